//! Dead letters: a log record its consumer can never process, kept byte for byte with where it
//! was read and why it was given up on, so it can be inspected and, once the cause is fixed,
//! appended again. Each consumer has its own dead-letter topic and its own closed set of
//! reasons (`R`): the processor's for `collect.batches.v1` ([`crate::collect::DeadReason`]),
//! the dispatcher's for `events.v1` ([`crate::events::EventDeadReason`]).

use serde::{Deserialize, Serialize};

use crate::time::Timestamp;

/// The version of [`DeadLetter`] this build writes.
pub const DEAD_LETTER_SCHEMA: u32 = 1;

/// One dead letter: the original record, where it was read, and why it was given up on. The
/// original is kept byte for byte (base64, since an unreadable record need not be text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter<R> {
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
    pub reason: R,
    /// What went wrong, for a person.
    pub message: String,
    pub dead_at: Timestamp,
}

impl<R> DeadLetter<R> {
    /// The dead letter of the record at `topic`/`partition`/`offset`, carrying its bytes.
    pub fn of(
        topic: &str,
        partition: u32,
        offset: u64,
        key: &[u8],
        payload: &[u8],
        reason: R,
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
