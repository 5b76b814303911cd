#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what the tests need when it is missing
# (redis-server, nodejs, chromium and chromium-driver from Debian's packages, cargo-nextest from crates.io), starts Redis on a free
# port, runs every test of the workspace, and stops Redis whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/servers.sh

need_deb redis-server redis-server
# The end-to-end browser tests drive headless Chromium through WebDriver (tests/tests/browser.rs).
need_deb chromedriver chromium chromium-driver
command -v cargo-nextest >/dev/null 2>&1 || cargo install --locked cargo-nextest

start_redis
export VIGIL_TEST_REDIS_URL="$REDIS_URL"

# The browser SDK's own tests (crypto vectors, the protocol against a mock server) run in Node.
need_deb node nodejs
node --test ingest/sdk/test/

# The CLI tests run the real `vigil` executable.
cargo build --bin vigil
cargo nextest run --workspace --no-fail-fast "$@"
