//! Scored sessions and their decision history (`003_sessions.cql`), with the indexes a save
//! moves: `sessions_idle` (`006_sessions_idle.cql`) and `sessions_by_verdict`
//! (`008_read_indexes.cql`); and the marks by which the writer skips re-reading what it saved.

use std::ops::Bound;

use fjall::{OwnedWriteBatch, Readable};
use schemas::credential::Environment;
use schemas::ids::{OrgId, SessionId};
use schemas::time::Timestamp;
use serde::{Deserialize, Serialize};

use super::expiry::Expiring;
use super::{
    EXPIRY_QUEUE, EmbeddedStore, Inner, SESSION_DECISIONS, SESSIONS, SESSIONS_BY_VERDICT,
    SESSIONS_IDLE, decode, decode_row, encode, key, prefix_end, read_indexed, scan, unavailable,
};
use crate::{
    DecisionRecord, DecisionTurn, IdleSession, Result, SessionRecord, SessionSave, StoreError,
};

/// How many sessions' marks the writer keeps: a few megabytes, and more than the sessions a
/// busy processor saves between two visits of the same session.
pub(super) const SESSION_MARKS: usize = 65_536;

pub(super) type SessionMarks = quick_cache::unsync::Cache<SessionId, SessionMark>;

/// A session's newest `session_decisions` row: its key and its turn.
type NewestDecision = ([u8; 32], DecisionTurn);

/// What replacing a session's rows must know of the rows stored before: where its index rows
/// are and which of its decisions the new one may prune. Read from the store the first time,
/// then kept by the writer for the sessions it saved lately: every fold of a session saves it
/// again, and reading its row (some 13 KB, for three small columns) and scanning its decisions
/// each time took a tenth of the processor's store writes. Exact because the writer is the
/// store's only writer and updates a mark only once its batch is committed; a purged session
/// loses its mark.
#[derive(Clone)]
pub(super) struct SessionMark {
    updated_at: Timestamp,
    finalized: bool,
    verdict: Option<String>,
    /// The newest `session_decisions` row, and the turn of the one before.
    newest: Option<NewestDecision>,
    before: Option<DecisionTurn>,
}

/// The columns of a stored `sessions` row that say where it sits in `sessions_idle`,
/// `sessions_by_verdict` and `expiry_queue` (decoding only these skips the rest of the row
/// without building it).
#[derive(Deserialize)]
pub(super) struct SessionPlace {
    pub(super) updated_at: Timestamp,
    #[serde(default)]
    finalized: bool,
    #[serde(default)]
    latest_decision: Option<DecisionTurn>,
}

impl SessionPlace {
    pub(super) fn verdict(&self) -> Option<&str> {
        self.latest_decision.as_ref()?.verdict.as_deref()
    }
}

/// The column of a stored `session_decisions` row that says whether it is a turning point.
#[derive(Deserialize)]
struct DecisionPlace {
    decision: Option<DecisionTurn>,
}

/// `sessions_idle`: where an unfinalised session is (its id and time are in the key).
#[derive(Serialize, Deserialize)]
struct IdleRow {
    organization_id: OrgId,
    environment: Environment,
}

impl Inner {
    /// Adds one session's save to `batch` (see `save_sessions`). Callers hold the writer mutex,
    /// so the stored row read here (which says where its idle-index row is) is current.
    ///
    /// With a decision newer than the stored latest, it also prunes the session's decision
    /// history as appending it calls for (D23): the stored latest goes unless it is a turning
    /// point, that is unless its phase or verdict differs from the decision kept before it (or
    /// none was).
    ///
    /// Returns the session's mark as the batch leaves it, for the caller to keep once the batch
    /// is committed; `None` when it is not known (a late decision landed below the newest).
    fn add_session_save(
        &self,
        batch: &mut OwnedWriteBatch,
        save: &SessionSave,
        marks: &SessionMarks,
    ) -> Result<Option<SessionMark>> {
        let session = &save.session;
        let (org, env, id) = (session.organization_id, session.environment, session.id);
        let k = key::session(org, env, id);
        let stored = match marks.get(&id) {
            Some(mark) => Some(mark.clone()),
            None => match decode_row::<SessionPlace>(SESSIONS, self.sessions.get(k))? {
                Some(place) => {
                    let (newest, before) = self.newest_decisions(id)?;
                    Some(SessionMark {
                        updated_at: place.updated_at,
                        finalized: place.finalized,
                        verdict: place.verdict().map(str::to_owned),
                        newest,
                        before,
                    })
                }
                None => None,
            },
        };
        if let Some(stored) = &stored {
            if !stored.finalized {
                batch.remove(&self.sessions_idle, key::idle(id, stored.updated_at));
            }
            if stored.updated_at != session.updated_at {
                batch.remove(
                    &self.expiry_queue,
                    key::expiry(stored.updated_at, Expiring::Session as u8, &k),
                );
            }
        }
        let verdict = session.verdict();
        let stored_verdict = stored.as_ref().and_then(|s| s.verdict.as_deref());
        if stored_verdict != verdict.as_deref()
            && let Some(old) = stored_verdict.and_then(|v| key::session_by_verdict(org, env, v, id))
        {
            batch.remove(&self.sessions_by_verdict, old);
        }
        if let Some(new) = verdict
            .as_deref()
            .and_then(|v| key::session_by_verdict(org, env, v, id))
        {
            batch.insert(&self.sessions_by_verdict, new, []);
        }
        batch.insert(
            &self.expiry_queue,
            key::expiry(session.updated_at, Expiring::Session as u8, &k),
            [],
        );
        if !session.finalized {
            let row = IdleRow {
                organization_id: org,
                environment: env,
            };
            batch.insert(
                &self.sessions_idle,
                key::idle(id, session.updated_at),
                encode(SESSIONS_IDLE, &row)?,
            );
        }
        batch.insert(&self.sessions, k, encode(SESSIONS, session)?);
        let (mut newest, mut before) = match stored {
            Some(s) => (s.newest, s.before),
            None => (None, None),
        };
        let mut known = true;
        if let Some(d) = &save.decision {
            let dk = key::decision(d.session_id, d.id);
            let turn = DecisionTurn::of(&d.decision);
            // Only a newer decision replaces the newest; a redelivered or late one prunes
            // nothing, and lands somewhere below (the mark is then read again next time).
            let is_newer = newest.as_ref().is_none_or(|(latest_key, _)| {
                key::trailing_id(latest_key).is_some_and(|latest| d.id.ulid().0 > latest)
            });
            batch.insert(&self.session_decisions, dk, encode(SESSION_DECISIONS, d)?);
            if is_newer {
                // The newest row is kept only if it was a turning point: unlike the one before.
                match (newest.take(), &before) {
                    (Some((latest_key, latest)), Some(prior)) if latest == *prior => {
                        batch.remove(&self.session_decisions, latest_key);
                    }
                    (Some((_, latest)), _) => before = Some(latest),
                    (None, _) => {}
                }
                newest = Some((dk, turn));
            } else {
                known = false;
            }
        }
        self.add_events(batch, &save.events)?;
        Ok(known.then_some(SessionMark {
            updated_at: session.updated_at,
            finalized: session.finalized,
            verdict,
            newest,
            before,
        }))
    }

    /// The session's two newest decision rows as [`SessionMark`] holds them, read from the store.
    fn newest_decisions(
        &self,
        session: SessionId,
    ) -> Result<(Option<NewestDecision>, Option<DecisionTurn>)> {
        let partition = key::decision_partition(session);
        let mut newest = None;
        let mut before = None;
        for guard in self.session_decisions.prefix(partition).take(2) {
            let (k, v) = guard.into_inner().map_err(unavailable)?;
            let turn = decode::<DecisionPlace>(SESSION_DECISIONS, &v)?
                .decision
                .unwrap_or_default();
            match newest {
                None => {
                    let k: [u8; 32] = k.as_ref().try_into().map_err(|_| StoreError::Corrupt {
                        table: SESSION_DECISIONS,
                        detail: "a decision key of the wrong length".into(),
                    })?;
                    newest = Some((k, turn));
                }
                Some(_) => before = Some(turn),
            }
        }
        Ok((newest, before))
    }

    /// Drops the session at `k` if it was not updated since `keep_since`, with its decisions
    /// (a handful, since the history is pruned) and its index rows.
    pub(super) fn purge_session(
        &self,
        batch: &mut OwnedWriteBatch,
        marks: &mut SessionMarks,
        k: &[u8],
        keep_since: Timestamp,
    ) -> Result<()> {
        let Some(place) = decode_row::<SessionPlace>(SESSIONS, self.sessions.get(k))? else {
            return Ok(());
        };
        if place.updated_at >= keep_since {
            return Ok(());
        }
        let (org, env, id) = key::parse_session(k).ok_or_else(|| StoreError::Corrupt {
            table: EXPIRY_QUEUE,
            detail: "a queued session key of the wrong length".into(),
        })?;
        marks.remove(&id);
        if !place.finalized {
            batch.remove(&self.sessions_idle, key::idle(id, place.updated_at));
        }
        if let Some(vk) = place
            .verdict()
            .and_then(|v| key::session_by_verdict(org, env, v, id))
        {
            batch.remove(&self.sessions_by_verdict, vk);
        }
        let partition = key::decision_partition(id);
        for guard in self.session_decisions.prefix(partition) {
            batch.remove(&self.session_decisions, guard.key().map_err(unavailable)?);
        }
        batch.remove(&self.sessions, k.to_vec());
        Ok(())
    }
}

impl EmbeddedStore {
    /// One batch under the writer mutex for the whole list (one fsync however many sessions):
    /// per session its row (replacing any stored one), the decision's row when given, the
    /// events' rows and its move in the idle index, so a reader sees all of it or none.
    pub(super) async fn save_sessions(&self, saves: &[SessionSave]) -> Result<()> {
        crate::check_session_saves(saves)?;
        let saves = saves.to_vec();
        self.write(move |db, state| {
            let mut batch = db.batch();
            let mut marks = Vec::with_capacity(saves.len());
            for save in &saves {
                let mark = db.add_session_save(&mut batch, save, &state.session_marks)?;
                marks.push((save.session.id, mark));
            }
            // Marks change only with what is stored: a batch that fails leaves them unknown.
            let committed = batch.commit().map_err(unavailable);
            for (id, mark) in marks {
                match (mark, &committed) {
                    (Some(mark), Ok(())) => state.session_marks.insert(id, mark),
                    _ => {
                        state.session_marks.remove(&id);
                    }
                }
            }
            committed
        })
        .await
    }

    pub(super) async fn get_session(
        &self,
        org: OrgId,
        env: Environment,
        id: SessionId,
    ) -> Result<Option<SessionRecord>> {
        decode_row(
            SESSIONS,
            self.inner
                .db
                .snapshot()
                .get(&self.inner.sessions, key::session(org, env, id)),
        )
    }

    pub(super) async fn list_sessions(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let partition = key::session_partition(org, env);
        let start = match after {
            // Keys sort newest first, so "older than `after`" is "after its key".
            Some(after) => Bound::Excluded(key::session(org, env, after).to_vec()),
            None => Bound::Included(partition.to_vec()),
        };
        scan(
            SESSIONS,
            &self.inner.db.snapshot(),
            &self.inner.sessions,
            start,
            prefix_end(&partition),
            limit,
        )
    }

    /// The verdict index's rows and the session rows they name, from one snapshot.
    pub(super) async fn list_sessions_by_verdict(
        &self,
        org: OrgId,
        env: Environment,
        verdict: &str,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>> {
        let Some(partition) = key::verdict_partition(org, env, verdict) else {
            return Ok(Vec::new());
        };
        let start = match after.and_then(|a| key::session_by_verdict(org, env, verdict, a)) {
            Some(after) => Bound::Excluded(after),
            None => Bound::Included(partition.clone()),
        };
        read_indexed(
            &self.inner.db.snapshot(),
            (&self.inner.sessions_by_verdict, SESSIONS_BY_VERDICT),
            (start, prefix_end(&partition)),
            limit,
            (&self.inner.sessions, SESSIONS),
            |id| key::session(org, env, SessionId::from_ulid(id.into())),
        )
    }

    pub(super) async fn list_decisions(
        &self,
        session: SessionId,
        limit: usize,
    ) -> Result<Vec<DecisionRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let partition = key::decision_partition(session);
        scan(
            SESSION_DECISIONS,
            &self.inner.db.snapshot(),
            &self.inner.session_decisions,
            Bound::Included(partition.to_vec()),
            prefix_end(&partition),
            limit,
        )
    }

    pub(super) async fn list_idle_sessions(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> Result<Vec<IdleSession>> {
        let snapshot = self.inner.db.snapshot();
        let mut idle = Vec::new();
        for bucket in 0..key::IDLE_BUCKETS {
            if idle.len() >= limit {
                break;
            }
            let start = key::idle_bucket(bucket).to_vec();
            let end = key::idle_before(bucket, before).to_vec();
            for guard in snapshot
                .range(&self.inner.sessions_idle, start..end)
                .take(limit - idle.len())
            {
                let (k, v) = guard.into_inner().map_err(unavailable)?;
                let row: IdleRow = decode(SESSIONS_IDLE, &v)?;
                let (session_id, idle_since) =
                    key::parse_idle(&k).ok_or_else(|| StoreError::Corrupt {
                        table: SESSIONS_IDLE,
                        detail: "a key of the wrong length".into(),
                    })?;
                idle.push(IdleSession {
                    organization_id: row.organization_id,
                    environment: row.environment,
                    session_id,
                    idle_since,
                });
            }
        }
        Ok(idle)
    }
}
