//! Scored sessions and their decision history (`003_sessions.cql`), with the indexes a save
//! moves: `sessions_idle` (`006_sessions_idle.cql`) and `sessions_by_verdict`
//! (`008_read_indexes.cql`); and the marks by which the writer skips re-reading what it saved.
//!
//! A session's newest decision lives in its `sessions` row (`newest_decision`), not in
//! `session_decisions`, which holds only the turning points before it: a decision becomes a
//! row when a newer one supersedes it and it was a turning point. Every fold of a session
//! decides again, and writing each decision as a row of its own (and a tombstone for the one
//! it replaced) was a fifth of the bytes a fold wrote. Stores written before keep their newest
//! decision as a row, which the next save prunes or keeps as before.

use async_trait::async_trait;
use std::ops::Bound;

use std::hash::{BuildHasher, RandomState};

use fjall::{OwnedWriteBatch, Readable, Snapshot};
use schemas::credential::Environment;
use schemas::ids::{DecisionId, OrgId, SessionId};
use schemas::raw::RawJson;
use schemas::session_digest::{SessionDigest, StateDigest};
use schemas::time::Timestamp;
use serde::{Deserialize, Serialize};

use super::key::Expiring;
use super::{
    EXPIRY_QUEUE, EmbeddedStore, Inner, SESSION_DECISIONS, SESSION_DIGESTS, SESSION_SETTLED,
    SESSIONS, SESSIONS_BY_VERDICT, SESSIONS_IDLE, decode, decode_row, encode, key, prefix_end,
    read_indexed, scan, unavailable,
};
use crate::{
    DecisionRecord, DecisionTurn, IdleSession, PartitionFence, Result, SessionRecord, SessionSave,
    SessionStore, StoreError,
};

/// How many sessions' marks the writer keeps: a few megabytes, and more than the sessions a
/// busy processor saves between two visits of the same session.
pub(super) const SESSION_MARKS: usize = 65_536;

pub(super) type SessionMarks = quick_cache::unsync::Cache<SessionId, SessionMark>;

/// A session's newest decision as the writer's mark keeps it: its id, its turn, and where it
/// is stored.
#[derive(Clone)]
pub(super) struct Newest {
    id: DecisionId,
    turn: DecisionTurn,
    /// A `session_decisions` row, as stores written before the newest moved into the session
    /// row keep it; otherwise the session row's `newest_decision`.
    in_row: bool,
}

/// The `newest_decision` member of a `sessions` row: what makes the session's newest decision a
/// [`DecisionRecord`] again beside the row's `latest_decision`.
#[derive(Clone, Serialize, Deserialize)]
struct NewestDecision {
    id: DecisionId,
    evaluated_at: Timestamp,
    /// Its document when it is not the row's `latest_decision` (a save without a decision, or
    /// with a late one); absent when it is, as with every save the processor makes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    decision: Option<RawJson>,
}

/// A `sessions` row as written: the session and, beside its members, its newest decision.
#[derive(Serialize)]
struct SessionRow<'a> {
    #[serde(flatten)]
    session: &'a SessionRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    newest_decision: Option<NewestDecision>,
}

/// The members of a stored `sessions` row that give its newest decision back.
#[derive(Deserialize)]
struct StoredNewest {
    #[serde(default)]
    latest_decision: Option<RawJson>,
    #[serde(default)]
    newest_decision: Option<NewestDecision>,
}

impl StoredNewest {
    /// The newest decision of `session` kept in its row, if the row keeps one.
    fn record(self, session: SessionId) -> Result<Option<DecisionRecord>> {
        let Some(newest) = self.newest_decision else {
            return Ok(None);
        };
        let decision =
            newest
                .decision
                .or(self.latest_decision)
                .ok_or_else(|| StoreError::Corrupt {
                    table: SESSIONS,
                    detail: "a newest decision without its document".into(),
                })?;
        Ok(Some(DecisionRecord {
            session_id: session,
            id: newest.id,
            evaluated_at: newest.evaluated_at,
            decision,
        }))
    }
}

/// The `newest_decision` of a row whose session is `session`, for the decision `d`.
fn newest_of(d: &DecisionRecord, session: &SessionRecord) -> NewestDecision {
    NewestDecision {
        id: d.id,
        evaluated_at: d.evaluated_at,
        decision: (session.latest_decision.as_ref() != Some(&d.decision))
            .then(|| d.decision.clone()),
    }
}

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
    /// The newest decision, and the turn of the newest `session_decisions` row before it.
    newest: Option<Newest>,
    before: Option<DecisionTurn>,
    /// The session's `session_settled` row, if it has one: a save whose settled part hashes the
    /// same does not write it again, nor read it again for the session's digest.
    settled: Option<SettledMark>,
}

/// What the writer keeps of a session's `session_settled` row.
#[derive(Clone)]
struct SettledMark {
    /// By the writer's [`RandomState`], so no client can aim for a collision.
    hash: u64,
    /// What the part shows the digest; `None` until a save read it (a mark made from the
    /// stored rows has not).
    shows: Option<StateDigest>,
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
    #[serde(default)]
    newest_decision: Option<NewestPlace>,
}

/// The members of a row's `newest_decision` that place it in the history.
#[derive(Deserialize)]
pub(super) struct NewestPlace {
    id: DecisionId,
    #[serde(default)]
    decision: Option<DecisionTurn>,
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
    /// With a decision newer than the stored newest, it also prunes the session's decision
    /// history as appending it calls for (docs/architecture.md#retention): the newest so far
    /// becomes a `session_decisions` row only if it is a turning point, that is if its phase or
    /// verdict differs from the decision kept before it (or none was), and the new decision takes
    /// its place in the row.
    ///
    /// Returns the session's mark as the batch leaves it, for the caller to keep once the batch
    /// is committed; `None` when it is not known (a late decision landed below the newest).
    fn add_session_save(
        &self,
        batch: &mut OwnedWriteBatch,
        save: &SessionSave,
        (marks, hasher): (&SessionMarks, &RandomState),
    ) -> Result<Option<SessionMark>> {
        let session = &save.session;
        let (org, env, id) = (session.organization_id, session.environment, session.id);
        let k = key::session(org, env, id);
        let stored = match marks.get(&id) {
            Some(mark) => Some(mark.clone()),
            None => self.stored_mark(&k, id, hasher)?,
        };
        // The settled part is written only when it changed, and dropped when the state comes
        // whole (a session row, and so a settled row, exists only where a mark was found).
        let settled = match &save.settled {
            Some(part) => {
                let hash = hasher.hash_one(part.as_str().as_bytes());
                let kept = stored
                    .as_ref()
                    .and_then(|s| s.settled.clone())
                    .filter(|s| s.hash == hash);
                if kept.is_none() {
                    batch.insert(&self.session_settled, k, part.as_str());
                }
                Some(SettledMark {
                    hash,
                    shows: Some(
                        kept.and_then(|s| s.shows)
                            .unwrap_or_else(|| StateDigest::read(part)),
                    ),
                })
            }
            None => {
                if stored.as_ref().is_some_and(|s| s.settled.is_some()) {
                    batch.remove(&self.session_settled, k);
                }
                None
            }
        };
        if let Some(stored) = &stored {
            if !stored.finalized {
                batch.remove(&self.sessions_idle, key::idle(id, stored.updated_at));
            }
            if stored.updated_at != session.updated_at {
                batch.remove(
                    &self.expiry_queue,
                    key::expiry(stored.updated_at, Expiring::Session, &k),
                );
            }
        }
        // The session's latest decision is nearly always the one saved with it: its turn is
        // read once for both.
        let latest_turn = session.latest_turn();
        let verdict = latest_turn.as_ref().and_then(|t| t.verdict.clone());
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
            key::expiry(session.updated_at, Expiring::Session, &k),
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
        let (mut newest, mut before) = match stored {
            Some(s) => (s.newest, s.before),
            None => (None, None),
        };
        let mut known = true;
        let kept = match &save.decision {
            // Newer than the newest (or the newest again, redelivered): it becomes the newest.
            Some(d) if newest.as_ref().is_none_or(|n| d.id >= n.id) => {
                match newest.take() {
                    Some(prior) if prior.id != d.id => {
                        let turning = before.as_ref() != Some(&prior.turn);
                        match (prior.in_row, turning) {
                            (true, false) => {
                                batch.remove(&self.session_decisions, key::decision(id, prior.id));
                            }
                            (false, true) => {
                                let record = self.stored_newest(&k, id)?.ok_or_else(|| {
                                    StoreError::Corrupt {
                                        table: SESSIONS,
                                        detail: "a session whose newest decision is gone".into(),
                                    }
                                })?;
                                batch.insert(
                                    &self.session_decisions,
                                    key::decision(id, record.id),
                                    encode(SESSION_DECISIONS, &record)?,
                                );
                            }
                            (true, true) | (false, false) => {}
                        }
                        if turning {
                            before = Some(prior.turn);
                        }
                    }
                    // The newest redelivered: one copy, in the session row.
                    Some(prior) if prior.in_row => {
                        batch.remove(&self.session_decisions, key::decision(id, prior.id));
                    }
                    Some(_) | None => {}
                }
                newest = Some(Newest {
                    id: d.id,
                    turn: match &latest_turn {
                        Some(turn) if session.latest_decision.as_ref() == Some(&d.decision) => {
                            turn.clone()
                        }
                        _ => DecisionTurn::of(&d.decision),
                    },
                    in_row: false,
                });
                Some(newest_of(d, session))
            }
            // A late decision lands below the newest, which stays; what was kept before it may
            // have changed, so the mark is read again next time.
            Some(d) => {
                batch.insert(
                    &self.session_decisions,
                    key::decision(id, d.id),
                    encode(SESSION_DECISIONS, d)?,
                );
                known = false;
                self.carried_newest(&k, id, newest.as_ref(), session)?
            }
            None => self.carried_newest(&k, id, newest.as_ref(), session)?,
        };
        let row = SessionRow {
            session,
            newest_decision: kept,
        };
        batch.insert(&self.sessions, k, encode(SESSIONS, &row)?);
        batch.insert(
            &self.session_digests,
            k,
            encode(
                SESSION_DIGESTS,
                &session.digest_with(settled.as_ref().and_then(|s| s.shows.clone())),
            )?,
        );
        self.add_events(batch, &save.events)?;
        Ok(known.then_some(SessionMark {
            updated_at: session.updated_at,
            finalized: session.finalized,
            verdict,
            newest,
            before,
            settled,
        }))
    }

    /// The mark of the session stored at `k`, read from its rows and its decisions.
    fn stored_mark(
        &self,
        k: &[u8],
        id: SessionId,
        hasher: &RandomState,
    ) -> Result<Option<SessionMark>> {
        let Some(place) = decode_row::<SessionPlace>(SESSIONS, self.sessions.get(k))? else {
            return Ok(None);
        };
        let rows = self.newest_decision_rows(id)?;
        let (newest, before) = match &place.newest_decision {
            Some(n) => (
                Some(Newest {
                    id: n.id,
                    turn: n
                        .decision
                        .clone()
                        .or_else(|| place.latest_decision.clone())
                        .unwrap_or_default(),
                    in_row: false,
                }),
                rows.first().map(|(_, turn)| turn.clone()),
            ),
            None => (
                rows.first().map(|(id, turn)| Newest {
                    id: *id,
                    turn: turn.clone(),
                    in_row: true,
                }),
                rows.get(1).map(|(_, turn)| turn.clone()),
            ),
        };
        let settled = self
            .session_settled
            .get(k)
            .map_err(unavailable)?
            .map(|part| SettledMark {
                hash: hasher.hash_one(&*part),
                shows: None,
            });
        Ok(Some(SessionMark {
            updated_at: place.updated_at,
            finalized: place.finalized,
            verdict: place.verdict().map(str::to_owned),
            newest,
            before,
            settled,
        }))
    }

    /// `session` as read from `snapshot`, with its settled part (if stored apart) merged back
    /// into its state.
    fn whole(&self, snapshot: &Snapshot, mut session: SessionRecord) -> Result<SessionRecord> {
        let k = key::session(session.organization_id, session.environment, session.id);
        let Some(part) = snapshot
            .get(&self.session_settled, k)
            .map_err(unavailable)?
        else {
            return Ok(session);
        };
        let corrupt = |detail: String| StoreError::Corrupt {
            table: SESSION_SETTLED,
            detail,
        };
        let part = RawJson::parse(&part).map_err(|e| corrupt(e.to_string()))?;
        session.state =
            crate::merge_state(&session.state, &part).map_err(|e| corrupt(e.to_string()))?;
        Ok(session)
    }

    /// The newest decision kept in the row at `k`, read back whole.
    fn stored_newest(&self, k: &[u8], id: SessionId) -> Result<Option<DecisionRecord>> {
        match decode_row::<StoredNewest>(SESSIONS, self.sessions.get(k))? {
            Some(stored) => stored.record(id),
            None => Ok(None),
        }
    }

    /// What a save that does not replace the newest decision writes of it: the stored row's, so
    /// it stays (with its document whenever the session saved now has another as its latest).
    fn carried_newest(
        &self,
        k: &[u8],
        id: SessionId,
        newest: Option<&Newest>,
        session: &SessionRecord,
    ) -> Result<Option<NewestDecision>> {
        if newest.is_none_or(|n| n.in_row) {
            return Ok(None);
        }
        Ok(self
            .stored_newest(k, id)?
            .map(|record| newest_of(&record, session)))
    }

    /// The ids and turns of the session's two newest `session_decisions` rows, newest first.
    fn newest_decision_rows(&self, session: SessionId) -> Result<Vec<(DecisionId, DecisionTurn)>> {
        let partition = key::decision_partition(session);
        let mut rows = Vec::with_capacity(2);
        for guard in self.session_decisions.prefix(partition).take(2) {
            let (k, v) = guard.into_inner().map_err(unavailable)?;
            let turn = decode::<DecisionPlace>(SESSION_DECISIONS, &v)?
                .decision
                .unwrap_or_default();
            let id = key::trailing_id(&k).ok_or_else(|| StoreError::Corrupt {
                table: SESSION_DECISIONS,
                detail: "a decision key of the wrong length".into(),
            })?;
            rows.push((DecisionId::from_ulid(ulid::Ulid(id)), turn));
        }
        Ok(rows)
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
        batch.remove(&self.session_settled, k.to_vec());
        batch.remove(&self.session_digests, k.to_vec());
        batch.remove(&self.sessions, k.to_vec());
        Ok(())
    }

    /// Writes the digest of every session that has none, once: a store made before digests
    /// were kept gets them at its first start by this build (about 30 µs a session), and
    /// records it in `settings` so later starts skip the walk. Blocking.
    pub(super) fn digest_sessions(&self) -> Result<()> {
        if self.contains(&self.settings, key::setting(DIGESTED))? {
            return Ok(());
        }
        let mut batch = self.batch();
        let mut written = 0;
        for guard in self.sessions.iter() {
            let (k, v) = guard.into_inner().map_err(unavailable)?;
            let session: SessionRecord = decode(SESSIONS, &v)?;
            let settled = match self.session_settled.get(&k).map_err(unavailable)? {
                Some(part) => Some(RawJson::parse(&part).map_err(|e| StoreError::Corrupt {
                    table: SESSION_SETTLED,
                    detail: e.to_string(),
                })?),
                None => None,
            };
            batch.insert(
                &self.session_digests,
                k.to_vec(),
                encode(SESSION_DIGESTS, &session.digest(settled.as_ref()))?,
            );
            written += 1;
            // Committed in steps, so the batch's memory stays small however many sessions.
            if written % 1_000 == 0 {
                std::mem::replace(&mut batch, self.batch())
                    .commit()
                    .map_err(unavailable)?;
            }
        }
        if written > 0 {
            tracing::info!(
                sessions = written,
                "embedded store: wrote the sessions' export digests"
            );
        }
        batch.insert(&self.settings, key::setting(DIGESTED), []);
        batch.commit().map_err(unavailable)
    }
}

/// The `settings` row that says every session has its digest.
const DIGESTED: &str = "store/session-digests/v1";

#[async_trait]
impl SessionStore for EmbeddedStore {
    /// One batch under the writer mutex for the whole list (one fsync however many sessions):
    /// per session its row (replacing any stored one), the decision's row when given, the
    /// events' rows and its move in the idle index, so a reader sees all of it or none.
    async fn save_sessions(&self, saves: &[SessionSave]) -> Result<()> {
        crate::rules::check_session_saves(saves)?;
        let saves = saves.to_vec();
        self.write(move |db, state| {
            let fenced = crate::rules::fenced_partitions(&saves, |p| {
                Ok(state.partition_generations.get(&p).copied())
            })?;
            if !fenced.is_empty() {
                return Err(StoreError::Fenced { partitions: fenced });
            }
            let mut batch = db.batch();
            let mut marks = Vec::with_capacity(saves.len());
            for save in &saves {
                let mark = db.add_session_save(
                    &mut batch,
                    save,
                    (&state.session_marks, &state.settled_hasher),
                )?;
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

    async fn claim_partitions(&self, partitions: &[u32]) -> Result<Vec<PartitionFence>> {
        let partitions = partitions.to_vec();
        self.write(move |_, state| {
            // A partition named twice is claimed once.
            let unique: std::collections::BTreeSet<u32> = partitions.iter().copied().collect();
            for partition in unique {
                *state.partition_generations.entry(partition).or_default() += 1;
            }
            Ok(partitions
                .into_iter()
                .map(|partition| PartitionFence {
                    partition,
                    generation: state.partition_generations[&partition],
                })
                .collect())
        })
        .await
    }

    async fn get_session(
        &self,
        org: OrgId,
        env: Environment,
        id: SessionId,
    ) -> Result<Option<SessionRecord>> {
        let snapshot = self.inner.db.snapshot();
        decode_row::<SessionRecord>(
            SESSIONS,
            snapshot.get(&self.inner.sessions, key::session(org, env, id)),
        )?
        .map(|session| self.inner.whole(&snapshot, session))
        .transpose()
    }

    async fn list_sessions(
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
        let snapshot = self.inner.db.snapshot();
        scan(
            SESSIONS,
            &snapshot,
            &self.inner.sessions,
            start,
            prefix_end(&partition),
            limit,
        )?
        .into_iter()
        .map(|session| self.inner.whole(&snapshot, session))
        .collect()
    }

    async fn list_session_digests(
        &self,
        org: OrgId,
        env: Environment,
        verdict: Option<&str>,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionDigest>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let snapshot = self.inner.db.snapshot();
        let Some(verdict) = verdict else {
            let partition = key::session_partition(org, env);
            let start = match after {
                Some(after) => Bound::Excluded(key::session(org, env, after).to_vec()),
                None => Bound::Included(partition.to_vec()),
            };
            return scan(
                SESSION_DIGESTS,
                &snapshot,
                &self.inner.session_digests,
                start,
                prefix_end(&partition),
                limit,
            );
        };
        let Some(partition) = key::verdict_partition(org, env, verdict) else {
            return Ok(Vec::new());
        };
        let start = match after.and_then(|a| key::session_by_verdict(org, env, verdict, a)) {
            Some(after) => Bound::Excluded(after),
            None => Bound::Included(partition.clone()),
        };
        read_indexed(
            &snapshot,
            (&self.inner.sessions_by_verdict, SESSIONS_BY_VERDICT),
            (start, prefix_end(&partition)),
            limit,
            (&self.inner.session_digests, SESSION_DIGESTS),
            |id| key::session(org, env, SessionId::from_ulid(id.into())),
        )
    }

    /// The verdict index's rows and the session rows they name, from one snapshot.
    async fn list_sessions_by_verdict(
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
        let snapshot = self.inner.db.snapshot();
        read_indexed(
            &snapshot,
            (&self.inner.sessions_by_verdict, SESSIONS_BY_VERDICT),
            (start, prefix_end(&partition)),
            limit,
            (&self.inner.sessions, SESSIONS),
            |id| key::session(org, env, SessionId::from_ulid(id.into())),
        )?
        .into_iter()
        .map(|session| self.inner.whole(&snapshot, session))
        .collect()
    }

    /// The session's newest decision (from its row) and the turning points before it, newest
    /// first, from one snapshot. Nothing for a session that is not this organization's and
    /// environment's.
    async fn list_decisions(
        &self,
        org: OrgId,
        env: Environment,
        session: SessionId,
        limit: usize,
    ) -> Result<Vec<DecisionRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let snapshot = self.inner.db.snapshot();
        let Some(stored) = decode_row::<StoredNewest>(
            SESSIONS,
            snapshot.get(&self.inner.sessions, key::session(org, env, session)),
        )?
        else {
            return Ok(Vec::new());
        };
        let partition = key::decision_partition(session);
        let mut decisions: Vec<DecisionRecord> = stored.record(session)?.into_iter().collect();
        let rows: Vec<DecisionRecord> = scan(
            SESSION_DECISIONS,
            &snapshot,
            &self.inner.session_decisions,
            Bound::Included(partition.to_vec()),
            prefix_end(&partition),
            limit,
        )?;
        // Rows are older than the row's newest; one left from before it moved there is skipped.
        let newest = decisions.first().map(|d| d.id);
        decisions.extend(rows.into_iter().filter(|r| Some(r.id) != newest));
        decisions.truncate(limit);
        Ok(decisions)
    }

    async fn list_idle_sessions(
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

#[cfg(test)]
mod tests {
    use schemas::time;

    use super::*;

    fn decision(session: SessionId, id: DecisionId, phase: &str) -> DecisionRecord {
        DecisionRecord {
            session_id: session,
            id,
            evaluated_at: time::now(),
            decision: RawJson::encode(&serde_json::json!({ "phase": phase, "verdict": "human" }))
                .unwrap(),
        }
    }

    fn session(latest: Option<&DecisionRecord>) -> SessionRecord {
        let now = time::now();
        SessionRecord {
            id: SessionId::generate(),
            organization_id: OrgId::generate(),
            environment: Environment::Live,
            visitor_id: None,
            opened_at: now,
            updated_at: now,
            page_url: "https://shop.example/".into(),
            ip: "203.0.113.7".into(),
            user_agent: "Mozilla/5.0".into(),
            processed_through: 1,
            processed_seqs: Vec::new(),
            state: RawJson::null(),
            latest_decision: latest.map(|d| d.decision.clone()),
            finalized: false,
        }
    }

    fn ids(n: usize) -> Vec<DecisionId> {
        let mut ids: Vec<DecisionId> = (0..n).map(|_| DecisionId::generate()).collect();
        ids.sort();
        ids
    }

    /// The ids of the session's `session_decisions` rows, newest first.
    fn decision_rows(store: &EmbeddedStore, id: SessionId) -> Vec<DecisionId> {
        store
            .inner
            .session_decisions
            .prefix(key::decision_partition(id))
            .map(|guard| {
                let k = guard.key().unwrap();
                DecisionId::from_ulid(ulid::Ulid(key::trailing_id(&k).unwrap()))
            })
            .collect()
    }

    async fn save(store: &EmbeddedStore, session: &SessionRecord, d: Option<&DecisionRecord>) {
        store.save_session(session, d, &[]).await.unwrap();
    }

    /// Folds that decide the same again write no decision row: the newest stays in the session
    /// row, and only a turning point it supersedes becomes a row.
    #[tokio::test]
    async fn the_newest_decision_is_kept_in_the_session_row() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let d = ids(4);
        let mut s = session(None);
        let (org, env, sid) = (s.organization_id, s.environment, s.id);
        let phases = ["snapshot", "snapshot", "snapshot", "interactive"];
        for (n, phase) in phases.iter().enumerate() {
            let made = decision(sid, d[n], phase);
            s.latest_decision = Some(made.decision.clone());
            save(&store, &s, Some(&made)).await;
            // The first decision became a row when the second superseded it (it is the first,
            // so a turning point); the same turn after it never did.
            let rows = decision_rows(&store, sid);
            assert_eq!(rows, if n == 0 { vec![] } else { vec![d[0]] }, "after {n}");
        }
        let history = store.list_decisions(org, env, sid, 10).await.unwrap();
        assert_eq!(
            history.iter().map(|h| h.id).collect::<Vec<_>>(),
            vec![d[3], d[0]]
        );
        assert_eq!(history[0].decision, *s.latest_decision.as_ref().unwrap());
        // A fold that turns again: the last newest ("interactive" after "snapshot") is kept.
        let next = decision(sid, DecisionId::generate(), "interactive");
        s.latest_decision = Some(next.decision.clone());
        save(&store, &s, Some(&next)).await;
        assert_eq!(decision_rows(&store, sid), vec![d[3], d[0]]);
        assert!(
            store
                .list_decisions(OrgId::generate(), env, sid, 10)
                .await
                .unwrap()
                .is_empty(),
            "another organization's session has no history here"
        );
    }

    /// A store written before the newest moved into the session row has it as a row: the next
    /// save prunes it (not a turning point) or keeps it, as then.
    #[tokio::test]
    async fn a_history_written_before_the_newest_moved_into_the_row_is_continued() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let d = ids(3);
        let s = session(None);
        let (org, env, sid) = (s.organization_id, s.environment, s.id);
        let first = decision(sid, d[0], "snapshot");
        let same = decision(sid, d[1], "snapshot");
        // As the store wrote it before: the session row without `newest_decision`, and both
        // decisions (the first, a turning point, and the latest) as rows.
        let before = SessionRecord {
            latest_decision: Some(same.decision.clone()),
            ..s.clone()
        };
        let inner = &store.inner;
        inner
            .sessions
            .insert(
                key::session(org, env, sid),
                encode(SESSIONS, &before).unwrap(),
            )
            .unwrap();
        for old in [&first, &same] {
            inner
                .session_decisions
                .insert(
                    key::decision(sid, old.id),
                    encode(SESSION_DECISIONS, old).unwrap(),
                )
                .unwrap();
        }
        assert_eq!(
            store.list_decisions(org, env, sid, 10).await.unwrap(),
            vec![same.clone(), first.clone()],
            "read as it was written"
        );
        // A save without a decision changes nothing of the history.
        save(&store, &before, None).await;
        assert_eq!(decision_rows(&store, sid), vec![d[1], d[0]]);
        let next = decision(sid, d[2], "snapshot");
        let after = SessionRecord {
            latest_decision: Some(next.decision.clone()),
            ..s
        };
        save(&store, &after, Some(&next)).await;
        assert_eq!(
            decision_rows(&store, sid),
            vec![d[0]],
            "the old latest pruned"
        );
        assert_eq!(
            store.list_decisions(org, env, sid, 10).await.unwrap(),
            vec![next, first]
        );
    }

    /// The digest reads the settled part's screen whether the part changed, came again (its
    /// reading is kept with the writer's mark), or came again to a store just opened (the mark
    /// read from the rows has no reading yet).
    #[tokio::test]
    async fn the_digest_follows_the_settled_part_kept_or_changed() {
        let dir = tempfile::tempdir().unwrap();
        let s = session(None);
        let (org, env) = (s.organization_id, s.environment);
        let part = |width: u32| {
            RawJson::encode(
                &serde_json::json!({ "observations": { "probes": { "screen": { "width": width } } } }),
            )
            .unwrap()
        };
        let save = |settled: RawJson| SessionSave {
            session: s.clone(),
            decision: None,
            events: Vec::new(),
            settled: Some(settled),
            fence: None,
        };
        async fn width(store: &EmbeddedStore, org: OrgId, env: Environment) -> Option<i64> {
            let digests = store
                .list_session_digests(org, env, None, None, 10)
                .await
                .unwrap();
            assert_eq!(digests.len(), 1);
            digests[0].screen_width
        }
        {
            let store = EmbeddedStore::open(dir.path()).unwrap();
            for settled in [390, 390, 412, 412] {
                store.save_sessions(&[save(part(settled))]).await.unwrap();
                assert_eq!(
                    width(&store, org, env).await,
                    Some(settled.into()),
                    "after {settled}"
                );
            }
        }
        let store = EmbeddedStore::open(dir.path()).unwrap();
        store.save_sessions(&[save(part(412))]).await.unwrap();
        assert_eq!(width(&store, org, env).await, Some(412), "reopened");
        store.save_sessions(&[save(part(360))]).await.unwrap();
        assert_eq!(
            width(&store, org, env).await,
            Some(360),
            "changed after reopening"
        );
    }

    /// A store made before digests were kept gets one for every session at its next open,
    /// once: the settled part of a state included.
    #[tokio::test]
    async fn an_older_store_gets_its_digests_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let s = session(None);
        let (org, env) = (s.organization_id, s.environment);
        let settled = RawJson::encode(
            &serde_json::json!({ "observations": { "probes": { "screen": { "width": 390 } } } }),
        )
        .unwrap();
        {
            let store = EmbeddedStore::open(dir.path()).unwrap();
            let save = SessionSave {
                session: s.clone(),
                decision: None,
                events: Vec::new(),
                settled: Some(settled.clone()),
                fence: None,
            };
            store.save_sessions(&[save]).await.unwrap();
            // As an older build left it: no digest, no record of the walk.
            let inner = &store.inner;
            let mut batch = inner.batch();
            batch.remove(
                &inner.session_digests,
                key::session(org, env, s.id).to_vec(),
            );
            batch.remove(&inner.settings, key::setting(DIGESTED));
            batch.commit().unwrap();
            assert!(
                store
                    .list_session_digests(org, env, None, None, 10)
                    .await
                    .unwrap()
                    .is_empty()
            );
        }
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let digests = store
            .list_session_digests(org, env, None, None, 10)
            .await
            .unwrap();
        assert_eq!(digests, vec![s.digest(Some(&settled))]);
        assert_eq!(digests[0].screen_width, Some(390));
        assert!(
            store
                .inner
                .contains(&store.inner.settings, key::setting(DIGESTED))
                .unwrap()
        );
    }
}
