//! Vigil's metrics, made one way in every crate: each part makes its own through a
//! [`Registrar`], which registers them in prometheus's default registry (the one every
//! process's `/metrics` serves) as they are made; every time is measured in one set of buckets
//! ([`SECONDS`]); the histograms of the hot paths are counted per thread
//! ([`per_thread_histogram`]); a port's calls are timed by [`CallMetrics`], and a part's
//! retried failures and dead letters counted and logged by [`Retries`] and [`DeadLetters`].

pub mod per_thread_histogram;

pub use per_thread_histogram::{PerThreadHistogramVec, ThreadSeries};
use prometheus::core::Collector;
use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
};

/// The buckets of every time Vigil measures, in seconds: from a rate-limit check in process
/// (tens of microseconds) to a webhook's attempt or an event's wait for its first (a minute).
/// Finer from 10 to 250 ms, where the pipeline's goals are (100 ms from a batch to its decision
/// in one process, 250 ms in a fleet), so a percentile read from them there is close.
pub const SECONDS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06,
    0.08, 0.1, 0.15, 0.2, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The maker of one part's metrics (`store`, `processor`, `http`): each is registered in
/// prometheus's default registry as it is made. A name or label prometheus refuses panics: the
/// names are the program's own, so that is a bug the first test that runs it finds. A name
/// registered twice is logged under the owner, never fatal: the metric is still counted, only
/// not served twice.
#[derive(Debug, Clone, Copy)]
pub struct Registrar {
    owner: &'static str,
}

impl Registrar {
    pub const fn new(owner: &'static str) -> Self {
        Registrar { owner }
    }

    pub fn counter(&self, name: &str, help: &str) -> IntCounter {
        self.register(IntCounter::new(name, help).expect("a valid counter"))
    }

    pub fn counters(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.register(IntCounterVec::new(Opts::new(name, help), labels).expect("a valid counter"))
    }

    pub fn gauge(&self, name: &str, help: &str) -> IntGauge {
        self.register(IntGauge::new(name, help).expect("a valid gauge"))
    }

    pub fn gauges(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.register(IntGaugeVec::new(Opts::new(name, help), labels).expect("a valid gauge"))
    }

    /// A histogram of seconds, in [`SECONDS`]' buckets.
    pub fn seconds(&self, name: &str, help: &str) -> Histogram {
        let opts = HistogramOpts::new(name, help).buckets(SECONDS.to_vec());
        self.register(Histogram::with_opts(opts).expect("a valid histogram"))
    }

    /// Histograms of seconds by `labels`, in [`SECONDS`]' buckets, counted per thread: for a
    /// hot path that every core observes.
    pub fn seconds_per_thread(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> PerThreadHistogramVec {
        let histograms = PerThreadHistogramVec::new(name, help, labels, SECONDS.to_vec())
            .expect("a valid histogram");
        self.register(histograms)
    }

    /// The part's retried failures, counted by operation in `name`.
    pub fn retries(&self, name: &str, help: &str) -> Retries {
        Retries {
            owner: self.owner,
            operations: self.counters(name, help, &["operation"]),
        }
    }

    /// The part's dead letters, set aside on `topic`, counted by reason in `name` and logged as
    /// `said`: every one of
    /// `reasons` is shown at 0 from the start, so a dashboard or an alert on a rate sees the
    /// first dead letter as a change rather than a new series.
    pub fn dead_letters(
        &self,
        name: &str,
        help: &str,
        (topic, said): (&'static str, &'static str),
        reasons: impl IntoIterator<Item = &'static str>,
    ) -> DeadLetters {
        let counted = self.counters(name, help, &["reason"]);
        for reason in reasons {
            counted.with_label_values(&[reason]);
        }
        DeadLetters {
            owner: self.owner,
            topic,
            said,
            counted,
        }
    }

    fn register<C: Collector + Clone + 'static>(&self, collector: C) -> C {
        if let Err(e) = prometheus::register(Box::new(collector.clone())) {
            tracing::error!(owner = self.owner, error = %e, "registering a metric");
        }
        collector
    }
}

/// Declares a part's metrics where they are used: a `Metrics` struct with a field a metric, and
/// a `METRICS` static that makes every one through one [`Registrar`] of `owner` the first time it
/// is read. A block after `=>` runs once they are made, with the struct at hand, to show label values
/// at 0 before their first count (so an alert on a rate sees the first as a change).
///
/// ```ignore
/// telemetry::metrics! {
///     owner: "processor";
///     folded: IntCounter = counter("vigil_processor_records_folded_total", "Records folded");
///     => |made| { /* made.folded … */ }
/// }
/// ```
#[macro_export]
macro_rules! metrics {
    (
        owner: $owner:literal;
        $( $(#[$field_meta:meta])* $field:ident: $ty:ty = $make:ident($($arg:expr),+ $(,)?); )+
        $( => |$made:ident| $then:block )?
    ) => {
        struct Metrics {
            $( $(#[$field_meta])* $field: $ty, )+
        }

        static METRICS: ::std::sync::LazyLock<Metrics> = ::std::sync::LazyLock::new(|| {
            let registrar = $crate::Registrar::new($owner);
            let metrics = Metrics {
                $( $field: registrar.$make($($arg),+), )+
            };
            $( let $made = &metrics; $then )?
            metrics
        });
    };
}

/// A part's transient failures (the store or the log did not answer) that it retries: each is
/// counted by operation, and logged at warn for the first three of an outage and every tenth
/// after, so a long outage does not flood the log.
pub struct Retries {
    owner: &'static str,
    operations: IntCounterVec,
}

impl Retries {
    /// A transient failure of `what`, about to be retried: the `failures`th in a row.
    pub fn retried(&self, what: &'static str, error: &dyn std::fmt::Display, failures: u32) {
        self.operations.with_label_values(&[what]).inc();
        if failures <= 3 || failures.is_multiple_of(10) {
            tracing::warn!(what, failures, %error, "{}: transient failure; retrying", self.owner);
        }
    }
}

/// Records a part set aside on its dead-letter topic (`topic`) and will not take up again: each
/// is counted by reason and logged at error with where it was, since each is a record lost to
/// the pipeline that an operator must look at.
pub struct DeadLetters {
    owner: &'static str,
    topic: &'static str,
    /// The log line's words after the owner's name.
    said: &'static str,
    counted: IntCounterVec,
}

impl DeadLetters {
    /// The record at `partition`/`offset` was set aside for `reason` (`message` says more).
    pub fn set_aside(&self, reason: &'static str, partition: u32, offset: u64, message: &str) {
        self.counted.with_label_values(&[reason]).inc();
        tracing::error!(
            reason,
            partition,
            offset,
            message,
            topic = self.topic,
            "{}: {}",
            self.owner,
            self.said
        );
    }
}

/// A port's calls: `seconds`, their time by `labels` in [`SECONDS`]' buckets, and
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
    /// Made and registered under `owner`.
    pub fn register(owner: &'static str, names: CallMetricNames<'_>) -> Self {
        let registrar = Registrar::new(owner);
        CallMetrics {
            seconds: registrar.seconds_per_thread(names.seconds.0, names.seconds.1, names.labels),
            errors: registrar.counters(names.errors.0, names.errors.1, names.error_labels),
        }
    }
}
