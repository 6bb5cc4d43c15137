#!/usr/bin/env bash
# `make test`: every stage runs, whatever an earlier one did, and every
# failure is named again at the end. Each stage prints as it goes: each
# package as it ends (the stage's elapsed time, the package's own), a
# failing test's whole output as it fails, and what is still running after
# a minute with nothing said (cmd/testreport reads `go test -json`). The end
# is a table of the stages, how long each took, and one closing line:
# "tests: N passed, N failed, N skipped". Exit 1 when anything failed.
#
# STAGES (default "gofmt vet unit e2e compare") runs fewer; the summaries,
# and each test stage's whole `go test -json` output (every test's log,
# the passing ones' measurements too: out/test/<stage>.jsonl), are in
# out/test/.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
STAGES=${STAGES:-gofmt vet unit e2e compare}
E2E=github.com/throttlekit/throttlekit/test/e2e
SIM=github.com/throttlekit/throttlekit/internal/sim
top=$(pwd)
sums=$top/out/test
rm -rf "$sums" && mkdir -p "$sums"

# The reporter is built first: without it nothing below can be read.
if ! $GO build -o "$top/bin/testreport" ./cmd/testreport; then
  echo "make test: cannot build cmd/testreport (above); nothing was run" >&2
  exit 2
fi
tr=$top/bin/testreport
begin=$(date +%s)
# go test can exit non-zero with no failure the reporter saw (it should
# not, but a run is judged by both): such a stage fails make test too.
status=0
noted() {
  local piped=$1; shift
  for rc in "$@"; do [ "$rc" -eq 0 ] || { [ "$piped" -ne 0 ] || echo "make test: go test exited $rc with no failure reported above"; status=1; }; done
}
say() { printf '\n== %s (%s, %ds into make test)\n' "$1" "$(date +%H:%M:%S)" $(($(date +%s) - begin)); }

for stage in $STAGES; do
  case $stage in
  gofmt)
    say "gofmt: every tracked Go file formatted"
    "$tr" exec -stage gofmt -summary "$sums/1-gofmt.json" -- sh -c \
      'out=$(gofmt -l $(git ls-files "*.go" 2>/dev/null || find . -name "*.go")); [ -z "$out" ] || { echo "gofmt needed:"; echo "$out"; exit 1; }'
    ;;
  vet)
    say "vet: go vet ./..., and test/compare's module"
    "$tr" exec -stage vet -summary "$sums/2-vet.json" -- sh -c "$GO vet ./... && cd test/compare && $GO vet ./..."
    ;;
  unit)
    # Every package but test/e2e, with the race detector, but internal/sim:
    # the simulator starts no goroutine and shares nothing (a pure,
    # single-threaded discrete-event loop, as TestParetoBar's below), so
    # the detector has nothing to find there and made it four times slower
    # (540 s against 130 s at load 15, one package slot of the two held
    # for nine minutes). `go test -race ./...` still passes it.
    say "unit: go test -race, every package but test/e2e (internal/sim without -race)"
    { $GO test -count=1 -timeout 20m -json "$SIM" 2>&1
      $GO test -race -count=1 -timeout 20m -json $($GO list ./... | grep -vx -e "$E2E" -e "$SIM") 2>&1; } |
      tee "$sums/3-unit.jsonl" | "$tr" run -stage unit -summary "$sums/3-unit.json"
    noted $? "${PIPESTATUS[@]}"
    ;;
  e2e)
    # test/e2e runs alone, after the rest: its adaptive gates infer from
    # latency the two cores also spend on other packages' race builds.
    say "e2e: go test -race ./test/e2e (the real binary against real servers)"
    $GO test -race -count=1 -timeout 20m -json "$E2E" 2>&1 |
      tee "$sums/4-e2e.jsonl" | "$tr" run -stage e2e -summary "$sums/4-e2e.json"
    noted $? "${PIPESTATUS[@]}"
    ;;
  compare)
    # The peer comparison, a module of its own (test/compare): its
    # adapters, determinism and defaults under the race detector, then its
    # bar, TestParetoBar, on every scenario and seeds 1–6 without it (a
    # single-threaded simulation, 66 runs: about 55 s of CPU).
    say "compare: test/compare under -race, then TestParetoBar"
    (cd test/compare && $GO test -race -count=1 -timeout 10m -json -skip '^TestParetoBar$' ./... 2>&1
      $GO test -count=1 -timeout 10m -json -run '^TestParetoBar$' ./... 2>&1) |
      tee "$sums/5-compare.jsonl" | "$tr" run -stage compare -summary "$sums/5-compare.json"
    noted $? "${PIPESTATUS[@]}"
    ;;
  *)
    echo "make test: unknown stage $stage (want gofmt, vet, unit, e2e, compare)" >&2
    exit 2
    ;;
  esac
done

printf '\n== make test took %ds\n' $(($(date +%s) - begin))
"$tr" recap "$sums"/*.json || status=1
exit $status
