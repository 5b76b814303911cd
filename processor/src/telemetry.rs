//! The processor's telemetry (docs/architecture.md#conv-telemetry-events): each event below both
//! logs and counts, so the two never disagree. The metrics are registered in prometheus's default
//! registry, which `/metrics` serves beside the HTTP layer's (`edge::metrics`); every label is
//! bounded (a dead-letter reason from a closed set, a partition number below the topic's count, a
//! retried operation's static name).

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{Histogram, IntCounter, IntGauge, IntGaugeVec};
use schemas::collect::DeadReason;
use telemetry::{DeadLetters, Retries};

telemetry::metrics! {
    owner: "processor";
    dead_letters: DeadLetters = dead_letters(
        "vigil_processor_dead_letters_total",
        "Records the processor gave up on and appended to collect.dead.v1, by reason",
        (schemas::collect::DEAD_TOPIC, "record dead-lettered to collect.dead.v1; moving on"),
        DeadReason::ALL.map(DeadReason::as_str),
    );
    folded: IntCounter = counter(
        "vigil_processor_records_folded_total",
        "Batch records the processor took from the log and folded into their session \
         (a redelivered one, recognised by its number, counts again)",
    );
    lag: IntGaugeVec = gauges(
        "vigil_processor_lag",
        "Batch records appended but not yet folded, by partition of collect.batches.v1",
        &["partition"],
    );
    fold_seconds: Histogram = seconds(
        "vigil_processor_fold_duration_seconds",
        "Time to fold one session's new records of a poll and decide",
    );
    decision_seconds: Histogram = seconds(
        "vigil_processor_batch_to_decision_seconds",
        "Time from ingest accepting a batch to the decision folding it in being stored",
    );
    polled_seconds: Histogram = seconds(
        "vigil_processor_batch_to_poll_seconds",
        "Time from ingest accepting a batch to the processor taking it from the log \
         (the log's share of the batch-to-decision time)",
    );
    retries: Retries = retries(
        "vigil_processor_retries_total",
        "Transient store or log failures the processor retried, by operation",
    );
    cached_sessions: IntGauge = gauge(
        "vigil_processor_cached_sessions",
        "Session states the processor keeps in memory between batches",
    );
    cache_bytes: IntGauge = gauge(
        "vigil_processor_cache_bytes",
        "Estimated bytes of the session states kept in memory (bounded by --processor-cache-mb)",
    );
    visitor_races: IntCounter = counter(
        "vigil_processor_visitor_races_total",
        "Visitor saves found saved by another processor since they were read, and reapplied \
         to the newer version",
    );
    fenced_saves: IntCounter = counter(
        "vigil_processor_fenced_saves_total",
        "Session saves refused because their partition was claimed by another processor since \
         (this one stalled past its poll interval); the new owner folds them again",
    );
}

/// Registers the metrics, so `/metrics` shows them before the first record arrives.
pub fn init() {
    LazyLock::force(&METRICS);
}

/// A session's `records` new records were folded in `took`.
pub fn folded(records: usize, took: Duration) {
    METRICS.folded.inc_by(records as u64);
    METRICS.fold_seconds.observe(took.as_secs_f64());
}

/// The batches accepted at `received` have their decision stored, as of `now`.
pub fn decided(received: &[schemas::time::Timestamp], now: schemas::time::Timestamp) {
    for at in received {
        METRICS.decision_seconds.observe(seconds_between(*at, now));
    }
}

/// A batch accepted at `received` was taken from the log at `now`.
pub fn polled(received: schemas::time::Timestamp, now: schemas::time::Timestamp) {
    METRICS
        .polled_seconds
        .observe(seconds_between(received, now));
}

/// Seconds from `from` to `to`, 0 if the clock went back.
fn seconds_between(from: schemas::time::Timestamp, to: schemas::time::Timestamp) -> f64 {
    (to - from).to_std().unwrap_or_default().as_secs_f64()
}

/// A record was appended to the dead-letter topic and will not be processed again.
pub fn dead_lettered(reason: DeadReason, partition: u32, offset: u64, message: &str) {
    METRICS
        .dead_letters
        .set_aside(reason.as_str(), partition, offset, message);
}

/// The records appended to `partition` and not yet folded.
pub fn lag(partition: u32, records: u64) {
    METRICS
        .lag
        .with_label_values(&[partition.to_string().as_str()])
        .set(i64::try_from(records).unwrap_or(i64::MAX));
}

/// The processor no longer reads `partition` (another replica does, and reports its lag).
pub fn lag_gone(partition: u32) {
    let _ = METRICS
        .lag
        .remove_label_values(&[partition.to_string().as_str()]);
}

/// A transient failure of `what`, about to be retried (the `failures`th in a row).
pub fn retried(what: &'static str, error: &dyn std::fmt::Display, failures: u32) {
    METRICS.retries.retried(what, error, failures);
}

/// The session states kept in memory now, and their estimated bytes.
pub fn cache(sessions: usize, bytes: u64) {
    METRICS
        .cached_sessions
        .set(i64::try_from(sessions).unwrap_or(i64::MAX));
    METRICS
        .cache_bytes
        .set(i64::try_from(bytes).unwrap_or(i64::MAX));
}

/// `visitors` of a poll were saved by another processor since they were read: their visits are
/// reapplied to the newer versions.
pub fn visitor_races(visitors: usize) {
    METRICS.visitor_races.inc_by(visitors as u64);
    tracing::debug!(
        visitors,
        "processor: visitors saved by another processor meanwhile; reapplying this poll's visits"
    );
}

/// A save of `sessions` sessions was refused: `partitions` were claimed by another processor
/// since this one claimed them, so it no longer owns them and forgets what it folded of them.
pub fn fenced(sessions: usize, partitions: &[u32]) {
    METRICS.fenced_saves.inc_by(sessions as u64);
    tracing::warn!(
        sessions,
        ?partitions,
        "processor: partitions were claimed by another processor while this one stalled; \
         its saves of them are refused and the new owner folds them"
    );
}
