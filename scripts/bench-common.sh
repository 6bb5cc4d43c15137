# shellcheck shell=bash
# bench-common: what bench-rls.sh and bench-extproc.sh share. Source it after
# setting BENCH_NAME (used in log lines, the work directory and out/ paths).
# It sets the common settings, owns the processes the bench starts (stopped on
# exit), and provides free_port, wait_ready and ensure_ghz.

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$PWD

# Used by the scripts that source this file.
# shellcheck disable=SC2034
{
GHZ_VERSION=v0.120.0
GO=${GO:-go}
MAKE=${MAKE:-make}
DURATION=${BENCH_DURATION:-15s}
CONCURRENCY=${BENCH_CONCURRENCY:-50}
CONNECTIONS=${BENCH_CONNECTIONS:-1}
START_TIMEOUT=${BENCH_START_TIMEOUT:-20}

TOOLS=$ROOT/bin/tools
GHZ=$TOOLS/ghz
BENCHTOOL=$ROOT/bin/bench/benchtool
THROTTLEKIT=${BENCH_THROTTLEKIT:-$ROOT/bin/throttlekit}
}

log() { echo "$BENCH_NAME: $*" >&2; }
die() {
	log "$*"
	exit 1
}

# Settings meant for a deployed sidecar must not leak into the servers
# measured here: each is configured by flags alone.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^THROTTLEKIT_' || true)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/$BENCH_NAME.XXXXXX")
LOGS=$ROOT/out/$BENCH_NAME-logs # the servers' output, kept for a look after a failure
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

# forget PID: PID has ended; cleanup has nothing more to stop there.
forget() {
	local keep=() p
	for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
	PIDS=("${keep[@]}")
}

# stop PID: ends one process this script started (SIGTERM: servers drain) and
# waits for it.
stop() {
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
	forget "$1"
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

# ensure_ghz installs the pinned ghz into bin/tools unless it is there.
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
