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

-- Every change to a key or an organization, but a key's last use, is notified on
-- `vigil_credentials` at its commit: each replica's authentication cache drops what it holds
-- (store/src/postgres/credentials.rs).
CREATE FUNCTION vigil_credentials_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('vigil_credentials', TG_TABLE_NAME);
    RETURN NULL;
END
$$;
CREATE TRIGGER api_keys_changed AFTER UPDATE ON api_keys FOR EACH ROW
    WHEN ((OLD.body::jsonb - 'last_used_at') IS DISTINCT FROM (NEW.body::jsonb - 'last_used_at')
          OR OLD.key_hash IS DISTINCT FROM NEW.key_hash)
    EXECUTE FUNCTION vigil_credentials_changed();
CREATE TRIGGER api_keys_removed AFTER DELETE ON api_keys FOR EACH ROW
    EXECUTE FUNCTION vigil_credentials_changed();
CREATE TRIGGER organizations_changed AFTER UPDATE OR DELETE ON organizations FOR EACH ROW
    EXECUTE FUNCTION vigil_credentials_changed();
