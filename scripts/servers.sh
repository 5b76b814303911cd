# Sourced by test.sh and bench.sh: installing Debian packages on demand, and a throwaway Redis
# and PostgreSQL on free loopback ports (and, from engines.sh, a Kafka broker), stopped when the
# calling script exits, whatever happens.

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

# need_lib PACKAGE...: installs Debian packages (build libraries, no command to look for) unless
# dpkg has them all.
need_lib() {
  dpkg -s "$@" >/dev/null 2>&1 && return 0
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
pg_dir=""
stop_servers() {
  stop_engines
  if [ -n "$redis_pid" ]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
  if [ -n "$pg_dir" ]; then
    as_postgres "$pg_bin/pg_ctl" -D "$pg_dir/data" -m immediate stop >/dev/null 2>&1 || true
  fi
  rm -rf "$servers_dir"
}
trap stop_servers EXIT
source "$(dirname "${BASH_SOURCE[0]}")/engines.sh"
source "$(dirname "${BASH_SOURCE[0]}")/ip-data.sh"

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

# Runs a command as the `postgres` user when root (initdb refuses to run as root).
as_postgres() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# start_postgres: installs Debian's PostgreSQL when missing, starts a throwaway cluster on a free
# port (trust authentication, loopback only, fsync off: the data is thrown away) and sets
# POSTGRES_URL to a database in it; fails loudly if it does not answer.
start_postgres() {
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  if [ -z "$pg_bin" ] || [ ! -x "$pg_bin/initdb" ]; then
    need_deb /usr/lib/postgresql/15/bin/initdb postgresql
    pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  fi
  local port
  port=$(free_port)
  pg_dir="$servers_dir/postgres"
  mkdir -p "$pg_dir"
  if [ "$(id -u)" = 0 ]; then
    chown postgres "$pg_dir"
    chmod 755 "$servers_dir"
  fi
  as_postgres "$pg_bin/initdb" -D "$pg_dir/data" -U vigil --auth=trust >"$servers_dir/initdb.log" 2>&1 || {
    echo "initdb failed:"
    cat "$servers_dir/initdb.log"
    exit 1
  }
  as_postgres "$pg_bin/pg_ctl" -D "$pg_dir/data" -w -l "$pg_dir/server.log" \
    -o "-p $port -k $pg_dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=400" start >/dev/null || {
    echo "PostgreSQL did not start:"
    cat "$pg_dir/server.log"
    exit 1
  }
  as_postgres "$pg_bin/createdb" -h 127.0.0.1 -p "$port" -U vigil vigil
  POSTGRES_URL="postgres://vigil@127.0.0.1:$port/vigil"
}
