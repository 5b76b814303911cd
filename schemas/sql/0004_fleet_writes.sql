-- Writes two replicas can race (docs/architecture.md#fleet-writes).

-- A visitor's revision n is saved only over revision n - 1, so two processors updating one
-- visitor at once cannot lose each other's visit. Rows saved before this version are at 0.
ALTER TABLE visitors ADD COLUMN revision bigint NOT NULL DEFAULT 0;

-- The generation of each partition of `collect.batches.v1` as last claimed by a processor of
-- the group: a processor's session saves carry the generation it claimed, and a save of an
-- older one (from a processor that lost the partition while stalled) is refused.
CREATE TABLE processor_partitions (
    partition integer PRIMARY KEY,
    generation bigint NOT NULL
);

-- Nonces already spent (Web Bot Auth signatures), shared by every ingest process so that a
-- replay to another process is caught too; each is kept until its signature expires.
CREATE TABLE spent_nonces (
    scope text NOT NULL,
    nonce text NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (scope, nonce)
);
CREATE INDEX spent_nonces_by_expiry ON spent_nonces (expires_at);
