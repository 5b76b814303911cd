-- What the sessions export reads of each session (`schemas::session_digest`): its request and
-- latest decision flattened, written with the row, so an export reads a few hundred bytes a
-- session rather than its whole state. Rows written before this version have none; the store
-- computes theirs from `body` when an export reaches them.
ALTER TABLE sessions ADD COLUMN digest json;
