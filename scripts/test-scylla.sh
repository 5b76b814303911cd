#!/usr/bin/env bash
# The ScyllaDB backend's real-node tests on ScyllaDB itself, for anyone with Docker: starts the
# compose file's `scylla` service (published on 127.0.0.1:9042), waits until it is healthy, runs
# the store's ScyllaDB tests, and stops the node whatever happens. The test command runs the
# same tests on an Apache Cassandra node (scripts/engines.sh); the TLS test needs that node's CA
# and is left to it.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v docker >/dev/null 2>&1 || { echo "test-scylla: docker is not installed" >&2; exit 1; }
trap 'docker compose --profile scylla stop scylla >/dev/null' EXIT
docker compose --profile scylla up --detach --wait scylla
export VIGIL_TEST_SCYLLA_URL=scylla://127.0.0.1:9042
cargo nextest run -p vigil-store -E 'test(/^scylla::/) - test(/tls/)' "$@"
