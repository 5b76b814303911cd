#!/usr/bin/env bash
# The benchmarks: installs wrk and redis-server when missing, starts Redis on a free port, runs
# the full-stack versus bare-handler benchmark in release mode, and stops Redis.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/servers.sh

need_deb wrk wrk
need_deb redis-server redis-server

start_redis
export VIGIL_BENCH_REDIS_URL="$REDIS_URL"

cargo bench -p vigil-tests --bench organization_get "$@"
