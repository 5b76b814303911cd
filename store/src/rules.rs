//! The read-check-write rules of the port, as pure functions over the stored row: each backend
//! reads the row under its own lock (the embedded writer mutex, a PostgreSQL row lock) and
//! applies the same rule, so the two cannot drift apart.

use schemas::time::Timestamp;

use crate::{
    AgentLogin, AgentTokenRecord, ApiKeyRecord, GatePoll, GateSessionRecord, Result, StoreError,
};

/// `update_api_key`: the row to write over `stored`. Identity, hash and the rotation columns
/// stay as stored, a revocation is sticky and `last_used_at` only moves forward.
pub fn merge_key_update(stored: &ApiKeyRecord, given: &ApiKeyRecord) -> ApiKeyRecord {
    let mut key = given.clone();
    key.key_hash = stored.key_hash;
    key.rotated_at = stored.rotated_at;
    key.grace_expires_at = stored.grace_expires_at;
    key.replaced_by = stored.replaced_by;
    if stored.revoked_at.is_some() {
        key.revoked_at = stored.revoked_at;
    }
    key.last_used_at = key.last_used_at.max(stored.last_used_at);
    key
}

/// `rotate_api_key`: the rotated old row to write over `stored`, or the `Conflict` that
/// refuses the rotation (no such key, revoked, or rotated already).
pub fn rotated_key(stored: Option<&ApiKeyRecord>, old: &ApiKeyRecord) -> Result<ApiKeyRecord> {
    let Some(stored) = stored else {
        return Err(StoreError::Conflict(format!(
            "api key {} does not exist",
            old.id
        )));
    };
    if stored.revoked_at.is_some() {
        return Err(StoreError::Conflict(format!(
            "api key {} is revoked",
            old.id
        )));
    }
    if let Some(by) = stored.replaced_by {
        return Err(StoreError::Conflict(format!(
            "api key {} was already rotated (replaced by {by})",
            old.id
        )));
    }
    let mut rotated = old.clone();
    rotated.key_hash = stored.key_hash;
    rotated.last_used_at = rotated.last_used_at.max(stored.last_used_at);
    Ok(rotated)
}

/// `count_gate_poll`: counts a poll at `now` on the stored session; whether it changed the row
/// is whether the answer is not `Exhausted`.
pub fn count_poll(
    session: &mut GateSessionRecord,
    now: Timestamp,
    slow_down_secs: u32,
    max_polls: u32,
) -> GatePoll {
    if session.polls >= max_polls {
        return GatePoll::Exhausted;
    }
    let too_soon = session.last_poll_at.is_some_and(|last| {
        now < last + chrono::TimeDelta::seconds(i64::from(session.interval_secs))
    });
    session.polls += 1;
    session.last_poll_at = Some(now);
    if too_soon {
        session.interval_secs += slow_down_secs;
        GatePoll::TooSoon
    } else {
        GatePoll::Counted
    }
}

/// `count_agent_login`: counts a login at `now` on the stored token; `Counted` (with the token
/// to write) or why not, in which case nothing is written.
pub fn count_login(mut token: AgentTokenRecord, now: Timestamp, per_hour: usize) -> AgentLogin {
    if token.revoked_at.is_some() || token.expires_at <= now {
        return AgentLogin::Unusable;
    }
    let hour_ago = now - chrono::TimeDelta::hours(1);
    token.recent_logins.retain(|t| *t > hour_ago);
    if token.recent_logins.len() >= per_hour {
        return AgentLogin::CapReached(token.recent_logins[0]);
    }
    token.recent_logins.push(now);
    AgentLogin::Counted(token)
}
