//! Collect sessions and their pings' lookup rows in PostgreSQL. Every conditional change (a
//! counter raised, a ping's arrival, the first results) reads the session under its row lock,
//! so of racing ingest replicas exactly one makes it. A handoff's opening is one conditional
//! insert, so of racing opens exactly one is first.

use crate::rules::CollectChange;
use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use schemas::ids::{PingId, SessionId};
use schemas::time::Timestamp;

use super::{PostgresStore, db_error, decode_opt, execute, json, row, rows, ulid_bytes, ulid_of};
use crate::{CollectSessionRecord, CollectStore, HandoffOpening, ReplayMark, Result};

pub(super) const COLLECT_SESSIONS: &str = "collect_sessions";

async fn write(
    tx: &impl GenericClient,
    key: &Vec<u8>,
    session: &CollectSessionRecord,
) -> Result<()> {
    execute(
        tx,
        "UPDATE collect_sessions SET body = $2 WHERE id = $1",
        &[key, &json(session)],
    )
    .await?;
    Ok(())
}

#[async_trait]
impl CollectStore for PostgresStore {
    /// Reads the session under its row lock, lets `change` modify it (answering whether it did),
    /// and writes it back only if it changed. `None` if there is no such session; otherwise
    /// whether this call wrote, and the row as now stored.
    async fn change_collect_session(
        &self,
        id: SessionId,
        change: CollectChange,
    ) -> Result<Option<(bool, CollectSessionRecord)>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        // Checked once the connection is at hand: a `Seq` here is a caller's bug.
        crate::rules::check_collect_change(&change)?;
        let key = ulid_bytes(id.ulid());
        let found = row(
            &tx,
            "SELECT body FROM collect_sessions WHERE id = $1 FOR UPDATE",
            &[&key],
        )
        .await?;
        let Some(mut session) = decode_opt::<CollectSessionRecord>(COLLECT_SESSIONS, found)? else {
            return Ok(None);
        };
        if !change.apply(&mut session) {
            return Ok(Some((false, session)));
        }
        write(&tx, &key, &session).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(Some((true, session)))
    }

    async fn create_collect_session(&self, session: &CollectSessionRecord) -> Result<()> {
        crate::rules::check_collect_pings(session)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let id = ulid_bytes(session.id.ulid());
        execute(
            &tx,
            "INSERT INTO collect_sessions (id, body) VALUES ($1, $2)",
            &[&id, &json(session)],
        )
        .await?;
        for ping in &session.pings {
            execute(
                &tx,
                "INSERT INTO collect_pings (ping_id, session_id) VALUES ($1, $2)",
                &[&ulid_bytes(ping.id.ulid()), &id],
            )
            .await?;
        }
        tx.commit().await.map_err(db_error)
    }

    async fn get_collect_session(&self, id: SessionId) -> Result<Option<CollectSessionRecord>> {
        let found = row(
            &self.client().await?,
            "SELECT body FROM collect_sessions WHERE id = $1",
            &[&ulid_bytes(id.ulid())],
        )
        .await?;
        decode_opt(COLLECT_SESSIONS, found)
    }

    async fn find_collect_ping(&self, ping: PingId) -> Result<Option<SessionId>> {
        let found = row(
            &self.client().await?,
            "SELECT session_id FROM collect_pings WHERE ping_id = $1",
            &[&ulid_bytes(ping.ulid())],
        )
        .await?;
        found
            .map(|r| ulid_of("collect_pings", r.get::<_, &[u8]>(0)).map(SessionId::from_ulid))
            .transpose()
    }

    /// Raised in groups with the other advances waiting (see `seqs`).
    async fn advance_collect_seq(&self, id: SessionId, seq: u64) -> Result<bool> {
        self.seqs.advance(id, seq).await
    }

    /// An expired row of the same nonce (not yet purged) is spent again.
    async fn spend_nonce(&self, scope: &str, nonce: &str, until: Timestamp) -> Result<bool> {
        let spent = execute(
            &self.client().await?,
            "INSERT INTO spent_nonces (scope, nonce, expires_at) VALUES ($1, $2, $3)
             ON CONFLICT (scope, nonce) DO UPDATE SET expires_at = excluded.expires_at
             WHERE spent_nonces.expires_at < now()",
            &[&scope, &nonce, &until],
        )
        .await?;
        Ok(spent == 1)
    }

    async fn leave_replay_marks(
        &self,
        marks: &[ReplayMark],
        until: Timestamp,
    ) -> Result<Vec<Option<ReplayMark>>> {
        let keys: Vec<&[u8]> = marks.iter().map(|m| &m.key[..]).collect();
        let sessions: Vec<Vec<u8>> = marks
            .iter()
            .map(|m| ulid_bytes(m.session_id.ulid()))
            .collect();
        let sketches: Vec<&[u8]> = marks.iter().map(|m| &m.sketch[..]).collect();
        let client = self.client().await?;
        // One statement leaves every mark not there yet (the first of two equal keys in the
        // call wins), and says which it left; the others are read after.
        let left = rows(
            &client,
            "INSERT INTO replay_marks (mark, session_id, sketch, expires_at)
             SELECT DISTINCT ON (mark) mark, session_id, sketch, $4
             FROM unnest($1::bytea[], $2::bytea[], $3::bytea[]) WITH ORDINALITY
                  AS given(mark, session_id, sketch, n)
             ORDER BY mark, n
             ON CONFLICT (mark) DO NOTHING RETURNING mark, session_id",
            &[&keys, &sessions, &sketches, &until],
        )
        .await?;
        let left: Vec<(Vec<u8>, Vec<u8>)> = left.iter().map(|r| (r.get(0), r.get(1))).collect();
        let found = rows(
            &client,
            // Joined to the keys rather than `mark = ANY($1)`, whose generic plan (a prepared
            // statement's after five runs) can scan the whole table.
            "SELECT r.mark, r.session_id, r.sketch
             FROM unnest($1::bytea[]) AS k(mark) JOIN replay_marks r ON r.mark = k.mark",
            &[&keys],
        )
        .await?;
        let mut stored = std::collections::HashMap::new();
        for row in &found {
            let key: Vec<u8> = row.get(0);
            let session: Vec<u8> = row.get(1);
            stored.insert(key, (session, row.get::<_, Vec<u8>>(2)));
        }
        let mut answered = std::collections::HashSet::new();
        let mut out = Vec::with_capacity(marks.len());
        for mark in marks {
            let own = ulid_bytes(mark.session_id.ulid());
            // Left now by this very mark: the first of its key in the call.
            let left_now = left
                .iter()
                .any(|(key, session)| key[..] == mark.key && *session == own)
                && answered.insert(mark.key);
            if left_now {
                out.push(None);
                continue;
            }
            out.push(match stored.get(&mark.key[..]) {
                Some((session, sketch)) => Some(ReplayMark {
                    key: mark.key,
                    session_id: SessionId::from_ulid(ulid_of("replay_marks", session)?),
                    sketch: sketch.clone(),
                }),
                // Swept between the two statements: whose it was cannot be read any more, so it
                // is answered as the caller's own, which reads as no replay.
                None => Some(mark.clone()),
            });
        }
        Ok(out)
    }

    async fn open_handoff_once(&self, opening: &HandoffOpening) -> Result<Option<Timestamp>> {
        let (handoff, at) = (&opening.handoff[..], opening.at);
        let client = self.client().await?;
        let first = row(
            &client,
            "INSERT INTO handoff_openings (handoff, first_opened_at, expires_at) VALUES ($1, $2, $3)
             ON CONFLICT (handoff) DO NOTHING RETURNING 1",
            &[&handoff, &at, &opening.expires_at],
        )
        .await?;
        if first.is_some() {
            return Ok(None);
        }
        let stored = row(
            &client,
            "SELECT first_opened_at FROM handoff_openings WHERE handoff = $1",
            &[&handoff],
        )
        .await?;
        // The row was there a statement ago; the sweep may have dropped it since, once expired.
        Ok(Some(stored.map_or(at, |r| r.get(0))))
    }
}
