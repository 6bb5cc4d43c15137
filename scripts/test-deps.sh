#!/usr/bin/env bash
# Installs what the tests need when it is absent: redis-server and
# redis-sentinel (internal/testenv starts them), prometheus (promtool checks
# the alert rules; deploy's dashboard test runs a real server) and
# PostgreSQL (initdb and postgres, started as an unprivileged user when the
# tests run as root). `make test` and `.ci/run` call it. On Debian/Ubuntu it
# installs with apt-get (as root, or through sudo); elsewhere, or when it
# cannot, it says the one command to run and fails.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  missing+=(prometheus)
fi
# Debian keeps initdb and postgres in /usr/lib/postgresql/<version>/bin, off PATH.
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

cmd="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo="sudo"
  else
    echo "test-deps: the tests need ${missing[*]}; install them with: sudo sh -c '$cmd'" >&2
    exit 1
  fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "test-deps: the tests need ${missing[*]} (the Debian/Ubuntu package names); install them with your system's package manager" >&2
  exit 1
fi
echo "test-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
