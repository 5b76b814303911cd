//! Events (D12): the types the interface names, the event shape of its Resources section, and
//! the log topic every role appends them to (`schemas/events.md` documents `data` per type).

use serde::{Deserialize, Serialize};

use crate::ids::EventId;
use crate::time::{self, Timestamp};

/// Events of every organization, keyed by organization id so one organization's events stay in
/// order for the dispatcher.
pub const EVENTS_TOPIC: &str = "events.v1";
/// Partitions of the events topic when Vigil creates it.
pub const EVENTS_PARTITIONS: u32 = 4;

/// The event types of the interface's Events section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventType {
    /// A session was linked to a visitor fingerprint (subject: the session).
    #[serde(rename = "session.fingerprint.calculated")]
    SessionFingerprintCalculated,
    /// A session's final decision was stored, once per session (subject: the session).
    #[serde(rename = "session.result.persisted")]
    SessionResultPersisted,
    #[serde(rename = "gate.session.approved")]
    GateSessionApproved,
    #[serde(rename = "webhook.test")]
    WebhookTest,
}

impl EventType {
    pub const ALL: [&'static str; 4] = [
        "session.fingerprint.calculated",
        "session.result.persisted",
        "gate.session.approved",
        "webhook.test",
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::SessionFingerprintCalculated => Self::ALL[0],
            EventType::SessionResultPersisted => Self::ALL[1],
            EventType::GateSessionApproved => Self::ALL[2],
            EventType::WebhookTest => Self::ALL[3],
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "session.fingerprint.calculated" => Some(EventType::SessionFingerprintCalculated),
            "session.result.persisted" => Some(EventType::SessionResultPersisted),
            "gate.session.approved" => Some(EventType::GateSessionApproved),
            "webhook.test" => Some(EventType::WebhookTest),
            _ => None,
        }
    }
}

/// What an event is about: `{ "type": "session", "id": "sid_…" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventSubject {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
}

/// An event in the interface's shape, as the events log carries it and the events API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub id: EventId,
    pub object: String,
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub subject: EventSubject,
    pub data: serde_json::Value,
    /// The deliveries made so far; empty when the event is first recorded.
    pub webhook_deliveries: Vec<serde_json::Value>,
    #[serde(serialize_with = "time::ser")]
    pub created_at: Timestamp,
}

/// The version of [`LoggedEvent`] this build writes.
pub const LOGGED_EVENT_SCHEMA: u32 = 1;

/// A record of `events.v1`: the event in the interface's shape, with the tenancy the
/// dispatcher needs to find the organization's endpoints (the event shape itself has none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoggedEvent {
    pub schema: u32,
    pub organization_id: crate::OrgId,
    pub environment: crate::credential::Environment,
    pub event: Event,
}

impl LoggedEvent {
    pub fn new(
        organization_id: crate::OrgId,
        environment: crate::credential::Environment,
        event: Event,
    ) -> Self {
        LoggedEvent {
            schema: LOGGED_EVENT_SCHEMA,
            organization_id,
            environment,
            event,
        }
    }
}
