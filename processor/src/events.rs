//! The events the processor records (docs/architecture.md#events; `schemas/events.md`):
//! `session.fingerprint.calculated` once a session is linked to a visitor,
//! `session.result.persisted` once its final decision is stored. Pure: building an event does no
//! I/O; the pipeline stores and publishes them.
//!
//! An event's id is derived from its session and type (the time part from the batch that caused
//! it), so the processor, redelivered that batch after a crash, mints the same id again: the
//! store keeps one row, and the log's consumers see the same `webhook-id` twice at worst.

use schemas::decision::{Decision, DecisionStatus};
use schemas::events::{
    DecisionSummary, EventData, EventSubject, EventType, FingerprintCalculated, ResultPersisted,
};
use schemas::time::Timestamp;
use schemas::{EventId, SessionId};
use sha2::{Digest, Sha256};
use store::{EventRecord, SessionRecord, VisitorRecord};

pub use schemas::events::{LOGGED_EVENT_SCHEMA, LinkedBy, LoggedEvent};

/// An event as `events.v1` carries it.
pub fn logged(record: &EventRecord) -> LoggedEvent {
    LoggedEvent::new(
        record.organization_id,
        record.environment,
        record.to_event(Vec::new()),
    )
}

/// The id of `session`'s one event of `event_type`, made at `at`.
pub fn event_id(session: SessionId, event_type: EventType, at: Timestamp) -> EventId {
    let digest = Sha256::new()
        .chain_update(session.ulid().to_bytes())
        .chain_update(event_type.as_str())
        .finalize();
    let mut random = [0u8; 16];
    random.copy_from_slice(&digest[..16]);
    let ms = u64::try_from(at.timestamp_millis()).unwrap_or(0);
    EventId::from_parts(ms, u128::from_be_bytes(random))
}

fn session_event(session: &SessionRecord, at: Timestamp, data: EventData) -> EventRecord {
    let event_type = data.event_type();
    EventRecord {
        id: event_id(session.id, event_type, at),
        organization_id: session.organization_id,
        environment: session.environment,
        event_type,
        subject: EventSubject {
            kind: "session".to_owned(),
            id: session.id.to_string(),
        },
        data: data.into_value(),
        created_at: at,
    }
}

/// `session.fingerprint.calculated`: which visitor the session was linked to, and how.
pub fn fingerprint_calculated(
    session: &SessionRecord,
    visitor: &VisitorRecord,
    linked_by: LinkedBy,
    at: Timestamp,
) -> EventRecord {
    let data = EventData::SessionFingerprintCalculated(FingerprintCalculated {
        session_id: session.id,
        visitor_id: visitor.id,
        linked_by,
        seen_count: visitor.seen_count,
        first_seen_at: visitor.first_seen_at,
        last_seen_at: visitor.last_seen_at,
    });
    session_event(session, at, data)
}

/// `session.result.persisted`: the session's final decision, summarised (the whole decision is
/// one `GET /v1/sessions/{id}` away).
pub fn result_persisted(
    session: &SessionRecord,
    decision: &Decision,
    at: Timestamp,
) -> EventRecord {
    let data = EventData::SessionResultPersisted(ResultPersisted {
        session_id: session.id,
        visitor_id: session.visitor_id,
        decision: DecisionSummary {
            event_id: decision.event_id,
            automation_status: decision.automation_status,
            verdict: decision.verdict,
            risk_score: decision.risk_score,
            phase: decision.phase,
            decision_status: decision.decision_status,
            manipulation: decision.manipulation,
        },
    });
    session_event(session, at, data)
}

/// Whether a stored decision is final. One that does not read as a decision is not.
pub fn is_final(decision: Option<&store::RawJson>) -> bool {
    decision.and_then(|d| Decision::status_of(d).ok()) == Some(DecisionStatus::Final)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;
    use serde_json::{Value, json};

    #[test]
    fn a_sessions_event_of_one_type_always_gets_one_id() {
        let sid = SessionId::generate();
        let at = schemas::time::now();
        let fp = EventType::SessionFingerprintCalculated;
        assert_eq!(event_id(sid, fp, at), event_id(sid, fp, at));
        assert_ne!(
            event_id(sid, fp, at),
            event_id(sid, EventType::SessionResultPersisted, at)
        );
        assert_ne!(
            event_id(sid, fp, at),
            event_id(SessionId::generate(), fp, at)
        );
        // Later events sort later: the id's time part is the event's.
        let later = at + TimeDelta::milliseconds(5);
        assert!(event_id(sid, fp, later) > event_id(SessionId::generate(), fp, at));
        assert!(event_id(sid, fp, at).to_string().starts_with("wevt_"));
    }

    #[test]
    fn only_a_final_decision_is_final() {
        let raw = |v: Value| store::RawJson::encode(&v).unwrap();
        assert!(is_final(Some(&raw(json!({ "decision_status": "final" })))));
        assert!(!is_final(Some(&raw(
            json!({ "decision_status": "preliminary" })
        ))));
        assert!(!is_final(Some(&raw(json!({})))));
        assert!(!is_final(None));
    }
}
