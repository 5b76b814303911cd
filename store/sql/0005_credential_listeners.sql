-- Who listens on `vigil_credentials`, and which barriers each listener has heard
-- (store/src/postgres/credentials.rs). A replica that changes a key or an organization sends a
-- barrier notification after its commit and answers only once every live listener has recorded
-- it here: notifications reach each listener in commit order, so a listener that heard the
-- barrier has dropped what the change made stale, and the change counts on the next request to
-- any replica, not only to the one that made it.
CREATE TABLE credential_listeners (
    listener text PRIMARY KEY,
    -- The listening connection's server process: a listener whose process is gone from
    -- `pg_stat_activity` hears nothing and is not waited for.
    backend_pid integer NOT NULL,
    -- Raised every two seconds while the connection lives.
    seen_at timestamptz NOT NULL
);
CREATE TABLE credential_barriers_heard (
    barrier text NOT NULL,
    listener text NOT NULL,
    heard_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (barrier, listener)
);
-- Notifications are database-wide: each now names the schema of the table that changed, so a
-- listener serving another schema of the same database ignores it.
CREATE OR REPLACE FUNCTION vigil_credentials_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('vigil_credentials', TG_TABLE_SCHEMA);
    RETURN NULL;
END
$$;
