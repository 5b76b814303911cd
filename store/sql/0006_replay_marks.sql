-- The replay record (docs/detection.md#replayed-sessions): a mark per batch content the processor
-- judged (a probes batch's, an interaction stream's shape), the session that left it first, and
-- for a stream a sketch of its first events. Kept a day; the retention sweep drops expired rows.
CREATE TABLE replay_marks (
    mark bytea PRIMARY KEY,
    session_id bytea NOT NULL,
    sketch bytea NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX replay_marks_by_expiry ON replay_marks (expires_at);
