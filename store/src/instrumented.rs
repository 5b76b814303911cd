//! The store port's one instrumented wrapper: every call of every backend gets a tracing span,
//! its latency in `vigil_store_operation_seconds{operation}` and its failures in
//! `vigil_store_errors_total{operation, kind}`, so a slow or failing store shows which
//! operation it is, whatever the backend. The retry policy stays with the callers (the
//! consumer loops share `log::retry`): only they know which of their writes are idempotent.

use std::future::Future;
use std::sync::LazyLock;
use std::time::Instant;

use tracing::Instrument;

use crate::{Layered, Result, Store, StoreError, StoreLayer};
use telemetry::{CallMetricNames, CallMetrics};

/// Registered in prometheus's default registry, which every process's `/metrics` serves.
static METRICS: LazyLock<CallMetrics> = LazyLock::new(|| {
    CallMetrics::register(
        "store",
        CallMetricNames {
            seconds: (
                "vigil_store_operation_seconds",
                "Time of one store call, by operation.",
            ),
            errors: (
                "vigil_store_errors_total",
                "Store calls that failed, by operation and kind of failure.",
            ),
            labels: &["operation"],
            error_labels: &["operation", "kind"],
        },
    )
});

/// A failure's kind, as its label.
fn kind(e: &StoreError) -> &'static str {
    match e {
        StoreError::Conflict(_) => "conflict",
        StoreError::Unavailable(_) => "unavailable",
        StoreError::Corrupt { .. } => "corrupt",
        StoreError::Invalid(_) => "invalid",
        StoreError::Rejected(_) => "rejected",
        StoreError::NotEnabled(_) => "not_enabled",
        StoreError::Fenced { .. } => "fenced",
    }
}

fn observe<T>(operation: &'static str, started: Instant, result: &Result<T>) {
    METRICS
        .seconds
        .observe_named(operation, started.elapsed().as_secs_f64());
    if let Err(e) = result {
        METRICS
            .errors
            .with_label_values(&[operation, kind(e)])
            .inc();
    }
}

/// The layer that measures every call (see the module doc).
pub struct Instrumentation;

impl StoreLayer for Instrumentation {
    async fn around<'a, T: Send + 'static>(
        &'a self,
        operation: &'static str,
        call: impl Future<Output = Result<T>> + Send + 'a,
    ) -> Result<T> {
        let started = Instant::now();
        let result = call
            .instrument(tracing::debug_span!("store", operation))
            .await;
        observe(operation, started, &result);
        result
    }
}

/// Wraps a store so its calls are measured.
pub fn instrument(inner: Store) -> Store {
    std::sync::Arc::new(Layered::new(inner, Instrumentation))
}
