//! Vigil's metrics, made one way in every crate: registered in prometheus's default registry
//! (which every process's `/metrics` serves) through [`register`], the latency of a port's calls
//! in [`CALL_SECONDS`]' buckets, and the histograms of the hot paths counted per thread
//! ([`per_thread_histogram`]).

pub mod per_thread_histogram;

pub use per_thread_histogram::{PerThreadHistogramVec, ThreadSeries};
use prometheus::IntCounterVec;
use prometheus::core::Collector;

/// The buckets of one call's time, whatever it calls (a store, the log, the rate limiter): from
/// a rate-limit check in process (tens of microseconds) to a poll that waits for records.
pub const CALL_SECONDS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 10.0,
];

/// Registers `collectors` in prometheus's default registry. A name registered twice is logged
/// under `owner` (the crate's part: `store`, `processor`), never fatal: the metric is still
/// counted, only not served twice.
pub fn register(owner: &str, collectors: Vec<Box<dyn Collector>>) {
    for collector in collectors {
        if let Err(e) = prometheus::register(collector) {
            tracing::error!(owner, error = %e, "registering a metric");
        }
    }
}

/// A port's calls: `seconds`, their time by `labels` in [`CALL_SECONDS`]' buckets, and
/// `errors`, those that failed, by `error_labels`. Registered when made.
pub struct CallMetrics {
    pub seconds: PerThreadHistogramVec,
    pub errors: IntCounterVec,
}

/// The names, help texts and labels of a port's [`CallMetrics`].
pub struct CallMetricNames<'a> {
    pub seconds: (&'a str, &'a str),
    pub errors: (&'a str, &'a str),
    pub labels: &'a [&'a str],
    pub error_labels: &'a [&'a str],
}

impl CallMetrics {
    /// Made and registered under `owner`. Panics on a name or label prometheus refuses: the
    /// names are the program's own, so that is a bug caught by the first test that runs it.
    pub fn register(owner: &str, names: CallMetricNames<'_>) -> Self {
        let seconds = PerThreadHistogramVec::new(
            names.seconds.0,
            names.seconds.1,
            names.labels,
            CALL_SECONDS.to_vec(),
        )
        .expect("a valid histogram");
        let errors = IntCounterVec::new(
            prometheus::Opts::new(names.errors.0, names.errors.1),
            names.error_labels,
        )
        .expect("a valid counter");
        register(
            owner,
            vec![Box::new(seconds.clone()), Box::new(errors.clone())],
        );
        CallMetrics { seconds, errors }
    }
}
