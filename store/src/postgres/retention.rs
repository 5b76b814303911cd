//! Expiry in PostgreSQL (docs/architecture.md#retention): each kind of row past its retention is
//! deleted by its indexed time, at most `budget` rows a statement, each statement its own short
//! transaction, so a step never holds locks for long and a fleet's replicas may purge side by side
//! (a row two of them pick is deleted once; the other's delete finds nothing).

use async_trait::async_trait;
use std::time::Duration;

use schemas::time::Timestamp;

use super::{PostgresStore, db_error, decode_all, execute, json, limit, row, rows, ulid_bytes};
use crate::rules::{self, GateSweep};
use crate::{GateSessionRecord, Result, RetentionStore};

/// How long a collect session (and its pings' rows) is kept after its id was minted, as the
/// embedded store and ScyllaDB's TTL keep it.
const COLLECT_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// Each statement deletes up to `$2` rows and answers how many. The rows are picked with
/// `FOR UPDATE SKIP LOCKED` (a row a save holds is left to the next step, and purges and saves
/// never wait on each other in opposite orders), and the time condition is repeated on the
/// delete itself: under READ COMMITTED, a row rewritten between the pick and the delete is
/// re-checked against that condition only, so a session saved, a visitor seen or an
/// idempotency record claimed again at the boundary is kept.
const SESSIONS: &str = "WITH gone AS (
        DELETE FROM sessions WHERE id IN (
            SELECT id FROM sessions WHERE updated_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)
            AND updated_at < $1
        RETURNING id),
    decisions AS (
        DELETE FROM session_decisions WHERE session_id IN (SELECT id FROM gone))
    SELECT count(*) FROM gone";

const EVENTS: &str = "WITH gone AS (
        DELETE FROM events WHERE (organization_id, environment, id) IN (
            SELECT organization_id, environment, id FROM events WHERE created_at < $1 LIMIT $2
            FOR UPDATE SKIP LOCKED)
            AND created_at < $1
        RETURNING organization_id, environment, id),
    deliveries AS (
        DELETE FROM webhook_deliveries d USING gone g
        WHERE d.organization_id = g.organization_id AND d.environment = g.environment
          AND d.event_id = g.id)
    SELECT count(*) FROM gone";

/// Their anchor index rows go by cascade.
const VISITORS: &str = "WITH gone AS (
        DELETE FROM visitors WHERE (organization_id, environment, id) IN (
            SELECT organization_id, environment, id FROM visitors WHERE last_seen_at < $1 LIMIT $2
            FOR UPDATE SKIP LOCKED)
            AND last_seen_at < $1
        RETURNING 1)
    SELECT count(*) FROM gone";

/// Sessions a day past their delivery window (`rules::gate_sweep`'s `Drop`). Every session
/// lives `SESSION_TTL` from its creation, so the creation index finds them.
/// An unacknowledged signup still holding its delivery waits for `withdraw_unacknowledged`,
/// which deletes the account and token it made first.
const GATE_SESSIONS: &str = "WITH gone AS (
        DELETE FROM gate_sessions WHERE id IN (
            SELECT id FROM gate_sessions WHERE created_at < $1
              AND NOT (body->>'flow' = 'signup' AND body->>'status' = 'approved'
                       AND body->>'sealed_delivery' <> '')
            LIMIT $2 FOR UPDATE SKIP LOCKED)
            AND created_at < $1
        RETURNING 1)
    SELECT count(*) FROM gone";

const IDEMPOTENCY: &str = "WITH gone AS (
        DELETE FROM idempotency_records WHERE scope IN (
            SELECT scope FROM idempotency_records WHERE expires_at <= $1 LIMIT $2
            FOR UPDATE SKIP LOCKED)
            AND expires_at <= $1
        RETURNING 1)
    SELECT count(*) FROM gone";

const HANDOFFS: &str = "WITH gone AS (
        DELETE FROM handoff_openings WHERE handoff IN (
            SELECT handoff FROM handoff_openings WHERE expires_at <= $1 LIMIT $2
            FOR UPDATE SKIP LOCKED)
            AND expires_at <= $1
        RETURNING 1)
    SELECT count(*) FROM gone";

const REPLAY_MARKS: &str = "WITH gone AS (
        DELETE FROM replay_marks WHERE mark IN (
            SELECT mark FROM replay_marks WHERE expires_at <= $1 LIMIT $2
            FOR UPDATE SKIP LOCKED)
            AND expires_at <= $1
        RETURNING 1)
    SELECT count(*) FROM gone";

const NONCES: &str = "WITH gone AS (
        DELETE FROM spent_nonces WHERE (scope, nonce) IN (
            SELECT scope, nonce FROM spent_nonces WHERE expires_at <= $1 LIMIT $2
            FOR UPDATE SKIP LOCKED)
            AND expires_at <= $1
        RETURNING 1)
    SELECT count(*) FROM gone";

/// Collect session ids are ULIDs, minted in time order: those below the id of the cutoff's
/// millisecond are older. Their pings' rows go by cascade.
const COLLECT: &str = "WITH gone AS (
        DELETE FROM collect_sessions WHERE id IN (
            SELECT id FROM collect_sessions WHERE id < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)
        RETURNING 1)
    SELECT count(*) FROM gone";

/// Approved signups never acknowledged whose delivery window has closed (`rules::gate_sweep`'s
/// `Withdraw`): created before `$1`, with a delivery still sealed in them.
const UNACKNOWLEDGED_SIGNUPS: &str = "SELECT body FROM gate_sessions
    WHERE created_at < $1 AND body->>'flow' = 'signup' AND body->>'status' = 'approved'
      AND body->>'sealed_delivery' <> ''
    LIMIT $2 FOR UPDATE SKIP LOCKED";

/// Gate sessions created before this are dropped: a day after the window in which an approved
/// signup's delivery is shown (twice the session's lifetime) closed.
fn gate_drop_before(now: Timestamp) -> Timestamp {
    let ttl = chrono::TimeDelta::from_std(schemas::gate::SESSION_TTL).unwrap_or_default();
    let kept =
        chrono::TimeDelta::from_std(schemas::gate::SESSION_KEPT_AFTER_EXPIRY).unwrap_or_default();
    now - ttl - ttl - kept
}

impl PostgresStore {
    /// Withdraws up to `budget` unacknowledged signups' deliveries, with the accounts and agent
    /// tokens they made, in one transaction; whether more may remain.
    async fn withdraw_unacknowledged(&self, now: Timestamp, budget: i64) -> Result<bool> {
        let ttl = chrono::TimeDelta::from_std(schemas::gate::SESSION_TTL).unwrap_or_default();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let found = rows(&tx, UNACKNOWLEDGED_SIGNUPS, &[&(now - ttl - ttl), &budget]).await?;
        let sessions: Vec<GateSessionRecord> = decode_all("gate_sessions", &found)?;
        for mut session in sessions {
            // Withdrawn, or due to be dropped as an unacknowledged signup still: its account and
            // token go first either way (the drop below leaves such rows to this step).
            if !matches!(
                rules::gate_sweep(&session, now),
                GateSweep::Withdraw | GateSweep::Drop { withdraw: true }
            ) {
                continue;
            }
            if let Some(account) = session.account_id {
                execute(
                    &tx,
                    "DELETE FROM gate_accounts WHERE id = $1",
                    &[&ulid_bytes(account.ulid())],
                )
                .await?;
            }
            if let Some(token) = session.agent_token {
                execute(
                    &tx,
                    "DELETE FROM agent_tokens WHERE hash = $1",
                    &[&&token.0[..]],
                )
                .await?;
            }
            session.sealed_delivery = Vec::new();
            session.ack_token = None;
            execute(
                &tx,
                "UPDATE gate_sessions SET body = $2 WHERE id = $1",
                &[&ulid_bytes(session.id.ulid()), &json(&session)],
            )
            .await?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok(found.len() as i64 >= budget)
    }
}

#[async_trait]
impl RetentionStore for PostgresStore {
    async fn purge_expired(
        &self,
        now: Timestamp,
        keep_since: Timestamp,
        budget: usize,
    ) -> Result<bool> {
        let budget = limit(budget.max(1));
        let mut more = self.withdraw_unacknowledged(now, budget).await?;
        let client = self.client().await?;
        for (sql, before) in [
            (SESSIONS, keep_since),
            (EVENTS, keep_since),
            (VISITORS, keep_since),
            (GATE_SESSIONS, gate_drop_before(now)),
            (IDEMPOTENCY, now),
            (HANDOFFS, now),
            (REPLAY_MARKS, now),
            (NONCES, now),
        ] {
            let deleted: i64 = row(&client, sql, &[&before, &budget])
                .await?
                .map_or(0, |r| r.get(0));
            more |= deleted >= budget;
        }
        let retention = chrono::TimeDelta::from_std(COLLECT_RETENTION).unwrap_or_default();
        if let Ok(cutoff) = u64::try_from((now - retention).timestamp_millis()) {
            let below = ulid::Ulid::from_parts(cutoff, 0).to_bytes().to_vec();
            let deleted: i64 = row(&client, COLLECT, &[&below, &budget])
                .await?
                .map_or(0, |r| r.get(0));
            more |= deleted >= budget;
        }
        Ok(more)
    }
}
