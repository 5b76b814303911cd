//! The read-check-write rules of the port, as pure functions over the stored row: each backend
//! reads the row under its own lock (the embedded writer mutex, a PostgreSQL row lock, a
//! ScyllaDB lightweight transaction on the row's revision) and applies the same rule, so they
//! cannot drift apart.

use schemas::PingId;
use schemas::time::Timestamp;

use crate::error::{Result, StoreError};
use crate::model::{
    AgentLogin, AgentTokenRecord, ApiKeyRecord, CollectSessionRecord, DecisionRecord, EventRecord,
    GateAttempt, GateAttemptCount, GateFlow, GatePoll, GateSessionRecord, GateSessionStatus,
    OrganizationRecord, RawJson, SessionRecord, SessionSave, VisitorRecord,
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

/// `count_gate_attempt`: counts `attempt` on the stored session, unless it no longer waits, its
/// budget of `max` is spent, or (a user code) it is the session's own; whether it changed the
/// row is whether the answer is `Counted`.
pub fn count_attempt(
    mut session: GateSessionRecord,
    attempt: GateAttempt,
    max: u32,
) -> GateAttemptCount {
    if session.status != GateSessionStatus::Pending {
        return GateAttemptCount::Refused(Box::new(session));
    }
    // The budget first: once wrong codes have spent it, no code is compared at all.
    if *attempt_counter(&mut session, attempt) >= max {
        return GateAttemptCount::Refused(Box::new(session));
    }
    if let GateAttempt::UserCode(typed) = attempt
        && session.user_code == Some(typed)
    {
        return GateAttemptCount::Matched(Box::new(session));
    }
    let counter = attempt_counter(&mut session, attempt);
    *counter += 1;
    let number = *counter;
    GateAttemptCount::Counted(Box::new(session), number)
}

fn attempt_counter(session: &mut GateSessionRecord, attempt: GateAttempt) -> &mut u32 {
    match attempt {
        GateAttempt::UserCode(_) => &mut session.code_attempts,
        GateAttempt::UnsureJudgement => &mut session.uncertain_judgements,
    }
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

/// A state given in two parts (see [`SessionSave::settled`]) made whole: objects merge member
/// by member, and anywhere else the settled part's value is kept. `Invalid` when either part
/// is not JSON the merge can read.
pub fn merge_state(state: &RawJson, settled: &RawJson) -> Result<RawJson> {
    fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
        match (into, from) {
            (serde_json::Value::Object(into), serde_json::Value::Object(from)) => {
                for (name, value) in from {
                    match into.get_mut(&name) {
                        Some(member) => merge(member, value),
                        None => {
                            into.insert(name, value);
                        }
                    }
                }
            }
            (into, from) => *into = from,
        }
    }
    let invalid = |e: serde_json::Error| StoreError::Invalid(format!("a session's state: {e}"));
    let mut whole: serde_json::Value = state.decode().map_err(invalid)?;
    merge(&mut whole, settled.decode().map_err(invalid)?);
    RawJson::encode(&whole).map_err(invalid)
}

/// The check of `save_visitors` that needs no read, for every backend to run first.
pub fn check_visitor_saves(visitors: &[VisitorRecord]) -> Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(visitors.len());
    for v in visitors {
        if !seen.insert((v.organization_id, v.environment, v.id)) {
            return Err(StoreError::Invalid(format!(
                "visitor {} is saved twice in one call",
                v.id
            )));
        }
    }
    Ok(())
}

/// The partitions whose fence in `saves` is below the generation `current` answers for them
/// (none for a partition never claimed), ascending and each once: what `save_sessions` refuses
/// as `Fenced`.
pub fn fenced_partitions(
    saves: &[SessionSave],
    mut current: impl FnMut(u32) -> Result<Option<u64>>,
) -> Result<Vec<u32>> {
    let fences: std::collections::BTreeSet<crate::model::PartitionFence> =
        saves.iter().filter_map(|s| s.fence).collect();
    let mut fenced = Vec::new();
    for fence in fences {
        if !fenced.contains(&fence.partition)
            && current(fence.partition)?.is_some_and(|g| g > fence.generation)
        {
            fenced.push(fence.partition);
        }
    }
    fenced.sort_unstable();
    Ok(fenced)
}

/// The checks of `save_sessions` that need no read, for every backend to run first.
pub fn check_session_saves(saves: &[SessionSave]) -> Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(saves.len());
    for save in saves {
        if !seen.insert(save.session.id) {
            return Err(StoreError::Invalid(format!(
                "session {} is saved twice in one call",
                save.session.id
            )));
        }
        check_session_save(&save.session, save.decision.as_ref(), &save.events)?;
    }
    Ok(())
}

fn check_session_save(
    session: &SessionRecord,
    decision: Option<&DecisionRecord>,
    events: &[EventRecord],
) -> Result<()> {
    if let Some(d) = decision.filter(|d| d.session_id != session.id) {
        return Err(StoreError::Invalid(format!(
            "decision {} belongs to session {}, not to the session {} being saved",
            d.id, d.session_id, session.id
        )));
    }
    if let Some(e) = events.iter().find(|e| {
        e.organization_id != session.organization_id || e.environment != session.environment
    }) {
        return Err(StoreError::Invalid(format!(
            "event {} belongs to another organization or environment than session {}",
            e.id, session.id
        )));
    }
    Ok(())
}

/// The checks of `create_organization_with_keys` that need no read, for every backend to run
/// first: `Invalid` if a key belongs to another organization, then `Conflict` if two of the
/// keys share an id or a hash (checks against stored rows cannot see the batch's own rows).
pub fn check_organization_keys(org: &OrganizationRecord, keys: &[ApiKeyRecord]) -> Result<()> {
    if let Some(stray) = keys.iter().find(|k| k.organization_id != org.id) {
        return Err(StoreError::Invalid(format!(
            "api key {} belongs to organization {}, not to the organization {} being created \
             with it",
            stray.id, stray.organization_id, org.id
        )));
    }
    let mut ids = std::collections::HashSet::with_capacity(keys.len());
    let mut hashes = std::collections::HashSet::with_capacity(keys.len());
    for key in keys {
        if !ids.insert(key.id) {
            return Err(StoreError::Conflict(format!(
                "api key id {} is given twice",
                key.id
            )));
        }
        if !hashes.insert(key.key_hash) {
            return Err(StoreError::Conflict(
                "two api keys share a credential hash".into(),
            ));
        }
    }
    Ok(())
}

/// What retention does with a stored Gate session at `now` (docs/gate.md#storage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateSweep {
    Keep,
    /// A signup approved but never acknowledged, whose delivery stopped being shown: its
    /// sealed delivery is cleared, and the account and agent token it made are deleted (the
    /// tool never confirmed it received them).
    Withdraw,
    /// Past its lifetime: dropped with its login code's row (and, if it is an unacknowledged
    /// signup's still, withdrawn first: `withdraw`).
    Drop {
        withdraw: bool,
    },
}

/// The rule of [`GateSweep`]: a session is dropped a day after its delivery window closed
/// (for every flow, that is after it expired); before that, an unacknowledged signup's
/// delivery is withdrawn as soon as the window closes.
pub fn gate_sweep(session: &GateSessionRecord, now: Timestamp) -> GateSweep {
    let kept =
        chrono::TimeDelta::from_std(schemas::gate::SESSION_KEPT_AFTER_EXPIRY).expect("a day fits");
    let window = chrono::TimeDelta::from_std(schemas::gate::SESSION_TTL).expect("minutes fit");
    // An unacknowledged signup's account and token go whenever its window has closed, even
    // if the session is dropped in the same step (retention was down for a day, say).
    let unacknowledged = session.flow == GateFlow::Signup
        && session.status == GateSessionStatus::Approved
        && !session.sealed_delivery.is_empty()
        && session.delivery_expired(now);
    if now >= session.expires_at + window + kept {
        GateSweep::Drop {
            withdraw: unacknowledged,
        }
    } else if unacknowledged {
        GateSweep::Withdraw
    } else {
        GateSweep::Keep
    }
}

/// `create_collect_session`: `Conflict` if two of a new session's pings share an id (as if one
/// had been created first); checked before anything is written.
pub fn check_collect_pings(session: &CollectSessionRecord) -> Result<()> {
    let mut ids = std::collections::HashSet::with_capacity(session.pings.len());
    for ping in &session.pings {
        if !ids.insert(ping.id) {
            return Err(StoreError::Conflict(format!(
                "ping {} is given twice in collect session {}",
                ping.id, session.id
            )));
        }
    }
    Ok(())
}

/// One of a collect session's one-way changes (`change_collect_session`, and the port's
/// `advance_collect_call`, `record_collect_ping`, `record_collect_ws_identity` and
/// `mark_collect_results` over it): each backend reads the row under its own lock and applies
/// the change with [`CollectChange::apply`]. `Seq` is ScyllaDB's alone: the embedded store and
/// PostgreSQL keep the batch counter apart (`advance_collect_seq`), and refuse it there
/// ([`check_collect_change`]).
#[derive(Debug, Clone)]
pub enum CollectChange {
    /// The batch counter raised to this, if above it.
    Seq(u64),
    /// The proof counter raised to this, if above it.
    Call(u64),
    /// The ping's arrival, if it is one of the session's and has not arrived.
    Ping { ping: PingId, at: Timestamp },
    /// The WebSocket connection's identity, if none is recorded yet.
    WsIdentity(serde_json::Value),
    /// When results were first read, if they have not been.
    Results(Timestamp),
}

impl CollectChange {
    /// Applies the change to `session`: whether it changed anything, and so is to be written.
    pub fn apply(&self, session: &mut CollectSessionRecord) -> bool {
        fn raise(counter: &mut u64, to: u64) -> bool {
            let raised = to > *counter;
            if raised {
                *counter = to;
            }
            raised
        }
        match self {
            CollectChange::Seq(seq) => raise(&mut session.last_seq, *seq),
            CollectChange::Call(counter) => raise(&mut session.last_call, *counter),
            CollectChange::Ping { ping, at } => {
                match session.pings.iter_mut().find(|p| p.id == *ping) {
                    Some(p) if p.arrived_at.is_none() => {
                        p.arrived_at = Some(*at);
                        true
                    }
                    // Already arrived, or not one of this session's pings.
                    _ => false,
                }
            }
            CollectChange::WsIdentity(identity) => {
                if session.ws_identity.is_some() {
                    return false;
                }
                session.ws_identity = Some(identity.clone());
                true
            }
            CollectChange::Results(at) => {
                if session.results_at.is_some() {
                    return false;
                }
                session.results_at = Some(*at);
                true
            }
        }
    }
}

/// `change_collect_session` on a store that keeps the batch counter apart from the row: `Seq`
/// is a caller's bug (`Invalid`), since the row's own counter is not the one that counts.
pub fn check_collect_change(change: &CollectChange) -> Result<()> {
    match change {
        CollectChange::Seq(_) => Err(StoreError::Invalid(
            "the batch counter is raised by advance_collect_seq".into(),
        )),
        _ => Ok(()),
    }
}

/// Whether a collect change was written: the session exists and the change changed it.
pub fn written(changed: Option<(bool, CollectSessionRecord)>) -> bool {
    changed.is_some_and(|(written, _)| written)
}
