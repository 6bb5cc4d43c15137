#!/usr/bin/env bash
# bench-overload: throttlekit serve pushed past its own capacity. ghz first
# finds the most checks per second the sidecar answers (closed loop,
# BENCH_CONCURRENCY calls), then offers 1×, 2× and 3× that rate open loop
# (ghz --rps, with enough workers that the offered rate does not wait on
# answers) with Envoy's rate-limit timeout as ghz's --timeout. For each
# rate: what was answered (OK, shed with RESOURCE_EXHAUSTED, expired at the
# client's deadline, other), and the p50, p99 and max of every call, shed
# ones included. Prints a markdown table (also out/bench-overload.md) and
# fails when a p99 exceeds BENCH_P99_BOUND_MS or a call fails otherwise.
#
# Environment:
#   BENCH_DURATION       ghz duration per step (default 5s: ghz keeps every call's details)
#   BENCH_CONCURRENCY    closed-loop calls for the capacity step (default 50)
#   BENCH_WORKERS        open-loop workers (default 2000)
#   BENCH_TIMEOUT        ghz's per-call deadline, as Envoy's rate-limit timeout (default 100ms, envoy/envoy.yaml's)
#   BENCH_MAX_INFLIGHT   the sidecar's --grpc-max-inflight (default: its own default)
#   BENCH_P99_BOUND_MS   the p99 every step must stay under (default 100)
#   BENCH_THROTTLEKIT    a prebuilt binary instead of `make build`
#
# The sidecar runs the memory store (strict policy, test/bench/policy-strict),
# so its own capacity is what is measured, not Redis's.
set -euo pipefail

BENCH_NAME=bench-overload
# shellcheck source=scripts/bench-common.sh
source "$(dirname "$0")/bench-common.sh"
DURATION=${BENCH_DURATION:-5s}
WORKERS=${BENCH_WORKERS:-2000}
TIMEOUT=${BENCH_TIMEOUT:-100ms}
P99_BOUND=${BENCH_P99_BOUND_MS:-100}

METHOD=envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit
REQUEST='{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}],"hits_addend":1}'

ensure_ghz
mkdir -p "$ROOT/bin/bench"
"$GO" build -o "$BENCHTOOL" ./test/bench/benchtool
if [[ -z ${BENCH_THROTTLEKIT:-} ]]; then
	"$MAKE" --no-print-directory build || die "make build failed"
fi

grpc_port=$(free_port)
http_port=$(free_port)
args=(serve --policy "$ROOT/test/bench/policy-strict" --store memory
	--grpc-addr "127.0.0.1:$grpc_port" --http-addr "127.0.0.1:$http_port")
[[ -n ${BENCH_MAX_INFLIGHT:-} ]] && args+=(--grpc-max-inflight "$BENCH_MAX_INFLIGHT")
"$THROTTLEKIT" "${args[@]}" >"$LOGS/throttlekit.log" 2>&1 &
pid=$!
PIDS+=("$pid")
wait_ready throttlekit "$pid" "$LOGS/throttlekit.log" -grpc "127.0.0.1:$grpc_port" -http "http://127.0.0.1:$http_port/readyz"
"$BENCHTOOL" check -addr "127.0.0.1:$grpc_port" -data "$REQUEST" -want-limit ||
	die "the sidecar answered the bench request wrongly"

ghz_run() { # ghz_run OUT ARGS...
	local out=$1
	shift
	"$GHZ" --insecure --call "$METHOD" --data "$REQUEST" --duration "$DURATION" --duration-stop ignore \
		--connections 1 --format json --output "$out" "$@" "127.0.0.1:$grpc_port" ||
		die "ghz failed: $*"
}

log "capacity: closed loop, $CONCURRENCY calls, $DURATION"
ghz_run "$WORK/capacity.json" --concurrency "$CONCURRENCY"
read -r _ max _ < <("$BENCHTOOL" summary "$WORK/capacity.json") || die "no capacity figure"
log "capacity: $max checks/s"

ROWS=()
FAILED=()
for mult in 1 2 3; do
	rate=$((max * mult))
	log "open loop at ${mult}× = $rate/s, $WORKERS workers, --timeout $TIMEOUT"
	ghz_run "$WORK/$mult.json" --rps "$rate" --concurrency "$WORKERS" --timeout "$TIMEOUT"
	read -r count rps ok shed expired other p50 p99 maxl < <("$BENCHTOOL" answers "$WORK/$mult.json") ||
		die "could not read ghz's report for ${mult}×"
	ROWS+=("$mult $rate $rps $count $ok $shed $expired $other $p50 $p99 $maxl")
	((other == 0)) || FAILED+=("${mult}×: $other calls failed with a code other than RESOURCE_EXHAUSTED or DEADLINE_EXCEEDED")
	awk -v p="$p99" -v b="$P99_BOUND" 'BEGIN { exit !(p > b) }' && FAILED+=("${mult}×: p99 ${p99} ms > ${P99_BOUND} ms")
done
shed_total=$(curl -fsS "http://127.0.0.1:$http_port/metrics" | awk '/^throttlekit_grpc_shed_total/ { printf "%s ", $0 }')
stop "$pid"

mkdir -p "$ROOT/out"
{
	echo "Overload: throttlekit serve (memory store, strict) at 1×, 2× and 3× its closed-loop capacity of $max checks/s;"
	echo "ghz $GHZ_VERSION open loop, $WORKERS workers, --timeout $TIMEOUT, $DURATION per step; client and server share this machine ($(nproc) CPUs)."
	echo
	echo "| offered | sent/s | answered/s | calls | OK | shed | expired | other | p50 | p99 | max |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	for row in "${ROWS[@]}"; do
		read -r mult rate rps count ok shed expired other p50 p99 maxl <<<"$row"
		echo "| ${mult}× | $rate | $rps | $count | $ok | $shed | $expired | $other | $p50 ms | $p99 ms | $maxl ms |"
	done
	echo
	echo "shed: RESOURCE_EXHAUSTED, more than --grpc-max-inflight checks in progress; expired: ghz's deadline passed"
	echo "(Envoy then applies failure_mode_deny to either). Server counters: $shed_total"
} | tee "$ROOT/out/bench-overload.md"

if ((${#FAILED[@]} > 0)); then
	printf 'bench-overload: %s\n' "${FAILED[@]}" >&2
	exit 1
fi
