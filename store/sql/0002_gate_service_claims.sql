-- Two Gate services may not share an id with `-` and `_` taken alike: both become `_` in the
-- name of the agent token's variable (`acme-cli` and `acme_cli` would fill one `.env` line).
-- An index on the id so written makes it a constraint, and serves the check before an insert.
CREATE UNIQUE INDEX gate_services_claim ON gate_services ((replace(id, '_', '-')));
