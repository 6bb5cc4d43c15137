#!/usr/bin/env bash
# bench-extproc: what gating one HTTP request through ext_proc costs, measured
# with ghz against
#   noop   the no-op ExternalProcessor (test/bench/noopextproc): the gRPC floor
#   gates  throttlekit serve --store memory, gates policy (test/bench/policy-gates:
#          one gradient2 concurrency gate on every path)
# and prints a markdown table: target | RPS (streams/s) | p50 | p99 | vs floor
# (also written to out/bench-extproc.md; server logs in out/bench-extproc-logs/).
# The target is throttlekit at 0.8× the floor or better.
#
# Every ghz call is one envoy.service.ext_proc.v3.ExternalProcessor/Process
# stream carrying what Envoy sends for one HTTP request: request_headers
# (:method, :path, :authority), then response_headers (:status 200); ghz
# sends both, half-closes and waits for the server to end the stream. The
# gate's limits (1000 to 100000) are far above the bench's concurrency, so
# every request is admitted: the bench measures the gating, never a rejection.
#
# ghz reports how each stream ended, not how many answers it got, so besides
# requiring no errors in its report the script checks, before measuring, that
# one stream gets request headers answered CONTINUE and response headers
# answered (benchtool extproc), and after measuring, on the server, that the
# streams were answered in full: the no-op server's exit tally (streams the
# client closed with both headers messages answered ≥ ghz's calls, none closed
# short) and throttlekit's gate counters (admitted and released on response
# headers ≥ ghz's calls, none rejected, none with a 5xx outcome).
#
# Environment:
#   BENCH_TARGETS        targets to run, in order (default "noop gates")
#   BENCH_DURATION       ghz duration per target (default 15s)
#   BENCH_CONCURRENCY    concurrent calls (streams) (default 50)
#   BENCH_CONNECTIONS    gRPC connections ghz opens (default 1, like one Envoy worker)
#   BENCH_START_TIMEOUT  seconds a server gets to become ready (default 20)
#   BENCH_THROTTLEKIT    a prebuilt throttlekit binary to measure instead of
#                        building bin/throttlekit with `make build`
#
# The script starts everything it measures on free loopback ports and stops
# all of it on exit; it never uses a server that was already running.
set -euo pipefail

BENCH_NAME=bench-extproc
TARGETS=${BENCH_TARGETS:-noop gates}
# shellcheck source=scripts/bench-common.sh
source "$(dirname "$0")/bench-common.sh"

MIN_RATIO=0.8 # the target: throttlekit's streams/s over the floor's
NOOP=$ROOT/bin/bench/noopextproc
POLICY=$ROOT/test/bench/policy-gates
GATE=bench # the gate of $POLICY
METHOD=envoy.service.ext_proc.v3.ExternalProcessor.Process

# header NAME VALUE: one HeaderValue as protobuf JSON; raw_value is bytes,
# which JSON carries in base64.
header() {
	printf '{"key":"%s","raw_value":"%s"}' "$1" "$(printf '%s' "$2" | base64 | tr -d '\n')"
}
# STREAM is the messages of one call (ghz's --data for a bidi method: an
# array, one element per message).
STREAM="[{\"request_headers\":{\"headers\":{\"headers\":[$(header :method GET),$(header :path /api/v1/items),$(header :authority bench.local)]},\"end_of_stream\":true}},"
STREAM+="{\"response_headers\":{\"headers\":{\"headers\":[$(header :status 200)]},\"end_of_stream\":false}}]"

need_throttlekit=false
for t in $TARGETS; do
	case $t in
	noop) ;;
	gates) need_throttlekit=true ;;
	*) die "unknown target \"$t\" in BENCH_TARGETS (want: noop gates)" ;;
	esac
done
[[ $CONCURRENCY =~ ^[1-9][0-9]*$ ]] || die "BENCH_CONCURRENCY=$CONCURRENCY: want a positive integer"

# gate_counts URL: throttlekit's counters for the bench gate, "admitted
# rejected cancelled ok error dropped".
gate_counts() {
	"$BENCHTOOL" gates -metrics "$1" -gate "$GATE" || die "cannot read gate $GATE's counters from $1"
}

# tally_field LINE NAME: NAME's count in the no-op server's tally line.
tally_field() {
	local kv
	for kv in $1; do
		if [[ $kv =~ ^$2=([0-9]+)$ ]]; then
			echo "${BASH_REMATCH[1]}"
			return 0
		fi
	done
	die "no $2 in the no-op server's tally \"$1\""
}

# CPU accounting (Linux /proc; skipped elsewhere). The client shares the
# machine, so when ghz is what saturates it, RPS says little about the server
# and its CPU time per stream is the figure to compare.
HAVE_PROC=false
[[ -r /proc/stat && -r /proc/self/stat ]] && HAVE_PROC=true
CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)
# proc_ticks PID: the CPU time (user + system, in clock ticks) PID has used.
proc_ticks() {
	awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null
}
# machine_ticks: "busy total", every CPU's clock ticks since boot.
machine_ticks() {
	awk '/^cpu / { for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t; exit }' /proc/stat
}

label() {
	case $1 in
	noop) echo "noop (floor)" ;;
	gates) echo "throttlekit (gates, memory)" ;;
	esac
}

# ---- one target --------------------------------------------------------------
ROWS=()   # "target rps p50 p99 errors"
NOTES=()  # what the server says it answered, per target
FAILED=() # every check that failed
run_target() {
	local target=$1 grpc_port http_port="" pid logfile="$LOGS/$1.log" probe=()
	grpc_port=$(free_port)
	case $target in
	noop)
		"$NOOP" -addr "127.0.0.1:$grpc_port" >"$logfile" 2>&1 &
		pid=$!
		probe=(-grpc "127.0.0.1:$grpc_port")
		;;
	gates)
		http_port=$(free_port)
		"$THROTTLEKIT" serve --policy "$POLICY" --store memory \
			--grpc-addr "127.0.0.1:$grpc_port" --http-addr "127.0.0.1:$http_port" >"$logfile" 2>&1 &
		pid=$!
		probe=(-grpc "127.0.0.1:$grpc_port" -http "http://127.0.0.1:$http_port/readyz")
		;;
	esac
	PIDS+=("$pid")
	wait_ready "$target" "$pid" "$logfile" "${probe[@]}"
	"$BENCHTOOL" extproc -addr "127.0.0.1:$grpc_port" -data "$STREAM" ||
		die "$target answered the bench stream wrongly; its log: $logfile"

	local before=() after=() metrics="http://127.0.0.1:$http_port/metrics"
	if [[ $target == gates ]]; then
		read -r -a before < <(gate_counts "$metrics") || die "no gate counters before the run"
		((before[0] >= 1)) ||
			die "gate $GATE admitted nothing for the check stream: the policy's gate does not match the bench request (policy $POLICY, log $logfile)"
	fi
	local srv0=0 srv1=0 m0=(0 0) m1=(0 0)
	if $HAVE_PROC; then
		srv0=$(proc_ticks "$pid") || die "cannot read /proc/$pid/stat"
		read -r -a m0 < <(machine_ticks) || die "cannot read /proc/stat"
	fi
	log "$target: ghz for $DURATION at $CONCURRENCY concurrent streams"
	# In the background, waited for: a signal to the script then ends the run
	# at once (bash runs traps only between foreground commands).
	local ghz_pid rc=0
	"$GHZ" --insecure --call "$METHOD" --data "$STREAM" \
		--duration "$DURATION" --duration-stop ignore \
		--concurrency "$CONCURRENCY" --connections "$CONNECTIONS" \
		--format json --output "$WORK/$target.json" "127.0.0.1:$grpc_port" &
	ghz_pid=$!
	PIDS+=("$ghz_pid")
	wait "$ghz_pid" || rc=$?
	forget "$ghz_pid"
	((rc == 0)) || die "ghz failed against $target (exit status $rc)"
	if [[ $target == gates ]]; then
		read -r -a after < <(gate_counts "$metrics") || die "no gate counters after the run"
	fi
	if $HAVE_PROC; then
		srv1=$(proc_ticks "$pid") || die "$target exited during the run; its log: $logfile"
		read -r -a m1 < <(machine_ticks) || die "cannot read /proc/stat"
	fi
	stop "$pid"

	local count rps p50 p99 errs
	read -r count rps p50 p99 errs < <("$BENCHTOOL" summary "$WORK/$target.json") ||
		die "could not read ghz's report for $target"
	rm -f "$WORK/$target.json"
	((errs == 0)) || FAILED+=("$target: $errs of $count calls failed (ghz's errors above)")

	if $HAVE_PROC; then
		NOTES+=("$target: server CPU $(awk -v s=$((srv1 - srv0)) -v hz="$CLK_TCK" -v n="$count" \
			-v b=$((m1[0] - m0[0])) -v t=$((m1[1] - m0[1])) -v cpus="$(nproc)" 'BEGIN {
				printf "%.1f µs/stream, %.0f%% of the busy CPU time (the rest is mostly ghz); machine %.0f%% busy (%d CPUs)",
					1e6 * s / hz / n, b ? 100 * s / b : 0, t ? 100 * b / t : 0, cpus }')")
	fi

	# What the server answered. The check stream was answered in full too;
	# the streams in flight when ghz stopped were cut short.
	case $target in
	noop)
		local tally streams complete partial broken
		tally=$(grep -o 'tally streams=.*' "$logfile" | tail -n 1) ||
			die "noop printed no tally on exit; its log: $logfile"
		streams=$(tally_field "$tally" streams)
		complete=$(tally_field "$tally" complete)
		partial=$(tally_field "$tally" partial)
		broken=$(tally_field "$tally" broken)
		NOTES+=("noop: of $streams streams (the check's included), $((complete - 1)) closed with request and response headers answered; ghz counted $count; $partial closed short; $broken cut (in flight at the end)")
		((complete - 1 >= count)) ||
			FAILED+=("noop: only $((complete - 1)) streams answered in full, ghz counted $count calls")
		((partial == 0)) ||
			FAILED+=("noop: $partial streams closed without both headers messages answered")
		;;
	gates)
		local adm=$((after[0] - before[0])) rej=$((after[1] - before[1])) can=$((after[2] - before[2]))
		local ok=$((after[3] - before[3])) bad=$((after[4] - before[4])) drop=$((after[5] - before[5]))
		NOTES+=("gates: gate $GATE admitted $adm, rejected $rej, released $ok on response headers ($bad with a 5xx); when ghz stopped, $drop dropped after admission and $can cancelled while acquiring; ghz counted $count")
		((rej == 0)) ||
			FAILED+=("gates: gate $GATE rejected $rej requests (answered with a 503 immediate_response): the bench would measure rejections")
		((bad == 0)) || FAILED+=("gates: $bad requests released as errors (5xx)")
		((adm >= count && ok >= count)) ||
			FAILED+=("gates: gate $GATE admitted $adm and released $ok on response headers, fewer than ghz's $count calls")
		;;
	esac
	ROWS+=("$target $rps $p50 $p99 $errs")
}

# ---- main --------------------------------------------------------------------
command -v base64 >/dev/null || die "base64 (coreutils) is needed to encode the header values"
ensure_ghz
mkdir -p "$ROOT/bin/bench"
"$GO" build -o "$NOOP" ./test/bench/noopextproc || die "cannot build test/bench/noopextproc"
"$GO" build -o "$BENCHTOOL" ./test/bench/benchtool || die "cannot build test/bench/benchtool"
if $need_throttlekit && [[ -z ${BENCH_THROTTLEKIT:-} ]]; then
	"$MAKE" --no-print-directory build || die "make build failed: cannot build bin/throttlekit"
fi
if $need_throttlekit; then
	[[ -x $THROTTLEKIT ]] || die "$THROTTLEKIT is not an executable"
fi

for t in $TARGETS; do
	run_target "$t"
done

floor=
gates_rps=
for row in "${ROWS[@]}"; do
	read -r t rps _ <<<"$row"
	[[ $t == noop ]] && floor=$rps
	[[ $t == gates ]] && gates_rps=$rps
done
# ratio A: A's RPS over the floor's, as "0.93×" (n/a without a floor).
ratio() {
	if [[ -n $floor ]]; then
		awk -v a="$1" -v b="$floor" 'BEGIN { printf "%.2f×", a / b }'
	else
		echo n/a
	fi
}
verdict=
if [[ -n $floor && -n $gates_rps ]]; then
	if awk -v a="$gates_rps" -v b="$floor" -v m="$MIN_RATIO" 'BEGIN { exit !(a >= m * b) }'; then
		verdict="met"
	else
		verdict="MISSED"
	fi
	verdict="Target, throttlekit ≥ ${MIN_RATIO}× the floor: $verdict ($(ratio "$gates_rps"))."
fi

mkdir -p "$ROOT/out"
{
	echo "ext_proc bench: ghz $GHZ_VERSION, $DURATION per target, $CONCURRENCY concurrent streams on $CONNECTIONS connection(s),"
	echo "each stream = request_headers + response_headers; client and servers share this machine ($(nproc) CPUs)."
	echo "$(date -u +%Y-%m-%dT%H:%MZ), $("$GO" env GOVERSION)."
	echo
	echo "| target | RPS (streams/s) | p50 | p99 | vs floor |"
	echo "| --- | ---: | ---: | ---: | ---: |"
	for row in "${ROWS[@]}"; do
		read -r t rps p50 p99 errs <<<"$row"
		lbl=$(label "$t")
		((errs == 0)) || lbl="$lbl ($errs errors)"
		echo "| $lbl | $rps | ${p50} ms | ${p99} ms | $(ratio "$rps") |"
	done
	echo
	if [[ -n $verdict ]]; then
		echo "$verdict"
		echo
	fi
	echo "Answers checked on the server side:"
	for n in "${NOTES[@]}"; do echo "- $n"; done
} | tee "$ROOT/out/bench-extproc.md"

if ((${#FAILED[@]} > 0)); then
	log "FAILED:"
	printf 'bench-extproc:   %s\n' "${FAILED[@]}" >&2
	exit 1
fi
if [[ $verdict == *MISSED* ]]; then
	log "throttlekit is below ${MIN_RATIO}× the floor (see out/bench-extproc.md)"
fi
