#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what the tests need when it is missing
# (redis-server from Debian's packages, cargo-nextest from crates.io), starts Redis on a free
# port, runs every test of the workspace, and stops Redis whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_updated=0
need_deb() { # need_deb COMMAND PACKAGE...
  command -v "$1" >/dev/null 2>&1 && return 0
  shift
  if [ "$apt_updated" = 0 ]; then
    echo "test.sh: installing $* (apt-get)"
    apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

need_deb redis-server redis-server
command -v cargo-nextest >/dev/null 2>&1 || cargo install --locked cargo-nextest

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }

work=$(mktemp -d)
redis_pid=""
cleanup() {
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
  --logfile "$work/redis.log" &
redis_pid=$!
for _ in $(seq 1 50); do
  redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
  sleep 0.1
done
redis-cli -p "$redis_port" ping >/dev/null || { echo "test.sh: redis-server did not start"; cat "$work/redis.log"; exit 1; }
export VIGIL_TEST_REDIS_URL="redis://127.0.0.1:$redis_port"

# The CLI tests run the real `vigil` executable.
cargo build --bin vigil
cargo nextest run --workspace --no-fail-fast "$@"
