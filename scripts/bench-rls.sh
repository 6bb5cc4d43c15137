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

BENCH_NAME=bench-rls
TARGETS=${BENCH_TARGETS:-noop strict leased memory}
# shellcheck source=scripts/bench-common.sh
source "$(dirname "$0")/bench-common.sh"

NOOP=$ROOT/bin/bench/noop
METHOD=envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit
REQUEST='{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}],"hits_addend":1}'

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
