//! Scored sessions and their decision history on ScyllaDB (`store/cql/003_sessions.cql`,
//! `006_sessions_idle.cql`, the verdict index of `008_read_indexes.cql`). A save reads what it
//! must know of the stored row (its verdict and idle clock, the newest two decisions), then
//! writes the session, its decision, the pruning, both index moves and its events in one
//! logged batch. One processor owns a session's log partition, so no other save races those
//! reads.

use async_trait::async_trait;
use schemas::credential::Environment;
use schemas::ids::{OrgId, SessionId};
use schemas::session_digest::SessionDigest;
use schemas::time::Timestamp;
use scylla::statement::batch::{Batch, BatchType};
use scylla::value::{CqlTimestamp, CqlValue};

use super::{ScyllaStore, corrupt, decode, encode, env_of, env_text, errors, rows_of};
use crate::{
    DecisionRecord, DecisionTurn, IdleSession, PartitionFence, Result, SessionRecord, SessionSave,
    SessionStore, StoreError,
};

const SESSIONS: &str = "sessions";
const SESSION_DECISIONS: &str = "session_decisions";
const SESSIONS_IDLE: &str = "sessions_idle";

/// The idle index's partitions: a session's is its id's ULID modulo this.
const IDLE_BUCKETS: u8 = 16;

const READ_STORED: &str = "SELECT verdict, updated_at, finalized FROM sessions \
     WHERE organization_id = ? AND environment = ? AND id = ?";
const NEWEST_DECISIONS: &str =
    "SELECT id, body FROM session_decisions WHERE session_id = ? LIMIT 2";
const WRITE: &str = "INSERT INTO sessions \
     (organization_id, environment, id, verdict, updated_at, finalized, body, digest) \
     VALUES (?, ?, ?, ?, ?, ?, ?, ?)";
const WRITE_DECISION: &str =
    "INSERT INTO session_decisions (session_id, id, body) VALUES (?, ?, ?)";
const PRUNE_DECISION: &str = "DELETE FROM session_decisions WHERE session_id = ? AND id = ?";
const UNINDEX_VERDICT: &str = "DELETE FROM sessions_by_verdict \
     WHERE organization_id = ? AND environment = ? AND verdict = ? AND session_id = ?";
const INDEX_VERDICT: &str = "INSERT INTO sessions_by_verdict \
     (organization_id, environment, verdict, session_id) VALUES (?, ?, ?, ?)";
const UNINDEX_IDLE: &str =
    "DELETE FROM sessions_idle WHERE bucket = ? AND idle_since = ? AND session_id = ?";
const INDEX_IDLE: &str = "INSERT INTO sessions_idle \
     (bucket, idle_since, session_id, organization_id, environment) VALUES (?, ?, ?, ?, ?)";
const READ: &str =
    "SELECT body FROM sessions WHERE organization_id = ? AND environment = ? AND id = ?";
const LIST: &str = "SELECT body FROM sessions WHERE organization_id = ? AND environment = ?";
const LIST_AFTER: &str =
    "SELECT body FROM sessions WHERE organization_id = ? AND environment = ? AND id < ?";
const DIGESTS: &str = "SELECT digest FROM sessions WHERE organization_id = ? AND environment = ?";
const DIGESTS_AFTER: &str =
    "SELECT digest FROM sessions WHERE organization_id = ? AND environment = ? AND id < ?";
const DIGEST: &str =
    "SELECT digest FROM sessions WHERE organization_id = ? AND environment = ? AND id = ?";
const BY_VERDICT: &str = "SELECT session_id FROM sessions_by_verdict \
     WHERE organization_id = ? AND environment = ? AND verdict = ?";
const BY_VERDICT_AFTER: &str = "SELECT session_id FROM sessions_by_verdict \
     WHERE organization_id = ? AND environment = ? AND verdict = ? AND session_id < ?";
const EXISTS: &str =
    "SELECT id FROM sessions WHERE organization_id = ? AND environment = ? AND id = ?";
const DECISIONS: &str = "SELECT body FROM session_decisions WHERE session_id = ?";
const IDLE: &str = "SELECT idle_since, session_id, organization_id, environment \
     FROM sessions_idle WHERE bucket = ? AND idle_since < ?";
const GENERATION: &str = "SELECT generation FROM processor_partitions WHERE partition = ?";
const FIRST_CLAIM: &str =
    "INSERT INTO processor_partitions (partition, generation) VALUES (?, 1) IF NOT EXISTS";
const NEXT_CLAIM: &str =
    "UPDATE processor_partitions SET generation = ? WHERE partition = ? IF generation = ?";

/// How many read-then-claim rounds a partition's claim tries before it reports the store busy.
const CLAIM_ROUNDS: u32 = 32;

/// A partition number as its `int` column.
fn partition_column(partition: u32) -> Result<i32> {
    i32::try_from(partition)
        .map_err(|_| StoreError::Invalid(format!("partition {partition} is out of range")))
}

impl ScyllaStore {
    /// A partition's generation as last claimed; `None` if it never was.
    async fn generation(&self, partition: u32) -> Result<Option<u64>> {
        let result = self
            .execute_serial(GENERATION, (partition_column(partition)?,))
            .await?;
        let rows = rows_of("processor_partitions", result)?;
        let row = rows
            .maybe_first_row::<(Option<i64>,)>()
            .map_err(|e| corrupt("processor_partitions", &e))?;
        Ok(row.and_then(|(g,)| g).map(i64::unsigned_abs))
    }
}

/// Every statement of this module, for the test that prepares each on a CQL node.
pub const STATEMENTS: &[&str] = &[
    READ_STORED,
    NEWEST_DECISIONS,
    WRITE,
    WRITE_DECISION,
    PRUNE_DECISION,
    UNINDEX_VERDICT,
    INDEX_VERDICT,
    UNINDEX_IDLE,
    INDEX_IDLE,
    READ,
    LIST,
    LIST_AFTER,
    DIGESTS,
    DIGESTS_AFTER,
    DIGEST,
    BY_VERDICT,
    BY_VERDICT_AFTER,
    EXISTS,
    DECISIONS,
    IDLE,
    GENERATION,
    FIRST_CLAIM,
    NEXT_CLAIM,
];

fn bucket(id: SessionId) -> i8 {
    (id.ulid().0 % u128::from(IDLE_BUCKETS)) as i8
}

fn millis(at: Timestamp) -> CqlTimestamp {
    CqlTimestamp(at.timestamp_millis())
}

fn time_of(table: &'static str, at: CqlTimestamp) -> Result<Timestamp> {
    chrono::DateTime::from_timestamp_millis(at.0)
        .ok_or_else(|| corrupt(table, &format!("timestamp {}", at.0)))
}

/// A bound value of a batch's statement (`None` binds null).
type Bound = Option<CqlValue>;

fn text(s: impl Into<String>) -> Bound {
    Some(CqlValue::Text(s.into()))
}

/// What a save must know of the stored row.
struct Stored {
    verdict: Option<String>,
    idle_since: Option<CqlTimestamp>,
}

impl ScyllaStore {
    async fn stored_session(&self, session: &SessionRecord) -> Result<Option<Stored>> {
        let result = self
            .execute(
                READ_STORED,
                (
                    session.organization_id.to_string(),
                    env_text(session.environment),
                    session.id.to_string(),
                ),
            )
            .await?;
        let rows = rows_of(SESSIONS, result)?;
        let found = rows
            .maybe_first_row::<(Option<String>, Option<CqlTimestamp>, Option<bool>)>()
            .map_err(|e| corrupt(SESSIONS, &e))?;
        Ok(found.map(|(verdict, updated_at, finalized)| Stored {
            verdict,
            idle_since: updated_at.filter(|_| !finalized.unwrap_or(false)),
        }))
    }

    /// The stored latest decision's id, when the decision given supersedes it and it was no
    /// turning point (its phase and verdict are those of the decision kept before it).
    async fn superseded_decision(&self, decision: &DecisionRecord) -> Result<Option<String>> {
        let result = self
            .execute(NEWEST_DECISIONS, (decision.session_id.to_string(),))
            .await?;
        let rows = rows_of(SESSION_DECISIONS, result)?;
        let newest: Vec<(String, String)> = rows
            .rows::<(String, String)>()
            .map_err(|e| corrupt(SESSION_DECISIONS, &e))?
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| corrupt(SESSION_DECISIONS, &e))?;
        let [(latest_id, latest), (_, before)] = newest.as_slice() else {
            return Ok(None);
        };
        let turn = |body: &str| -> Result<DecisionTurn> {
            let record: DecisionRecord = decode(SESSION_DECISIONS, body)?;
            Ok(DecisionTurn::of(&record.decision))
        };
        let newer = decision.id.to_string() > *latest_id;
        Ok((newer && turn(latest)? == turn(before)?).then(|| latest_id.clone()))
    }

    /// The statements and values of one session's save, appended to `batch`.
    async fn batch_save(
        &self,
        save: &SessionSave,
        session: &SessionRecord,
        batch: &mut Batch,
        values: &mut Vec<Vec<Bound>>,
    ) -> Result<()> {
        let (org, env, id) = (
            session.organization_id.to_string(),
            env_text(session.environment),
            session.id.to_string(),
        );
        let stored = self.stored_session(session).await?;
        let verdict = session.verdict();
        batch.append_statement(WRITE);
        values.push(vec![
            text(&org),
            text(env),
            text(&id),
            verdict.clone().and_then(text),
            Some(CqlValue::Timestamp(millis(session.updated_at))),
            Some(CqlValue::Boolean(session.finalized)),
            text(encode(session)),
            text(encode(&session.digest(None))),
        ]);
        if let Some(decision) = &save.decision {
            if let Some(superseded) = self.superseded_decision(decision).await? {
                batch.append_statement(PRUNE_DECISION);
                values.push(vec![text(&id), text(superseded)]);
            }
            batch.append_statement(WRITE_DECISION);
            values.push(vec![
                text(&id),
                text(decision.id.to_string()),
                text(encode(decision)),
            ]);
        }
        let stored_verdict = stored.as_ref().and_then(|s| s.verdict.clone());
        if let Some(old) = stored_verdict.filter(|old| verdict.as_ref() != Some(old)) {
            batch.append_statement(UNINDEX_VERDICT);
            values.push(vec![text(&org), text(env), text(old), text(&id)]);
        }
        // Written with every save, so its TTL runs from the session's last write, as the row's.
        if let Some(new) = &verdict {
            batch.append_statement(INDEX_VERDICT);
            values.push(vec![text(&org), text(env), text(new), text(&id)]);
        }
        let b = Some(CqlValue::TinyInt(bucket(session.id)));
        // A save at the same `updated_at` (a retry) keeps its row: a delete and an insert of
        // one row in one batch share a timestamp, and the delete would win.
        let now_since = millis(session.updated_at);
        if let Some(since) = stored
            .and_then(|s| s.idle_since)
            .filter(|since| session.finalized || *since != now_since)
        {
            batch.append_statement(UNINDEX_IDLE);
            values.push(vec![b.clone(), Some(CqlValue::Timestamp(since)), text(&id)]);
        }
        if !session.finalized {
            batch.append_statement(INDEX_IDLE);
            values.push(vec![
                b,
                Some(CqlValue::Timestamp(millis(session.updated_at))),
                text(&id),
                text(&org),
                text(env),
            ]);
        }
        super::events::batch_events(&save.events, batch, values);
        Ok(())
    }

    /// Sessions by id, in the order given; an id whose row is gone is skipped.
    async fn sessions_by_id(
        &self,
        org: OrgId,
        env: Environment,
        ids: Vec<String>,
    ) -> Result<Vec<SessionRecord>> {
        let reads = ids.into_iter().map(|id| async move {
            let result = self
                .execute(READ, (org.to_string(), env_text(env), id))
                .await?;
            Self::body::<SessionRecord>(SESSIONS, result)
        });
        let found = futures::future::try_join_all(reads).await?;
        Ok(found.into_iter().flatten().collect())
    }

    /// A page of the verdict index: the ids of `org`'s sessions with `verdict`, newest first.
    async fn ids_with_verdict(
        &self,
        org: OrgId,
        env: Environment,
        verdict: &str,
        after: Option<SessionId>,
        count: usize,
    ) -> Result<Vec<String>> {
        let (org, env, verdict) = (org.to_string(), env_text(env), verdict.to_owned());
        match after {
            None => {
                self.first_texts(
                    "sessions_by_verdict",
                    BY_VERDICT,
                    (org, env, verdict),
                    count,
                )
                .await
            }
            Some(after) => {
                self.first_texts(
                    "sessions_by_verdict",
                    BY_VERDICT_AFTER,
                    (org, env, verdict, after.to_string()),
                    count,
                )
                .await
            }
        }
    }
}

#[async_trait]
impl SessionStore for ScyllaStore {
    /// One logged batch per session, after its reads.
    async fn save_sessions(&self, saves: &[SessionSave]) -> Result<()> {
        crate::rules::check_session_saves(saves)?;
        // One row holds the whole state: a settled part given apart is merged in, for every
        // save before any is written, so a state that does not merge writes nothing.
        let wholes = saves
            .iter()
            .map(|save| match &save.settled {
                Some(part) => Ok(SessionRecord {
                    state: crate::merge_state(&save.session.state, part)?,
                    ..save.session.clone()
                }),
                None => Ok(save.session.clone()),
            })
            .collect::<Result<Vec<_>>>()?;
        let mut current = std::collections::HashMap::new();
        for fence in saves.iter().filter_map(|s| s.fence) {
            if let std::collections::hash_map::Entry::Vacant(slot) = current.entry(fence.partition)
            {
                slot.insert(self.generation(fence.partition).await?);
            }
        }
        let fenced =
            crate::rules::fenced_partitions(saves, |p| Ok(current.get(&p).copied().flatten()))?;
        if !fenced.is_empty() {
            return Err(StoreError::Fenced { partitions: fenced });
        }
        for (save, session) in saves.iter().zip(&wholes) {
            let mut batch = Batch::new(BatchType::Logged);
            let mut values = Vec::new();
            self.batch_save(save, session, &mut batch, &mut values)
                .await?;
            self.session()
                .await?
                .batch(&batch, values)
                .await
                .map_err(errors::execution)?;
        }
        Ok(())
    }

    async fn claim_partitions(&self, partitions: &[u32]) -> Result<Vec<PartitionFence>> {
        let unique: std::collections::BTreeSet<u32> = partitions.iter().copied().collect();
        let mut claimed = std::collections::HashMap::new();
        for partition in unique {
            let p = partition_column(partition)?;
            // Claims race only with other claims of the partition: each lost round means
            // another processor's claim won, and the next read sees it.
            let mut rounds = 0;
            let generation = loop {
                rounds += 1;
                if rounds > CLAIM_ROUNDS {
                    return Err(StoreError::Unavailable(format!(
                        "partition {partition}: no claim applied in {CLAIM_ROUNDS} rounds"
                    )));
                }
                let applied = match self.generation(partition).await? {
                    None => self.applied(FIRST_CLAIM, (p,)).await?.then_some(1),
                    Some(g) => {
                        let next = i64::try_from(g + 1).unwrap_or(i64::MAX);
                        let read = i64::try_from(g).unwrap_or(i64::MAX);
                        self.applied(NEXT_CLAIM, (next, p, read))
                            .await?
                            .then_some(g + 1)
                    }
                };
                if let Some(generation) = applied {
                    break generation;
                }
            };
            claimed.insert(partition, generation);
        }
        Ok(partitions
            .iter()
            .map(|&partition| PartitionFence {
                partition,
                generation: claimed[&partition],
            })
            .collect())
    }

    async fn get_session(
        &self,
        org: OrgId,
        env: Environment,
        id: SessionId,
    ) -> Result<Option<SessionRecord>> {
        let result = self
            .execute(READ, (org.to_string(), env_text(env), id.to_string()))
            .await?;
        Self::body(SESSIONS, result)
    }

    async fn list_sessions(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<SessionId>,
        count: usize,
    ) -> Result<Vec<SessionRecord>> {
        let (org, env) = (org.to_string(), env_text(env));
        match after {
            None => self.first_bodies(SESSIONS, LIST, (org, env), count).await,
            Some(after) => {
                self.first_bodies(SESSIONS, LIST_AFTER, (org, env, after.to_string()), count)
                    .await
            }
        }
    }

    async fn list_sessions_by_verdict(
        &self,
        org: OrgId,
        env: Environment,
        verdict: &str,
        after: Option<SessionId>,
        count: usize,
    ) -> Result<Vec<SessionRecord>> {
        let ids = self
            .ids_with_verdict(org, env, verdict, after, count)
            .await?;
        self.sessions_by_id(org, env, ids).await
    }

    async fn list_session_digests(
        &self,
        org: OrgId,
        env: Environment,
        verdict: Option<&str>,
        after: Option<SessionId>,
        count: usize,
    ) -> Result<Vec<SessionDigest>> {
        let Some(verdict) = verdict else {
            let (org, env) = (org.to_string(), env_text(env));
            return match after {
                None => {
                    self.first_bodies(SESSIONS, DIGESTS, (org, env), count)
                        .await
                }
                Some(after) => {
                    self.first_bodies(
                        SESSIONS,
                        DIGESTS_AFTER,
                        (org, env, after.to_string()),
                        count,
                    )
                    .await
                }
            };
        };
        let ids = self
            .ids_with_verdict(org, env, verdict, after, count)
            .await?;
        let reads = ids.into_iter().map(|id| async move {
            let result = self
                .execute(DIGEST, (org.to_string(), env_text(env), id))
                .await?;
            Self::body::<SessionDigest>(SESSIONS, result)
        });
        let found = futures::future::try_join_all(reads).await?;
        Ok(found.into_iter().flatten().collect())
    }

    async fn list_decisions(
        &self,
        org: OrgId,
        env: Environment,
        session: SessionId,
        count: usize,
    ) -> Result<Vec<DecisionRecord>> {
        let found = self
            .execute(
                EXISTS,
                (org.to_string(), env_text(env), session.to_string()),
            )
            .await?;
        if rows_of(SESSIONS, found)?.rows_num() == 0 {
            return Ok(Vec::new());
        }
        self.first_bodies(SESSION_DECISIONS, DECISIONS, (session.to_string(),), count)
            .await
    }

    /// Each bucket's oldest first, merged oldest first: at most `count`.
    async fn list_idle_sessions(
        &self,
        before: Timestamp,
        count: usize,
    ) -> Result<Vec<IdleSession>> {
        let mut idle = Vec::new();
        for b in 0..IDLE_BUCKETS {
            let oldest = self
                .first_rows(IDLE, (b as i8, millis(before)), count, |page| {
                    let rows = rows_of(SESSIONS_IDLE, page)?;
                    let found = rows
                        .rows::<(CqlTimestamp, String, String, String)>()
                        .map_err(|e| corrupt(SESSIONS_IDLE, &e))?;
                    found
                        .map(|row| {
                            let (since, id, org, env) =
                                row.map_err(|e| corrupt(SESSIONS_IDLE, &e))?;
                            let bad = |what: &str| corrupt(SESSIONS_IDLE, &what);
                            Ok(IdleSession {
                                organization_id: org.parse().map_err(|_| bad("organization id"))?,
                                environment: env_of(SESSIONS_IDLE, &env)?,
                                session_id: id.parse().map_err(|_| bad("session id"))?,
                                idle_since: time_of(SESSIONS_IDLE, since)?,
                            })
                        })
                        .collect()
                })
                .await?;
            idle.extend(oldest);
        }
        idle.sort_by_key(|s| (s.idle_since, s.session_id));
        idle.truncate(count);
        Ok(idle)
    }
}
