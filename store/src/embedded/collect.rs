//! Collect sessions and their pings' lookup rows (`002_collect.cql`): the conditional updates
//! ingest makes while a browser collects, and the sweep that drops them a day after; and the
//! openings of the handoffs they mint (`007_handoffs.cql`), each kept until its handoff expires.

use async_trait::async_trait;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use fjall::{OwnedWriteBatch, Readable};
use schemas::ids::{PingId, SessionId};
use schemas::time::Timestamp;
use serde::{Deserialize, Serialize};

use super::row_cache::{Changes, Lookup};
use super::{
    COLLECT_PINGS, COLLECT_SEQS, COLLECT_SESSIONS, EmbeddedStore, HANDOFF_OPENINGS, Inner,
    REPLAY_MARKS, decode, decode_row, encode, key, unavailable,
};
use crate::rules::CollectChange;
use crate::{CollectSessionRecord, CollectStore, HandoffOpening, ReplayMark, Result, StoreError};

/// How long a collect session (and its pings' lookup rows) is kept after its id was minted:
/// ScyllaDB's `default_time_to_live` of `collect_sessions` and `collect_pings`. Sessions expire
/// after 30 minutes; the log, not the store, keeps what they collected.
const COLLECT_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// `collect_pings`: the session a ping belongs to.
#[derive(Serialize, Deserialize)]
struct PingRow {
    session_id: SessionId,
}

/// `replay_marks`: the session that left a mark, its sketch, and until when it is kept.
#[derive(Serialize, Deserialize)]
pub(super) struct ReplayMarkRow {
    session_id: schemas::SessionId,
    #[serde(default, with = "crate::model::bytes_text")]
    sketch: Vec<u8>,
    pub(super) expires_at: Timestamp,
}

/// `handoff_openings`: when a handoff was first opened, kept until it expires.
#[derive(Serialize, Deserialize)]
pub(super) struct OpeningRow {
    first_opened_at: Timestamp,
    pub(super) expires_at: Timestamp,
}

impl Inner {
    /// The session as stored: its row (see `collect_session_row`) with its batch counter
    /// raised to the highest of its row's, its `collect_seqs` row's (see `COLLECT_SEQS`) and a
    /// raise not written yet (see `seqs`).
    pub(super) fn get_collect_session(
        &self,
        id: SessionId,
    ) -> Result<Option<CollectSessionRecord>> {
        let Some(row) = self.collect_session_row(id)? else {
            return Ok(None);
        };
        // The pending counter first: one is dropped from memory only once written.
        let pending = self.pending_seq(id).unwrap_or(0);
        let stored = self.written_seq(id, &row)?;
        let mut row = CollectSessionRecord::clone(&row);
        row.last_seq = stored.max(pending);
        Ok(Some(row))
    }

    /// The session's counter as written, without copying the row; `None` if there is no such
    /// session. `seqs` takes its pending counter over this.
    pub(super) fn stored_collect_seq(&self, id: SessionId) -> Result<Option<u64>> {
        match self.collect_session_row(id)? {
            Some(row) => self.written_seq(id, &row).map(Some),
            None => Ok(None),
        }
    }

    /// The counter of `id`'s `row` as written: the row's own or its `collect_seqs` row's, the
    /// higher.
    fn written_seq(&self, id: SessionId, row: &CollectSessionRecord) -> Result<u64> {
        Ok(row.last_seq.max(self.collect_seq(id)?.unwrap_or(0)))
    }

    /// The `collect_sessions` row, from the row cache when it has it (see `row_cache`), else
    /// decoded from fjall.
    fn collect_session_row(&self, id: SessionId) -> Result<Option<Arc<CollectSessionRecord>>> {
        let ticket = match self.cache.collect_session(id) {
            Lookup::Hit(row) => return Ok(Some(row)),
            Lookup::Miss(ticket) => ticket,
        };
        let row: Option<CollectSessionRecord> = decode_row(
            COLLECT_SESSIONS,
            self.collect_sessions.get(key::collect_session(id)),
        )?;
        Ok(row.map(|row| {
            self.cache.fill_collect_session(ticket, id, &row);
            Arc::new(row)
        }))
    }

    /// The session's `collect_seqs` row, if ingest raised its counter since the session was
    /// made.
    pub(super) fn collect_seq(&self, id: SessionId) -> Result<Option<u64>> {
        let Some(value) = self
            .collect_seqs
            .get(key::collect_session(id))
            .map_err(unavailable)?
        else {
            return Ok(None);
        };
        let bytes: [u8; 8] = value.as_ref().try_into().map_err(|_| StoreError::Corrupt {
            table: COLLECT_SEQS,
            detail: format!("a counter of {} bytes", value.len()),
        })?;
        Ok(Some(u64::from_be_bytes(bytes)))
    }

    /// The conditional update of one session: reads the row, lets `change` modify it (returning
    /// whether it did), and writes it back in one synced batch only if it changed, under the
    /// collect rows' lock, so the check and the write are one step. Callers hold the writer
    /// mutex. `None` if the session does not exist (nothing is written: no upsert); otherwise
    /// whether this call wrote, and the row as now stored.
    fn change_collect_session(
        &self,
        id: SessionId,
        change: CollectChange,
    ) -> Result<Option<(bool, CollectSessionRecord)>> {
        crate::rules::check_collect_change(&change)?;
        let _rows = self
            .collect_rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(mut session) = self.get_collect_session(id)? else {
            return Ok(None);
        };
        if !change.apply(&mut session) {
            return Ok(Some((false, session)));
        }
        let mut batch = self.batch();
        batch.insert(
            &self.collect_sessions,
            key::collect_session(id),
            encode(COLLECT_SESSIONS, &session)?,
        );
        self.commit(
            batch,
            Changes {
                collect_sessions: &[id],
                ..Changes::default()
            },
        )?;
        self.cache.written_collect_session(session.clone());
        Ok(Some((true, session)))
    }

    /// Deletes the sessions minted more than `COLLECT_RETENTION` before `now`, with their
    /// pings' lookup rows: what ScyllaDB's TTL does, judged by the id's time (the moment of the
    /// insert, give or take the request). Session ids are ULIDs, so those rows are a key prefix
    /// and nothing younger is read; at most `budget` of them, and whether more may remain.
    /// The purged sessions' ids are added to `purged`, for the commit to drop from the cache.
    /// The caller holds the collect rows' lock until that commit and then forgets the purged
    /// sessions' pending counters (`forget_pending_seqs`), so none is written back.
    pub(super) fn purge_expired_collect_sessions(
        &self,
        batch: &mut OwnedWriteBatch,
        now: Timestamp,
        budget: usize,
        purged: &mut Vec<SessionId>,
    ) -> Result<bool> {
        let retention = chrono::TimeDelta::from_std(COLLECT_RETENTION).unwrap_or_default();
        let Ok(cutoff) = u64::try_from((now - retention).timestamp_millis()) else {
            return Ok(false);
        };
        let end = key::collect_sessions_minted_from(cutoff);
        let mut read = 0;
        for guard in self.collect_sessions.range(..end).take(budget) {
            read += 1;
            let (k, v) = guard.into_inner().map_err(unavailable)?;
            match decode::<CollectSessionRecord>(COLLECT_SESSIONS, &v) {
                Ok(session) => {
                    for ping in &session.pings {
                        batch.remove(&self.collect_pings, key::collect_ping(ping.id));
                    }
                    purged.push(session.id);
                }
                // Past retention either way: a damaged row must not block the sweep (and with
                // it every session open); its ping rows, if any, cannot be found from it.
                Err(e) => tracing::warn!(error = %e, "dropping an undecodable collect session"),
            }
            batch.remove(&self.collect_seqs, k.clone());
            batch.remove(&self.collect_sessions, k);
        }
        Ok(read == budget)
    }
}

#[async_trait]
impl CollectStore for EmbeddedStore {
    /// Applies `change` to the session under the writer lock, synced, unlike
    /// `advance_collect_seq`: nothing downstream drops a replayed call proof, so a counter lost
    /// in a crash would let a seen proof through again.
    async fn change_collect_session(
        &self,
        id: SessionId,
        change: CollectChange,
    ) -> Result<Option<(bool, CollectSessionRecord)>> {
        self.write(move |db, _| db.change_collect_session(id, change))
            .await
    }

    /// One batch: the session row and a `collect_pings` row per ping, each id checked free under
    /// the writer mutex first; the first conflict drops the unwritten batch, so a failed call
    /// writes and claims nothing.
    async fn create_collect_session(&self, session: &CollectSessionRecord) -> Result<()> {
        crate::rules::check_collect_pings(session)?;
        let session = session.clone();
        self.write(move |db, _| {
            let _rows = db
                .collect_rows
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let k = key::collect_session(session.id);
            if db.contains(&db.collect_sessions, &k)? {
                return Err(StoreError::Conflict(format!(
                    "collect session {} exists",
                    session.id
                )));
            }
            let mut batch = db.batch();
            batch.insert(&db.collect_sessions, k, encode(COLLECT_SESSIONS, &session)?);
            let row = encode(
                COLLECT_PINGS,
                &PingRow {
                    session_id: session.id,
                },
            )?;
            for ping in &session.pings {
                let k = key::collect_ping(ping.id);
                if db.contains(&db.collect_pings, &k)? {
                    return Err(StoreError::Conflict(format!("ping {} exists", ping.id)));
                }
                batch.insert(&db.collect_pings, k, row.clone());
            }
            db.commit(
                batch,
                Changes {
                    collect_sessions: &[session.id],
                    ..Changes::default()
                },
            )?;
            db.cache.written_collect_session(session);
            Ok(())
        })
        .await
    }

    async fn get_collect_session(&self, id: SessionId) -> Result<Option<CollectSessionRecord>> {
        self.inner.get_collect_session(id)
    }

    async fn find_collect_ping(&self, ping: PingId) -> Result<Option<SessionId>> {
        let row: Option<PingRow> = decode_row(
            COLLECT_PINGS,
            self.inner
                .db
                .snapshot()
                .get(&self.inner.collect_pings, key::collect_ping(ping)),
        )?;
        Ok(row.map(|r| r.session_id))
    }

    /// Not durable when it returns, unlike every other write of this store: ingest calls it for
    /// every batch, and an fsync each capped ingest at about a thousand batches a second.
    /// Losing an advance in a crash only lets a replayed batch through once more, and the
    /// processor drops batches it has seen by number, so durability here would buy nothing.
    /// Raised in memory and written behind (see `seqs`).
    async fn advance_collect_seq(&self, id: SessionId, seq: u64) -> Result<bool> {
        self.seqs.advance(&self.inner, id, seq)
    }

    async fn spend_nonce(&self, scope: &str, nonce: &str, until: Timestamp) -> Result<bool> {
        use super::nonces::{NonceUse, SeenNonces};
        match self.nonces.first_use(
            scope,
            nonce,
            until.timestamp(),
            schemas::time::now().timestamp(),
        ) {
            NonceUse::First => Ok(true),
            NonceUse::Replayed => Ok(false),
            NonceUse::Full => Err(StoreError::Unavailable(format!(
                "{} unexpired nonces are remembered already",
                SeenNonces::CAPACITY
            ))),
        }
    }

    async fn leave_replay_marks(
        &self,
        marks: &[ReplayMark],
        until: Timestamp,
    ) -> Result<Vec<Option<ReplayMark>>> {
        // Nothing to write: answered without the writer, so even a full disk answers it.
        if marks.is_empty() {
            return Ok(Vec::new());
        }
        let marks = marks.to_vec();
        self.write(move |db, _| {
            let mut found = Vec::with_capacity(marks.len());
            let mut batch = db.batch();
            let mut left: std::collections::HashMap<[u8; 16], ReplayMark> =
                std::collections::HashMap::new();
            for mark in marks {
                // A mark left earlier in this same call is found like a stored one.
                if let Some(earlier) = left.get(&mark.key) {
                    found.push(Some(earlier.clone()));
                    continue;
                }
                let stored: Option<ReplayMarkRow> =
                    decode_row(REPLAY_MARKS, db.replay_marks.get(mark.key))?;
                match stored {
                    Some(row) => found.push(Some(ReplayMark {
                        key: mark.key,
                        session_id: row.session_id,
                        sketch: row.sketch,
                    })),
                    None => {
                        let row = ReplayMarkRow {
                            session_id: mark.session_id,
                            sketch: mark.sketch.clone(),
                            expires_at: until,
                        };
                        batch.insert(&db.replay_marks, mark.key, encode(REPLAY_MARKS, &row)?);
                        left.insert(mark.key, mark);
                        found.push(None);
                    }
                }
            }
            if !left.is_empty() {
                batch.commit().map_err(unavailable)?;
            }
            Ok(found)
        })
        .await
    }

    async fn open_handoff_once(&self, opening: &HandoffOpening) -> Result<Option<Timestamp>> {
        let (k, at, expires_at) = (opening.handoff, opening.at, opening.expires_at);
        self.write(move |db, _| {
            let stored: Option<OpeningRow> =
                decode_row(HANDOFF_OPENINGS, db.handoff_openings.get(k))?;
            if let Some(first) = stored {
                return Ok(Some(first.first_opened_at));
            }
            let row = OpeningRow {
                first_opened_at: at,
                expires_at,
            };
            let mut batch = db.batch();
            batch.insert(&db.handoff_openings, k, encode(HANDOFF_OPENINGS, &row)?);
            batch.commit().map_err(unavailable)?;
            Ok(None)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use schemas::credential::Environment;
    use schemas::ids::{KeyId, OrgId};

    use super::*;
    use crate::prelude::*;

    /// A collect session written before call proofs existed still reads: without a proof key
    /// (so it can prove no call) and with no counter spent.
    #[test]
    fn a_collect_session_row_from_before_call_proofs_decodes() {
        let token_hash = [0u8; 32];
        let row = serde_json::json!({
            "id": SessionId::generate(), "organization_id": OrgId::generate(),
            "environment": "live", "key_id": KeyId::generate(), "sealed_batch_key": [1, 2],
            "page_url": "https://shop.example/", "sdk_version": "1.0.0",
            "opened_at": "2025-01-01T00:00:00Z", "expires_at": "2025-01-01T00:30:00Z",
            "last_seq": 4, "pings": [], "network_check_token_hash": token_hash,
            "ws_identity": null, "results_at": null
        });
        let session: CollectSessionRecord =
            decode(COLLECT_SESSIONS, &serde_json::to_vec(&row).unwrap()).unwrap();
        assert_eq!(
            (
                session.sealed_proof_key.len(),
                session.last_call,
                session.last_seq
            ),
            (0, 0, 4)
        );
    }

    fn session(org: OrgId) -> CollectSessionRecord {
        let now = schemas::time::now();
        CollectSessionRecord {
            id: SessionId::generate(),
            organization_id: org,
            environment: Environment::Live,
            key_id: KeyId::generate(),
            sealed_batch_key: vec![1; 60],
            sealed_proof_key: vec![3; 60],
            page_url: "https://shop.example/".into(),
            sdk_version: "1.0.0".into(),
            opened_at: now,
            expires_at: now + chrono::TimeDelta::minutes(30),
            last_seq: 0,
            last_call: 0,
            pings: (0..3)
                .map(|_| crate::PingRecord {
                    id: PingId::generate(),
                    arrived_at: None,
                })
                .collect(),
            network_check_token_hash: [2; 32],
            ws_identity: None,
            results_at: None,
            gate_session_id: None,
            challenge: String::new(),
        }
    }

    /// The session's counter as read.
    async fn last_seq(store: &EmbeddedStore, id: SessionId) -> u64 {
        let read = store.get_collect_session(id).await.unwrap();
        read.expect("the session exists").last_seq
    }

    /// Waits until the writing thread has written `id`'s raised counter (see `seqs`).
    fn written(store: &EmbeddedStore, id: SessionId) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while store.inner.pending_seq(id).is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "a raise was never written"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Ingest's batch counter is raised and read at once while other writes hold the writer
    /// mutex (a processor's save, say) and the collect rows' lock, and written once they are
    /// let go.
    // Synchronous, so the test can hold the store's locks while the runtime runs the raise.
    #[test]
    fn batch_counters_are_raised_in_memory_and_written_behind() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let s = session(OrgId::generate());
        runtime.block_on(store.create_collect_session(&s)).unwrap();

        let writer = store.inner.writer.lock().unwrap();
        let rows = store.inner.collect_rows.lock().unwrap();
        assert!(
            runtime
                .block_on(store.advance_collect_seq(s.id, 1))
                .unwrap()
        );
        assert!(
            !runtime
                .block_on(store.advance_collect_seq(s.id, 1))
                .unwrap()
        );
        let read = runtime.block_on(store.get_collect_session(s.id)).unwrap();
        assert_eq!(read.map(|s| s.last_seq), Some(1));
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(
            store.inner.collect_seq(s.id).unwrap(),
            None,
            "written past the lock"
        );
        drop(rows);
        drop(writer);
        written(&store, s.id);
        assert_eq!(store.inner.collect_seq(s.id).unwrap(), Some(1));

        // Raises of other sessions while a pass waits for the lock are written by a later pass.
        let others: Vec<_> = (0..3).map(|_| session(OrgId::generate())).collect();
        for other in &others {
            runtime
                .block_on(store.create_collect_session(other))
                .unwrap();
        }
        let rows = store.inner.collect_rows.lock().unwrap();
        assert!(
            runtime
                .block_on(store.advance_collect_seq(others[0].id, 1))
                .unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            runtime
                .block_on(store.advance_collect_seq(others[1].id, 1))
                .unwrap()
        );
        assert!(
            runtime
                .block_on(store.advance_collect_seq(others[2].id, 1))
                .unwrap()
        );
        drop(rows);
        for other in &others {
            written(&store, other.id);
            assert_eq!(store.inner.collect_seq(other.id).unwrap(), Some(1));
        }

        // What is pending when the store closes is written before it does.
        let rows = store.inner.collect_rows.lock().unwrap();
        assert!(
            runtime
                .block_on(store.advance_collect_seq(s.id, 2))
                .unwrap()
        );
        drop(rows);
        drop(store);
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let read = runtime.block_on(store.get_collect_session(s.id)).unwrap();
        assert_eq!(read.map(|s| s.last_seq), Some(2));
    }

    /// A raised counter is written alone, to `collect_seqs`, and read over the row's own; a
    /// row's counter from before that table (or carried by a later rewrite of the row) still
    /// counts, the higher of the two winning.
    #[tokio::test]
    async fn batch_counters_live_in_rows_of_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let stored_row = |id| {
            let bytes = store
                .inner
                .collect_sessions
                .get(key::collect_session(id))
                .unwrap()
                .unwrap();
            decode::<CollectSessionRecord>(COLLECT_SESSIONS, &bytes).unwrap()
        };

        let s = session(OrgId::generate());
        store.create_collect_session(&s).await.unwrap();
        assert!(store.advance_collect_seq(s.id, 5).await.unwrap());
        written(&store, s.id);
        assert_eq!(stored_row(s.id).last_seq, 0);
        assert_eq!(store.inner.collect_seq(s.id).unwrap(), Some(5));
        assert_eq!(last_seq(&store, s.id).await, 5);
        assert!(!store.advance_collect_seq(s.id, 5).await.unwrap());
        assert!(!store.advance_collect_seq(s.id, 4).await.unwrap());

        // A rewrite of the row (a ping arriving) carries the counter as read.
        let ping = s.pings[0].id;
        assert!(
            store
                .record_collect_ping(s.id, ping, schemas::time::now())
                .await
                .unwrap()
        );
        assert_eq!(stored_row(s.id).last_seq, 5);
        assert!(store.advance_collect_seq(s.id, 6).await.unwrap());
        assert_eq!(last_seq(&store, s.id).await, 6);

        // A row whose counter is higher than any `collect_seqs` row (one written before them).
        let older = CollectSessionRecord {
            last_seq: 4,
            ..session(OrgId::generate())
        };
        store.create_collect_session(&older).await.unwrap();
        assert!(!store.advance_collect_seq(older.id, 4).await.unwrap());
        assert_eq!(store.inner.pending_seq(older.id), None);
        assert_eq!(store.inner.collect_seq(older.id).unwrap(), None);
        assert!(store.advance_collect_seq(older.id, 7).await.unwrap());
        assert_eq!(last_seq(&store, older.id).await, 7);

        // No session, no counter.
        let missing = SessionId::generate();
        assert!(!store.advance_collect_seq(missing, 1).await.unwrap());
        assert_eq!(store.inner.pending_seq(missing), None);
        assert_eq!(store.inner.collect_seq(missing).unwrap(), None);
    }

    /// The sweep drops sessions (and their pings' lookup rows) a day after their id was
    /// minted, and nothing younger.
    #[tokio::test]
    async fn collect_sessions_are_swept_after_their_retention() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let old = session(OrgId::generate());
        store.create_collect_session(&old).await.unwrap();
        let young = session(OrgId::generate());
        store.create_collect_session(&young).await.unwrap();
        // Counters raised and written, so their `collect_seqs` rows must go with the sessions.
        assert!(store.advance_collect_seq(old.id, 3).await.unwrap());
        assert!(store.advance_collect_seq(young.id, 1).await.unwrap());
        written(&store, old.id);
        written(&store, young.id);
        assert_eq!(store.inner.collect_seqs.iter().count(), 2);
        let old = CollectSessionRecord { last_seq: 3, ..old };
        let young = CollectSessionRecord {
            last_seq: 1,
            ..young
        };
        let minted = |s: &CollectSessionRecord| {
            chrono::DateTime::from_timestamp_millis(s.id.ulid().timestamp_ms() as i64).unwrap()
        };
        let retention = chrono::TimeDelta::from_std(COLLECT_RETENTION).unwrap();

        // Just inside the old session's retention: both stay.
        let now = minted(&old) + retention;
        while store
            .purge_expired(now, chrono::DateTime::UNIX_EPOCH, 1000)
            .await
            .unwrap()
        {}
        assert_eq!(
            store.get_collect_session(old.id).await.unwrap(),
            Some(old.clone())
        );

        // Just past it (and before the young one's, if minted a millisecond later): the old one
        // goes with its pings.
        let now = minted(&old) + retention + chrono::TimeDelta::milliseconds(1);
        while store
            .purge_expired(now, chrono::DateTime::UNIX_EPOCH, 1000)
            .await
            .unwrap()
        {}
        assert_eq!(store.get_collect_session(old.id).await.unwrap(), None);
        for ping in &old.pings {
            assert_eq!(store.find_collect_ping(ping.id).await.unwrap(), None);
        }
        if minted(&young) > minted(&old) {
            assert_eq!(
                store.get_collect_session(young.id).await.unwrap(),
                Some(young.clone())
            );
        }

        // A day after the young one: the table is empty.
        let now = minted(&young) + retention + chrono::TimeDelta::milliseconds(1);
        while store
            .purge_expired(now, chrono::DateTime::UNIX_EPOCH, 1000)
            .await
            .unwrap()
        {}
        assert_eq!(store.get_collect_session(young.id).await.unwrap(), None);
        assert_eq!(store.inner.collect_sessions.iter().count(), 0);
        assert_eq!(store.inner.collect_pings.iter().count(), 0);
        assert_eq!(store.inner.collect_seqs.iter().count(), 0);
    }
}
