//! The one writer of dead letters (`schemas::dead`), shared by the log's consumers: the
//! processor's `collect.dead.v1` and the dispatcher's `events.dead.v1`. A dead letter is
//! appended with the consumer's retries, and one that is over the log's size (its record in
//! base64 is a third larger than the record) is appended again without the record's bytes,
//! which stay at their position until retention.

use schemas::dead::DeadLetter;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::retry::{OnFailure, Retried, retry};
use crate::{Log, LogError, Record, Topic};

/// Why a record is given up on: the consumer's reason from its closed set, and a message for a
/// person.
pub struct Cause<'a, R> {
    pub reason: R,
    pub message: &'a str,
}

/// Appends the dead letter of `record`, read from `source`, to `dead` under the record's own
/// key (so one session's or one event's dead letters keep their order), retrying transient
/// failures (each told to `on_failure`) until it lands, fails permanently, or `shutdown` comes.
pub async fn append<R: Serialize>(
    log: &Log,
    (source, dead): (&Topic, &Topic),
    record: &Record,
    cause: Cause<'_, R>,
    on_failure: OnFailure,
    shutdown: &CancellationToken,
) -> Retried<(), LogError> {
    let mut letter = DeadLetter::of(
        source.as_str(),
        record.partition,
        record.offset,
        &record.key,
        &record.payload,
        cause.reason,
        cause.message,
    );
    let (letter, topic, key) = (&mut letter, dead, &record.key[..]);
    loop {
        let payload = match serde_json::to_vec(letter) {
            Ok(payload) => payload,
            Err(e) => return Retried::Failed(LogError::Invalid(format!("a dead letter: {e}"))),
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
            Retried::Failed(LogError::TooLarge { .. }) if letter.record.is_some() => {
                letter.record = None;
            }
            other => return other,
        }
    }
}
