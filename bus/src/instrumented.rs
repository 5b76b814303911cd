//! The log port's one instrumented wrapper: every call of every backend, its consumers' polls
//! and commits included, gets a tracing span, its latency in
//! `vigil_log_operation_seconds{operation}` and its failures in
//! `vigil_log_errors_total{operation, kind}`, whatever the backend. The retry policy stays with
//! the callers, which share [`crate::retry`]: only they know what may be appended twice.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use prometheus::{HistogramVec, IntCounterVec};
use tracing::Instrument;

use crate::{
    BusError, Group, Log, LogBackend, LogConsumer, Position, Rebalance, Record, Result, Topic,
};

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

/// Runs one call in a span, and measures it.
async fn measured<T>(
    operation: &'static str,
    call: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let started = Instant::now();
    let result = call
        .instrument(tracing::debug_span!("log", operation))
        .await;
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

/// Any backend, instrumented.
pub struct Instrumented {
    inner: Log,
}

/// Wraps a log so its calls, and its consumers', are measured.
pub fn instrument(inner: Log) -> Log {
    std::sync::Arc::new(Instrumented { inner })
}

#[async_trait]
impl LogBackend for Instrumented {
    async fn ping(&self) -> Result<()> {
        measured("ping", self.inner.ping()).await
    }

    async fn create_topic(&self, topic: &Topic, partitions: u32) -> Result<u32> {
        measured("create_topic", self.inner.create_topic(topic, partitions)).await
    }

    async fn partitions(&self, topic: &Topic) -> Result<u32> {
        measured("partitions", self.inner.partitions(topic)).await
    }

    async fn append(&self, topic: &Topic, key: &[u8], payload: &[u8]) -> Result<Position> {
        measured("append", self.inner.append(topic, key, payload)).await
    }

    async fn try_append(&self, topic: &Topic, key: &[u8], payload: &[u8]) -> Result<Position> {
        measured("append", self.inner.try_append(topic, key, payload)).await
    }

    async fn end_offsets(&self, topic: &Topic) -> Result<Vec<u64>> {
        measured("end_offsets", self.inner.end_offsets(topic)).await
    }

    async fn consumer(
        &self,
        group: &Group,
        topic: &Topic,
        partitions: &[u32],
    ) -> Result<Box<dyn LogConsumer>> {
        let inner = measured("consumer", self.inner.consumer(group, topic, partitions)).await?;
        Ok(Box::new(InstrumentedConsumer { inner }))
    }

    async fn consumer_of_all(&self, group: &Group, topic: &Topic) -> Result<Box<dyn LogConsumer>> {
        let inner = measured("consumer", self.inner.consumer_of_all(group, topic)).await?;
        Ok(Box::new(InstrumentedConsumer { inner }))
    }

    async fn member(&self, group: &Group, topic: &Topic) -> Result<Box<dyn LogConsumer>> {
        let inner = measured("member", self.inner.member(group, topic)).await?;
        Ok(Box::new(InstrumentedConsumer { inner }))
    }

    async fn expire(&self, retention: Duration, budget: usize) -> Result<bool> {
        measured("expire", self.inner.expire(retention, budget)).await
    }
}

/// A consumer of an instrumented log: its polls and commits are measured too.
struct InstrumentedConsumer {
    inner: Box<dyn LogConsumer>,
}

#[async_trait]
impl LogConsumer for InstrumentedConsumer {
    fn group(&self) -> &Group {
        self.inner.group()
    }

    fn topic(&self) -> &Topic {
        self.inner.topic()
    }

    fn partitions(&self) -> &[u32] {
        self.inner.partitions()
    }

    fn take_rebalance(&mut self) -> Option<Rebalance> {
        self.inner.take_rebalance()
    }

    async fn poll(&mut self, max: usize, wait: Duration) -> Result<Vec<Record>> {
        measured("poll", self.inner.poll(max, wait)).await
    }

    async fn commit(&mut self, processed: &[Position]) -> Result<()> {
        measured("commit", self.inner.commit(processed)).await
    }
}
