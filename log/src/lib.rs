//! Vigil's log port: an append-only, partitioned, durable log with consumer groups, a backend
//! chosen by URL (`embedded:<dir>` by default, `kafka://host:port[,host...]`), and one
//! conformance suite that every backend must pass unchanged (`conformance`, behind the
//! `testsuite` feature: tests only).
//!
//! The contract, shared by both backends:
//! - [`LogBackend::append`] returns only once the record is durable (embedded: fsynced; Kafka:
//!   acknowledged by all in-sync replicas), and answers the record's [`Position`].
//! - A record goes to the partition [`partition_for`] picks from its key, the same on every
//!   backend and in every process, so records of one key (one collect session) keep their order.
//! - A [`LogConsumer`] reads its partitions in offset order, starting from its group's committed
//!   position, and [`LogConsumer::commit`] moves that position after the records were
//!   processed. Delivery is at least once: whatever was read but not committed is read again
//!   by the group's next consumer, so processing must be idempotent.
//!
//! A consumer gets its partitions in one of two ways:
//! - as a group member ([`LogBackend::member`]), the way the roles consume: the log shares the
//!   topic's partitions among the group's live members and moves them as members come and go.
//!   On Kafka that is the consumer-group protocol with cooperative rebalancing; the embedded log
//!   belongs to one process and has one member per group, which reads every partition.
//!   A member learns of moves through [`LogConsumer::take_rebalance`]; a partition it gives up
//!   stays its own until its next `poll`, so it can store and commit what it processed first.
//! - explicitly ([`LogBackend::consumer`], [`LogBackend::consumer_of_all`]), for tools and
//!   tests: no membership at all, and the caller makes sure that one consumer at a time reads a
//!   (group, partition).

#[cfg(any(test, feature = "testsuite"))]
pub mod conformance;
pub mod dead_letter;
pub mod embedded;
pub mod instrumented;
#[cfg(feature = "kafka")]
pub mod kafka;
mod names;
mod partition;
mod port;
pub mod retry;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

pub use names::{Group, Topic};
pub use partition::{murmur2, partition_for, shown as shown_partitions};
pub use port::{Layered, LogBackend, LogCall, LogLayer, ThroughLayer};

/// The largest record (key plus payload) either backend accepts: below librdkafka's default
/// `message.max.bytes` (1,000,000 bytes with the batch framing) and the brokers' (1,048,588),
/// so a record the embedded log takes is one Kafka takes too.
pub const MAX_RECORD_BYTES: usize = 960 * 1024;

/// The most partitions a topic may have (Kafka's practical ceiling per topic is far lower).
pub const MAX_PARTITIONS: u32 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A topic or group name outside the allowed alphabet or length, or a bad argument.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The topic was never created.
    #[error("unknown topic `{0}`")]
    UnknownTopic(String),
    /// The topic exists but has no such partition, or the consumer was not given it.
    #[error("topic `{topic}` has no partition {partition} here")]
    UnknownPartition { topic: String, partition: u32 },
    /// The record is over [`MAX_RECORD_BYTES`]; a retry cannot help.
    #[error("record of {size} bytes is over the log's limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    /// The backend cannot be reached or refused the operation; a retry may help.
    #[error("log unavailable: {0}")]
    Unavailable(String),
    /// The backend holds as many appends in flight as it takes (the Kafka producer's queue is
    /// full): refused at once rather than queued behind them, so a retry a moment later helps.
    #[error("log busy: {0}")]
    Busy(String),
    /// Stored data could not be decoded: a bug or a damaged log.
    #[error("corrupt log data: {0}")]
    Corrupt(String),
    /// The log URL names a backend this build does not have, or no backend at all.
    #[error("log backend not enabled: {0}")]
    NotEnabled(String),
}

impl LogError {
    /// Whether the same call may succeed later (back off and retry rather than drop).
    pub fn is_transient(&self) -> bool {
        matches!(self, LogError::Unavailable(_) | LogError::Busy(_))
    }
}

pub type Result<T, E = LogError> = std::result::Result<T, E>;

/// Where a record sits in its topic: its partition and its offset there. Offsets start at 0 and
/// grow by one per record in each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Position {
    pub partition: u32,
    pub offset: u64,
}

/// A record read from a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub partition: u32,
    pub offset: u64,
    pub key: Bytes,
    pub payload: Bytes,
}

impl Record {
    pub fn position(&self) -> Position {
        Position {
            partition: self.partition,
            offset: self.offset,
        }
    }
}

/// How a member's partitions changed since it last asked ([`LogConsumer::take_rebalance`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebalance {
    /// Partitions the member now reads, from the group's committed position. Ascending.
    pub assigned: Vec<u32>,
    /// Partitions the member gives up, ascending. They stay the member's until its next
    /// `poll`: what it processed of them may still be committed before then, and their next
    /// owner starts after that commit. Whatever state the member keeps about them must be
    /// dropped, since another member changes it from now on. (Partitions the group took away
    /// because the member fell silent are already someone else's; commits of them are dropped.)
    pub revoked: Vec<u32>,
}

impl Rebalance {
    pub fn is_empty(&self) -> bool {
        self.assigned.is_empty() && self.revoked.is_empty()
    }
}

/// One group's reader of some partitions of one topic.
///
/// Within a partition, `poll` returns records in offset order, each once per consumer; records
/// of different partitions may interleave. Dropping a consumer loses nothing but its
/// uncommitted progress.
#[async_trait]
pub trait LogConsumer: Send {
    fn group(&self) -> &Group;
    fn topic(&self) -> &Topic;
    /// The partitions this consumer reads, ascending. A member's change as the group
    /// rebalances (they are updated by `poll`); an explicit consumer's never do.
    fn partitions(&self) -> &[u32];

    /// What changed in a member's partitions since the last call; `None` if nothing did (and
    /// always for an explicit consumer). Changes are learnt during `poll`, so ask after each.
    fn take_rebalance(&mut self) -> Option<Rebalance> {
        None
    }

    /// The next records: waits until at least one is available, then returns up to `max` of
    /// those available at once; answers an empty batch if none arrived within `wait`.
    ///
    /// Cancel-safe: if the future is dropped (as in a `select!` with a shutdown signal), no
    /// record is skipped; the next call returns whatever this one had not returned.
    async fn poll(&mut self, max: usize, wait: Duration) -> Result<Vec<Record>>;

    /// Every record from the consumer's position on, until a poll finds nothing more within
    /// `wait`: for tools, tests and benchmarks that read a topic through (the roles poll).
    async fn read_to_end(&mut self, wait: Duration) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        loop {
            let records = self.poll(1000, wait).await?;
            if records.is_empty() {
                return Ok(out);
            }
            out.extend(records);
        }
    }

    /// Records that every record up to and including each given position (per partition, the
    /// highest offset given counts) is processed: the group's next consumer starts after them.
    ///
    /// Call it only after the effects of those records are durable. Returns once the commit is
    /// itself durable. `UnknownPartition` for a partition an explicit consumer does not read.
    ///
    /// A member's commit of a partition it no longer reads (revoked and released by a `poll`
    /// since, or taken by the group) is dropped, as is a commit the group refuses because its
    /// membership is changing: that can only make the partition's next owner read some records
    /// again, never skip one, and failing instead would stall the caller on a partition it
    /// cannot commit any more.
    async fn commit(&mut self, processed: &[Position]) -> Result<()>;
}

/// The log every role shares.
pub type Log = Arc<dyn LogBackend>;

/// Opens the backend a log URL names: `embedded:<dir>` (the default, a durable log in `dir`)
/// or `kafka://host:port[,host:port...]`, optionally followed by `?name=value&...` librdkafka
/// client properties (for example `?linger.ms=5&security.protocol=ssl`).
///
/// The embedded log's `dir` is its own (say `<data-dir>/log`), not the embedded store's: each
/// is a fjall database, and fjall locks its directory to one open handle per process.
pub async fn open(url: &str) -> Result<Log> {
    if let Some(dir) = url.strip_prefix("embedded:") {
        if dir.is_empty() {
            return Err(LogError::Invalid(
                "embedded log URL needs a directory: embedded:<dir>".into(),
            ));
        }
        let dir = std::path::PathBuf::from(dir);
        let log = tokio::task::spawn_blocking(move || embedded::EmbeddedLog::open(&dir))
            .await
            .map_err(|e| LogError::Unavailable(e.to_string()))??;
        Ok(Arc::new(log))
    } else if let Some(rest) = url.strip_prefix("kafka://") {
        open_kafka(rest)
    } else {
        Err(LogError::NotEnabled(format!(
            "unknown log URL `{}`: expected embedded:<dir> or kafka://host:9092[,host...]",
            schemas::redact::redact_url(url)
        )))
    }
}

#[cfg(feature = "kafka")]
fn open_kafka(rest: &str) -> Result<Log> {
    Ok(Arc::new(kafka::KafkaLog::connect(
        &kafka::KafkaConfig::parse(rest)?,
    )?))
}

#[cfg(not(feature = "kafka"))]
fn open_kafka(_rest: &str) -> Result<Log> {
    Err(LogError::NotEnabled(
        "this build has no Kafka backend (the `kafka` feature of vigil-log is off)".into(),
    ))
}

/// The shared checks of a consumer's `commit`: for each partition named in `processed` (which
/// must be one of the consumer's, `assigned`, sorted), the offset the group resumes from.
pub(crate) fn resume_offsets(
    topic: &Topic,
    assigned: &[u32],
    processed: &[Position],
) -> Result<Vec<(u32, u64)>> {
    let mut through: Vec<(u32, u64)> = Vec::new();
    for position in processed {
        if assigned.binary_search(&position.partition).is_err() {
            return Err(LogError::UnknownPartition {
                topic: topic.to_string(),
                partition: position.partition,
            });
        }
        match through.iter_mut().find(|(p, _)| *p == position.partition) {
            Some((_, last)) => *last = (*last).max(position.offset),
            None => through.push((position.partition, position.offset)),
        }
    }
    Ok(through
        .into_iter()
        .map(|(p, last)| (p, last.saturating_add(1)))
        .collect())
}

/// The shared checks of a consumer's partitions; answers them sorted.
pub(crate) fn check_partitions(topic: &Topic, count: u32, partitions: &[u32]) -> Result<Vec<u32>> {
    if partitions.is_empty() {
        return Err(LogError::Invalid(
            "a consumer needs at least one partition".into(),
        ));
    }
    let mut sorted = partitions.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err(LogError::Invalid(format!(
            "partitions {partitions:?} name one twice"
        )));
    }
    if let Some(&p) = sorted.iter().find(|&&p| p >= count) {
        return Err(LogError::UnknownPartition {
            topic: topic.to_string(),
            partition: p,
        });
    }
    Ok(sorted)
}

/// The shared argument checks of `create_topic`; both backends apply them.
pub(crate) fn check_partition_count(partitions: u32) -> Result<()> {
    if partitions == 0 || partitions > MAX_PARTITIONS {
        return Err(LogError::Invalid(format!(
            "a topic has 1 to {MAX_PARTITIONS} partitions, not {partitions}"
        )));
    }
    Ok(())
}

/// The shared size check of `append`; both backends apply it.
pub(crate) fn check_record_size(key: &[u8], payload: &[u8]) -> Result<()> {
    let size = key.len() + payload.len();
    if size > MAX_RECORD_BYTES {
        return Err(LogError::TooLarge {
            size,
            limit: MAX_RECORD_BYTES,
        });
    }
    Ok(())
}
