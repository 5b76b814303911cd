#!/usr/bin/env bash
# The contract check (docs/testing.md#the-contract-check): schemathesis, from PyPI, fuzzes a
# served Vigil from its own OpenAPI document, in three bounded runs: the routes a secret key
# reaches (with a test secret key), the routes a publishable key reaches (with a test
# publishable key), and the rest without a key. Its checks: server errors, status codes,
# content types, response schemas and headers, negative data refused and positive data
# accepted. Prints one `schemathesis: N passed, N failed` line (operations, over the three
# runs) and fails when any check failed. Run by scripts/test.sh; alone, it builds the `vigil`
# executable and needs python3 and curl.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/servers.sh
# The fuzzed server is the script's own: no VIGIL_* setting of the caller's (a store, a limiter,
# a key) reaches it or the commands that prepare it.
for name in $(compgen -e | grep '^VIGIL_' || true); do unset "$name"; done

SCHEMATHESIS_VERSION=4.32.5
venv=target/schemathesis
[ -x "$venv/bin/schemathesis" ] && "$venv/bin/schemathesis" --version 2>/dev/null \
    | grep -q "$SCHEMATHESIS_VERSION" \
  || { python3 -m venv "$venv" \
       && "$venv/bin/pip" install --quiet "schemathesis==$SCHEMATHESIS_VERSION"; }

# The executable of this tree (scripts/test.sh has just built it; alone, this builds it).
cargo build --quiet --bin vigil
vigil=target/debug/vigil
work=$(mktemp -d)
data="$work/data"
# Kept after the run (and replaced by the next): each run's log and JUnit report.
reports="$venv/last"
rm -rf "$reports"
mkdir -p "$reports"
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
  stop_servers
}
trap cleanup EXIT

# An organization of its own, whose test keys are not limited: the fuzzer's thousands of calls
# would otherwise meet 429s instead of the routes (a 429 is documented, so it hides nothing, but
# it spends the examples).
"$vigil" bootstrap --data-dir "$data" --name Contract --slug contract > "$work/credentials.json"
credential() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))$1)" "$work/credentials.json"; }
# Assigned, then exported, so that a failing command fails the script (`export X=$(...)` would
# hide it), and checked not empty.
VIGIL_ORG=$(credential '["organization"]["id"]')
VIGIL_SK=$(credential '["keys"]["secret_test"]')
VIGIL_PK=$(credential '["keys"]["publishable_test"]')
export VIGIL_ORG="${VIGIL_ORG:?}" VIGIL_SK="${VIGIL_SK:?}" VIGIL_PK="${VIGIL_PK:?}"
for key in "$VIGIL_SK" "$VIGIL_PK"; do
  "$vigil" keys set-rate-limit --data-dir "$data" --key "$key" --limit 1000000 >/dev/null
done

port=$(free_port)
export VIGIL_URL="http://127.0.0.1:$port"
# Private webhooks: the endpoint the run reads, rotates and deletes points at this machine.
# Generated Gate services name hosts that are looked up: one short try each, so a machine whose
# resolver cannot be reached refuses them at once rather than after the resolver's timeouts.
RES_OPTIONS="timeout:1 attempts:1" "$vigil" serve --listen "127.0.0.1:$port" --data-dir "$data" --anonymous-rate-limit 1000000 \
  --allow-private-webhooks > "$work/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  curl -sf "$VIGIL_URL/readyz" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -sf "$VIGIL_URL/readyz" >/dev/null || { cat "$work/serve.log"; exit 1; }

# What the path parameters name, made first so the fuzzer reaches real resources: a secret key
# of its own to update, rotate and revoke (never the run's), a webhook endpoint, a published
# Gate service.
api() {
  curl -sf -X POST "$VIGIL_URL$1" -H "Authorization: Bearer $VIGIL_SK" \
       -H 'Content-Type: application/json' -d "$2" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["id"])'
}
VIGIL_KEY_ID=$(api "/v1/organizations/$VIGIL_ORG/api-keys" '{"name":"fuzzed","type":"secret"}')
VIGIL_ENDPOINT_ID=$(api "/v1/organizations/$VIGIL_ORG/webhooks/endpoints" \
  '{"name":"fuzzed","url":"http://127.0.0.1:9/hook","event_types":["webhook.test"]}')
VIGIL_SERVICE_ID=$(api /v1/gate/services \
  '{"id":"fuzzed","name":"Fuzzed","website":"https://fuzzed.example","discoverable":true}')
export VIGIL_KEY_ID="${VIGIL_KEY_ID:?}" VIGIL_ENDPOINT_ID="${VIGIL_ENDPOINT_ID:?}" \
  VIGIL_SERVICE_ID="${VIGIL_SERVICE_ID:?}"

curl -sf "$VIGIL_URL/v1/openapi.json" > "$work/openapi.json"
# The operations of each run, by the security each declares.
operations() {
  python3 - "$work/openapi.json" "$1" <<'EOF'
import json, sys
doc, wanted = json.load(open(sys.argv[1])), sys.argv[2]
for item in doc["paths"].values():
    for op in item.values():
        schemes = {s for req in op.get("security", [{}]) for s in req}
        kind = ("secret" if "secret_key" in schemes and "publishable_key" not in schemes
                else "publishable" if "publishable_key" in schemes else "none")
        if kind == wanted:
            print(op["operationId"])
EOF
}

status=0
# The secret run last: it disables the Gate service and revokes the key the others may read.
for run in none publishable secret; do
  args=()
  for id in $(operations "$run"); do args+=(--include-operation-id "$id"); done
  set +e
  "$venv/bin/schemathesis" --config-file scripts/schemathesis.toml run "$work/openapi.json" \
    "${args[@]}" --report junit --report-dir "$reports/$run" > "$reports/$run.log" 2>&1
  code=$?
  set -e
  # Any exit but 0 fails the command: 1 is a failed check, or an error schemathesis met on the
  # way (which it also answers with 1); the JUnit reports only count the operations.
  if [ "$code" -ne 0 ]; then
    echo "schemathesis ($run run) exited $code:"; cat "$reports/$run.log"; status=1
  fi
  echo "schemathesis ($run run): $(grep -A1 '^Test cases:' "$reports/$run.log" | tail -1 | xargs)"
done

python3 - "$reports" <<'EOF' || status=1
import glob, sys
import xml.etree.ElementTree as ET
passed = failed = 0
for report in glob.glob(f"{sys.argv[1]}/*/junit*.xml"):
    for case in ET.parse(report).iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is None:
            passed += 1
print(f"schemathesis: {passed} passed, {failed} failed")
sys.exit(1 if failed or not passed else 0)
EOF
exit $status
