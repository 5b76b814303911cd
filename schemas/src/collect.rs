//! The collect pipeline's log contract (`schemas/collect.md`, section 6): topic names, the
//! versioned record ingest appends for every accepted batch, and the dead-letter record the
//! processor appends for a record it can never process.

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

/// Records the processor could never process, each with why (see [`DeadLetter`]). Keyed like
/// the record it carries, so one session's dead letters keep their order.
pub const DEAD_TOPIC: &str = "collect.dead.v1";
/// Partitions of the dead-letter topic when Vigil creates it: few, it should stay near empty.
pub const DEAD_PARTITIONS: u32 = 1;
pub const DEAD_LETTER_SCHEMA: u32 = 1;

/// Why a record was dead-lettered: a closed set, so it can label a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadReason {
    /// The session's stored row (or its processor state, or a row the fold reads beside it)
    /// does not decode.
    CorruptRow,
    /// The record, or the SDK batch it carries, does not decode.
    UnreadableRecord,
    /// An event the record caused is over the log's record size, so it can never be published.
    OversizeEvent,
}

impl DeadReason {
    pub const ALL: [DeadReason; 3] = [
        DeadReason::CorruptRow,
        DeadReason::UnreadableRecord,
        DeadReason::OversizeEvent,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeadReason::CorruptRow => "corrupt_row",
            DeadReason::UnreadableRecord => "unreadable_record",
            DeadReason::OversizeEvent => "oversize_event",
        }
    }
}

/// One record of `collect.dead.v1`: the original record, where it was read, and why it was
/// given up on. The original is kept byte for byte (base64, since an unreadable record need not
/// be text), so it can be inspected and, once the cause is fixed, appended again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Always [`DEAD_LETTER_SCHEMA`] for this version of the record.
    pub schema: u32,
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    /// The original record's key, base64 (standard alphabet, padded).
    pub key: String,
    /// The original record's payload, base64; `None` only when carrying it would put this
    /// record over the log's size (the original stays at its position until retention).
    pub record: Option<String>,
    /// The original payload's size in bytes.
    pub record_bytes: usize,
    pub reason: DeadReason,
    /// What went wrong, for a person.
    pub message: String,
    pub dead_at: Timestamp,
}

impl DeadLetter {
    /// The dead letter of the record at `topic`/`partition`/`offset`, carrying its bytes.
    pub fn of(
        topic: &str,
        partition: u32,
        offset: u64,
        key: &[u8],
        payload: &[u8],
        reason: DeadReason,
        message: impl Into<String>,
    ) -> Self {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        DeadLetter {
            schema: DEAD_LETTER_SCHEMA,
            topic: topic.to_owned(),
            partition,
            offset,
            key: b64.encode(key),
            record: Some(b64.encode(payload)),
            record_bytes: payload.len(),
            reason,
            message: message.into(),
            dead_at: crate::time::now(),
        }
    }

    /// The original payload's bytes, if carried and well-formed.
    pub fn payload(&self) -> Option<Vec<u8>> {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        self.record.as_deref().and_then(|r| b64.decode(r).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_letter_carries_its_record_byte_for_byte() {
        let payload = b"\xff not json";
        let d = DeadLetter::of(
            BATCHES_TOPIC,
            3,
            42,
            b"sid_x",
            payload,
            DeadReason::UnreadableRecord,
            "expected value",
        );
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["reason"], "unreadable_record");
        assert_eq!(json["topic"], BATCHES_TOPIC);
        let back: DeadLetter = serde_json::from_value(json).unwrap();
        assert_eq!(back.payload().unwrap(), payload);
        assert_eq!(back.record_bytes, payload.len());
    }
}
