//! The one writer of dead letters (`schemas::dead`), shared by the log's consumers: the
//! processor's `collect.dead.v1` and the dispatcher's `events.dead.v1`. A dead letter is
//! appended with the consumer's retries, and one that is over the log's size (its record in
//! base64 is a third larger than the record) is appended again without the record's bytes,
//! which stay at their position until retention.

use schemas::dead::DeadLetter;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::retry::{OnFailure, Retried, retry};
use crate::{BusError, Log, Topic};

/// Appends `letter` to `topic` under `key` (the original record's, so one session's or one
/// event's dead letters keep their order), retrying transient failures (each told to
/// `on_failure`) until it lands, fails permanently, or `shutdown` comes.
pub async fn append<R: Serialize>(
    log: &Log,
    topic: &Topic,
    key: &[u8],
    letter: &mut DeadLetter<R>,
    on_failure: OnFailure,
    shutdown: &CancellationToken,
) -> Retried<(), BusError> {
    loop {
        let payload = match serde_json::to_vec(letter) {
            Ok(payload) => payload,
            Err(e) => return Retried::Failed(BusError::Invalid(format!("a dead letter: {e}"))),
        };
        let appended = retry(
            "dead-lettering",
            on_failure,
            shutdown,
            &mut (log, topic, key, &payload),
            |(log, topic, key, payload)| {
                Box::pin(async move { log.append(topic, key, payload).await.map(|_| ()) })
            },
        )
        .await;
        match appended {
            Retried::Failed(BusError::TooLarge { .. }) if letter.record.is_some() => {
                letter.record = None;
            }
            other => return other,
        }
    }
}
