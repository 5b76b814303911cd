//! The log port's measuring layer: every call of every backend, its consumers' polls and
//! commits included, gets a tracing span, its latency in
//! `vigil_log_operation_seconds{operation}` and its failures in
//! `vigil_log_errors_total{operation, kind}`, whatever the backend. The retry policy stays with
//! the callers, which share [`crate::retry`]: only they know what may be appended twice.

use std::sync::LazyLock;
use std::time::Instant;

use telemetry::{CallMetricNames, CallMetrics};
use tracing::Instrument;

use crate::{Layered, Log, LogCall, LogError, LogLayer, Result};

/// Registered in prometheus's default registry, which every process's `/metrics` serves.
static METRICS: LazyLock<CallMetrics> = LazyLock::new(|| {
    CallMetrics::register(
        "log",
        CallMetricNames {
            seconds: (
                "vigil_log_operation_seconds",
                "Time of one log call, by operation (a poll includes its wait for records).",
            ),
            errors: (
                "vigil_log_errors_total",
                "Log calls that failed, by operation and kind of failure.",
            ),
            labels: &["operation"],
            error_labels: &["operation", "kind"],
        },
    )
});

fn kind(e: &LogError) -> &'static str {
    match e {
        LogError::Invalid(_) => "invalid",
        LogError::UnknownTopic(_) => "unknown_topic",
        LogError::UnknownPartition { .. } => "unknown_partition",
        LogError::TooLarge { .. } => "too_large",
        LogError::Busy(_) => "busy",
        LogError::Unavailable(_) => "unavailable",
        LogError::Corrupt(_) => "corrupt",
        LogError::NotEnabled(_) => "not_enabled",
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
            .observe_named(operation, started.elapsed().as_secs_f64());
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
