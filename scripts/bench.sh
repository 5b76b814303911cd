#!/usr/bin/env bash
# The benchmarks, in release mode: installs wrk, redis-server and Chromium when missing, starts
# Redis on a free port, and runs the API benchmark (full stack versus a bare handler), the
# ingest benchmark (batches/s and batch-to-decision latency on the embedded log and on Kafka)
# and the SDK's cost in headless Chromium; stops Redis whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/servers.sh

need_deb wrk wrk
need_deb redis-server redis-server
need_deb chromedriver chromium chromium-driver

start_redis
export VIGIL_BENCH_REDIS_URL="$REDIS_URL"

cargo bench -p vigil-tests --bench organization_get --bench ingest --bench sdk_cost "$@"
