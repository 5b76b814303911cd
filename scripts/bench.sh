#!/usr/bin/env bash
# The benchmarks, in release mode: installs wrk, redis-server and Chromium when missing, starts
# Redis on a free port, and runs the API benchmark (full stack versus a bare handler), the
# ingest benchmark (batches/s and batch-to-decision latency on the embedded log and on Kafka),
# the SDK's cost in headless Chromium, and the many-sessions benchmark (4,096 sessions at once,
# then a 10-minute soak of 100,000 sessions against a `vigil serve` process), and the webhook
# delivery benchmark (deliveries/s to a local receiver, event to first attempt), and the fleet
# benchmark (one processor process versus two on Kafka and PostgreSQL; the API benchmark also
# reads through the PostgreSQL store), and the embedded log's retention (the same appends with
# and without it), and the sessions export (rows/s into an Arrow reader against an in-memory IPC
# write, and peak memory at 100k and 1M rows, embedded and PostgreSQL), and the replay check
# (CPU a batch with the replay record on and off, a mark's cost and size), and the IP data
# (lookups a second, resident memory, CPU a batch on and off, with the public databases it
# fetches from npm); starts PostgreSQL too, and stops both whatever happens.
# Ends with a table of every performance goal, its figure in this run and whether it held; the
# whole output is kept in target/bench/last.log.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/servers.sh

need_deb wrk wrk
need_deb redis-server redis-server
need_deb chromedriver chromium chromium-driver

start_redis
export VIGIL_BENCH_REDIS_URL="$REDIS_URL"
start_postgres
export VIGIL_TEST_POSTGRES_URL="$POSTGRES_URL"
fetch_ip_data

# The soak runs the release executable as its own process.
cargo build --release --bin vigil
# The embedded log's retention: the same load with and without it.
cargo run --release -p vigil-log --example log_retention
mkdir -p target/bench
cargo bench -p vigil-tests --bench organization_get --bench ingest --bench sdk_cost --bench many_sessions --bench webhook_deliveries --bench fleet --bench export --bench replay --bench network "$@" \
  | tee target/bench/last.log

# Every goal of docs/performance.md with this run's figure and its ceiling, gathered from the
# benchmarks' `goal | ...` lines.
echo
echo "| path | figure (ceiling measured in the same run) | goal | |"
echo "| --- | --- | --- | --- |"
grep '^goal | ' target/bench/last.log | sed 's/^goal | /| /; s/$/ |/'
