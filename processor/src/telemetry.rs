//! The processor's telemetry (docs/architecture.md#conv-telemetry-events): each event below both
//! logs and counts, so the two never disagree. The metrics are registered in prometheus's default
//! registry, which `/metrics` serves beside the HTTP layer's (`edge::metrics`); every label is
//! bounded (a dead-letter reason from a closed set, a partition number below the topic's count, a
//! retried operation's static name).

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
};
use schemas::collect::DeadReason;

struct Metrics {
    folded: IntCounter,
    dead_letters: IntCounterVec,
    lag: IntGaugeVec,
    fold_seconds: Histogram,
    decision_seconds: Histogram,
    polled_seconds: Histogram,
    retries: IntCounterVec,
    cached_sessions: IntGauge,
    cache_bytes: IntGauge,
    visitor_races: IntCounter,
    fenced_saves: IntCounter,
}

/// The buckets of the pipeline's latencies (batch to poll, batch to decision): fine below
/// 100 ms, the goal of one process, with a bound at 250 ms, the goal of a fleet, and coarse
/// above.
const PIPELINE_BUCKETS: [f64; 21] = [
    0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.15, 0.2, 0.25, 0.3, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0,
];

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let folded = IntCounter::new(
        "vigil_processor_records_folded_total",
        "Batch records the processor took from the log and folded into their session \
         (a redelivered one, recognised by its number, counts again)",
    )
    .expect("valid metric");
    let dead_letters = IntCounterVec::new(
        Opts::new(
            "vigil_processor_dead_letters_total",
            "Records the processor gave up on and appended to collect.dead.v1, by reason",
        ),
        &["reason"],
    )
    .expect("valid metric");
    let lag = IntGaugeVec::new(
        Opts::new(
            "vigil_processor_lag",
            "Batch records appended but not yet folded, by partition of collect.batches.v1",
        ),
        &["partition"],
    )
    .expect("valid metric");
    let fold_seconds = Histogram::with_opts(
        HistogramOpts::new(
            "vigil_processor_fold_duration_seconds",
            "Time to fold one session's new records of a poll and decide",
        )
        .buckets(vec![
            0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
        ]),
    )
    .expect("valid metric");
    let decision_seconds = Histogram::with_opts(
        HistogramOpts::new(
            "vigil_processor_batch_to_decision_seconds",
            "Time from ingest accepting a batch to the decision folding it in being stored",
        )
        .buckets(PIPELINE_BUCKETS.to_vec()),
    )
    .expect("valid metric");
    let polled_seconds = Histogram::with_opts(
        HistogramOpts::new(
            "vigil_processor_batch_to_poll_seconds",
            "Time from ingest accepting a batch to the processor taking it from the log \
             (the log's share of the batch-to-decision time)",
        )
        .buckets(PIPELINE_BUCKETS.to_vec()),
    )
    .expect("valid metric");
    let retries = IntCounterVec::new(
        Opts::new(
            "vigil_processor_retries_total",
            "Transient store or log failures the processor retried, by operation",
        ),
        &["operation"],
    )
    .expect("valid metric");
    let cached_sessions = IntGauge::new(
        "vigil_processor_cached_sessions",
        "Session states the processor keeps in memory between batches",
    )
    .expect("valid metric");
    let cache_bytes = IntGauge::new(
        "vigil_processor_cache_bytes",
        "Estimated bytes of the session states kept in memory (bounded by --processor-cache-mb)",
    )
    .expect("valid metric");
    let visitor_races = IntCounter::new(
        "vigil_processor_visitor_races_total",
        "Visitor saves found saved by another processor since they were read, and reapplied \
         to the newer version",
    )
    .expect("valid metric");
    let fenced_saves = IntCounter::new(
        "vigil_processor_fenced_saves_total",
        "Session saves refused because their partition was claimed by another processor since \
         (this one stalled past its poll interval); the new owner folds them again",
    )
    .expect("valid metric");
    telemetry::register(
        "processor",
        vec![
            Box::new(folded.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(visitor_races.clone()),
            Box::new(fenced_saves.clone()),
            Box::new(cached_sessions.clone()),
            Box::new(cache_bytes.clone()),
            Box::new(dead_letters.clone()),
            Box::new(lag.clone()),
            Box::new(fold_seconds.clone()),
            Box::new(decision_seconds.clone()),
            Box::new(polled_seconds.clone()),
            Box::new(retries.clone()),
        ],
    );
    // Every reason is shown from the start, at 0, so a dashboard or an alert on a rate sees
    // the first dead letter as a change rather than a new series.
    for reason in DeadReason::ALL {
        dead_letters.with_label_values(&[reason.as_str()]);
    }
    Metrics {
        folded,
        dead_letters,
        lag,
        fold_seconds,
        decision_seconds,
        polled_seconds,
        retries,
        cached_sessions,
        cache_bytes,
        visitor_races,
        fenced_saves,
    }
});

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
        .with_label_values(&[reason.as_str()])
        .inc();
    tracing::error!(
        reason = reason.as_str(),
        partition,
        offset,
        %message,
        "processor: record dead-lettered to {}; moving on",
        schemas::collect::DEAD_TOPIC
    );
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
    METRICS.retries.with_label_values(&[what]).inc();
    // The first failures of an outage at warn, then every tenth, so a long outage does not
    // flood the log.
    if failures <= 3 || failures.is_multiple_of(10) {
        tracing::warn!(what, failures, %error, "processor: transient failure; retrying");
    }
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
