//! Events (docs/architecture.md#events): the types the interface names, the event shape of its
//! Resources section, the log topic every role appends them to (`schemas/events.md` documents
//! `data` per type), and the dead-letter topic the dispatcher sets aside the records of it cannot
//! read.

use serde::{Deserialize, Serialize};

use crate::ids::EventId;
use crate::time::{self, Timestamp};

/// Events of every organization, keyed by organization id so one organization's events stay in
/// order for the dispatcher.
pub const EVENTS_TOPIC: &str = "events.v1";
/// Partitions of the events topic when Vigil creates it.
pub const EVENTS_PARTITIONS: u32 = 4;

/// Records of `events.v1` the dispatcher can never deliver, each with why
/// ([`EventDeadLetter`]). Keyed like the record it carries.
pub const EVENTS_DEAD_TOPIC: &str = "events.dead.v1";
/// Partitions of the events dead-letter topic when Vigil creates it: few, it should stay near
/// empty.
pub const EVENTS_DEAD_PARTITIONS: u32 = 1;

/// Why the dispatcher dead-lettered a record of `events.v1`: a closed set, so it can label a
/// metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventDeadReason {
    /// Written by a newer build (`schema` above [`LOGGED_EVENT_SCHEMA`]): its members may mean
    /// what this build cannot tell.
    NewerSchema,
    /// An event type this build does not know, so it cannot tell who subscribed to it.
    UnknownEventType,
    /// The record is not a logged event at all.
    UnreadableRecord,
}

impl EventDeadReason {
    pub const ALL: [EventDeadReason; 3] = [
        EventDeadReason::NewerSchema,
        EventDeadReason::UnknownEventType,
        EventDeadReason::UnreadableRecord,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventDeadReason::NewerSchema => "newer_schema",
            EventDeadReason::UnknownEventType => "unknown_event_type",
            EventDeadReason::UnreadableRecord => "unreadable_record",
        }
    }
}

/// One record of `events.dead.v1`.
pub type EventDeadLetter = crate::dead::DeadLetter<EventDeadReason>;

/// The event types the API documents (docs/api.md#events).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub enum EventType {
    /// A session was linked to a visitor fingerprint (subject: the session).
    #[serde(rename = "session.fingerprint.calculated")]
    SessionFingerprintCalculated,
    /// A session's final decision was stored, once per session (subject: the session).
    #[serde(rename = "session.result.persisted")]
    SessionResultPersisted,
    /// A person approved a Gate signup or login on its consent page (subject: the Gate
    /// session).
    #[serde(rename = "gate.session.approved")]
    GateSessionApproved,
    /// A Gate session was denied: by its person, or because Vigil judged its consent page's
    /// browser automated, stayed uncertain through every try, or the user code was mistyped
    /// too often (subject: the Gate session; `data.reason` says which).
    #[serde(rename = "gate.session.denied")]
    GateSessionDenied,
    #[serde(rename = "webhook.test")]
    WebhookTest,
}

impl EventType {
    pub const ALL: [&'static str; 5] = [
        "session.fingerprint.calculated",
        "session.result.persisted",
        "gate.session.approved",
        "gate.session.denied",
        "webhook.test",
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::SessionFingerprintCalculated => Self::ALL[0],
            EventType::SessionResultPersisted => Self::ALL[1],
            EventType::GateSessionApproved => Self::ALL[2],
            EventType::GateSessionDenied => Self::ALL[3],
            EventType::WebhookTest => Self::ALL[4],
        }
    }

    /// The name of the schema of its events' `data` in the OpenAPI document ([`EventData`]).
    pub fn data_schema(self) -> std::borrow::Cow<'static, str> {
        use utoipa::ToSchema;
        match self {
            EventType::SessionFingerprintCalculated => FingerprintCalculated::name(),
            EventType::SessionResultPersisted => ResultPersisted::name(),
            EventType::GateSessionApproved => GateSessionApproved::name(),
            EventType::GateSessionDenied => GateSessionDenied::name(),
            EventType::WebhookTest => WebhookTest::name(),
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "session.fingerprint.calculated" => Some(EventType::SessionFingerprintCalculated),
            "session.result.persisted" => Some(EventType::SessionResultPersisted),
            "gate.session.approved" => Some(EventType::GateSessionApproved),
            "gate.session.denied" => Some(EventType::GateSessionDenied),
            "webhook.test" => Some(EventType::WebhookTest),
            _ => None,
        }
    }
}

/// What an event says, its `data`: one shape per type (schemas/events.md), which is what a
/// webhook's receiver reads. Built typed by whoever emits the event, and stored and sent as the
/// JSON object it serializes to ([`EventData::into_value`]).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum EventData {
    SessionFingerprintCalculated(FingerprintCalculated),
    SessionResultPersisted(ResultPersisted),
    GateSessionApproved(GateSessionApproved),
    GateSessionDenied(GateSessionDenied),
    WebhookTest(WebhookTest),
}

impl EventData {
    /// The type of the events that carry it.
    pub fn event_type(&self) -> EventType {
        match self {
            EventData::SessionFingerprintCalculated(_) => EventType::SessionFingerprintCalculated,
            EventData::SessionResultPersisted(_) => EventType::SessionResultPersisted,
            EventData::GateSessionApproved(_) => EventType::GateSessionApproved,
            EventData::GateSessionDenied(_) => EventType::GateSessionDenied,
            EventData::WebhookTest(_) => EventType::WebhookTest,
        }
    }

    /// The JSON object an event's `data` is.
    pub fn into_value(self) -> serde_json::Value {
        // Every member is a string, a number, a list or an object of those: nothing to fail.
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// How a session found its visitor, in the order they are tried (docs/architecture.md#visitors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LinkedBy {
    VisitorToken,
    Anchors,
    NearestVector,
    NewVisitor,
}

/// `session.fingerprint.calculated`: which visitor a session was linked to, and how.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct FingerprintCalculated {
    pub session_id: crate::SessionId,
    pub visitor_id: crate::VisitorId,
    pub linked_by: LinkedBy,
    /// The visitor's sessions, this one included.
    pub seen_count: u64,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    pub first_seen_at: Timestamp,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    pub last_seen_at: Timestamp,
}

/// `session.result.persisted`: the session's first final decision, summed up (the whole of it is
/// `GET /v1/sessions/{sessionId}`).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ResultPersisted {
    pub session_id: crate::SessionId,
    /// Null if the session sent no probes.
    pub visitor_id: Option<crate::VisitorId>,
    pub decision: DecisionSummary,
}

/// A decision as `session.result.persisted` sums it up.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct DecisionSummary {
    pub event_id: crate::DecisionId,
    pub automation_status: crate::decision::AutomationStatus,
    pub verdict: crate::decision::Verdict,
    pub risk_score: u8,
    pub phase: crate::decision::Phase,
    pub decision_status: crate::decision::DecisionStatus,
    pub manipulation: Option<crate::decision::Manipulation>,
}

/// `gate.session.approved`: a person approved a Gate signup or login.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct GateSessionApproved {
    pub gate_session_id: crate::ids::GateSessionId,
    pub flow: crate::gate::GateFlow,
    pub service_id: String,
    /// The account made (signup) or logged in to (login).
    pub gate_account_id: crate::ids::GateAccountId,
    /// The keys of the service's declared variables.
    pub env_vars: Vec<String>,
    pub approval: Judgement,
}

/// `gate.session.denied`: a Gate signup or login closed without approval.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct GateSessionDenied {
    pub gate_session_id: crate::ids::GateSessionId,
    pub flow: crate::gate::GateFlow,
    pub service_id: String,
    pub reason: crate::gate::GateDenialReason,
    /// Null for `user_code`, refused before any judgement.
    pub judgement: Option<Judgement>,
}

/// What Vigil made of a Gate consent page's browser, as the page showed it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Judgement {
    pub automation_status: crate::decision::AutomationStatus,
    pub verdict: crate::decision::Verdict,
    pub risk_score: u8,
}

/// `webhook.test`: a test of one endpoint, sent to it alone.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct WebhookTest {
    pub endpoint_id: crate::ids::WebhookEndpointId,
    /// A fixed sentence saying what the event is.
    pub message: String,
}

/// What an event is about: `{ "type": "session", "id": "sid_…" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EventSubject {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
}

/// An event in the interface's shape, as the events log carries it and the events API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Event {
    pub id: EventId,
    #[schema(pattern = "^event$")]
    pub object: String,
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub subject: EventSubject,
    /// What happened, by type (schemas/events.md).
    #[schema(value_type = EventData)]
    pub data: serde_json::Value,
    /// The deliveries made so far; empty when the event is first recorded.
    #[schema(value_type = Vec<WebhookDelivery>)]
    pub webhook_deliveries: Vec<serde_json::Value>,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
}

/// A delivery of an event to an endpoint (`object: webhook_delivery`), as the document
/// describes the events API's `webhook_deliveries`; the admin API builds it from the store's
/// record. What an attempt has not told yet (the endpoint's answer before the first attempt, an
/// error once one succeeded) is left out, never null.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // described; the admin API serializes its own view of the stored delivery
pub struct WebhookDelivery {
    id: crate::ids::WebhookDeliveryId,
    #[schema(pattern = "^webhook_delivery$")]
    object: String,
    event_id: EventId,
    endpoint_id: crate::ids::WebhookEndpointId,
    event_type: EventType,
    #[schema(pattern = "^(pending|succeeded|failed)$")]
    status: String,
    attempts: u32,
    /// The endpoint's status at the latest attempt that got one.
    #[schema(nullable = false)]
    response_status: Option<u16>,
    /// The start of the endpoint's answer.
    #[schema(nullable = false)]
    response_body: Option<String>,
    /// Why the latest attempt failed.
    #[schema(nullable = false)]
    error: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    updated_at: Timestamp,
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
    /// Reads a record of `events.v1`, telling one this build must not deliver (newer, of an
    /// unknown type, or not an event) from one it reads, with why and what went wrong.
    pub fn read(payload: &[u8]) -> Result<Self, (EventDeadReason, String)> {
        // The envelope first: a newer record, or one of an unknown type, is named as such
        // rather than reported as whatever part of it fails to decode.
        #[derive(Deserialize)]
        struct Envelope<'a> {
            schema: u32,
            #[serde(borrow)]
            event: Head<'a>,
        }
        #[derive(Deserialize)]
        struct Head<'a> {
            #[serde(rename = "type", borrow)]
            event_type: std::borrow::Cow<'a, str>,
        }
        let unreadable = |e: serde_json::Error| {
            (
                EventDeadReason::UnreadableRecord,
                format!("not a logged event: {e}"),
            )
        };
        let envelope: Envelope<'_> = serde_json::from_slice(payload).map_err(unreadable)?;
        if envelope.schema > LOGGED_EVENT_SCHEMA {
            return Err((
                EventDeadReason::NewerSchema,
                format!(
                    "a logged event of schema {}, newer than this build's {LOGGED_EVENT_SCHEMA}",
                    envelope.schema
                ),
            ));
        }
        if EventType::parse(&envelope.event.event_type).is_none() {
            return Err((
                EventDeadReason::UnknownEventType,
                format!("an event of unknown type {:?}", envelope.event.event_type),
            ));
        }
        serde_json::from_slice(payload).map_err(unreadable)
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn logged(schema: u32, event_type: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "schema": schema,
            "organization_id": crate::OrgId::generate(),
            "environment": "test",
            "event": {
                "id": EventId::generate(),
                "object": "event",
                "type": event_type,
                "subject": {"type": "session", "id": "sid_x"},
                "data": {},
                "webhook_deliveries": [],
                "created_at": "2026-11-21T23:18:46.123Z",
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_record_this_build_cannot_deliver_is_told_apart_with_why() {
        let read = LoggedEvent::read(&logged(LOGGED_EVENT_SCHEMA, "webhook.test")).unwrap();
        assert_eq!(read.event.event_type, EventType::WebhookTest);
        let reason = |payload: &[u8]| LoggedEvent::read(payload).unwrap_err().0;
        assert_eq!(
            reason(&logged(LOGGED_EVENT_SCHEMA + 1, "webhook.test")),
            EventDeadReason::NewerSchema
        );
        // Newer first: a newer build may well have made the type too.
        assert_eq!(
            reason(&logged(LOGGED_EVENT_SCHEMA + 1, "visitor.merged")),
            EventDeadReason::NewerSchema
        );
        assert_eq!(
            reason(&logged(LOGGED_EVENT_SCHEMA, "visitor.merged")),
            EventDeadReason::UnknownEventType
        );
        assert_eq!(reason(b"\xff not json"), EventDeadReason::UnreadableRecord);
        assert_eq!(
            reason(b"{\"schema\": 1}"),
            EventDeadReason::UnreadableRecord
        );
    }
}
