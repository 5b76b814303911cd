//! Collect sessions, their pings, handoff openings and the replay record on ScyllaDB
//! (`store/cql/002_collect.cql`, `007_handoffs.cql`, `013_replay_marks.cql`). Every conditional change of a session
//! (a counter raised, a ping's arrival, the first results) is a read-check-write on its `rev`,
//! so of racing ingest replicas exactly one makes it; a handoff's opening is one
//! `IF NOT EXISTS`, so of racing opens exactly one is first.

use crate::rules::{CollectChange, written};
use async_trait::async_trait;
use schemas::ids::{PingId, SessionId};
use schemas::time::Timestamp;
use scylla::value::CqlTimestamp;

use super::{CONTENDED_RETRIES, ScyllaStore, corrupt, encode, rows_of};
use crate::{CollectSessionRecord, CollectStore, HandoffOpening, ReplayMark, Result, StoreError};

const COLLECT_SESSIONS: &str = "collect_sessions";

const INSERT: &str = "INSERT INTO collect_sessions (id, rev, body) VALUES (?, 0, ?) IF NOT EXISTS";
const READ: &str = "SELECT rev, body FROM collect_sessions WHERE id = ?";
const READ_BODY: &str = "SELECT body FROM collect_sessions WHERE id = ?";
const UPDATE: &str = "UPDATE collect_sessions SET rev = ?, body = ? WHERE id = ? IF rev = ?";
const CLAIM_PING: &str =
    "INSERT INTO collect_pings (ping_id, session_id) VALUES (?, ?) IF NOT EXISTS";
const RELEASE_PING: &str = "DELETE FROM collect_pings WHERE ping_id = ? IF session_id = ?";
const FIND_PING: &str = "SELECT session_id FROM collect_pings WHERE ping_id = ?";
const OPEN_HANDOFF: &str = "INSERT INTO handoff_openings (handoff, first_opened_at, expires_at) \
     VALUES (?, ?, ?) IF NOT EXISTS USING TTL ?";
const READ_REPLAY_MARK: &str = "SELECT session_id, sketch FROM replay_marks WHERE mark = ?";
const LEAVE_REPLAY_MARK: &str =
    "INSERT INTO replay_marks (mark, session_id, sketch) VALUES (?, ?, ?) USING TTL ?";
const HANDOFF_OPENED: &str = "SELECT first_opened_at FROM handoff_openings WHERE handoff = ?";
const SPEND_NONCE: &str =
    "INSERT INTO spent_nonces (scope, nonce) VALUES (?, ?) IF NOT EXISTS USING TTL ?";

/// Every statement of this module, for the test that prepares each on a CQL node.
pub const STATEMENTS: &[&str] = &[
    INSERT,
    READ,
    READ_BODY,
    UPDATE,
    CLAIM_PING,
    RELEASE_PING,
    FIND_PING,
    OPEN_HANDOFF,
    HANDOFF_OPENED,
    SPEND_NONCE,
];

impl ScyllaStore {
    async fn release_pings(&self, pings: &[PingId], session: SessionId) {
        for ping in pings {
            if let Err(e) = self
                .applied(RELEASE_PING, (ping.to_string(), session.to_string()))
                .await
            {
                tracing::warn!(error = %e, "ScyllaDB: a ping of a failed collect session was not released");
            }
        }
    }
}

#[async_trait]
impl CollectStore for ScyllaStore {
    /// Reads the session, lets `change` modify it (answering whether it did), and writes it
    /// back if it changed and no other writer came between. `None` if there is no such
    /// session; otherwise whether this call wrote, and the row as now stored.
    async fn change_collect_session(
        &self,
        id: SessionId,
        change: CollectChange,
    ) -> Result<Option<(bool, CollectSessionRecord)>> {
        for _ in 0..CONTENDED_RETRIES {
            let result = self.execute(READ, (id.to_string(),)).await?;
            let Some((rev, mut session)) =
                Self::revision::<CollectSessionRecord>(COLLECT_SESSIONS, result)?
            else {
                return Ok(None);
            };
            if !change.apply(&mut session) {
                return Ok(Some((false, session)));
            }
            if self
                .applied(UPDATE, (rev + 1, encode(&session), id.to_string(), rev))
                .await?
            {
                return Ok(Some((true, session)));
            }
        }
        Err(StoreError::Unavailable(format!(
            "ScyllaDB: collect session {id} kept changing under its update"
        )))
    }

    /// Each ping's id is claimed first, then the session inserted; a conflict on either gives
    /// back the pings claimed, so a failed call keeps nothing.
    async fn create_collect_session(&self, session: &CollectSessionRecord) -> Result<()> {
        crate::rules::check_collect_pings(session)?;
        let mut claimed = Vec::new();
        for ping in &session.pings {
            let applied = self
                .applied(CLAIM_PING, (ping.id.to_string(), session.id.to_string()))
                .await;
            match applied {
                Ok(true) => claimed.push(ping.id),
                Ok(false) => {
                    self.release_pings(&claimed, session.id).await;
                    return Err(StoreError::Conflict(format!(
                        "ping {} belongs to another collect session",
                        ping.id
                    )));
                }
                Err(e) => {
                    self.release_pings(&claimed, session.id).await;
                    return Err(e);
                }
            }
        }
        match self
            .applied(INSERT, (session.id.to_string(), encode(session)))
            .await
        {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.release_pings(&claimed, session.id).await;
                Err(StoreError::Conflict(format!(
                    "collect session {} exists",
                    session.id
                )))
            }
            Err(e) => Err(e),
        }
    }

    async fn get_collect_session(&self, id: SessionId) -> Result<Option<CollectSessionRecord>> {
        let result = self.execute(READ_BODY, (id.to_string(),)).await?;
        Self::body(COLLECT_SESSIONS, result)
    }

    async fn find_collect_ping(&self, ping: PingId) -> Result<Option<SessionId>> {
        let result = self.execute(FIND_PING, (ping.to_string(),)).await?;
        let rows = rows_of("collect_pings", result)?;
        let Some((session,)) = rows
            .maybe_first_row::<(String,)>()
            .map_err(|e| corrupt("collect_pings", &e))?
        else {
            return Ok(None);
        };
        let session: SessionId = session
            .parse()
            .map_err(|_| corrupt("collect_pings", &format!("session id `{session}`")))?;
        // A claim of a session that was never written reads as absent.
        Ok(self.get_collect_session(session).await?.map(|s| s.id))
    }

    async fn advance_collect_seq(&self, id: SessionId, seq: u64) -> Result<bool> {
        Ok(written(
            self.change_collect_session(id, CollectChange::Seq(seq))
                .await?,
        ))
    }

    /// Kept until `until` by the row's TTL.
    async fn spend_nonce(&self, scope: &str, nonce: &str, until: Timestamp) -> Result<bool> {
        let ttl = (until - schemas::time::now()).num_seconds().max(1);
        self.applied(
            SPEND_NONCE,
            (scope, nonce, i32::try_from(ttl).unwrap_or(i32::MAX)),
        )
        .await
    }

    async fn leave_replay_marks(
        &self,
        marks: &[ReplayMark],
        until: Timestamp,
    ) -> Result<Vec<Option<ReplayMark>>> {
        let ttl =
            i32::try_from((until - schemas::time::now()).num_seconds().max(1)).unwrap_or(i32::MAX);
        // Read together, then the absent ones written together: two round trips a call.
        let found = futures::future::try_join_all(marks.iter().map(|mark| async move {
            let result = self.execute(READ_REPLAY_MARK, (&mark.key[..],)).await?;
            let rows = rows_of("replay_marks", result)?;
            let row = rows
                .maybe_first_row::<(Option<String>, Option<Vec<u8>>)>()
                .map_err(|e| corrupt("replay_marks", &e))?;
            row.map(|(session, sketch)| {
                let session_id = session
                    .as_deref()
                    .and_then(|s| s.parse::<SessionId>().ok())
                    .ok_or_else(|| corrupt("replay_marks", &"session id"))?;
                Ok(ReplayMark {
                    key: mark.key,
                    session_id,
                    sketch: sketch.unwrap_or_default(),
                })
            })
            .transpose()
        }))
        .await?;
        let mut out = Vec::with_capacity(marks.len());
        let mut left: std::collections::HashMap<[u8; 16], &ReplayMark> =
            std::collections::HashMap::new();
        for (mark, stored) in marks.iter().zip(found) {
            match stored.or_else(|| left.get(&mark.key).map(|m| (*m).clone())) {
                Some(stored) => out.push(Some(stored)),
                None => {
                    left.insert(mark.key, mark);
                    out.push(None);
                }
            }
        }
        futures::future::try_join_all(left.values().map(|mark| {
            self.execute(
                LEAVE_REPLAY_MARK,
                (
                    &mark.key[..],
                    mark.session_id.to_string(),
                    &mark.sketch[..],
                    ttl,
                ),
            )
        }))
        .await?;
        Ok(out)
    }

    async fn open_handoff_once(&self, opening: &HandoffOpening) -> Result<Option<Timestamp>> {
        let (handoff, at, expires_at) = (&opening.handoff[..], opening.at, opening.expires_at);
        let first = self
            .applied(
                OPEN_HANDOFF,
                (
                    handoff,
                    CqlTimestamp(at.timestamp_millis()),
                    CqlTimestamp(expires_at.timestamp_millis()),
                    // Kept until it expires (an hour past it at most: the table's default).
                    i32::try_from((expires_at - at).num_seconds().max(1)).unwrap_or(i32::MAX),
                ),
            )
            .await?;
        if first {
            return Ok(None);
        }
        let result = self.execute(HANDOFF_OPENED, (handoff,)).await?;
        let rows = rows_of("handoff_openings", result)?;
        let stored = rows
            .maybe_first_row::<(Option<CqlTimestamp>,)>()
            .map_err(|e| corrupt("handoff_openings", &e))?;
        // The row was there a statement ago; its TTL may have run since.
        Ok(Some(
            stored
                .and_then(|(t,)| t)
                .and_then(|t| chrono::DateTime::from_timestamp_millis(t.0))
                .unwrap_or(at),
        ))
    }
}
