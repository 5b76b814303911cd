//! The rows the store keeps. Each mirrors one CQL table in `schemas/cql/` (the partition and
//! clustering keys are named on each type), so a ScyllaDB backend is a mapping, not a redesign.

use schemas::credential::{Environment, KeyType};
use schemas::ids::{KeyId, OrgId};
use schemas::resources::OrgStatus;
use schemas::scope::Scope;
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

/// A keyed hash of a credential (HMAC-SHA256 with the server pepper): the only form in which
/// secret credentials are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CredentialHash(pub [u8; 32]);

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

/// `idempotency_records`, partition key `(credential_hash, idempotency_key)`, TTL 24 h.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// SHA-256 of method, path and body: a retry must send the same request.
    pub request_fingerprint: [u8; 32],
    pub expires_at: Timestamp,
    /// `None` while the first request is still being answered.
    pub response: Option<StoredResponse>,
}

/// A response kept for replay. The body is sealed by the caller (it may hold a secret key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredResponse {
    pub status: u16,
    pub sealed_body: Vec<u8>,
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

/// `collect_sessions`, partition key `id`: a browser's encrypted collect session (D9), stored so
/// that any ingest replica can serve any session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectSessionRecord {
    pub id: schemas::SessionId,
    pub organization_id: OrgId,
    pub environment: Environment,
    /// The publishable key that opened it.
    pub key_id: KeyId,
    /// The AES-256-GCM batch key, sealed under the server secret (never stored in the clear).
    pub sealed_batch_key: Vec<u8>,
    pub page_url: String,
    pub sdk_version: String,
    pub opened_at: Timestamp,
    pub expires_at: Timestamp,
    /// The highest batch number accepted; 0 before the first batch.
    pub last_seq: u64,
    /// The session's pings, in the order the SDK is to send them.
    pub pings: Vec<PingRecord>,
    /// SHA-256 of the one-time token that lets the SDK open the network-check WebSocket.
    pub network_check_token_hash: [u8; 32],
    /// What the WebSocket connection showed of the client (address, forwarding chain, header
    /// names), once it connected.
    pub ws_identity: Option<serde_json::Value>,
    /// When the SDK asked for the handoff (which also makes the decision final).
    pub results_at: Option<Timestamp>,
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
    /// Batch numbers already folded in: the log delivers at least once, so a redelivered batch
    /// is recognised and skipped.
    pub processed_seqs: Vec<u64>,
    /// The processor's folded state of the session's observations and server context (its
    /// own JSON; opaque to the store).
    pub state: serde_json::Value,
    /// The latest decision (the processor's JSON, with its `event_id`).
    pub latest_decision: Option<serde_json::Value>,
}

/// `session_decisions`, partition key `session_id`, clustering key `id DESC`: every decision a
/// session had, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionRecord {
    pub session_id: schemas::SessionId,
    pub id: schemas::DecisionId,
    pub evaluated_at: Timestamp,
    pub decision: serde_json::Value,
}
