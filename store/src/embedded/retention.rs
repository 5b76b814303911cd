//! Retention (docs/architecture.md#retention), where ScyllaDB has TTLs: `purge_expired`'s bounded
//! steps over the `expiry_queue` (sessions, visitors, events, Gate sessions), the walks of the
//! tables with no time order (idempotency records, handoff openings) and the collect sweep, and the
//! one-time indexing of rows stored before the read and expiry indexes existed. What dropping a row
//! of a family also drops (a session's decisions, a visitor's index rows, an event's deliveries,
//! a collect session's pings) is in that family's module.

use async_trait::async_trait;
use std::ops::Bound;
use std::sync::PoisonError;

use fjall::{Keyspace, OwnedWriteBatch};
use schemas::credential::Environment;
use schemas::ids::{OrgId, SessionId};
use schemas::time::Timestamp;
use serde::Deserialize;

use super::collect::{OpeningRow, ReplayMarkRow};
use super::events::EventPlace;
use super::key::Expiring;
use super::row_cache::Changes;
use super::sessions::{SessionMarks, SessionPlace};
use super::writer::{Backfill, WriterState};
use super::{
    EVENTS, EmbeddedStore, GATE_SESSIONS, HANDOFF_OPENINGS, IDEMPOTENCY_RECORDS, Inner,
    REPLAY_MARKS, SESSIONS, VISITORS, decode, decode_row, key, unavailable,
};
use crate::{
    GateSessionRecord, IdempotencyRecord, Result, RetentionStore, VisitorOrder, VisitorRecord,
};

/// The `settings` row that says the backfill is done.
const BACKFILLED: &str = "store/indexes-backfilled/v1";

/// A stored `sessions` row's identity and index columns, for the backfill.
#[derive(Deserialize)]
struct SessionIdentity {
    id: SessionId,
    organization_id: OrgId,
    environment: Environment,
    #[serde(flatten)]
    place: SessionPlace,
}

impl Inner {
    /// `purge_expired` under the writer lock: every kind's step in one batch. Not synced: a
    /// delete lost in a crash is found again by the next step (its queue row is lost with it).
    fn purge_step(
        &self,
        state: &mut WriterState,
        now: Timestamp,
        keep_since: Timestamp,
        budget: usize,
    ) -> Result<bool> {
        let mut batch = self.db.batch();
        // Alone in its batch: a purge in the same batch could drop a row the backfill indexes.
        if self.backfill_step(&mut batch, &mut state.backfill, budget)? {
            batch.commit().map_err(unavailable)?;
            return Ok(true);
        }
        // Held to the commit: see `purge_expired_collect_sessions`.
        let _rows = self
            .collect_rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut more =
            self.purge_retained(&mut batch, &mut state.session_marks, keep_since, budget)?;
        let mut purged = Vec::new();
        more |= self.purge_expired_collect_sessions(&mut batch, now, budget, &mut purged)?;
        more |= self.sweep_step(
            &mut batch,
            &self.idempotency_records,
            &mut state.idempotency_cursor,
            budget,
            |v| Ok(decode::<IdempotencyRecord>(IDEMPOTENCY_RECORDS, v)?.expires_at <= now),
        )?;
        more |= self.sweep_step(
            &mut batch,
            &self.handoff_openings,
            &mut state.handoff_cursor,
            budget,
            |v| Ok(decode::<OpeningRow>(HANDOFF_OPENINGS, v)?.expires_at <= now),
        )?;
        more |= self.sweep_step(
            &mut batch,
            &self.replay_marks,
            &mut state.replay_cursor,
            budget,
            |v| Ok(decode::<ReplayMarkRow>(REPLAY_MARKS, v)?.expires_at <= now),
        )?;
        more |= self.sweep_gate_sessions(&mut batch, &mut state.gate_cursor, now, budget)?;
        self.commit(
            batch,
            Changes {
                collect_sessions: &purged,
                ..Changes::default()
            },
        )?;
        self.forget_pending_seqs(&purged);
        Ok(more)
    }

    /// Records a new store's backfill as done: it has no rows to index. Otherwise a store
    /// filled right after it was made (a restore, a bulk load) would be walked again by its
    /// first sweeps for nothing. Blocking.
    pub(super) fn skip_backfill_when_empty(&self) -> Result<()> {
        let empty = [&self.sessions, &self.visitors, &self.events]
            .iter()
            .all(|table| table.first_key_value().is_none());
        if empty && !self.contains(&self.settings, key::setting(BACKFILLED))? {
            let mut batch = self.batch();
            batch.insert(&self.settings, key::setting(BACKFILLED), b"done".to_vec());
            batch.commit().map_err(unavailable)?;
        }
        Ok(())
    }

    /// One step of the backfill (see [`Backfill`]); whether it did one (false once done).
    fn backfill_step(
        &self,
        batch: &mut OwnedWriteBatch,
        backfill: &mut Backfill,
        budget: usize,
    ) -> Result<bool> {
        let done = match backfill.done {
            Some(done) => done,
            None => self.contains(&self.settings, key::setting(BACKFILLED))?,
        };
        backfill.done = Some(done);
        if done {
            return Ok(false);
        }
        let table = match backfill.table {
            0 => &self.sessions,
            1 => &self.visitors,
            _ => &self.events,
        };
        let start = backfill
            .cursor
            .take()
            .map_or(Bound::Unbounded, Bound::Excluded);
        let mut read = 0;
        for guard in table
            .range::<Vec<u8>, _>((start, Bound::Unbounded))
            .take(budget)
        {
            let (k, v) = guard.into_inner().map_err(unavailable)?;
            read += 1;
            match backfill.table {
                0 => {
                    let s: SessionIdentity = decode(SESSIONS, &v)?;
                    let queued = key::expiry(s.place.updated_at, Expiring::Session, &k);
                    batch.insert(&self.expiry_queue, queued, []);
                    if let Some(vk) = s.place.verdict().and_then(|verdict| {
                        key::session_by_verdict(s.organization_id, s.environment, verdict, s.id)
                    }) {
                        batch.insert(&self.sessions_by_verdict, vk, []);
                    }
                }
                1 => {
                    let v: VisitorRecord = decode(VISITORS, &v)?;
                    let (org, env) = (v.organization_id, v.environment);
                    for order in VisitorOrder::ALL {
                        let ok = key::visitor_by(org, env, order.value(&v), v.id);
                        batch.insert(self.visitor_order(order), ok, []);
                    }
                    let queued = key::expiry(v.last_seen_at, Expiring::Visitor, &k);
                    batch.insert(&self.expiry_queue, queued, []);
                }
                _ => {
                    let e: EventPlace = decode(EVENTS, &v)?;
                    let queued = key::expiry(e.created_at, Expiring::Event, &k);
                    batch.insert(&self.expiry_queue, queued, []);
                }
            }
            backfill.cursor = Some(k.to_vec());
        }
        if read < budget {
            backfill.cursor = None;
            backfill.table += 1;
            if backfill.table > 2 {
                batch.insert(&self.settings, key::setting(BACKFILLED), b"done".to_vec());
                backfill.done = Some(true);
            }
        }
        Ok(true)
    }

    /// Removes `expiry_queue` rows older than `keep_since`, at most `budget`, each with the row
    /// it names when that row was not written again since (a newer write has its own queue row).
    fn purge_retained(
        &self,
        batch: &mut OwnedWriteBatch,
        marks: &mut SessionMarks,
        keep_since: Timestamp,
        budget: usize,
    ) -> Result<bool> {
        let end = key::expiry_before(keep_since).to_vec();
        let mut read = 0;
        for guard in self.expiry_queue.range(..end).take(budget) {
            let k = guard.key().map_err(unavailable)?;
            read += 1;
            batch.remove(&self.expiry_queue, k.clone());
            let Some((kind, target)) = key::parse_expiry(&k) else {
                continue;
            };
            if kind == Expiring::Session as u8 {
                self.purge_session(batch, marks, target, keep_since)?;
            } else if kind == Expiring::Visitor as u8 {
                self.purge_visitor(batch, target, keep_since)?;
            } else if kind == Expiring::GateSession as u8 {
                let row: Option<GateSessionRecord> =
                    decode_row(GATE_SESSIONS, self.gate_sessions.get(target))?;
                if let Some(session) = row {
                    if let Some(code) = session.login_code {
                        batch.remove(&self.gate_login_codes, code.0);
                    }
                    batch.remove(&self.gate_sessions, target.to_vec());
                }
            } else if kind == Expiring::Event as u8 {
                let row: Option<EventPlace> = decode_row(EVENTS, self.events.get(target))?;
                if row.is_some_and(|e| e.created_at < keep_since) {
                    batch.remove(&self.events, target.to_vec());
                    self.purge_deliveries(batch, target)?;
                }
            }
        }
        Ok(read == budget)
    }

    /// One bounded step of a walk over a table with no time order (`idempotency_records`,
    /// `handoff_openings`): reads at most `budget` rows after `cursor`, adds the removal of those
    /// `expired` says are past their expiry to `batch`, and moves the cursor. Whether the walk
    /// has rows left (it starts over from the beginning once it has none).
    fn sweep_step(
        &self,
        batch: &mut OwnedWriteBatch,
        keyspace: &Keyspace,
        cursor: &mut Option<Vec<u8>>,
        budget: usize,
        expired: impl Fn(&[u8]) -> Result<bool>,
    ) -> Result<bool> {
        let start = cursor.take().map_or(Bound::Unbounded, Bound::Excluded);
        let mut read = 0;
        let mut last = None;
        for guard in keyspace
            .range::<Vec<u8>, _>((start, Bound::Unbounded))
            .take(budget)
        {
            let (k, v) = guard.into_inner().map_err(unavailable)?;
            read += 1;
            if expired(&v)? {
                batch.remove(keyspace, k.clone());
            }
            last = Some(k.to_vec());
        }
        if read < budget {
            return Ok(false);
        }
        *cursor = last;
        Ok(true)
    }
}

#[async_trait]
impl RetentionStore for EmbeddedStore {
    async fn purge_expired(
        &self,
        now: Timestamp,
        keep_since: Timestamp,
        budget: usize,
    ) -> Result<bool> {
        let budget = budget.max(1);
        self.write(move |db, state| db.purge_step(state, now, keep_since, budget))
            .await
    }
}

#[cfg(test)]
mod tests {
    use schemas::ids::VisitorId;

    use super::*;
    use crate::prelude::*;
    use crate::{CredentialHash, IdempotencyScope, SessionRecord};

    /// Idempotency records and handoff openings have no time order: the purge walks them a
    /// bounded step at a time, drops the expired ones, keeps the rest, and ends its walk.
    #[tokio::test]
    async fn expired_idempotency_records_and_handoff_openings_are_walked_and_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let now = schemas::time::now();
        let (past, future) = (
            now - chrono::TimeDelta::minutes(1),
            now + chrono::TimeDelta::hours(1),
        );
        for i in 0..10u8 {
            let scope = IdempotencyScope {
                credential: CredentialHash([i; 32]),
                key: format!("k{i}"),
            };
            let record = IdempotencyRecord {
                request_fingerprint: [i; 32],
                expires_at: if i % 2 == 0 { past } else { future },
                response: None,
            };
            store.idempotency_begin(&scope, &record).await.unwrap();
            let expires = if i % 2 == 0 { past } else { future };
            store
                .open_handoff_once(&crate::HandoffOpening {
                    handoff: [i; 16],
                    at: now,
                    expires_at: expires,
                })
                .await
                .unwrap();
        }
        let epoch = chrono::DateTime::UNIX_EPOCH;
        let mut steps = 0;
        while store.purge_expired(now, epoch, 3).await.unwrap() {
            steps += 1;
            assert!(steps < 100, "the walk ends");
        }
        assert!(steps >= 3, "10 rows in steps of 3 ({steps} steps)");
        assert_eq!(store.inner.idempotency_records.iter().count(), 5);
        assert_eq!(store.inner.handoff_openings.iter().count(), 5);
        // A dropped opening is gone; a live one still answers with its first opening.
        assert_eq!(
            store
                .open_handoff_once(&crate::HandoffOpening {
                    handoff: [0; 16],
                    at: now,
                    expires_at: future
                })
                .await
                .unwrap(),
            None
        );
        assert_eq!(
            store
                .open_handoff_once(&crate::HandoffOpening {
                    handoff: [1; 16],
                    at: now,
                    expires_at: future
                })
                .await
                .unwrap(),
            Some(now)
        );
    }

    /// A store written before the read and expiry indexes existed: the first purge steps index
    /// its rows, so they are listed in every order and expire like new ones.
    #[tokio::test]
    async fn rows_stored_before_the_indexes_are_indexed_by_the_first_purge_steps() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let (org, env) = (OrgId::generate(), Environment::Live);
        let now = schemas::time::now();
        let session = SessionRecord {
            id: SessionId::generate(),
            organization_id: org,
            environment: env,
            visitor_id: None,
            opened_at: now,
            updated_at: now,
            page_url: String::new(),
            ip: String::new(),
            user_agent: String::new(),
            processed_through: 0,
            processed_seqs: Vec::new(),
            state: crate::RawJson::null(),
            latest_decision: Some(
                crate::RawJson::encode(&serde_json::json!({"verdict": "bot"})).unwrap(),
            ),
            finalized: true,
        };
        store.save_session(&session, None, &[]).await.unwrap();
        let visitor = VisitorRecord {
            id: VisitorId::generate(),
            organization_id: org,
            environment: env,
            first_seen_at: now,
            last_seen_at: now,
            seen_count: 3,
            expires_at: now,
            latest_request: Default::default(),
            storage: Default::default(),
            anchors: Default::default(),
            components: Vec::new(),
            traits: Default::default(),
            recent_sessions: Vec::new(),
            revision: 0,
        };
        store.save_visitor(&visitor).await.unwrap();
        // Forget the indexes, as a store from before them has none (and the record that a
        // new store, empty when opened, has nothing to index).
        let db = &store.inner;
        assert!(db.settings.contains_key(key::setting(BACKFILLED)).unwrap());
        db.settings.remove(key::setting(BACKFILLED)).unwrap();
        for table in [
            &db.sessions_by_verdict,
            &db.visitors_by_last_seen,
            &db.visitors_by_seen_count,
            &db.visitors_by_first_seen,
            &db.expiry_queue,
        ] {
            let keys: Vec<_> = table.iter().map(|g| g.key().unwrap()).collect();
            for k in keys {
                table.remove(k).unwrap();
            }
        }
        assert!(
            store
                .list_visitors_by(org, env, VisitorOrder::SeenCount, None, 10)
                .await
                .unwrap()
                .is_empty()
        );

        let epoch = chrono::DateTime::UNIX_EPOCH;
        while store.purge_expired(now, epoch, 1).await.unwrap() {}
        assert_eq!(
            store
                .list_sessions_by_verdict(org, env, "bot", None, 10)
                .await
                .unwrap(),
            vec![session.clone()]
        );
        for order in VisitorOrder::ALL {
            assert_eq!(
                store
                    .list_visitors_by(org, env, order, None, 10)
                    .await
                    .unwrap(),
                vec![visitor.clone()]
            );
        }
        assert!(db.settings.contains_key(key::setting(BACKFILLED)).unwrap());
        // And they expire.
        let later = now + chrono::TimeDelta::seconds(1);
        while store.purge_expired(later, later, 100).await.unwrap() {}
        assert_eq!(store.get_session(org, env, session.id).await.unwrap(), None);
        assert_eq!(store.get_visitor(org, env, visitor.id).await.unwrap(), None);
    }
}
