//! The log port's measuring layer: every call of every backend, its consumers' polls and
//! commits included, gets a tracing span, its latency in
//! `vigil_log_operation_seconds{operation}` and its failures in
//! `vigil_log_errors_total{operation, kind}`, whatever the backend. The retry policy stays with
//! the callers, which share [`crate::retry`]: only they know what may be appended twice.

use std::sync::LazyLock;
use std::time::Instant;

use prometheus::{HistogramVec, IntCounterVec};
use tracing::Instrument;

use crate::{BusError, Layered, Log, LogCall, LogLayer, Result};

struct Metrics {
    seconds: HistogramVec,
    errors: IntCounterVec,
}

/// Registered in prometheus's default registry, which every process's `/metrics` serves.
static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let seconds = HistogramVec::new(
        prometheus::HistogramOpts::new(
            "vigil_log_operation_seconds",
            "Time of one log call, by operation (a poll includes its wait for records).",
        )
        .buckets(vec![
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
        ]),
        &["operation"],
    )
    .expect("a valid histogram");
    let errors = IntCounterVec::new(
        prometheus::Opts::new(
            "vigil_log_errors_total",
            "Log calls that failed, by operation and kind of failure.",
        ),
        &["operation", "kind"],
    )
    .expect("a valid counter");
    for metric in [
        Box::new(seconds.clone()) as Box<dyn prometheus::core::Collector>,
        Box::new(errors.clone()),
    ] {
        if let Err(e) = prometheus::register(metric) {
            tracing::error!(error = %e, "log: registering a metric");
        }
    }
    Metrics { seconds, errors }
});

fn kind(e: &BusError) -> &'static str {
    match e {
        BusError::Invalid(_) => "invalid",
        BusError::UnknownTopic(_) => "unknown_topic",
        BusError::UnknownPartition { .. } => "unknown_partition",
        BusError::TooLarge { .. } => "too_large",
        BusError::Busy(_) => "busy",
        BusError::Unavailable(_) => "unavailable",
        BusError::Corrupt(_) => "corrupt",
        BusError::NotEnabled(_) => "not_enabled",
    }
}

/// The layer that measures: each call runs in a span, its latency and failures counted under
/// its operation's name.
pub struct Measured;

impl LogLayer for Measured {
    async fn around<'a, T: Send + 'a>(
        &'a self,
        call: LogCall<'a>,
        run: impl std::future::Future<Output = Result<T>> + Send + 'a,
    ) -> Result<T> {
        let operation = call.operation();
        let started = Instant::now();
        let result = run.instrument(tracing::debug_span!("log", operation)).await;
        METRICS
            .seconds
            .with_label_values(&[operation])
            .observe(started.elapsed().as_secs_f64());
        if let Err(e) = &result {
            METRICS
                .errors
                .with_label_values(&[operation, kind(e)])
                .inc();
        }
        result
    }
}

/// Wraps a log so its calls, and its consumers', are measured.
pub fn instrument(inner: Log) -> Log {
    std::sync::Arc::new(Layered::new(inner, Measured))
}
