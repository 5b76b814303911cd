-- The PostgreSQL store (`--store postgres://...`): the tables of the store port
-- (`store/src/lib.rs`), one per record type. Each row keeps its record as JSON in `body` (the
-- same JSON the embedded store keeps), beside the columns its keys, constraints and indexes
-- need. Where the CQL schema keeps an index table (`organizations_by_slug`, `api_keys_by_hash`,
-- `sessions_by_verdict`, the visitor orders, `sessions_idle`, `webhook_deliveries_due`,
-- `gate_registry`), PostgreSQL keeps a unique constraint or an index on the row itself, so it
-- moves with the row in the same statement.
--
-- Ids are ULIDs as 16 big-endian bytes: byte order is time order, so `ORDER BY id DESC` is
-- newest first. Environments are 0 (live) and 1 (test). `vigil migrate` applies this file once,
-- in one transaction, and records it in `vigil_schema_migrations`.

CREATE TABLE organizations (
    id bytea PRIMARY KEY,
    slug text NOT NULL UNIQUE,
    body json NOT NULL
);

CREATE TABLE api_keys (
    id bytea PRIMARY KEY,
    organization_id bytea NOT NULL,
    environment smallint NOT NULL,
    key_hash bytea NOT NULL UNIQUE,
    body json NOT NULL
);
CREATE INDEX api_keys_of_owner ON api_keys (organization_id, environment, id DESC);

CREATE TABLE idempotency_records (
    scope bytea PRIMARY KEY,
    expires_at timestamptz NOT NULL,
    body json NOT NULL
);
CREATE INDEX idempotency_records_by_expiry ON idempotency_records (expires_at);

CREATE TABLE handoff_openings (
    handoff bytea PRIMARY KEY,
    first_opened_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX handoff_openings_by_expiry ON handoff_openings (expires_at);

CREATE TABLE settings (
    name text PRIMARY KEY,
    value bytea NOT NULL
);

-- Collect sessions are kept a day after their id was minted: the id's time orders them.
CREATE TABLE collect_sessions (
    id bytea PRIMARY KEY,
    body json NOT NULL
);

CREATE TABLE collect_pings (
    ping_id bytea PRIMARY KEY,
    session_id bytea NOT NULL REFERENCES collect_sessions (id) ON DELETE CASCADE
);
CREATE INDEX collect_pings_of_session ON collect_pings (session_id);

CREATE TABLE sessions (
    organization_id bytea NOT NULL,
    environment smallint NOT NULL,
    id bytea NOT NULL,
    updated_at timestamptz NOT NULL,
    finalized boolean NOT NULL,
    -- The latest decision's verdict (`sessions_by_verdict`).
    verdict text,
    body json NOT NULL,
    PRIMARY KEY (organization_id, environment, id)
);
CREATE UNIQUE INDEX sessions_by_id ON sessions (id);
CREATE INDEX sessions_by_verdict ON sessions (organization_id, environment, verdict, id DESC)
    WHERE verdict IS NOT NULL;
-- `sessions_idle`: the sessions not final yet, by when they last changed.
CREATE INDEX sessions_idle ON sessions (updated_at, id) WHERE NOT finalized;
CREATE INDEX sessions_by_update ON sessions (updated_at);

CREATE TABLE session_decisions (
    session_id bytea NOT NULL,
    id bytea NOT NULL,
    body json NOT NULL,
    PRIMARY KEY (session_id, id)
);

CREATE TABLE events (
    organization_id bytea NOT NULL,
    environment smallint NOT NULL,
    id bytea NOT NULL,
    created_at timestamptz NOT NULL,
    body json NOT NULL,
    PRIMARY KEY (organization_id, environment, id)
);
CREATE INDEX events_by_creation ON events (created_at);

CREATE TABLE webhook_endpoints (
    organization_id bytea NOT NULL,
    environment smallint NOT NULL,
    id bytea NOT NULL,
    body json NOT NULL,
    PRIMARY KEY (organization_id, environment, id)
);

CREATE TABLE webhook_deliveries (
    organization_id bytea NOT NULL,
    environment smallint NOT NULL,
    event_id bytea NOT NULL,
    endpoint_id bytea NOT NULL,
    id bytea NOT NULL,
    attempts bigint NOT NULL,
    next_attempt_at timestamptz,
    body json NOT NULL,
    PRIMARY KEY (organization_id, environment, event_id, endpoint_id)
);
-- `webhook_deliveries_due`: the pending deliveries by when their next attempt is due.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE next_attempt_at IS NOT NULL;

CREATE TABLE visitors (
    organization_id bytea NOT NULL,
    environment smallint NOT NULL,
    id bytea NOT NULL,
    -- The three list orders' values (`VisitorOrder::value`) and the retention's clock.
    last_seen bigint NOT NULL,
    seen_count bigint NOT NULL,
    first_seen bigint NOT NULL,
    last_seen_at timestamptz NOT NULL,
    body json NOT NULL,
    PRIMARY KEY (organization_id, environment, id)
);
CREATE INDEX visitors_by_last_seen ON visitors (organization_id, environment, last_seen DESC, id DESC);
CREATE INDEX visitors_by_seen_count ON visitors (organization_id, environment, seen_count DESC, id DESC);
CREATE INDEX visitors_by_first_seen ON visitors (organization_id, environment, first_seen DESC, id DESC);
CREATE INDEX visitors_by_retention ON visitors (last_seen_at);

CREATE TABLE visitors_by_anchor (
    organization_id bytea NOT NULL,
    environment smallint NOT NULL,
    digest bytea NOT NULL,
    visitor_id bytea NOT NULL,
    PRIMARY KEY (organization_id, environment, digest, visitor_id),
    FOREIGN KEY (organization_id, environment, visitor_id)
        REFERENCES visitors (organization_id, environment, id) ON DELETE CASCADE
);
CREATE INDEX visitors_by_anchor_of_visitor ON visitors_by_anchor (organization_id, environment, visitor_id);

CREATE TABLE gate_services (
    -- Byte order, as the registry pages by id.
    id text COLLATE "C" PRIMARY KEY,
    organization_id bytea NOT NULL,
    environment smallint NOT NULL,
    -- Active and discoverable: listed in the registry (`gate_registry`).
    published boolean NOT NULL,
    body json NOT NULL
);
CREATE INDEX gate_services_of_owner ON gate_services (organization_id, environment, id);
CREATE INDEX gate_registry ON gate_services (environment, id) WHERE published;

CREATE TABLE gate_sessions (
    id bytea PRIMARY KEY,
    created_at timestamptz NOT NULL,
    -- `gate_login_codes`: a one-time login code is one session's at a time.
    login_code bytea UNIQUE,
    body json NOT NULL
);
CREATE INDEX gate_sessions_by_creation ON gate_sessions (created_at);

CREATE TABLE gate_accounts (
    id bytea PRIMARY KEY,
    body json NOT NULL
);

CREATE TABLE agent_tokens (
    hash bytea PRIMARY KEY,
    body json NOT NULL
);
