//! The embedded store's writer state: the bookkeeping that the one writer (see the module doc of
//! `embedded`) keeps between writes, under its mutex. It guards no data, only where walks resume
//! and what the writer remembers of recent saves.

use super::sessions::{SESSION_MARKS, SessionMarks};

/// The one-time indexing of rows stored before `sessions_by_verdict`, the visitor order tables
/// and `expiry_queue` existed (without it they would be missing from lists and never expire):
/// `purge_expired` walks `sessions`, then `visitors`, then `events`, a bounded step at a time,
/// and records in `settings` when it is done, so later starts skip it. Indexing a row twice
/// writes the same keys again, so a restart mid-walk just starts over.
#[derive(Default)]
pub(super) struct Backfill {
    /// `None` until the setting has been checked.
    pub(super) done: Option<bool>,
    /// 0: sessions, 1: visitors, 2: events.
    pub(super) table: u8,
    pub(super) cursor: Option<Vec<u8>>,
}

/// What the writer keeps between writes.
pub(super) struct WriterState {
    /// The stored place of the sessions saved lately (see [`super::sessions::SessionMark`]).
    pub(super) session_marks: SessionMarks,
    /// Hashes the settled parts of session states (see [`super::sessions::SessionMark`]).
    pub(super) settled_hasher: std::hash::RandomState,
    /// Where `purge_expired`'s walk of `idempotency_records` resumes (that table has no time
    /// order, so it is walked a bounded step at a time); `None`: from the start.
    pub(super) idempotency_cursor: Option<Vec<u8>>,
    /// The same for `handoff_openings`.
    pub(super) handoff_cursor: Option<Vec<u8>>,
    /// The same for `replay_marks`.
    pub(super) replay_cursor: Option<Vec<u8>>,
    /// The same for `gate_sessions`, whose lifetimes follow their status.
    pub(super) gate_cursor: Option<Vec<u8>>,
    /// Where the indexing of rows written before the read and expiry indexes existed stands.
    pub(super) backfill: Backfill,
    /// The generation of each partition of `collect.batches.v1` as last claimed
    /// (`claim_partitions`). In memory: the embedded store is one process's, so every processor
    /// that can race for a partition lives, and claims, in that process.
    pub(super) partition_generations: std::collections::HashMap<u32, u64>,
}

impl Default for WriterState {
    fn default() -> Self {
        WriterState {
            session_marks: SessionMarks::new(SESSION_MARKS),
            settled_hasher: std::hash::RandomState::new(),
            idempotency_cursor: None,
            handoff_cursor: None,
            replay_cursor: None,
            gate_cursor: None,
            backfill: Backfill::default(),
            partition_generations: Default::default(),
        }
    }
}
