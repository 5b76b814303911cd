//! The rows the store keeps. Each mirrors one CQL table in `store/cql/` (the partition and
//! clustering keys are named on each type), so a ScyllaDB backend is a mapping, not a redesign.

pub use schemas::credential::CredentialHash;
use schemas::credential::{Environment, KeyType};
pub use schemas::gate::{GateDenialReason, GateFlow};
use schemas::ids::{KeyId, OrgId};
pub use schemas::raw::RawJson;
use schemas::resources::OrgStatus;
use schemas::scope::Scope;
use schemas::session_digest::{DecisionDigest, SessionDigest, StateDigest};
use schemas::time::Timestamp;
use serde::{Deserialize, Serialize};

/// `organizations`, partition key `id`; slugs are claimed in `organizations_by_slug`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrganizationRecord {
    pub id: OrgId,
    pub name: String,
    pub slug: String,
    pub status: OrgStatus,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// `api_keys`, partition key `(organization_id, environment)`, clustering key `id DESC`
/// (ULIDs, so newest first). Looked up by credential through `api_keys_by_hash` and by id
/// alone through `api_key_ids`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiKeyRecord {
    pub id: KeyId,
    pub organization_id: OrgId,
    pub key_type: KeyType,
    pub environment: Environment,
    pub name: String,
    pub key_hash: CredentialHash,
    pub key_preview: String,
    pub display_key: String,
    /// Publishable keys are public, so their token is kept to be shown in reads; secret keys
    /// keep `None` here and exist only as `key_hash`.
    pub publishable_token: Option<String>,
    pub allowed_origins: Vec<String>,
    pub scopes: Vec<Scope>,
    /// The operator's per-key override (`vigil keys set-rate-limit`); `None` means the default.
    pub rate_limit_override: Option<u32>,
    pub created_at: Timestamp,
    pub rotated_at: Option<Timestamp>,
    pub revoked_at: Option<Timestamp>,
    pub grace_expires_at: Option<Timestamp>,
    pub last_used_at: Option<Timestamp>,
    /// The key that replaced this one in a rotation.
    pub replaced_by: Option<KeyId>,
}

/// A key as authentication reads it on every request (`find_key_and_organization`), with its
/// organization when the backend holds both at hand: the embedded store's row cache hands out
/// shared copies of the two rows rather than cloning each of their strings.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyAndOrganization {
    pub key: std::sync::Arc<ApiKeyRecord>,
    /// The key's organization as stored, when it was read with the key at no cost of its own;
    /// `None` when it was not read (the caller reads it with `get_organization` when it needs it).
    pub organization: Option<std::sync::Arc<OrganizationRecord>>,
}

/// `idempotency_records`, partition key `(credential_hash, idempotency_key)`, TTL 24 h.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// SHA-256 of method, path and body: a retry must send the same request.
    #[serde(with = "bytes_text")]
    pub request_fingerprint: [u8; 32],
    pub expires_at: Timestamp,
    /// `None` while the first request is still being answered.
    pub response: Option<StoredResponse>,
}

/// A response kept for replay. The body is sealed by the caller (it may hold a secret key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredResponse {
    pub status: u16,
    #[serde(with = "bytes_text")]
    pub sealed_body: Vec<u8>,
    /// The scope the route demanded of the first request's key (its name), if any: a replay
    /// is answered only while the key still holds it.
    #[serde(default)]
    pub required_scope: Option<String>,
}

/// Identifies one idempotency record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyScope {
    pub credential: CredentialHash,
    pub key: String,
}

/// What `idempotency_begin` found.
#[derive(Debug, Clone, PartialEq)]
pub enum IdempotencyBegin {
    /// No live record existed; one is now held in flight for this caller.
    Started,
    /// A live record exists (in flight or answered).
    Existing(IdempotencyRecord),
}

/// `collect_sessions`, partition key `id`: a browser's encrypted collect session
/// (docs/architecture.md#collect-transport), stored so that any ingest replica can serve any
/// session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectSessionRecord {
    pub id: schemas::SessionId,
    pub organization_id: OrgId,
    pub environment: Environment,
    /// The publishable key that opened it.
    pub key_id: KeyId,
    /// The AES-256-GCM batch key, sealed under the server secret (never stored in the clear).
    #[serde(with = "bytes_text")]
    pub sealed_batch_key: Vec<u8>,
    /// The HMAC-SHA256 key of the session's call proofs (pings, network checks, results), sealed
    /// under the server secret. Empty in a session opened before calls were proven, which can
    /// then prove none.
    #[serde(default)]
    #[serde(with = "bytes_text")]
    pub sealed_proof_key: Vec<u8>,
    pub page_url: String,
    pub sdk_version: String,
    pub opened_at: Timestamp,
    pub expires_at: Timestamp,
    /// The highest batch number accepted; 0 before the first batch.
    pub last_seq: u64,
    /// The highest counter a call proof has used; 0 before the first proven call. A counter is
    /// spent once, so a proof cannot be replayed.
    #[serde(default)]
    pub last_call: u64,
    /// The session's pings, in the order the SDK is to send them.
    pub pings: Vec<PingRecord>,
    /// SHA-256 of the one-time token that lets the SDK open the network-check WebSocket.
    #[serde(with = "bytes_text")]
    pub network_check_token_hash: [u8; 32],
    /// What the WebSocket connection showed of the client (address, forwarding chain, header
    /// names), once it connected.
    pub ws_identity: Option<serde_json::Value>,
    /// When the SDK asked for the handoff (which also makes the decision final).
    pub results_at: Option<Timestamp>,
    /// The Gate session whose consent page opened this collect session, with that page's
    /// one-time ticket (docs/gate.md#the-consent-page); only such a session's handoff can
    /// decide it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_session_id: Option<schemas::ids::GateSessionId>,
    /// The session's challenge: a fresh random nonce (base64url) the open answer gave the SDK,
    /// which folds it into its probes batch, so a batch recorded in another session carries
    /// another nonce (docs/detection.md#replayed-sessions). Empty in sessions opened before
    /// challenges.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub challenge: String,
}

/// One opening of a handoff (`handoff_openings`): the handoff's opening id, when it is opened,
/// and its own expiry, after which it cannot be opened anyway and its row may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandoffOpening {
    pub handoff: [u8; 16],
    pub at: Timestamp,
    pub expires_at: Timestamp,
}

/// A mark a batch leaves in the replay record (docs/detection.md#replayed-sessions): a key its
/// content gives, the session that left it first, and, for an interaction stream, a sketch of
/// its first events, by which a near-copy (times and places jittered) is told from a stream
/// that only shares its shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayMark {
    #[serde(with = "bytes_text")]
    pub key: [u8; 16],
    pub session_id: schemas::SessionId,
    #[serde(default, with = "bytes_text")]
    pub sketch: Vec<u8>,
}

/// One ping of a collect session and when it reached the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PingRecord {
    pub id: schemas::PingId,
    pub arrived_at: Option<Timestamp>,
}

/// `sessions`, partition key `(organization_id, environment)`, clustering key `id DESC`
/// (ULIDs, so newest first): a scored session as the processor keeps it and the reads show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub id: schemas::SessionId,
    pub organization_id: OrgId,
    pub environment: Environment,
    pub visitor_id: Option<schemas::VisitorId>,
    pub opened_at: Timestamp,
    pub updated_at: Timestamp,
    pub page_url: String,
    pub ip: String,
    pub user_agent: String,
    /// Every batch number up to this one is folded in (0: none yet). With `processed_seqs`, how
    /// a redelivered batch is recognised and skipped (the log delivers at least once).
    #[serde(default)]
    pub processed_through: u64,
    /// Batch numbers above `processed_through` already folded in (the SDK numbers batches in
    /// order, so this stays short: a number joins `processed_through` once the gap before it
    /// closes).
    pub processed_seqs: Vec<u64>,
    /// The processor's folded state of the session's observations and server context (its
    /// own JSON; opaque to the store).
    pub state: RawJson,
    /// The latest decision (the processor's JSON, with its `event_id`).
    pub latest_decision: Option<RawJson>,
    /// The decision is final (docs/architecture.md#decisions). Until it is, the session is listed
    /// in `sessions_idle` under its `updated_at`, so an idle session can be found and finalised.
    #[serde(default)]
    pub finalized: bool,
}

/// `sessions_idle`, partition key `bucket` (a few bits of the session id, so the index spreads
/// over a fixed set of partitions), clustering key `(idle_since, session_id)`: every session
/// whose decision is not final yet, by when it last changed. `save_session` keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleSession {
    pub organization_id: OrgId,
    pub environment: Environment,
    pub session_id: schemas::SessionId,
    /// The session's `updated_at` when it was indexed.
    pub idle_since: Timestamp,
}

impl SessionRecord {
    /// Whether batch `seq` is already folded in.
    pub fn has_processed(&self, seq: u64) -> bool {
        seq <= self.processed_through || self.processed_seqs.contains(&seq)
    }

    /// Records batch `seq` as folded in, keeping the record compact.
    pub fn mark_processed(&mut self, seq: u64) {
        if self.has_processed(seq) {
            return;
        }
        self.processed_seqs.push(seq);
        self.processed_seqs.sort_unstable();
        while self.processed_seqs.first() == Some(&(self.processed_through + 1)) {
            self.processed_through += 1;
            self.processed_seqs.remove(0);
        }
    }
}

/// The two members of a decision that make it a turning point of its session's history
/// (docs/architecture.md#retention): a session keeps the decisions where either changed, plus its
/// latest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct DecisionTurn {
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default)]
    pub verdict: Option<String>,
}

impl DecisionTurn {
    /// The phase and verdict of a decision's JSON (absent members, or a document that is not
    /// an object, read as `None`).
    pub fn of(decision: &RawJson) -> Self {
        decision.decode().unwrap_or_default()
    }
}

impl SessionRecord {
    /// What the sessions export reads of this session (`schemas::session_digest`), kept beside
    /// its row; `settled` is the settled part of its state when a save gives it apart.
    pub fn digest(&self, settled: Option<&RawJson>) -> SessionDigest {
        self.digest_with(settled.map(StateDigest::read))
    }

    /// [`Self::digest`] with what the settled part shows already read (a store that knows the
    /// part is unchanged keeps it rather than reading the part again).
    pub fn digest_with(&self, settled: Option<StateDigest>) -> SessionDigest {
        let parts = [settled.unwrap_or_default(), StateDigest::read(&self.state)];
        let decision = self.latest_decision.as_ref().and_then(DecisionDigest::read);
        SessionDigest::of(
            schemas::session_digest::Request {
                session_id: self.id,
                visitor_id: self.visitor_id,
                created_at: self.opened_at,
                updated_at: self.updated_at,
                url: &self.page_url,
                user_agent: &self.user_agent,
                ip_address: &self.ip,
            },
            decision,
            &parts,
        )
    }

    /// The verdict of the latest decision, which `sessions_by_verdict` indexes the session under.
    pub fn verdict(&self) -> Option<String> {
        self.latest_turn().and_then(|t| t.verdict)
    }

    /// The phase and verdict of the latest decision.
    pub fn latest_turn(&self) -> Option<DecisionTurn> {
        self.latest_decision.as_ref().map(DecisionTurn::of)
    }
}

/// `session_decisions`, partition key `session_id`, clustering key `id DESC`: the decisions a
/// session had where its phase or verdict changed, plus its latest, newest first
/// (docs/architecture.md#retention; `save_session` prunes the rest in the same write). The embedded
/// store keeps the latest in the session's row instead (see `store/src/embedded/sessions.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionRecord {
    pub session_id: schemas::SessionId,
    pub id: schemas::DecisionId,
    pub evaluated_at: Timestamp,
    pub decision: RawJson,
}

/// `events`, partition key `(organization_id, environment)`, clustering key `id DESC` (ULIDs in
/// hex, so newest first): an event as recorded for the events API (docs/architecture.md#events).
/// Its webhook deliveries are kept beside it by the dispatcher, not in this row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    pub id: schemas::EventId,
    pub organization_id: OrgId,
    pub environment: Environment,
    pub event_type: schemas::events::EventType,
    pub subject: schemas::events::EventSubject,
    pub data: serde_json::Value,
    pub created_at: Timestamp,
}

impl EventRecord {
    /// The record of an event as the events log carries it.
    pub fn of_logged(logged: &schemas::events::LoggedEvent) -> Self {
        EventRecord {
            id: logged.event.id,
            organization_id: logged.organization_id,
            environment: logged.environment,
            event_type: logged.event.event_type,
            subject: logged.event.subject.clone(),
            data: logged.event.data.clone(),
            created_at: logged.event.created_at,
        }
    }

    /// The event in the interface's shape, with the deliveries made so far.
    pub fn to_event(&self, webhook_deliveries: Vec<serde_json::Value>) -> schemas::events::Event {
        schemas::events::Event {
            id: self.id,
            object: "event".to_owned(),
            event_type: self.event_type,
            subject: self.subject.clone(),
            data: self.data.clone(),
            webhook_deliveries,
            created_at: self.created_at,
        }
    }
}

/// `webhook_endpoints`, partition key `(organization_id, environment)`, clustering key `id DESC`
/// (ULIDs, so newest first): where an organization's events of one environment are delivered
/// (docs/architecture.md#webhooks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebhookEndpointRecord {
    pub id: schemas::ids::WebhookEndpointId,
    pub organization_id: OrgId,
    pub environment: Environment,
    pub name: String,
    pub url: String,
    pub status: EndpointStatus,
    /// The event types delivered to it.
    pub event_types: Vec<schemas::events::EventType>,
    /// The signing secret (`whsec_…`), sealed under the server secret: the dispatcher needs it
    /// to sign, so it cannot be stored as a hash.
    #[serde(with = "bytes_text")]
    pub sealed_secret: Vec<u8>,
    /// While a rotated-out secret still signs beside the new one.
    #[serde(default)]
    pub previous_secret: Option<PreviousSecret>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A webhook endpoint's signing secret before its rotation, sealed, and when it stops signing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreviousSecret {
    #[serde(with = "bytes_text")]
    pub sealed: Vec<u8>,
    pub until: Timestamp,
}

impl WebhookEndpointRecord {
    /// What the seal of an endpoint's signing secret is bound to (the admin API seals it, the
    /// dispatcher opens it), so it opens only as that endpoint's.
    pub fn secret_context(org: OrgId, id: schemas::ids::WebhookEndpointId) -> Vec<u8> {
        format!("webhook-endpoint:{org}:{id}").into_bytes()
    }
}

/// Whether a webhook endpoint is delivered to. Deleting an endpoint disables it
/// (docs/architecture.md#webhooks), and so does a 410 answer to a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndpointStatus {
    Active,
    Disabled,
}

impl EndpointStatus {
    pub const ALL: [&'static str; 2] = ["active", "disabled"];

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(EndpointStatus::Active),
            "disabled" => Some(EndpointStatus::Disabled),
            _ => None,
        }
    }
}

/// `webhook_deliveries`, partition key `(organization_id, environment, event_id)`, clustering
/// key `endpoint_id`: one event's delivery to one endpoint and its attempts so far
/// (docs/architecture.md: #webhooks, #dispatcher). Pending ones are also in
/// `webhook_deliveries_due`, by when their next attempt is due, so a restarted dispatcher resumes
/// the schedule from the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebhookDeliveryRecord {
    pub id: schemas::ids::WebhookDeliveryId,
    pub organization_id: OrgId,
    pub environment: Environment,
    pub event_id: schemas::EventId,
    pub endpoint_id: schemas::ids::WebhookEndpointId,
    pub event_type: schemas::events::EventType,
    pub status: DeliveryStatus,
    pub attempts: u32,
    pub response_status: Option<u16>,
    /// The endpoint's answer, at most 4 KiB of it.
    pub response_body: Option<String>,
    pub error: Option<String>,
    /// When the next attempt is due; `None` once the delivery succeeded or failed for good.
    pub next_attempt_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl WebhookDeliveryRecord {
    /// A new delivery of `event` to `endpoint`, not yet attempted, its first attempt due `at`.
    pub fn pending(
        organization_id: OrgId,
        environment: Environment,
        event: (schemas::EventId, schemas::events::EventType),
        endpoint_id: schemas::ids::WebhookEndpointId,
        at: Timestamp,
    ) -> Self {
        WebhookDeliveryRecord {
            id: schemas::ids::WebhookDeliveryId::generate(),
            organization_id,
            environment,
            event_id: event.0,
            endpoint_id,
            event_type: event.1,
            status: DeliveryStatus::Pending,
            attempts: 0,
            response_status: None,
            response_body: None,
            error: None,
            next_attempt_at: Some(at),
            created_at: at,
            updated_at: at,
        }
    }
}

/// Where a delivery stands (docs/architecture.md#webhooks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    Pending,
    Succeeded,
    Failed,
}

/// `visitors`, partition key `(organization_id, environment)`, clustering key `id DESC` (ULIDs,
/// so newest first): a visitor fingerprint (docs/architecture.md#visitors) as the processor links
/// it and the reads show it. Its anchors are indexed in `visitors_by_anchor`, written with the row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VisitorRecord {
    pub id: schemas::VisitorId,
    pub organization_id: OrgId,
    pub environment: Environment,
    pub first_seen_at: Timestamp,
    pub last_seen_at: Timestamp,
    pub seen_count: u64,
    /// `last_seen_at` plus the retention (`--retention`; docs/architecture.md#visitors).
    pub expires_at: Timestamp,
    pub latest_request: VisitorRequest,
    pub storage: VisitorStorage,
    pub anchors: VisitorAnchors,
    /// The component vector (`components.vector`).
    pub components: Vec<f64>,
    /// What an anchor match must agree on.
    pub traits: VisitorTraits,
    /// The ids of the most recent linked sessions, newest first, at most
    /// [`VisitorRecord::RECENT_SESSIONS`].
    pub recent_sessions: Vec<schemas::SessionId>,
    /// The row's version: a save of revision `n` is written only over revision `n - 1` (or no
    /// row), so two processors updating one visitor at once cannot lose each other's visit
    /// (`VisitorStore::save_visitors`). A change to a visitor read at `n` is saved as `n + 1`.
    /// Rows saved before revisions existed read as 0.
    #[serde(default)]
    pub revision: u64,
}

impl VisitorRecord {
    /// How many linked session ids a visitor keeps.
    pub const RECENT_SESSIONS: usize = 20;

    /// Puts `session` first among the recent sessions (once), dropping the oldest past the cap.
    pub fn remember_session(&mut self, session: schemas::SessionId) {
        self.recent_sessions.retain(|s| *s != session);
        self.recent_sessions.insert(0, session);
        self.recent_sessions.truncate(Self::RECENT_SESSIONS);
    }
}

/// The orders `GET /v1/fingerprints` lists in (docs/architecture.md#lists), each kept by an index
/// table (`visitors_by_last_seen`, `visitors_by_seen_count`, `visitors_by_first_seen`): partition
/// `(organization_id, environment)`, clustering `(value DESC, visitor_id DESC)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VisitorOrder {
    LastSeen,
    SeenCount,
    FirstSeen,
}

impl VisitorOrder {
    pub const ALL: [VisitorOrder; 3] = [Self::LastSeen, Self::SeenCount, Self::FirstSeen];

    /// The sort value of `v` in this order: milliseconds since the epoch for the times (times
    /// before it, never written, clamp to 0), the count itself for `SeenCount`.
    pub fn value(self, v: &VisitorRecord) -> u64 {
        let millis = |t: Timestamp| u64::try_from(t.timestamp_millis()).unwrap_or(0);
        match self {
            Self::LastSeen => millis(v.last_seen_at),
            Self::SeenCount => v.seen_count,
            Self::FirstSeen => millis(v.first_seen_at),
        }
    }
}

/// The request that last linked to a visitor (`latest_request`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VisitorRequest {
    pub user_agent: String,
    pub ip_address: String,
}

/// Where the SDK found the visitor token (`storage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VisitorStorage {
    pub cookies: bool,
    pub local_storage: bool,
    pub indexed_db: bool,
    pub service_worker: bool,
    pub window_name: bool,
}

/// The rendering hashes that link a fresh profile on the same machine (`anchors`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VisitorAnchors {
    pub webgl_hash: Option<String>,
    pub parameters_hash: Option<String>,
    pub audio_hash: Option<String>,
}

/// The browser traits an anchor match must share (engine, OS and major version, as the
/// processor's user-agent parser names them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VisitorTraits {
    pub engine: String,
    pub os: String,
    pub major: Option<u32>,
}

/// The key of one `visitors_by_anchor` partition: SHA-256 of a pair of anchor values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AnchorDigest(pub [u8; 32]);

impl VisitorAnchors {
    /// The index digests of these anchors: one per pair of anchors present (at most three). An
    /// anchor match (at least two anchors present on both sides, and equal) always shares at
    /// least one of them, so looking up every digest finds every candidate.
    pub fn digests(&self) -> Vec<AnchorDigest> {
        use sha2::{Digest, Sha256};
        let named = [
            ("webgl", &self.webgl_hash),
            ("parameters", &self.parameters_hash),
            ("audio", &self.audio_hash),
        ];
        let present: Vec<(&str, &str)> = named
            .iter()
            .filter_map(|(n, v)| v.as_deref().filter(|v| !v.is_empty()).map(|v| (*n, v)))
            .collect();
        let mut out = Vec::new();
        for (i, (name_a, a)) in present.iter().enumerate() {
            for (name_b, b) in &present[i + 1..] {
                let mut h = Sha256::new();
                h.update(b"vigil/visitor-anchor/v1");
                for part in [*name_a, *a, *name_b, *b] {
                    h.update((part.len() as u64).to_be_bytes());
                    h.update(part.as_bytes());
                }
                out.push(AnchorDigest(h.finalize().into()));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processed_batch_numbers_stay_compact() {
        let mut s: SessionRecord = serde_json::from_value(serde_json::json!({
            "id": schemas::SessionId::generate(), "organization_id": OrgId::generate(),
            "environment": "test", "visitor_id": null, "opened_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z", "page_url": "", "ip": "", "user_agent": "",
            "processed_seqs": [], "state": null, "latest_decision": null
        }))
        .expect("a row written before processed_through existed reads with 0");
        assert_eq!(s.processed_through, 0);
        for seq in [1, 2, 4, 2, 6] {
            s.mark_processed(seq);
        }
        assert_eq!(
            (s.processed_through, s.processed_seqs.clone()),
            (2, vec![4, 6])
        );
        s.mark_processed(3);
        assert_eq!(
            (s.processed_through, s.processed_seqs.clone()),
            (4, vec![6])
        );
        s.mark_processed(5);
        assert_eq!((s.processed_through, s.processed_seqs.clone()), (6, vec![]));
        for seq in 1..=6 {
            assert!(s.has_processed(seq));
        }
        assert!(!s.has_processed(7));
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Row {
        #[serde(with = "bytes_text")]
        sealed: Vec<u8>,
        #[serde(with = "bytes_text")]
        hash: [u8; 32],
    }

    #[test]
    fn byte_columns_are_written_as_text_and_read_in_either_form() {
        let row = Row {
            sealed: vec![0, 1, 254, 255],
            hash: [7; 32],
        };
        let text = serde_json::to_string(&row).unwrap();
        assert!(
            text.starts_with(r#"{"sealed":"AAH+/w","hash":"BwcH"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Row>(&text).unwrap(), row);
        let legacy = serde_json::json!({"sealed": [0, 1, 254, 255], "hash": vec![7; 32]});
        assert_eq!(serde_json::from_value::<Row>(legacy).unwrap(), row);
        let short = serde_json::json!({"sealed": "", "hash": vec![7; 31]});
        assert!(serde_json::from_value::<Row>(short).is_err());
    }
}

/// Byte columns (sealed keys, hashes) as base64 text in the JSON rows of the embedded store.
/// serde writes bytes as an array of numbers, four times the size and a parse per number, and
/// ingest reads a collect session for every batch. Rows written as arrays still read.
pub(crate) mod bytes_text {
    use std::fmt;

    use base64::Engine;
    use base64::engine::general_purpose::STANDARD_NO_PAD;
    use serde::de::{self, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer, T: AsRef<[u8]>>(bytes: &T, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD_NO_PAD.encode(bytes.as_ref()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: TryFrom<Vec<u8>>>(
        d: D,
    ) -> Result<T, D::Error> {
        struct Bytes;
        impl<'de> Visitor<'de> for Bytes {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("base64 text or an array of bytes")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
                STANDARD_NO_PAD.decode(v).map_err(E::custom)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
                let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(b) = seq.next_element::<u8>()? {
                    bytes.push(b);
                }
                Ok(bytes)
            }
        }
        let bytes = d.deserialize_any(Bytes)?;
        let len = bytes.len();
        T::try_from(bytes).map_err(|_| de::Error::invalid_length(len, &"the column's byte length"))
    }
}

/// A Gate service (the API's `gate_service`, docs/architecture.md#gate), owned by one organization
/// in one environment; its id is unique over every organization and environment, since Gate's
/// no-key routes (signup, the registry by id) name a service by its id alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateServiceRecord {
    pub id: String,
    pub organization_id: OrgId,
    pub environment: Environment,
    pub status: GateServiceStatus,
    pub discoverable: bool,
    pub name: String,
    pub description: String,
    /// Stored as given, never derived from the other URLs.
    pub website: String,
    pub dashboard_login_url: Option<String>,
    pub webhook_url: Option<String>,
    /// The `webhook_secret`, sealed under the server secret (Gate signs with it).
    #[serde(with = "bytes_text")]
    pub sealed_webhook_secret: Vec<u8>,
    pub env_vars: Vec<GateEnvVar>,
    pub docs_url: Option<String>,
    /// In the order given.
    pub sdks: Vec<GateSdk>,
    pub branding: GateBranding,
    pub consent: GateConsent,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl GateServiceRecord {
    /// What the seal of a service's webhook secret is bound to.
    pub fn secret_context(id: &str) -> Vec<u8> {
        format!("gate-service:{id}").into_bytes()
    }

    /// The built-in system service (docs/architecture.md#gate) in `env`: Vigil's own, at `website`,
    /// owned by no organization (the nil id), always published, never stored.
    pub fn system(env: Environment, website: &str) -> Self {
        let epoch = Timestamp::UNIX_EPOCH;
        GateServiceRecord {
            id: schemas::gate::SYSTEM_SERVICE_ID.to_owned(),
            organization_id: schemas::gate::system_organization(),
            environment: env,
            status: GateServiceStatus::Active,
            discoverable: true,
            name: "Vigil".into(),
            description: "Sign up to this Vigil and log in to its dashboard from a developer \
                          tool."
                .into(),
            website: website.to_owned(),
            dashboard_login_url: None,
            webhook_url: None,
            sealed_webhook_secret: Vec::new(),
            env_vars: Vec::new(),
            docs_url: None,
            sdks: Vec::new(),
            branding: GateBranding {
                verified: true,
                ..GateBranding::default()
            },
            consent: GateConsent::default(),
            created_at: epoch,
            updated_at: epoch,
        }
    }

    /// Whether the registry lists it and signups and logins may start.
    pub fn is_published(&self) -> bool {
        self.status == GateServiceStatus::Active && self.discoverable
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GateServiceStatus {
    Active,
    /// Soft-disabled by DELETE: kept, still counted toward the cap.
    Disabled,
}

/// An environment variable a signup delivers; its value comes from the service's webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateEnvVar {
    pub name: String,
    pub key: String,
    pub secret: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateSdk {
    pub label: String,
    pub install: String,
    pub url: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateBranding {
    // Left out when unset, in the rows and in the API alike (the interface types them as
    // strings, never null).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logo_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary_color: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secondary_color: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ascii_art: Option<String>,
    /// Set by Vigil only.
    pub verified: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateConsent {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terms_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub privacy_url: Option<String>,
}

/// How creating (or renaming) a Gate service went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateServiceWrite {
    Written,
    /// Another service (of any organization or environment) has the id; nothing written.
    IdTaken,
    /// The organization has its cap of services already; nothing written.
    CapReached,
    /// An update of a service that is not stored; nothing written.
    Missing,
}

/// Where a Gate session stands. Expiry is read from `expires_at`, not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GateSessionStatus {
    /// Waiting for a person on the consent page.
    Pending,
    /// A person approved; the service's webhook is being asked (so a second approval, a
    /// double click, asks nothing again).
    Approving,
    /// Approved: a signup's delivery waits for its acknowledgement; a login's code waits to be
    /// consumed.
    Approved,
    Denied,
    /// A signup's delivery was acknowledged (its secrets are gone), or a login's code consumed.
    Completed,
}

/// A Gate session (docs/architecture.md#gate): a signup or a login, from its start to its approval
/// and after. Every token it involves is stored as a keyed hash; a signup's delivery is sealed
/// until it is acknowledged, then dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateSessionRecord {
    pub id: schemas::ids::GateSessionId,
    pub flow: GateFlow,
    pub service_id: String,
    pub organization_id: OrgId,
    pub environment: Environment,
    pub status: GateSessionStatus,
    /// The `gtc_` token of the consent URL.
    pub consent_token: CredentialHash,
    /// Signup: the `gtpoll_` token.
    pub poll_token: Option<CredentialHash>,
    pub interval_secs: u32,
    pub polls: u32,
    pub last_poll_at: Option<Timestamp>,
    /// The account: made on a signup's approval; a login's from its agent token.
    pub account_id: Option<schemas::ids::GateAccountId>,
    /// Signup: the variables and the `ack_` token, sealed, until acknowledged.
    #[serde(with = "bytes_text")]
    pub sealed_delivery: Vec<u8>,
    pub ack_token: Option<CredentialHash>,
    /// Login: the one-time code's hash, until consumed.
    pub login_code: Option<CredentialHash>,
    /// Login: the agent token that started it, checked again at approval and consumption, so
    /// a revocation stops logins under way. Signup: the agent token its approval made, which
    /// retention deletes if the signup is never acknowledged.
    #[serde(default)]
    pub agent_token: Option<CredentialHash>,
    pub code_expires_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    /// What Vigil made of the browser that approved or denied it on its consent page.
    #[serde(default)]
    pub approval: Option<GateApproval>,
    /// Signup: the name the tool gave itself, which names the account it makes.
    #[serde(default)]
    pub client_name: Option<String>,
    /// Signup: the names of the variables the tool was told it would receive (the service's, at
    /// the start). An approval delivers these or nothing: a service that changed its variables
    /// since cannot slip another one past the person or the tool.
    #[serde(default)]
    pub env_var_keys: Vec<String>,
    /// The user code's hash: the code the tool shows its person, who types it on the consent
    /// page before an approval counts (RFC 8628 §5.4, remote phishing). `None` in a session
    /// started before user codes, which can then never be approved.
    #[serde(default)]
    pub user_code: Option<CredentialHash>,
    /// User codes typed on the consent page, right or wrong (counted before the comparison).
    #[serde(default)]
    pub code_attempts: u32,
    /// Decisions of the consent page that Vigil judged `uncertain`.
    #[serde(default)]
    pub uncertain_judgements: u32,
    /// Why a denied session was denied, and by what.
    #[serde(default)]
    pub denial: Option<GateDenial>,
}

/// A denial: its reason, and the judgement of the browser it came from (none for spent user
/// code attempts, which are refused before any judgement).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateDenial {
    pub reason: GateDenialReason,
    pub judgement: Option<GateApproval>,
    pub denied_at: Timestamp,
}

/// What a Gate session counts on its consent page, each with its own budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateAttempt {
    /// A user code typed, by its keyed hash: compared with the session's in the counting step,
    /// and counted only when wrong (so parallel guesses cannot pass the budget, and a person's
    /// right code never spends it).
    UserCode(CredentialHash),
    /// A decision Vigil could not judge a person's (`uncertain`, or no input of the person's on
    /// the code field and the Approve button).
    UnsureJudgement,
}

/// How [`crate::GateStore::count_gate_attempt`] counted.
#[derive(Debug, Clone, PartialEq)]
pub enum GateAttemptCount {
    /// The user code is the session's: nothing was counted or written.
    Matched(Box<GateSessionRecord>),
    /// Counted: the session as stored after, with the attempt's number (1 for the first).
    Counted(Box<GateSessionRecord>, u32),
    /// The budget was spent already, or the session no longer waits: nothing was written.
    Refused(Box<GateSessionRecord>),
}

impl GateSessionRecord {
    /// Whether an approved signup's delivery is no longer shown: it is shown until the session
    /// is twice its lifetime old, so a tool that never acknowledges does not leave the secrets
    /// readable for ever.
    pub fn delivery_expired(&self, now: Timestamp) -> bool {
        let ttl = chrono::TimeDelta::from_std(schemas::gate::SESSION_TTL).expect("a short ttl");
        self.flow == GateFlow::Signup && now >= self.expires_at + ttl
    }
}

/// What Vigil made of the browser that decided a Gate session on its consent page
/// (docs/gate.md#the-consent-page): the scored collect session, and its final decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateApproval {
    pub collect_session_id: schemas::SessionId,
    pub automation_status: schemas::decision::AutomationStatus,
    pub verdict: schemas::decision::Verdict,
    pub risk_score: u8,
    /// Whether any input (pointer, touch or keyboard) reached the page before the decision.
    pub interacted: bool,
    /// Whether the person's own input reached the user code field and the Approve button
    /// (the page marks both for Vigil's SDK); a denial needs neither.
    #[serde(default)]
    pub used_code_field: bool,
    #[serde(default)]
    pub used_approve_button: bool,
    pub judged_at: Timestamp,
}

/// An account a signup made at a service (docs/architecture.md#gate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateAccountRecord {
    pub id: schemas::ids::GateAccountId,
    pub service_id: String,
    pub organization_id: OrgId,
    pub environment: Environment,
    pub name: String,
    pub created_at: Timestamp,
}

/// An agent token (`agt_`), stored by its keyed hash only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentTokenRecord {
    pub hash: CredentialHash,
    pub account_id: schemas::ids::GateAccountId,
    pub service_id: String,
    pub organization_id: OrgId,
    pub environment: Environment,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
    /// When it started its recent login sessions (the last hour's), for the hourly cap.
    pub recent_logins: Vec<Timestamp>,
}

/// How counting a login against an agent token went.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentLogin {
    /// Counted: the token as stored now.
    Counted(AgentTokenRecord),
    /// Unknown, revoked or expired.
    Unusable,
    /// The token started its hourly cap of logins; the oldest of them, which leaves the hour
    /// first.
    CapReached(Timestamp),
}

/// How a poll of a Gate session was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatePoll {
    /// Answer it with the session's state.
    Counted,
    /// Sooner than the interval: the interval grew (RFC 8628 `slow_down`).
    TooSoon,
    /// The session answered its most polls already; nothing was written.
    Exhausted,
}

/// One session's save in [`crate::SessionStore::save_sessions`].
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSave {
    pub session: SessionRecord,
    pub decision: Option<DecisionRecord>,
    pub events: Vec<EventRecord>,
    /// The members of the session's state that seldom change (the processor's probes and
    /// kept events), given apart from `session.state` so that a store may write them only when
    /// they changed: the embedded store keeps them in a row of their own, since rewriting them
    /// with every fold was most of what a fold wrote. The state stored and read back is
    /// `session.state` with these merged in ([`crate::rules::merge_state`]). `None`: `session.state` is the
    /// whole state.
    pub settled: Option<RawJson>,
    /// The processor's claim on the partition of `collect.batches.v1` the session's records are
    /// in (docs/architecture.md#fleet-writes): the save is refused if that partition was claimed
    /// again since. `None`: saved unconditionally (tools and tests).
    pub fence: Option<PartitionFence>,
}

/// A processor's claim on one partition of `collect.batches.v1`, as answered by
/// `SessionStore::claim_partitions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionFence {
    pub partition: u32,
    /// Raised by each claim of the partition, so the latest owner's is the highest.
    pub generation: u64,
}

/// The caps on an organization's webhook endpoints in one environment, checked by the store in
/// the same step as the write (docs/api.md#webhook-endpoints): every event is sent to each
/// active one, and disabled ones are kept with their deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointCaps {
    /// Active endpoints.
    pub active: usize,
    /// Endpoints, disabled ones included.
    pub total: usize,
}

/// How creating or updating a webhook endpoint went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointWrite {
    Written,
    /// An update of an endpoint that is not stored; nothing written.
    Missing,
    /// A create, or an update enabling a disabled endpoint, with [`EndpointCaps::active`]
    /// active already; nothing written.
    ActiveCapReached,
    /// A create with [`EndpointCaps::total`] endpoints already; nothing written.
    TotalCapReached,
}

impl EndpointWrite {
    /// What a write of `endpoint` over `stored` (none for a create) meets, given how many
    /// endpoints its environment holds and how many are active: the rule every backend applies
    /// under its own lock.
    pub fn check(
        endpoint: &WebhookEndpointRecord,
        stored: Option<&WebhookEndpointRecord>,
        (active, total): (usize, usize),
        caps: EndpointCaps,
    ) -> EndpointWrite {
        let enabling = endpoint.status == EndpointStatus::Active
            && stored.is_none_or(|s| s.status != EndpointStatus::Active);
        if stored.is_none() && total >= caps.total {
            EndpointWrite::TotalCapReached
        } else if enabling && active >= caps.active {
            EndpointWrite::ActiveCapReached
        } else {
            EndpointWrite::Written
        }
    }
}

/// How creating an API key under its organization's cap went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiKeyWrite {
    Written,
    /// The organization has its cap of keys in use already; nothing written.
    CapReached,
}

impl ApiKeyRecord {
    /// Whether the key counts toward its organization's cap: neither revoked nor replaced by a
    /// rotation (a replacement takes its old key's place, so a rotation never meets the cap).
    pub fn in_use(&self) -> bool {
        self.revoked_at.is_none() && self.replaced_by.is_none()
    }
}
