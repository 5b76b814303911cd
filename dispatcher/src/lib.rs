//! The dispatcher role (docs/architecture.md: #webhooks, #dispatcher): it consumes `events.v1`,
//! fans each event out to its organization's subscribed webhook endpoints ([`fan_out`],
//! [`consuming`]), and delivers it signed through the outbound sender (the `sender` crate), with every pending attempt
//! kept in the store ([`scheduling`]) and each outcome applied per the retry schedule
//! ([`attempts`]). A record of `events.v1` it cannot read (newer, of an unknown type, or not an
//! event) goes to `events.dead.v1` ([`consuming`]).

pub mod attempts;
pub mod consuming;
pub mod fan_out;
pub mod scheduling;
mod telemetry;

use std::time::Duration;

use log::{Log, Topic};
use secrets::ServerSecret;
use store::{Store, StoreError};
use tokio_util::sync::CancellationToken;

use crate::attempts::RetrySchedule;
use crate::scheduling::Dispatch;

/// How long a stopping dispatcher waits for its last outcomes to be written.
const DRAIN: Duration = Duration::from_secs(5);

/// What the dispatcher role runs with.
pub struct Settings {
    pub store: Store,
    pub log: Log,
    /// Opens the endpoints' sealed signing secrets.
    pub secret: ServerSecret,
    /// `--webhook-retry-schedule`.
    pub schedule: RetrySchedule,
    /// `--allow-private-webhooks`: plain http and private addresses are delivered to.
    pub allow_private: bool,
    /// How long an endpoint has to answer (15 s by default; docs/architecture.md#webhooks).
    pub attempt_timeout: Duration,
}

/// A failure of the store or the log in the dispatcher's loops.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Log(#[from] log::LogError),
}

impl log::retry::Transience for Failure {
    fn is_transient(&self) -> bool {
        match self {
            // A conflict or an invalid request is a bug, a corrupt row damage: neither goes away.
            Failure::Store(e) => matches!(e, StoreError::Unavailable(_)),
            Failure::Log(e) => e.is_transient(),
        }
    }
}

/// The topics the dispatcher reads and writes.
#[derive(Clone)]
pub struct Topics {
    /// `events.v1`: read (the processor and the admin API append to it).
    pub events: Topic,
    /// `events.dead.v1`: where records of `events.v1` it can never deliver go, with why.
    pub dead: Topic,
}

/// Creates the topics the dispatcher reads and writes.
pub async fn prepare_log(log: &Log) -> Result<Topics, log::LogError> {
    use schemas::events::{
        EVENTS_DEAD_PARTITIONS, EVENTS_DEAD_TOPIC, EVENTS_PARTITIONS, EVENTS_TOPIC,
    };
    let events = Topic::from_static(EVENTS_TOPIC);
    log.create_topic(&events, EVENTS_PARTITIONS).await?;
    let dead = Topic::from_static(EVENTS_DEAD_TOPIC);
    log.create_topic(&dead, EVENTS_DEAD_PARTITIONS).await?;
    Ok(Topics { events, dead })
}

/// Runs the dispatcher until `shutdown`: the consumer, the due scan and the recorder. On
/// shutdown, attempts not yet sent are dropped (they stay due in the store); those sent get
/// the attempt timeout to be answered, and their outcomes [`DRAIN`] to be written.
pub async fn run(settings: Settings, topics: Topics, shutdown: CancellationToken) {
    telemetry::init();
    let sender = sender::sending::Sender::new(settings.allow_private, settings.attempt_timeout);
    let (dispatch, outcomes) = Dispatch::new(
        settings.store.clone(),
        settings.secret,
        settings.schedule,
        sender,
    );
    // The recorder stops on its own once every attempt has ended; its retries stop at
    // `stop_recording`, cancelled only after the drain.
    let stop_recording = CancellationToken::new();
    let mut recorder = tokio::spawn(scheduling::recorder(
        settings.store,
        dispatch.in_flight.clone(),
        outcomes,
        stop_recording.clone(),
    ));
    let scan = tokio::spawn(scheduling::scan_due(dispatch.clone(), shutdown.clone()));
    consuming::consume(&dispatch, &settings.log, &topics, &shutdown).await;
    let _ = scan.await;
    dispatch.stopping.cancel();
    dispatch.tasks.close();
    let answered = settings.attempt_timeout + Duration::from_secs(1);
    if tokio::time::timeout(answered, dispatch.tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            "dispatcher: abandoning attempts still running; they are retried after the restart"
        );
        dispatch.abandon.cancel();
        dispatch.tasks.wait().await;
    }
    drop(dispatch);
    if tokio::time::timeout(DRAIN, &mut recorder).await.is_err() {
        tracing::warn!(
            "dispatcher: outcomes not recorded in time; those deliveries are attempted again after the restart"
        );
        stop_recording.cancel();
        let _ = recorder.await;
    }
}
