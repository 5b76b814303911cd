#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what the tests need when it is missing
# (redis-server, postgresql, nodejs, curl, chromium and chromium-driver from Debian's packages, Python's
# requests from PyPI, cargo-nextest from crates.io), starts Redis and PostgreSQL on free ports, checks the
# lints (clippy, warnings denied), runs every test of the workspace, and stops them whatever
# happens.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/servers.sh

need_deb redis-server redis-server
# The end-to-end browser tests drive headless Chromium through WebDriver (tests/tests/browser.rs).
need_deb chromedriver chromium chromium-driver
# Real server-side clients call the API in tests/tests/security.rs: curl, Node's fetch (below)
# and Python's requests.
need_deb curl curl
python3 -c 'import requests' 2>/dev/null || python3 -m pip install --quiet requests
command -v cargo-nextest >/dev/null 2>&1 || cargo install --locked cargo-nextest

start_redis
export VIGIL_TEST_REDIS_URL="$REDIS_URL"
# The PostgreSQL store's conformance suite and the fleet test run against a throwaway cluster.
start_postgres
export VIGIL_TEST_POSTGRES_URL="$POSTGRES_URL"

# The browser SDK's own tests (crypto vectors, the protocol against a mock server) run in Node.
need_deb node nodejs
node --test ingest/sdk/test/

# Lints first: a warning fails the run, as a failing test does.
cargo clippy --workspace --all-targets -- -D warnings

# The CLI tests run the real `vigil` executable.
cargo build --bin vigil
cargo nextest run --workspace --no-fail-fast "$@"
