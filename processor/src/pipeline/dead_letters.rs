//! Dead-lettering (docs/architecture.md#conv-consumer-failures): a record the processor can never
//! process is appended to `collect.dead.v1` with its position and why
//! ([`schemas::collect::DeadLetter`]), counted, and then committed past like any processed record,
//! so it cannot stall the sessions behind it. Appending the dead letter is itself retried while the
//! log is unavailable: a record is given up on only once its dead letter is durable.

use log::Record;
use schemas::collect::DeadReason;
use tokio_util::sync::CancellationToken;

use super::{Failure, Pipeline};
use crate::retry::Retried;

/// A poll's record the processor gives up on, and why.
pub(super) struct Dead<'a> {
    pub record: &'a Record,
    pub reason: DeadReason,
    pub message: String,
}

/// Appends the dead letter of `record` to `collect.dead.v1`, retrying while the log is
/// unavailable, and counts it; false if shutdown came first (nothing may be committed then).
pub(super) async fn dead_letter(
    pipeline: &Pipeline,
    record: &Record,
    reason: DeadReason,
    message: &str,
    shutdown: &CancellationToken,
) -> bool {
    let appended = log::dead_letter::append(
        &pipeline.log,
        (&pipeline.batches, &pipeline.dead),
        record,
        log::dead_letter::Cause { reason, message },
        crate::telemetry::retried,
        shutdown,
    )
    .await;
    match appended {
        Retried::Done(_) => {
            crate::telemetry::dead_lettered(reason, record.partition, record.offset, message);
            true
        }
        Retried::Failed(e) => {
            // Only a dead letter without its record over the log's size (which cannot be: its
            // message is bounded) or one that does not encode. Logged, and the record is still
            // not allowed to stall the rest.
            tracing::error!(error = %e, partition = record.partition, offset = record.offset, "processor: a record could not be dead-lettered; skipped");
            true
        }
        Retried::ShuttingDown => false,
    }
}

/// Dead-letters every record of a save that can never be stored, with the failure's reason;
/// false if shutdown came first.
pub(super) async fn dead_letter_all(
    pipeline: &Pipeline,
    records: &[Record],
    failure: Failure,
    shutdown: &CancellationToken,
) -> bool {
    let (reason, message) = match failure {
        Failure::Permanent(reason, message) => (reason, message),
        // `retry` hands back only permanent failures, and `store` takes fenced saves out (they
        // are another processor's to store) before anything is dead-lettered.
        Failure::Transient(message) => (DeadReason::CorruptRow, message),
        fenced @ Failure::Fenced(_) => (DeadReason::CorruptRow, fenced.to_string()),
    };
    for record in records {
        if !dead_letter(pipeline, record, reason, &message, shutdown).await {
            return false;
        }
    }
    true
}
