# Sourced by test.sh and bench.sh: installing Debian packages on demand, and a throwaway Redis on
# a free loopback port that is stopped when the calling script exits, whatever happens.

apt_updated=0
# need_deb COMMAND PACKAGE...: installs the packages unless COMMAND is already on the PATH.
need_deb() {
  command -v "$1" >/dev/null 2>&1 && return 0
  shift
  if [ "$apt_updated" = 0 ]; then
    echo "installing $* (apt-get)"
    apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

servers_dir=$(mktemp -d)
redis_pid=""
stop_servers() {
  if [ -n "$redis_pid" ]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
  rm -rf "$servers_dir"
}
trap stop_servers EXIT

# start_redis: starts redis-server and sets REDIS_URL; fails loudly if it does not answer.
start_redis() {
  local port
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$servers_dir" \
    --logfile "$servers_dir/redis.log" &
  redis_pid=$!
  for _ in $(seq 1 50); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  if ! redis-cli -p "$port" ping >/dev/null 2>&1; then
    echo "redis-server did not start:"
    cat "$servers_dir/redis.log"
    exit 1
  fi
  REDIS_URL="redis://127.0.0.1:$port"
}
