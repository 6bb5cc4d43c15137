# throttlekit — build, test and benchmark targets. `make test` is the one CI runs.
GO      ?= go
PKGS    ?= ./...
BENCHTIME ?= 1s

.PHONY: all build test lint vet fmt bench run clean

all: build

# VERSION holds the release's semantic version (CHANGELOG.md); the binary's
# `version` prints it.
VERSION := $(shell cat VERSION)
# A first build downloads the modules and compiles every dependency (a few
# minutes on two cores): it says so, and -v names each package as it
# compiles, so a cold `make run` is not a silent wait. A warm build prints
# nothing more.
build:
	@[ -x bin/throttlekit ] || echo "make build: a first build downloads the modules and compiles every dependency (a few minutes); each package is named as it compiles" >&2
	$(GO) build -v -ldflags "-X main.version=$(VERSION)" -o bin/throttlekit ./cmd/sidecar

# The container image, without a daemon (cmd/mkimage, go-containerregistry):
# the static serving binary without simulate (-tags lean), tagged
# throttlekit:$(VERSION), as a tarball `docker load -i`, `podman load -i`
# and `crane push` take.
.PHONY: image
image:
	CGO_ENABLED=0 $(GO) build -tags lean -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/throttlekit-lean ./cmd/sidecar
	$(GO) run ./cmd/mkimage --binary bin/throttlekit-lean --version $(VERSION) --out out/image/throttlekit-$(VERSION).tar

# The test command the README gives and CI runs (scripts/test.sh): gofmt,
# vet, then every test with the race detector, in stages that all run
# whatever an earlier one did: unit (every package but test/e2e; internal/sim,
# a single-threaded simulator, without -race), e2e (alone,
# after the rest: its adaptive gates infer from latency the two cores also
# spend on other packages' race builds), and compare (test/compare, a module
# of its own, then its Pareto bar). It prints each package as it ends with
# the stage's elapsed time, what is still running after a quiet minute, and
# at the end every failure again, each stage's time and one closing line of
# counts. Tests start their own servers (redis-server, Cluster, Sentinel,
# PostgreSQL); deploy/'s run promtool and a real prometheus server (Debian's
# prometheus package has both; THROTTLEKIT_SKIP_PROMTOOL=1 skips them where
# it is absent) and build cmd/sidecar. STAGES="unit e2e" runs fewer.
test: test-deps
	@GO=$(GO) bash scripts/test.sh

# What the tests need (redis-server, redis-sentinel, prometheus, PostgreSQL),
# installed when absent (scripts/test-deps.sh says the command when it cannot).
.PHONY: test-deps
test-deps:
	@bash scripts/test-deps.sh

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

# The alert rules alone: promtool validates deploy/alerts.yaml and the compose
# Prometheus config, and runs the rules' unit tests (deploy/alerts_test.yaml).
# `make test` runs the same through deploy/deploy_test.go.
.PHONY: alerts
alerts:
	cd deploy && promtool check rules alerts.yaml && promtool check config prometheus.yml && promtool test rules alerts_test.yaml

# The peer comparison (test/compare, a module of its own): every scenario
# in config/scenarios through our controllers at their defaults and through
# go-concurrency-limits v0.8.0's. sim-report writes docs/sim/README.md (a
# table per scenario, the verdicts) and a chart per scenario; sim-compare
# runs the Pareto bar of issue 34 (no same-named peer better on both
# goodput and failures; ours within 10% of the best goodput) on every
# scenario, seeds 1–6, verbosely (`make test` runs it too).
.PHONY: sim-report sim-compare
sim-report:
	cd test/compare && $(GO) run ./cmd/report -out ../../docs/sim

sim-compare:
	cd test/compare && $(GO) test -count=1 -timeout 10m -run '^TestParetoBar$$' -v ./...

# Hot-path benchmarks (allocs/op included). Figures in the README come from it.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./pkg/gale/... ./pkg/engine/ ./pkg/adaptive/ ./pkg/envoyrls/

run: build
	./bin/throttlekit

clean:
	rm -rf bin out

# RLS benchmark: ghz against the no-op gRPC floor and throttlekit serve
# (redis strict, redis leased, memory); prints a markdown table. Starts its own
# redis-server. Tune with BENCH_TARGETS, BENCH_DURATION, BENCH_CONCURRENCY.
.PHONY: bench-rls
bench-rls:
	GO=$(GO) ./scripts/bench-rls.sh

# Every fuzz target, FUZZTIME each (default 60s): strategies, policy parser,
# request translation, gate operation sequences, simulation scenarios.
FUZZTIME ?= 60s
.PHONY: fuzz
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzTake$$' -fuzztime $(FUZZTIME) ./pkg/gale/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./pkg/policy/
	$(GO) test -run '^$$' -fuzz '^FuzzTranslate$$' -fuzztime $(FUZZTIME) ./pkg/envoyrls/
	$(GO) test -run '^$$' -fuzz '^FuzzGate$$' -fuzztime $(FUZZTIME) ./pkg/adaptive/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/sim/

# The fault suite (toxiproxy between a sidecar and Redis; every fault × mode ×
# on_store_error), its table in out/faults.md. `make test` runs it too.
.PHONY: faults
faults:
	mkdir -p out
	$(GO) test -count=1 -run '^TestE2EFaults$$' -v ./test/e2e/ -args -faults-table=$(CURDIR)/out/faults.md

# The sidecar past its own capacity: ghz open loop at 1×, 2× and 3× its
# measured maximum; p99 of every call bounded, the excess shed with
# RESOURCE_EXHAUSTED. Prints a markdown table, also out/bench-overload.md.
.PHONY: bench-overload
bench-overload:
	GO=$(GO) ./scripts/bench-overload.sh

# ext_proc benchmark: ghz streams (request headers, then response headers)
# against the no-op ExternalProcessor floor and throttlekit serve with one
# concurrency gate (memory store); prints a markdown table, also written to
# out/bench-extproc.md. Tune with BENCH_TARGETS, BENCH_DURATION, BENCH_CONCURRENCY.
.PHONY: bench-extproc
bench-extproc:
	GO=$(GO) ./scripts/bench-extproc.sh

# The gates live (test/benchgate): real serve processes in front of a real
# HTTP backend whose latency doubles past 40 in flight, closed-loop ext_proc
# clients; no gate, a static limit of 40, then each controller at its
# defaults on one sidecar and on four coordinated over Redis. Every row
# runs BENCH_GATE_ROUNDS times, interleaved, and the table (goodput of the
# ideal, its range over the rounds, p99, the backend's mean in flight, a
# fleet's L_global) shows each row's median round, also in
# out/bench-gate.md; about three minutes a round. BENCH_GATE_BIN measures
# another build of throttlekit (another commit's) instead of this tree's.
BENCH_GATE_ROUNDS ?= 3
.PHONY: bench-gate
bench-gate:
	mkdir -p out
	$(GO) test -count=1 -timeout 40m -run '^TestBenchGate$$' -v ./test/benchgate/ -args -bench-gate \
		-bench-gate-out=$(CURDIR)/out/bench-gate.md -bench-gate-rounds=$(BENCH_GATE_ROUNDS) $(if $(BENCH_GATE_BIN),-bench-gate-bin=$(BENCH_GATE_BIN))

# The distributed gate end to end (4 serve processes over Redis, then
# PostgreSQL, then one sidecar alone, then four without a coordinator) with
# its chart: docs/fleet-gate.png and the samples as CSV in out/fleet/.
# `make test` runs the same test without the chart.
.PHONY: fleet-chart
fleet-chart:
	$(GO) test -count=1 -run '^TestE2EFleetGate$$' -v ./test/e2e/ -args -fleet-chart=$(CURDIR)/out/fleet
	cp out/fleet/fleet-gate.png docs/fleet-gate.png

# The bounds checker (internal/boundcheck) run long: SEEDS seeded
# schedules on the memory store from FIRST_SEED, REDIS_SEEDS on a real
# Redis, FED_SEEDS and FED_REDIS_SEEDS federated ones (regions, outages,
# skewed clocks), and RLQS_SEEDS and RLQS_REDIS_SEEDS of RLQS sidecars and
# Envoys (about 10 ms each: 20,000 by default); progress every 30 s, the
# seeds it ran at the end. `make test` runs 1,000 and 50, 2,000 and 100
# federated, 40 and 20 RLQS.
SEEDS ?= 100000
FIRST_SEED ?= 1
REDIS_SEEDS ?= 1000
FED_SEEDS ?= $(SEEDS)
FED_REDIS_SEEDS ?= $(REDIS_SEEDS)
RLQS_SEEDS ?= 20000
RLQS_REDIS_SEEDS ?= $(REDIS_SEEDS)
.PHONY: check-bounds
check-bounds:
	$(GO) test -count=1 -timeout 0 -run '^(TestBoundsHold|TestFederationBoundsHold|TestRLQSBoundsHold)$$' -v ./internal/boundcheck/ -args \
		-seeds=$(SEEDS) -first-seed=$(FIRST_SEED) -redis-seeds=$(REDIS_SEEDS) \
		-fed-seeds=$(FED_SEEDS) -fed-redis-seeds=$(FED_REDIS_SEEDS) \
		-rlqs-seeds=$(RLQS_SEEDS) -rlqs-redis-seeds=$(RLQS_REDIS_SEEDS)

# Redis Cluster: a real 3-primary cluster (redis-cli --cluster create):
# every mode as on one Redis, the compat samples, a live reshard under
# traffic. `make test` runs the same; bench-cluster compares 1 and 3
# primaries (checks/s and Redis CPU per check).
.PHONY: cluster bench-cluster
cluster:
	$(GO) test -race -count=1 -run 'Cluster|ParseCPU' ./internal/testenv/
	$(GO) test -race -count=1 -v ./test/cluster/
	$(GO) test -race -count=1 -run 'TestCompatSamplesOnCluster' ./pkg/engine/
bench-cluster:
	$(GO) test -run '^$$' -bench ClusterThroughput -benchtime 5s -count 5 ./test/cluster/

# What a check costs Redis, the resource a fleet shares: Redis CPU per check
# (INFO CPU) for every algorithm, against envoyproxy/ratelimit's INCRBY +
# PEXPIRE in the same run, from 1, 16 and 64 callers; benchstat table.
.PHONY: bench-redis-cpu
bench-redis-cpu:
	mkdir -p out
	$(GO) test -run '^$$' -bench RedisCPUPerCheck -benchtime 20000x -count 6 ./pkg/gale/redisstore/ | tee out/redis-cpu.txt
	$(GO) run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da -col /op out/redis-cpu.txt

# Soak: mixed zipf traffic over 100k keys in every mode, a policy reload
# every 5 s, a Redis restart every 60 s, a latency spike every 90 s, for
# SOAK (default 10m); writes out/soak/{soak.md,soak.csv,soak.png}. Not part
# of `make test`, which runs its 60 s version. No -race: RSS is the signal.
SOAK ?= 10m
.PHONY: soak
soak:
	$(GO) test -count=1 -timeout 0 -run '^TestE2ESoak$$' -v ./test/e2e/ -args -soak=$(SOAK) -soak-out=$(CURDIR)/out/soak

# Key floods: L1 bytes per key at 1M keys, then a flood of unique keys
# against a real sidecar (L1 bounded by MaxKeys, evictions return credits,
# hot keys unaffected).
.PHONY: flood
flood:
	$(GO) test -run '^$$' -bench L1BytesPerKey -benchtime 1x ./pkg/gale/
	$(GO) test -count=1 -run '^TestE2EKeyFlood$$' -v ./test/e2e/

# Sentinel failover: primary, two replicas, three redis-sentinels; the
# primary killed mid-window, plain and after a replica-link cut, with and
# without --redis-wait-replicas. `make test` runs one run of each.
FAILOVER_RUNS ?= 5
.PHONY: failover
failover:
	$(GO) test -count=1 -run TestFailover -v ./test/failover/ -failover-runs=$(FAILOVER_RUNS)
