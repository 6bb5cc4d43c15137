#!/usr/bin/env bash
# bench-rls: what a ShouldRateLimit call costs, measured with ghz against
#   noop    the no-op RLS server (test/bench/noop): the gRPC floor
#   strict  throttlekit serve --store redis, strict policy (a store round trip per request)
#   leased  throttlekit serve --store redis, leased policy (batch 1000)
#   memory  throttlekit serve --store memory, strict policy
# and prints a markdown table: target | RPS | p50 | p99 | Redis cmds/request |
# RPS vs floor (also written to out/bench-rls.md; server logs in
# out/bench-rls-logs/).
#
# Every request is the same: domain edge, one descriptor (remote_address,
# 10.0.0.1), which the bench policies (test/bench/policy-*) limit at 10^9 per
# second, so every answer is OK and every request makes a full decision.
#
# Environment:
#   BENCH_TARGETS        targets to run, in order (default "noop strict leased memory")
#   BENCH_DURATION       ghz duration per target (default 15s)
#   BENCH_CONCURRENCY    concurrent calls (default 50)
#   BENCH_CONNECTIONS    gRPC connections ghz opens (default 1, like one Envoy worker)
#   BENCH_START_TIMEOUT  seconds a server gets to become ready (default 20)
#   BENCH_THROTTLEKIT    a prebuilt throttlekit binary to measure instead of
#                        building bin/throttlekit with `make build`
#
# The script starts everything it measures on free loopback ports, including
# its own redis-server (no persistence), and stops all of it on exit; it never
# uses a server that was already running.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

GHZ_VERSION=v0.120.0
GO=${GO:-go}
MAKE=${MAKE:-make}
TARGETS=${BENCH_TARGETS:-noop strict leased memory}
DURATION=${BENCH_DURATION:-15s}
CONCURRENCY=${BENCH_CONCURRENCY:-50}
CONNECTIONS=${BENCH_CONNECTIONS:-1}
START_TIMEOUT=${BENCH_START_TIMEOUT:-20}

TOOLS=$ROOT/bin/tools
GHZ=$TOOLS/ghz
NOOP=$ROOT/bin/bench/noop
BENCHTOOL=$ROOT/bin/bench/benchtool
THROTTLEKIT=${BENCH_THROTTLEKIT:-$ROOT/bin/throttlekit}
METHOD=envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit
REQUEST='{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}],"hits_addend":1}'

log() { echo "bench-rls: $*" >&2; }
die() {
	log "$*"
	exit 1
}

# Settings meant for a deployed sidecar must not leak into the servers
# measured here: each is configured by flags alone.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^THROTTLEKIT_' || true)

need_redis=false
need_throttlekit=false
for t in $TARGETS; do
	case $t in
	noop) ;;
	strict | leased) need_redis=true need_throttlekit=true ;;
	memory) need_throttlekit=true ;;
	*) die "unknown target \"$t\" in BENCH_TARGETS (want: noop strict leased memory)" ;;
	esac
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-rls.XXXXXX")
LOGS=$ROOT/out/bench-rls-logs # the servers' output, kept for a look after a failure
rm -rf "$LOGS"
mkdir -p "$LOGS"
PIDS=() # every process this script started and has not stopped yet
cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# stop PID: ends one process this script started.
stop() {
	local pid=$1 keep=() p
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	for p in "${PIDS[@]}"; do [[ $p == "$pid" ]] || keep+=("$p"); done
	PIDS=("${keep[@]}")
}

# free_port prints a loopback TCP port nobody listens on. Another process may
# take it before ours binds it: a server that then fails to start is reported.
free_port() {
	local p _
	for _ in $(seq 1 100); do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	die "no free loopback port found"
}

# wait_ready NAME PID LOG PROBE_ARGS...: polls benchtool probe until the
# server answers ready, failing with the server's log when it exits first or
# is not ready within BENCH_START_TIMEOUT seconds.
wait_ready() {
	local name=$1 pid=$2 logfile=$3 err
	shift 3
	local deadline=$((SECONDS + START_TIMEOUT))
	while :; do
		if ! kill -0 "$pid" 2>/dev/null; then
			log "$name exited before it was ready; the end of its log ($logfile):"
			tail -n 30 "$logfile" >&2 || true
			exit 1
		fi
		if err=$("$BENCHTOOL" probe "$@" 2>&1); then
			return 0
		fi
		if ((SECONDS >= deadline)); then
			log "$name not ready after ${START_TIMEOUT}s: $err"
			log "the end of its log ($logfile):"
			tail -n 30 "$logfile" >&2 || true
			exit 1
		fi
		sleep 0.1
	done
}

ensure_ghz() {
	if [[ -x $GHZ && "$(cat "$TOOLS/ghz.version" 2>/dev/null)" == "$GHZ_VERSION" ]]; then
		return
	fi
	log "installing ghz $GHZ_VERSION into $TOOLS"
	mkdir -p "$TOOLS"
	GOBIN=$TOOLS "$GO" install "github.com/bojand/ghz/cmd/ghz@$GHZ_VERSION" ||
		die "go install github.com/bojand/ghz/cmd/ghz@$GHZ_VERSION failed"
	echo "$GHZ_VERSION" >"$TOOLS/ghz.version"
}

# ---- the Redis this script owns ---------------------------------------------
REDIS_PORT=
start_redis() {
	if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
		die "redis-server and redis-cli are needed for the redis targets (Debian/Ubuntu: apt-get install -y redis-server); or run BENCH_TARGETS=\"noop memory\""
	fi
	local attempt port pid deadline
	for attempt in 1 2 3 4 5; do
		port=$(free_port)
		redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
			--dir "$WORK" --logfile "$LOGS/redis.log" --daemonize no &
		pid=$!
		PIDS+=("$pid")
		deadline=$((SECONDS + START_TIMEOUT))
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
			if [[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]] && kill -0 "$pid" 2>/dev/null; then
				REDIS_PORT=$port
				log "redis-server on 127.0.0.1:$port"
				return 0
			fi
			sleep 0.1
		done
		stop "$pid"
		log "redis-server did not start on port $port (attempt $attempt)"
	done
	tail -n 20 "$LOGS/redis.log" >&2 || true
	die "could not start redis-server"
}

# redis_calls prints two counts of the commands Redis has executed, INFO (the
# bench's own reads) excluded: all of them, which includes every command a Lua
# script calls, and the script invocations (EVAL, EVALSHA, FCALL) alone.
redis_calls() {
	redis-cli -h 127.0.0.1 -p "$REDIS_PORT" INFO commandstats |
		awk -F'[:=,]' '/^cmdstat_/ && $1 != "cmdstat_info" {
			s += $3
			if ($1 ~ /^cmdstat_(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro)$/) e += $3
		} END { print s + 0, e + 0 }'
}

# ---- one target --------------------------------------------------------------
ROWS=() # "target rps p50 p99 errors cmds_per_request…"
FAILED=()
run_target() {
	local target=$1 grpc_port http_port pid logfile="$LOGS/$1.log" probe=() check=()
	local policy store=memory redis=false
	grpc_port=$(free_port)
	case $target in
	noop)
		"$NOOP" -addr "127.0.0.1:$grpc_port" >"$logfile" 2>&1 &
		pid=$!
		probe=(-grpc "127.0.0.1:$grpc_port")
		;;
	strict | leased | memory)
		policy=$ROOT/test/bench/policy-strict
		[[ $target == leased ]] && policy=$ROOT/test/bench/policy-leased
		[[ $target != memory ]] && store=redis redis=true
		http_port=$(free_port)
		local args=(serve --policy "$policy" --store "$store"
			--grpc-addr "127.0.0.1:$grpc_port" --http-addr "127.0.0.1:$http_port")
		if $redis; then
			args+=(--redis-url "redis://127.0.0.1:$REDIS_PORT/0")
			redis-cli -h 127.0.0.1 -p "$REDIS_PORT" FLUSHALL >/dev/null
		fi
		"$THROTTLEKIT" "${args[@]}" >"$logfile" 2>&1 &
		pid=$!
		probe=(-grpc "127.0.0.1:$grpc_port" -http "http://127.0.0.1:$http_port/readyz")
		check=(-want-limit)
		;;
	esac
	PIDS+=("$pid")
	wait_ready "$target" "$pid" "$logfile" "${probe[@]}"
	"$BENCHTOOL" check -addr "127.0.0.1:$grpc_port" -data "$REQUEST" "${check[@]}" ||
		die "$target answered the bench request wrongly; its log: $logfile"

	local before=(0 0) after=(0 0)
	if $redis; then
		read -r -a before < <(redis_calls) || die "cannot read Redis INFO commandstats"
	fi
	log "$target: ghz for $DURATION at $CONCURRENCY concurrent calls"
	"$GHZ" --insecure --call "$METHOD" --data "$REQUEST" \
		--duration "$DURATION" --duration-stop ignore \
		--concurrency "$CONCURRENCY" --connections "$CONNECTIONS" \
		--format json --output "$WORK/$target.json" "127.0.0.1:$grpc_port" ||
		die "ghz failed against $target"
	if $redis; then
		read -r -a after < <(redis_calls) || die "cannot read Redis INFO commandstats"
	fi
	stop "$pid"

	local count rps p50 p99 errs cmds
	read -r count rps p50 p99 errs < <("$BENCHTOOL" summary "$WORK/$target.json") ||
		die "could not read ghz's report for $target"
	rm -f "$WORK/$target.json"
	cmds=—
	if $redis; then
		cmds=$(awk -v d=$((after[0] - before[0])) -v e=$((after[1] - before[1])) -v n="$count" \
			'BEGIN { printf "%.3f (%.3f scripts)", d / n, e / n }')
	fi
	((errs == 0)) || FAILED+=("$target: $errs of $count calls failed")
	ROWS+=("$target $rps $p50 $p99 $errs $cmds")
}

# ---- main --------------------------------------------------------------------
ensure_ghz
mkdir -p "$ROOT/bin/bench"
"$GO" build -o "$NOOP" ./test/bench/noop
"$GO" build -o "$BENCHTOOL" ./test/bench/benchtool
if $need_throttlekit && [[ -z ${BENCH_THROTTLEKIT:-} ]]; then
	"$MAKE" --no-print-directory build || die "make build failed: cannot build bin/throttlekit"
fi
if $need_throttlekit; then
	[[ -x $THROTTLEKIT ]] || die "$THROTTLEKIT is not an executable"
fi
if $need_redis; then
	start_redis
fi

for t in $TARGETS; do
	run_target "$t"
done

floor=
for row in "${ROWS[@]}"; do
	read -r t rps _ <<<"$row"
	[[ $t == noop ]] && floor=$rps
done

mkdir -p "$ROOT/out"
{
	echo "RLS bench: ghz $GHZ_VERSION, $DURATION per target, $CONCURRENCY concurrent calls on $CONNECTIONS connection(s);"
	echo "client, servers and Redis share this machine ($(nproc) CPUs). $(date -u +%Y-%m-%dT%H:%MZ), $("$GO" env GOVERSION)."
	echo
	echo "| target | RPS | p50 | p99 | Redis cmds/request | RPS vs floor |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: |"
	for row in "${ROWS[@]}"; do
		read -r t rps p50 p99 errs cmds <<<"$row"
		vs=n/a
		[[ -n $floor ]] && vs=$(awk -v a="$rps" -v b="$floor" 'BEGIN { printf "%.0f%%", 100 * a / b }')
		label=$t
		((errs == 0)) || label="$t ($errs errors)"
		echo "| $label | $rps | ${p50} ms | ${p99} ms | $cmds | $vs |"
	done
	if $need_redis; then
		echo
		echo "Redis cmds/request: every command Redis executed per request (INFO commandstats), the"
		echo "commands Lua scripts call included; in parentheses, the script calls (EVAL/EVALSHA/FCALL) among them."
	fi
} | tee "$ROOT/out/bench-rls.md"

if ((${#FAILED[@]} > 0)); then
	printf 'bench-rls: %s\n' "${FAILED[@]}" >&2
	exit 1
fi
