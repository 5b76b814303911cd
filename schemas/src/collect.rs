//! The collect pipeline's log contract (`schemas/collect.md`, section 6): topic names and the
//! versioned record ingest appends for every accepted batch.

use serde::{Deserialize, Serialize};

use crate::credential::Environment;
use crate::ids::{OrgId, SessionId};
use crate::time::Timestamp;

/// Accepted batches, keyed by session id so a session's batches stay in order.
pub const BATCHES_TOPIC: &str = "collect.batches.v1";
/// Partitions of the batches topic when Vigil creates it.
pub const BATCHES_PARTITIONS: u32 = 8;

/// The request a batch arrived with, as far as the processor needs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchRequest {
    pub ip: String,
    pub user_agent: String,
    /// Header names in the order they arrived: part of the connection fingerprint (D9).
    pub header_names: Vec<String>,
    pub url: String,
    /// The request's Web Bot Auth signature checked (D9); absent when it carried none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_bot_auth: Option<WebBotAuthCheck>,
}

/// What checking a request's Web Bot Auth signature (RFC 9421 with `Signature-Agent`) found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebBotAuthCheck {
    pub status: WebBotAuthStatus,
    /// The agent: the trusted directory's origin when verified, else what `Signature-Agent`
    /// claimed (if anything).
    pub signature_agent: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebBotAuthStatus {
    /// A valid, unexpired signature by a key of a trusted agent's directory.
    Verified,
    /// A signature that fails: altered, expired, malformed, made for another host than this
    /// service's public authorities, replayed (its nonce seen before) or without a nonce, or
    /// by a key its `Signature-Agent` does not own.
    Invalid,
    /// A signature by a key no trusted directory holds: nothing proved either way.
    Unverified,
}

/// One accepted batch on `collect.batches.v1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchRecord {
    /// Always 1 for this version of the record.
    pub schema: u32,
    pub organization_id: OrgId,
    pub environment: Environment,
    pub session_id: SessionId,
    pub seq: u64,
    pub received_at: Timestamp,
    pub request: BatchRequest,
    /// The decrypted batch, as the SDK sent it (its text, passed through unparsed).
    pub observations: crate::raw::RawJson,
}

pub const BATCH_RECORD_SCHEMA: u32 = 1;
