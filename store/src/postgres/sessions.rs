//! Scored sessions and their decision history in PostgreSQL (a save's events are written by
//! `events`, in the save's transaction). The verdict and idle
//! indexes are indexes on `sessions` itself (its `verdict`, `updated_at` and `finalized`
//! columns), so they move with the row in the same statement; the decision history's pruning
//! reads the session's newest decisions under the session row's lock.

use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use schemas::credential::Environment;
use schemas::ids::{OrgId, SessionId};
use schemas::session_digest::SessionDigest;
use schemas::time::Timestamp;
use serde::Deserialize;
use tokio_postgres::types::Json;

use super::events::insert_events;
use super::{
    PostgresStore, db_error, decode, decode_all, env_code, env_of, execute, json, limit,
    owned_page, owned_row, rows, ulid_bytes, ulid_of,
};
use crate::{
    DecisionRecord, DecisionTurn, EventRecord, IdleSession, PartitionFence, Result, SessionRecord,
    SessionSave, SessionStore, StoreError,
};

const SESSIONS: &str = "sessions";
const SESSION_DECISIONS: &str = "session_decisions";
/// The most sessions one statement of a save writes.
const SAVE_CHUNK: usize = 256;

/// The member of a stored decision that says whether it is a turning point.
#[derive(Deserialize)]
struct DecisionPlace {
    decision: Option<DecisionTurn>,
}

/// The member of a stored session that the idle sweep needs, exactly as the record has it
/// (the `updated_at` column is rounded to microseconds).
#[derive(Deserialize)]
struct SessionClock {
    updated_at: Timestamp,
}

/// Writes a poll's saves (ordered by session id) in five statements whatever their number, not
/// four or more per session: every round trip to the database is waited for in turn inside
/// the transaction, and per session they held a processor to about 1,800 batches a second.
async fn save_all(tx: &impl GenericClient, ordered: &[&SessionSave]) -> Result<()> {
    // One row holds the whole state: a settled part given apart is merged in.
    let sessions: Vec<std::borrow::Cow<'_, SessionRecord>> = ordered
        .iter()
        .map(|save| match &save.settled {
            Some(part) => Ok(std::borrow::Cow::Owned(SessionRecord {
                state: crate::merge_state(&save.session.state, part)?,
                ..save.session.clone()
            })),
            None => Ok(std::borrow::Cow::Borrowed(&save.session)),
        })
        .collect::<Result<_>>()?;
    let ids: Vec<Vec<u8>> = sessions.iter().map(|s| ulid_bytes(s.id.ulid())).collect();
    let digests: Vec<SessionDigest> = sessions.iter().map(|s| s.digest(None)).collect();
    // The upsert locks the sessions' rows (in id order, as every save takes them), so the
    // decisions read below cannot change under it.
    execute(
        tx,
        "INSERT INTO sessions
             (organization_id, environment, id, updated_at, finalized, verdict, body, digest)
         SELECT * FROM unnest($1::bytea[], $2::smallint[], $3::bytea[], $4::timestamptz[],
                              $5::boolean[], $6::text[], $7::json[], $8::json[])
         ON CONFLICT (organization_id, environment, id) DO UPDATE SET
             updated_at = excluded.updated_at, finalized = excluded.finalized,
             verdict = excluded.verdict, body = excluded.body, digest = excluded.digest",
        &[
            &sessions
                .iter()
                .map(|s| ulid_bytes(s.organization_id.ulid()))
                .collect::<Vec<_>>(),
            &sessions
                .iter()
                .map(|s| env_code(s.environment))
                .collect::<Vec<_>>(),
            &ids,
            &sessions.iter().map(|s| s.updated_at).collect::<Vec<_>>(),
            &sessions.iter().map(|s| s.finalized).collect::<Vec<_>>(),
            &sessions.iter().map(|s| s.verdict()).collect::<Vec<_>>(),
            &sessions
                .iter()
                .map(|s| json(s.as_ref()))
                .collect::<Vec<_>>(),
            &digests.iter().map(json).collect::<Vec<_>>(),
        ],
    )
    .await?;
    let decided: Vec<(&Vec<u8>, &DecisionRecord)> = ids
        .iter()
        .zip(ordered)
        .filter_map(|(id, save)| save.decision.as_ref().map(|d| (id, d)))
        .collect();
    append_decisions(tx, &decided).await?;
    let events: Vec<&EventRecord> = ordered.iter().flat_map(|s| &s.events).collect();
    insert_events(tx, &events).await
}

/// Appends each session's new decision and prunes its history
/// (docs/architecture.md#retention): the stored latest is dropped when the new decision is
/// newer and the latest was no turning point (its phase and verdict are those of the decision
/// kept before it). A redelivered or late decision prunes nothing.
async fn append_decisions(
    tx: &impl GenericClient,
    decided: &[(&Vec<u8>, &DecisionRecord)],
) -> Result<()> {
    if decided.is_empty() {
        return Ok(());
    }
    let sessions: Vec<&Vec<u8>> = decided.iter().map(|(s, _)| *s).collect();
    // Each session's two newest decisions, newest first: two index reads a session.
    let newest = rows(
        tx,
        "SELECT d.session_id, d.id, d.body FROM unnest($1::bytea[]) AS s (id)
         CROSS JOIN LATERAL (
             SELECT session_id, id, body FROM session_decisions
             WHERE session_id = s.id ORDER BY id DESC LIMIT 2
         ) AS d
         ORDER BY d.session_id, d.id DESC",
        &[&sessions],
    )
    .await?;
    let mut by_session: std::collections::HashMap<&[u8], Vec<&tokio_postgres::Row>> =
        std::collections::HashMap::with_capacity(decided.len());
    for row in &newest {
        by_session.entry(row.get(0)).or_default().push(row);
    }
    let ids: Vec<Vec<u8>> = decided
        .iter()
        .map(|(_, d)| ulid_bytes(d.id.ulid()))
        .collect();
    execute(
        tx,
        "INSERT INTO session_decisions (session_id, id, body)
         SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::json[])
         ON CONFLICT (session_id, id) DO UPDATE SET body = excluded.body",
        &[
            &sessions,
            &ids,
            &decided.iter().map(|(_, d)| json(*d)).collect::<Vec<_>>(),
        ],
    )
    .await?;
    let turn = |r: &tokio_postgres::Row| -> Result<DecisionTurn> {
        Ok(decode::<DecisionPlace>(SESSION_DECISIONS, r, 2)?
            .decision
            .unwrap_or_default())
    };
    let mut pruned: (Vec<&Vec<u8>>, Vec<Vec<u8>>) = (Vec::new(), Vec::new());
    for ((session, _), id) in decided.iter().zip(&ids) {
        let of_session = by_session
            .get(session.as_slice())
            .map_or(&[][..], Vec::as_slice);
        if let [latest, before] = of_session {
            let latest_id: Vec<u8> = latest.get(1);
            if *id > latest_id && turn(latest)? == turn(before)? {
                pruned.0.push(session);
                pruned.1.push(latest_id);
            }
        }
    }
    if !pruned.0.is_empty() {
        execute(
            tx,
            "DELETE FROM session_decisions AS d
             USING unnest($1::bytea[], $2::bytea[]) AS gone (session_id, id)
             WHERE d.session_id = gone.session_id AND d.id = gone.id",
            &[&pruned.0, &pruned.1],
        )
        .await?;
    }
    Ok(())
}

/// `processor_partitions` rows (partition, generation) by partition.
fn generations(rows: &[tokio_postgres::Row]) -> std::collections::HashMap<u32, u64> {
    rows.iter()
        .map(|r| {
            let (p, g): (i32, i64) = (r.get(0), r.get(1));
            (p.unsigned_abs(), g.unsigned_abs())
        })
        .collect()
}

#[async_trait]
impl SessionStore for PostgresStore {
    /// One transaction for the whole list, sessions in id order (so two savers of overlapping
    /// lists lock rows in the same order and cannot deadlock).
    async fn save_sessions(&self, saves: &[SessionSave]) -> Result<()> {
        crate::rules::check_session_saves(saves)?;
        if saves.is_empty() {
            return Ok(());
        }
        let mut ordered: Vec<&SessionSave> = saves.iter().collect();
        ordered.sort_by_key(|s| s.session.id);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        // The fences' rows are read under a share lock held to the commit, so a claim (which
        // updates them) waits for this save to land, and a save after the claim sees it.
        let partitions: Vec<i32> = ordered
            .iter()
            .filter_map(|s| s.fence)
            .filter_map(|f| i32::try_from(f.partition).ok())
            .collect();
        if !partitions.is_empty() {
            let current = rows(
                &tx,
                "SELECT partition, generation FROM processor_partitions
                 WHERE partition = ANY($1) ORDER BY partition FOR SHARE",
                &[&partitions],
            )
            .await?;
            let current = generations(&current);
            let fenced = crate::rules::fenced_partitions(saves, |p| Ok(current.get(&p).copied()))?;
            if !fenced.is_empty() {
                return Err(StoreError::Fenced { partitions: fenced });
            }
        }
        // In chunks, so no one statement carries more than SAVE_CHUNK sessions' bodies (a
        // parameter is capped at 1 GB, and a large one is held whole in the server's memory).
        for chunk in ordered.chunks(SAVE_CHUNK) {
            save_all(&tx, chunk).await?;
        }
        tx.commit().await.map_err(db_error)
    }

    async fn claim_partitions(&self, partitions: &[u32]) -> Result<Vec<PartitionFence>> {
        let mut asked: Vec<i32> = partitions
            .iter()
            .map(|&p| {
                i32::try_from(p)
                    .map_err(|_| StoreError::Invalid(format!("partition {p} is out of range")))
            })
            .collect::<Result<_>>()?;
        // A partition named twice is claimed once (a statement cannot update a row twice).
        asked.sort_unstable();
        asked.dedup();
        let claimed = rows(
            &self.client().await?,
            "INSERT INTO processor_partitions (partition, generation)
             SELECT p, 1 FROM unnest($1::integer[]) AS p ORDER BY p
             ON CONFLICT (partition) DO UPDATE
                 SET generation = processor_partitions.generation + 1
             RETURNING partition, generation",
            &[&asked],
        )
        .await?;
        let claimed = generations(&claimed);
        partitions
            .iter()
            .map(|&partition| {
                let generation = claimed.get(&partition).copied().ok_or_else(|| {
                    StoreError::Unavailable(format!("partition {partition} was not claimed"))
                })?;
                Ok(PartitionFence {
                    partition,
                    generation,
                })
            })
            .collect()
    }

    async fn get_session(
        &self,
        org: OrgId,
        env: Environment,
        id: SessionId,
    ) -> Result<Option<SessionRecord>> {
        let sql =
            "SELECT body FROM sessions WHERE organization_id = $1 AND environment = $2 AND id = $3";
        owned_row(self, SESSIONS, sql, (org, env, id.ulid())).await
    }

    async fn list_sessions(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<SessionId>,
        count: usize,
    ) -> Result<Vec<SessionRecord>> {
        let sql = "SELECT body FROM sessions
             WHERE organization_id = $1 AND environment = $2 AND ($3::bytea IS NULL OR id < $3)
             ORDER BY id DESC LIMIT $4";
        owned_page(
            self,
            SESSIONS,
            sql,
            (org, env),
            after.map(|a| a.ulid()),
            count,
        )
        .await
    }

    async fn list_sessions_by_verdict(
        &self,
        org: OrgId,
        env: Environment,
        verdict: &str,
        after: Option<SessionId>,
        count: usize,
    ) -> Result<Vec<SessionRecord>> {
        let found = rows(
            &self.client().await?,
            "SELECT body FROM sessions
             WHERE organization_id = $1 AND environment = $2 AND verdict = $3
               AND ($4::bytea IS NULL OR id < $4)
             ORDER BY id DESC LIMIT $5",
            &[
                &ulid_bytes(org.ulid()),
                &env_code(env),
                &verdict,
                &after.map(|a| ulid_bytes(a.ulid())),
                &limit(count),
            ],
        )
        .await?;
        decode_all(SESSIONS, &found)
    }

    async fn list_session_digests(
        &self,
        org: OrgId,
        env: Environment,
        verdict: Option<&str>,
        after: Option<SessionId>,
        count: usize,
    ) -> Result<Vec<SessionDigest>> {
        // The body only of a row written before digests were kept, to make its digest from.
        let columns = "SELECT digest, CASE WHEN digest IS NULL THEN body END FROM sessions";
        let (org, env, after, count) = (
            ulid_bytes(org.ulid()),
            env_code(env),
            after.map(|a| ulid_bytes(a.ulid())),
            limit(count),
        );
        let client = self.client().await?;
        let found = match verdict {
            None => {
                let sql = format!(
                    "{columns} WHERE organization_id = $1 AND environment = $2
                       AND ($3::bytea IS NULL OR id < $3)
                     ORDER BY id DESC LIMIT $4"
                );
                rows(&client, &sql, &[&org, &env, &after, &count]).await?
            }
            Some(verdict) => {
                let sql = format!(
                    "{columns} WHERE organization_id = $1 AND environment = $2 AND verdict = $3
                       AND ($4::bytea IS NULL OR id < $4)
                     ORDER BY id DESC LIMIT $5"
                );
                rows(&client, &sql, &[&org, &env, &verdict, &after, &count]).await?
            }
        };
        found
            .iter()
            .map(
                |row| match row.try_get::<_, Option<Json<SessionDigest>>>(0) {
                    Ok(Some(Json(digest))) => Ok(digest),
                    Ok(None) => decode::<SessionRecord>(SESSIONS, row, 1).map(|s| s.digest(None)),
                    Err(e) => Err(crate::StoreError::Corrupt {
                        table: SESSIONS,
                        detail: e.to_string(),
                    }),
                },
            )
            .collect()
    }

    async fn list_decisions(
        &self,
        org: OrgId,
        env: Environment,
        session: SessionId,
        count: usize,
    ) -> Result<Vec<DecisionRecord>> {
        let found = rows(
            &self.client().await?,
            "SELECT body FROM session_decisions WHERE session_id = $1
               AND EXISTS (SELECT 1 FROM sessions
                           WHERE organization_id = $3 AND environment = $4 AND id = $1)
             ORDER BY id DESC LIMIT $2",
            &[
                &ulid_bytes(session.ulid()),
                &limit(count),
                &ulid_bytes(org.ulid()),
                &env_code(env),
            ],
        )
        .await?;
        decode_all(SESSION_DECISIONS, &found)
    }

    async fn list_idle_sessions(
        &self,
        before: Timestamp,
        count: usize,
    ) -> Result<Vec<IdleSession>> {
        let found = rows(
            &self.client().await?,
            "SELECT body, organization_id, environment, id FROM sessions
             WHERE NOT finalized AND updated_at < $1
             ORDER BY updated_at, id LIMIT $2",
            &[&before, &limit(count)],
        )
        .await?;
        found
            .iter()
            .map(|r| {
                let clock: SessionClock = decode(SESSIONS, r, 0)?;
                Ok(IdleSession {
                    organization_id: schemas::ids::OrgId::from_ulid(ulid_of(SESSIONS, r.get(1))?),
                    environment: env_of(SESSIONS, r.get(2))?,
                    session_id: SessionId::from_ulid(ulid_of(SESSIONS, r.get(3))?),
                    idle_since: clock.updated_at,
                })
            })
            .collect()
    }
}
