//! The Kafka backend (`kafka://[user:password@]host:port[,host:port...][?property=value&...]`)
//! over rdkafka and its bundled librdkafka.
//!
//! - SASL credentials come as the URL's user-info or as `sasl.username`/`sasl.password`
//!   properties; neither reaches a log or an error message (docs/architecture.md#secrets-in-logs):
//!   the config's `Debug`, its errors and librdkafka's configuration errors show secret properties
//!   as `***`.
//! - Appends go through one idempotent `FutureProducer` with `acks=all`, so an acknowledged
//!   record is on every in-sync replica, and librdkafka's retries neither duplicate nor reorder
//!   records of a partition. The partition is computed here ([`partition_for`]) and passed
//!   explicitly, so both backends place a key alike.
//! - Members ([`LogBackend::member`]) join their consumer group (`subscribe`) with cooperative
//!   rebalancing (`cooperative-sticky`): a rebalance moves only the partitions that change
//!   owner, and the others are read on throughout. A revocation is not handed back to the group
//!   inside librdkafka's callback but at the member's next `poll`, so the caller first stores
//!   and commits what it processed of the partitions it loses (see `GroupContext`).
//! - Explicit consumers ([`LogBackend::consumer`]) are plain clients `assign()`ed to their
//!   partitions at the group's committed offsets (`Offset::Stored`): no group join, which costs
//!   seconds; their commits are `OffsetCommit`s that Kafka accepts from a group with no active
//!   members.
//! - Auto-commit is off for both, and commits are synchronous.
//! - Topics are created with the admin API when missing, with the brokers' default replication
//!   factor. No client may create topics implicitly (`allow.auto.create.topics=false`), so a
//!   metadata lookup of a missing topic reports it missing instead of creating it.

#[cfg(any(test, feature = "testsuite"))]
pub mod mock;

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::FutureExt;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::util::Timeout;
use rdkafka::{Offset, TopicPartitionList};

use crate::{
    Group, LogBackend, LogConsumer, LogError, Position, Rebalance, Record, Result, Topic,
    check_partition_count, check_partitions, check_record_size, partition_for, resume_offsets,
};

/// How long a metadata lookup, a topic creation or a commit may take before the backend is
/// reported unavailable.
const BROKER_TIMEOUT: Duration = Duration::from_secs(10);
/// How many appends the producer holds in flight before refusing more: about half a second
/// of the appends one ingest process makes at its saturated rate, the latency an append may
/// queue for (docs/performance.md#ingest).
const PRODUCER_QUEUE: &str = "4096";
/// The longest a broker holds a fetch that found nothing new. Brokers answer as soon as data
/// arrives, but some hold every fetch to this bound (librdkafka's mock cluster does, and so
/// does any broker whose `fetch.min.bytes` is raised), and at librdkafka's default of 500 ms a
/// batch then waits up to that long before the processor reads it. An idle consumer pays for
/// this with one empty fetch per broker every 10 ms.
const FETCH_WAIT_MS: &str = "10";
/// How long a member's commit waits out a rebalance in progress before it is dropped.
const REBALANCE_COMMIT_WAIT: Duration = Duration::from_secs(5);

/// Client properties the log's guarantees rest on; a URL may not override them.
const RESERVED: &[&str] = &[
    "bootstrap.servers",
    "metadata.broker.list",
    "acks",
    "request.required.acks",
    "enable.idempotence",
    "allow.auto.create.topics",
    "group.id",
    "group.protocol",
    "partition.assignment.strategy",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "partitioner",
];

/// Where the brokers are and any extra librdkafka properties (TLS, SASL, tuning).
#[derive(Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    /// `host:port[,host:port...]`, as librdkafka's `bootstrap.servers`.
    pub brokers: String,
    /// Extra client properties, applied to producers, consumers and the admin client alike.
    pub properties: Vec<(String, String)>,
    /// The URL's `namespace`: put before every topic and consumer group's name (`ns.` and the
    /// name), so that several deployments, or test runs, share a cluster without meeting.
    pub namespace: Option<String>,
}

impl KafkaConfig {
    pub fn new(brokers: impl Into<String>) -> Self {
        Self {
            brokers: brokers.into(),
            properties: Vec::new(),
            namespace: None,
        }
    }

    /// Parses what follows `kafka://`: an optional `user:password@` (percent-encoded), then
    /// `host:port[,host:port...]` and an optional `?name=value&...` of librdkafka properties
    /// (form-urlencoded).
    ///
    /// User-info sets `sasl.username` and `sasl.password`, with `sasl.mechanism=PLAIN` and
    /// `security.protocol=sasl_ssl` unless the URL's properties choose others: a password is
    /// never sent in the clear unless the URL says `security.protocol=sasl_plaintext`.
    pub fn parse(rest: &str) -> Result<Self> {
        // The last `@` ends the user-info, as in `schemas::redact`: a password may hold `@`.
        let (user_info, rest) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let (brokers, query) = rest.split_once('?').unwrap_or((rest, ""));
        let brokers = brokers.trim_end_matches('/');
        let valid_broker = |b: &str| {
            b.rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
        };
        if brokers.is_empty() || !brokers.split(',').all(valid_broker) {
            return Err(LogError::Invalid(format!(
                "kafka URL needs host:port[,host:port...], got `{brokers}`"
            )));
        }
        let mut config = Self::new(brokers);
        for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
            if name == "namespace" {
                // A topic's own rules, so that every name it prefixes stays a legal one.
                Topic::new(&value).map_err(|_| {
                    LogError::Invalid(format!(
                        "kafka URL's namespace `{value}` must be 1 to 100 of A-Z a-z 0-9 . _ -"
                    ))
                })?;
                if value.len() > 100 {
                    return Err(LogError::Invalid(
                        "kafka URL's namespace must be at most 100 characters".into(),
                    ));
                }
                config.namespace = Some(value.into_owned());
                continue;
            }
            if RESERVED.contains(&name.as_ref()) {
                return Err(LogError::Invalid(format!(
                    "kafka property `{name}` is set by the log itself and cannot be overridden"
                )));
            }
            config
                .properties
                .push((name.into_owned(), value.into_owned()));
        }
        if let Some(user_info) = user_info {
            config.add_sasl_credentials(user_info)?;
        }
        Ok(config)
    }

    fn property(&self, name: &str) -> Option<&str> {
        self.properties
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn add_sasl_credentials(&mut self, user_info: &str) -> Result<()> {
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|_| {
                    LogError::Invalid("the kafka URL's user-info is not UTF-8 once decoded".into())
                })
        };
        let (user, password) = user_info.split_once(':').unwrap_or((user_info, ""));
        if user.is_empty() || password.is_empty() {
            return Err(LogError::Invalid(
                "a kafka URL's user-info is `user:password` (percent-encoded), for SASL".into(),
            ));
        }
        if self.property("sasl.username").is_some() || self.property("sasl.password").is_some() {
            return Err(LogError::Invalid(
                "the kafka URL gives SASL credentials twice: as user-info and as sasl.username/sasl.password".into(),
            ));
        }
        let (user, password) = (decode(user)?, decode(password)?);
        self.properties.push(("sasl.username".into(), user));
        self.properties.push(("sasl.password".into(), password));
        if self.property("sasl.mechanism").is_none() && self.property("sasl.mechanisms").is_none() {
            self.properties
                .push(("sasl.mechanism".into(), "PLAIN".into()));
        }
        if self.property("security.protocol").is_none() {
            self.properties
                .push(("security.protocol".into(), "sasl_ssl".into()));
        }
        Ok(())
    }
}

/// Secret properties (`sasl.password`, `ssl.key.pem`, ...) show as `***`.
impl std::fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let properties: Vec<(&str, &str)> = self
            .properties
            .iter()
            .map(|(name, value)| {
                let shown = if schemas::redact::is_secret_name(name) {
                    schemas::redact::REDACTED
                } else {
                    value.as_str()
                };
                (name.as_str(), shown)
            })
            .collect();
        f.debug_struct("KafkaConfig")
            .field("brokers", &self.brokers)
            .field("properties", &properties)
            .finish()
    }
}

/// The log on a Kafka cluster.
pub struct KafkaLog {
    /// The brokers and the URL's properties: the base of every client this log makes.
    base: ClientConfig,
    producer: FutureProducer,
    admin: AdminClient<DefaultClientContext>,
    /// Partition counts seen so far. A topic's count is taken as fixed: adding partitions to a
    /// live topic would move keys to other partitions and break per-key order anyway.
    partition_counts: RwLock<HashMap<Topic, u32>>,
    /// Put before every topic and group name (see [`KafkaConfig::namespace`]).
    namespace: Option<String>,
}

/// A broker's answer that librdkafka retries by itself: a group coordinator loading or moving,
/// a partition leader being elected.
fn transient(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::NotCoordinator
                | RDKafkaErrorCode::CoordinatorLoadInProgress
                | RDKafkaErrorCode::CoordinatorNotAvailable
                | RDKafkaErrorCode::NotLeaderForPartition
                | RDKafkaErrorCode::LeaderNotAvailable
        )
    )
}

fn unavailable(context: &str, e: KafkaError) -> LogError {
    LogError::Unavailable(format!("kafka: {context}: {}", describe(&e)))
}

/// The error as text, without the value of a secret property: rdkafka's `Display` of a
/// configuration error names the property and its value (a `ssl.key.password` it refuses would
/// be printed whole).
fn describe(e: &KafkaError) -> String {
    match e {
        KafkaError::ClientConfig(_, _, name, _) if schemas::redact::is_secret_name(name) => {
            format!("client config error: property `{name}` was refused (its value is not shown)")
        }
        other => other.to_string(),
    }
}

impl KafkaLog {
    /// Makes the clients; librdkafka connects in the background, so this does not wait for
    /// the brokers (`ping` does).
    pub fn connect(config: &KafkaConfig) -> Result<Self> {
        let mut base = ClientConfig::new();
        base.set("bootstrap.servers", &config.brokers)
            .set("allow.auto.create.topics", "false");
        for (name, value) in &config.properties {
            base.set(name, value);
        }

        let mut producer = base.clone();
        producer
            .set("acks", "all")
            .set("enable.idempotence", "true");
        // Defaults a URL may override:
        // - Send as soon as a record is queued: an append is awaited by a client request, and
        //   records that queue while a request is in flight still share the next one.
        // - Fail an append (ingest answers 503) rather than hang for librdkafka's default five
        //   minutes when the brokers are gone.
        // - Hold at most PRODUCER_QUEUE appends in flight. Each awaits its own acknowledgement,
        //   so the queue only grows when the brokers slow down; past the bound a client's
        //   append (`try_append`) is refused at once (`LogError::Busy`, a 503 with
        //   `Retry-After`) rather than queued for seconds behind librdkafka's default of
        //   100,000, while internal appends wait for room.
        for (name, value) in [
            ("linger.ms", "0"),
            ("message.timeout.ms", "30000"),
            ("queue.buffering.max.messages", PRODUCER_QUEUE),
        ] {
            if producer.get(name).is_none() {
                producer.set(name, value);
            }
        }
        let producer: FutureProducer = producer
            .create()
            .map_err(|e| unavailable("creating the producer", e))?;
        let admin: AdminClient<DefaultClientContext> = base
            .create()
            .map_err(|e| unavailable("creating the admin client", e))?;
        Ok(Self {
            base,
            producer,
            admin,
            partition_counts: RwLock::new(HashMap::new()),
            namespace: config.namespace.clone(),
        })
    }

    /// `topic` as the cluster names it, in the URL's namespace. Every method of the port takes
    /// its names through here once; what is below them sees the cluster's names only.
    fn topic<'a>(&self, topic: &'a Topic) -> Result<Cow<'a, Topic>> {
        match &self.namespace {
            None => Ok(Cow::Borrowed(topic)),
            Some(ns) => Topic::new(&format!("{ns}.{topic}")).map(Cow::Owned),
        }
    }

    /// `group` as the cluster names it, in the URL's namespace.
    fn group<'a>(&self, group: &'a Group) -> Result<Cow<'a, Group>> {
        match &self.namespace {
            None => Ok(Cow::Borrowed(group)),
            Some(ns) => Group::new(&format!("{ns}.{group}")).map(Cow::Owned),
        }
    }

    /// The high watermark of each of the topic's `count` partitions, under its cluster name.
    async fn watermarks(&self, topic: &Topic, count: u32) -> Result<Vec<u64>> {
        let producer = self.producer.clone();
        let name = topic.to_string();
        // The high watermark: the offset of the next message appended to the partition.
        tokio::task::spawn_blocking(move || {
            let deadline = std::time::Instant::now() + BROKER_TIMEOUT;
            (0..count)
                .map(|p| {
                    loop {
                        match producer
                            .client()
                            .fetch_watermarks(&name, p as i32, BROKER_TIMEOUT)
                        {
                            Ok((_, high)) => return Ok(high.max(0) as u64),
                            // A partition whose leader was just elected (a new topic, a broker
                            // that restarted) answers so for a moment; librdkafka's own producer
                            // retries these, and so does this read.
                            Err(e)
                                if matches!(
                                    e.rdkafka_error_code(),
                                    Some(
                                        RDKafkaErrorCode::NotLeaderForPartition
                                            | RDKafkaErrorCode::LeaderNotAvailable
                                    )
                                ) && std::time::Instant::now() < deadline =>
                            {
                                std::thread::sleep(Duration::from_millis(100));
                            }
                            Err(e) => return Err(unavailable("watermarks", e)),
                        }
                    }
                })
                .collect()
        })
        .await
        .map_err(|e| LogError::Unavailable(format!("kafka: watermarks: {e}")))?
    }

    /// The partition count of a topic the cluster has, under its cluster name.
    async fn count(&self, topic: &Topic) -> Result<u32> {
        self.lookup(topic)
            .await?
            .ok_or_else(|| LogError::UnknownTopic(topic.to_string()))
    }

    /// The partition count from the cluster's metadata; `None` if the topic does not exist.
    async fn lookup(&self, topic: &Topic) -> Result<Option<u32>> {
        if let Some(&n) = self
            .partition_counts
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(topic)
        {
            return Ok(Some(n));
        }
        let producer = self.producer.clone();
        let name = topic.to_string();
        let metadata = tokio::task::spawn_blocking(move || {
            producer
                .client()
                .fetch_metadata(Some(&name), BROKER_TIMEOUT)
        })
        .await
        .map_err(|e| LogError::Unavailable(format!("kafka: metadata lookup: {e}")))?
        .map_err(|e| unavailable("metadata lookup", e))?;
        let Some(found) = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic.as_str())
        else {
            return Ok(None);
        };
        match found.error().map(RDKafkaErrorCode::from) {
            None => {}
            Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
                return Ok(None);
            }
            Some(code) => {
                return Err(LogError::Unavailable(format!(
                    "kafka: metadata of topic `{topic}`: {code}"
                )));
            }
        }
        let count = found.partitions().len() as u32;
        // A topic still being created is not usable yet: a real broker lists its partitions
        // before it has elected their leaders, and until then reads of their offsets fail.
        let leaderless = found
            .partitions()
            .iter()
            .any(|p| p.leader() < 0 || p.error().is_some());
        if count == 0 || leaderless {
            return Ok(None);
        }
        self.partition_counts
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(topic.clone(), count);
        Ok(Some(count))
    }
}

impl KafkaLog {
    /// Appends through the producer, waiting up to `queue_wait` for room in its queue.
    async fn send(
        &self,
        topic: &Topic,
        key: &[u8],
        payload: &[u8],
        queue_wait: Duration,
    ) -> Result<Position> {
        check_record_size(key, payload)?;
        let partition = partition_for(key, self.count(topic).await?);
        let record = FutureRecord::to(topic.as_str())
            .partition(partition as i32)
            .key(key)
            .payload(payload);
        match self.producer.send(record, Timeout::After(queue_wait)).await {
            Ok(delivery) => Ok(Position {
                partition: delivery.partition as u32,
                offset: delivery.offset as u64,
            }),
            Err((e, _)) => Err(match e.rdkafka_error_code() {
                Some(
                    RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic,
                ) => LogError::UnknownTopic(topic.to_string()),
                Some(RDKafkaErrorCode::QueueFull) => LogError::Busy(
                    "kafka: the producer's queue (queue.buffering.max.messages) is full".into(),
                ),
                Some(RDKafkaErrorCode::MessageSizeTooLarge) => LogError::TooLarge {
                    size: key.len() + payload.len(),
                    limit: crate::MAX_RECORD_BYTES,
                },
                _ => unavailable("append", e),
            }),
        }
    }
}

#[async_trait]
impl LogBackend for KafkaLog {
    async fn ping(&self) -> Result<()> {
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || producer.client().fetch_metadata(None, BROKER_TIMEOUT))
            .await
            .map_err(|e| LogError::Unavailable(format!("kafka: ping: {e}")))?
            .map(drop)
            .map_err(|e| unavailable("ping", e))
    }

    async fn create_topic(&self, topic: &Topic, partitions: u32) -> Result<u32> {
        check_partition_count(partitions)?;
        let topic = &*self.topic(topic)?;
        if let Some(n) = self.lookup(topic).await? {
            return Ok(n);
        }
        // -1: the brokers' `default.replication.factor` (Kafka 2.4 and later).
        let new = NewTopic::new(
            topic.as_str(),
            partitions as i32,
            TopicReplication::Fixed(-1),
        );
        let options = AdminOptions::new().operation_timeout(Some(BROKER_TIMEOUT));
        // Bounded here too: a broker that takes the request and never answers (librdkafka's
        // mock cluster, for one) must not hold the caller's preparation forever.
        let results = tokio::time::timeout(
            BROKER_TIMEOUT * 2,
            self.admin.create_topics([&new], &options),
        )
        .await
        .map_err(|_| LogError::Unavailable(format!("kafka: creating topic `{topic}`: no answer")))?
        .map_err(|e| unavailable("creating a topic", e))?;
        for result in results {
            match result {
                // Another process created it meanwhile: its partition count stands.
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code)) => {
                    return Err(LogError::Unavailable(format!(
                        "kafka: creating topic `{name}`: {code}"
                    )));
                }
            }
        }
        // The creation reaches every broker's metadata a moment later, and each partition's
        // leader answers a moment after that: the topic is ready once its offsets can be read,
        // so that the first appends and reads do not meet a leader still being elected.
        let deadline = tokio::time::Instant::now() + BROKER_TIMEOUT;
        loop {
            if let Some(n) = self.lookup(topic).await? {
                self.watermarks(topic, n).await?;
                return Ok(n);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(LogError::Unavailable(format!(
                    "kafka: topic `{topic}` was created but its metadata did not show up"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn partitions(&self, topic: &Topic) -> Result<u32> {
        self.count(&*self.topic(topic)?).await
    }

    /// Waits for room in the producer's queue, up to the brokers' timeout: the processor's,
    /// the dispatcher's and the admin API's records are internal work that must not be lost to
    /// the clients' load.
    async fn append(&self, topic: &Topic, key: &[u8], payload: &[u8]) -> Result<Position> {
        self.send(&*self.topic(topic)?, key, payload, BROKER_TIMEOUT)
            .await
    }

    /// No wait for room: a full queue is answered at once (see PRODUCER_QUEUE).
    async fn try_append(&self, topic: &Topic, key: &[u8], payload: &[u8]) -> Result<Position> {
        self.send(&*self.topic(topic)?, key, payload, Duration::ZERO)
            .await
    }

    async fn end_offsets(&self, topic: &Topic) -> Result<Vec<u64>> {
        let topic = &*self.topic(topic)?;
        let count = self.count(topic).await?;
        self.watermarks(topic, count).await
    }

    async fn consumer(
        &self,
        group: &Group,
        topic: &Topic,
        partitions: &[u32],
    ) -> Result<Box<dyn LogConsumer>> {
        let named = (group.clone(), topic.clone());
        let (group, topic) = (&*self.group(group)?, &*self.topic(topic)?);
        let count = self.count(topic).await?;
        let partitions = check_partitions(topic, count, partitions)?;
        let consumer = self.client(group, topic, &self.base)?;
        let mut assignment = TopicPartitionList::new();
        for &p in &partitions {
            assignment
                .add_partition_offset(topic.as_str(), p as i32, Offset::Stored)
                .map_err(|e| unavailable("assigning partitions", e))?;
        }
        consumer
            .assign(&assignment)
            .map_err(|e| unavailable("assigning partitions", e))?;
        Ok(Box::new(KafkaConsumer {
            consumer: Arc::new(consumer),
            topic: topic.clone(),
            named,
            partitions,
            member: false,
        }))
    }

    async fn member(&self, group: &Group, topic: &Topic) -> Result<Box<dyn LogConsumer>> {
        let named = (group.clone(), topic.clone());
        let (group, topic) = (&*self.group(group)?, &*self.topic(topic)?);
        self.count(topic).await?;
        let mut config = self.base.clone();
        // Cooperative: a rebalance takes away only the partitions that move, so the members
        // keep reading (and keep their sessions' state for) the others.
        config.set("partition.assignment.strategy", "cooperative-sticky");
        // A member that vanished (killed, or cut off by a broker outage) is noticed within ten
        // seconds, not librdkafka's 45: its partitions wait that long for their next owner, and
        // a member that reconnects after an outage rejoins once its old self expired. The URL
        // may set either.
        for (name, default) in [
            ("session.timeout.ms", "10000"),
            ("heartbeat.interval.ms", "1000"),
        ] {
            if config.get(name).is_none() {
                config.set(name, default);
            }
        }
        let consumer = self.client(group, topic, &config)?;
        consumer
            .subscribe(&[topic.as_str()])
            .map_err(|e| unavailable("joining the group", e))?;
        Ok(Box::new(KafkaConsumer {
            consumer: Arc::new(consumer),
            topic: topic.clone(),
            named,
            // None until the group has assigned some.
            partitions: Vec::new(),
            member: true,
        }))
    }

    /// The brokers keep each topic as long as its `retention.ms` says (their
    /// `log.retention.hours`, a week by default, for the topics Vigil creates).
    async fn expire(&self, _retention: Duration, _budget: usize) -> Result<bool> {
        Ok(false)
    }
}

impl KafkaLog {
    /// A consumer client of `group`, not yet reading anything.
    fn client(
        &self,
        group: &Group,
        topic: &Topic,
        base: &ClientConfig,
    ) -> Result<StreamConsumer<GroupContext>> {
        let mut config = base.clone();
        config
            .set("group.id", group.as_str())
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            // A group that never committed starts at the beginning, and so does one whose
            // committed offset was deleted by retention: at least once, never skipped.
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false");
        if config.get("fetch.wait.max.ms").is_none() {
            config.set("fetch.wait.max.ms", FETCH_WAIT_MS);
        }
        config
            .create_with_context(GroupContext::new(topic))
            .map_err(|e| unavailable("creating a consumer", e))
    }
}

/// What librdkafka's rebalance callback shares with the member it belongs to. The callback runs
/// on the thread that polls the consumer, inside `recv` (so inside [`LogConsumer::poll`]).
///
/// Assignments are taken at once (`incremental_assign`: the partitions start at the group's
/// committed offsets). A revocation is recorded and handed back to the group
/// (`incremental_unassign`) only at the start of the member's next poll: until then the member
/// still owns the partitions, so the caller can land its store writes and commit them, and the
/// partitions' next owner starts exactly after what was processed. That holds the group's
/// rebalance for as long as the caller takes between two polls, which is what a caller that
/// processes a poll before the next one takes anyway. Partitions the group took away (the
/// member fell silent past `max.poll.interval.ms` or its session) are someone else's already,
/// and are given up at once, as they are when the member closes.
struct GroupContext {
    topic: String,
    state: Mutex<GroupState>,
    /// Set when the consumer is dropped: closing revokes every partition, and nobody polls
    /// after that to hand them back.
    closing: AtomicBool,
}

#[derive(Default)]
struct GroupState {
    /// Every partition the member holds, including those it is about to give up.
    owned: BTreeSet<u32>,
    /// Revoked but not yet handed back to the group.
    releasing: BTreeSet<u32>,
    /// Changes the caller did not take yet.
    assigned: BTreeSet<u32>,
    revoked: BTreeSet<u32>,
}

impl GroupContext {
    fn new(topic: &Topic) -> Self {
        Self {
            topic: topic.to_string(),
            state: Mutex::new(GroupState::default()),
            closing: AtomicBool::new(false),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, GroupState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The partitions of our topic in a list from librdkafka.
    fn ours(&self, tpl: &TopicPartitionList) -> Vec<u32> {
        tpl.elements_for_topic(&self.topic)
            .iter()
            .map(|e| e.partition() as u32)
            .collect()
    }
}

impl ClientContext for GroupContext {}

impl ConsumerContext for GroupContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let partitions = self.ours(tpl);
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                if let Err(e) = consumer.incremental_assign(tpl) {
                    tracing::error!(topic = %self.topic, error = %e, "kafka: taking assigned partitions");
                    return;
                }
                let mut state = self.state();
                for p in partitions {
                    state.owned.insert(p);
                    state.releasing.remove(&p);
                    state.assigned.insert(p);
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS
                if !self.closing.load(Ordering::Acquire) && !consumer.assignment_lost() =>
            {
                let mut state = self.state();
                for p in partitions {
                    state.releasing.insert(p);
                    state.revoked.insert(p);
                }
                tracing::info!(topic = %self.topic, revoked = ?state.releasing, "kafka: partitions revoked; handed back at the next poll");
            }
            // Closing, lost, or a rebalance error (librdkafka then expects the partitions
            // given up): handed back now.
            _ => {
                if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS {
                    tracing::warn!(topic = %self.topic, error = ?err, "kafka: rebalance error; giving up the partitions");
                }
                if let Err(e) = consumer.incremental_unassign(tpl) {
                    tracing::warn!(topic = %self.topic, error = %e, "kafka: giving up partitions");
                }
                let mut state = self.state();
                for p in partitions {
                    state.owned.remove(&p);
                    state.releasing.remove(&p);
                    state.revoked.insert(p);
                }
            }
        }
    }
}

struct KafkaConsumer {
    /// Shared with the blocking thread a synchronous commit runs on.
    consumer: Arc<StreamConsumer<GroupContext>>,
    /// The topic as the cluster names it (in the URL's namespace).
    topic: Topic,
    /// The group and topic as the caller named them, which the port answers with.
    named: (Group, Topic),
    /// The partitions read: an explicit consumer's, or a member's as of its last poll
    /// (including those it is giving up, whose records it may still have been given).
    partitions: Vec<u32>,
    /// A group member (`subscribe`), rather than a consumer of explicit partitions.
    member: bool,
}

impl Drop for KafkaConsumer {
    fn drop(&mut self) {
        // Closing (when the last handle on the client goes) revokes every partition, and
        // nobody polls afterwards to hand them back: they are given up in the callback.
        self.consumer
            .context()
            .closing
            .store(true, Ordering::Release);
    }
}

impl KafkaConsumer {
    fn context(&self) -> &GroupContext {
        self.consumer.context()
    }

    /// Hands the partitions revoked since the last poll back to the group: the caller has had
    /// the time between the two polls to store and commit what it processed of them.
    fn release_revoked(&mut self) {
        let releasing = std::mem::take(&mut self.context().state().releasing);
        if releasing.is_empty() {
            return;
        }
        let mut list = TopicPartitionList::new();
        for &p in &releasing {
            list.add_partition(self.topic.as_str(), p as i32);
        }
        if let Err(e) = self.consumer.incremental_unassign(&list) {
            // Lost meanwhile (librdkafka already gave them up), or the client is failing: they
            // are not read here either way.
            tracing::warn!(topic = %self.topic, error = %e, "kafka: handing back revoked partitions");
        }
        let mut state = self.context().state();
        for p in &releasing {
            state.owned.remove(p);
        }
        tracing::info!(topic = %self.topic, released = ?releasing, "kafka: revoked partitions handed back");
    }

    /// Refreshes a member's `partitions` from what the rebalance callback recorded.
    fn refresh_partitions(&mut self) {
        if self.member {
            let held = self.context().state().owned.iter().copied().collect();
            self.partitions = held;
        }
    }

    /// Whether a record is of a partition this consumer reads: a member's queue may still hold
    /// records fetched before a partition was handed back, which its next owner reads now.
    fn holds(&self, partition: u32) -> bool {
        !self.member || self.context().state().owned.contains(&partition)
    }
}

fn record(message: &BorrowedMessage<'_>) -> Record {
    // Kafka's partitions and offsets of consumed messages are never negative.
    Record {
        partition: message.partition() as u32,
        offset: message.offset() as u64,
        key: Bytes::copy_from_slice(message.key().unwrap_or_default()),
        payload: Bytes::copy_from_slice(message.payload().unwrap_or_default()),
    }
}

/// Whether a commit failed because the group's membership changed under it (a rebalance in
/// progress, a newer generation, the member dropped from the group): the partitions' owners
/// then read on from the group's last commit, so the commit can be given up.
fn membership_changed(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::RebalanceInProgress
                | RDKafkaErrorCode::IllegalGeneration
                | RDKafkaErrorCode::UnknownMemberId
                | RDKafkaErrorCode::FencedInstanceId
                | RDKafkaErrorCode::StaleMemberEpoch
                | RDKafkaErrorCode::AssignmentLost
        )
    )
}

#[async_trait]
impl LogConsumer for KafkaConsumer {
    fn group(&self) -> &Group {
        &self.named.0
    }

    fn topic(&self) -> &Topic {
        &self.named.1
    }

    fn partitions(&self) -> &[u32] {
        &self.partitions
    }

    fn take_rebalance(&mut self) -> Option<Rebalance> {
        if !self.member {
            return None;
        }
        let rebalance = {
            let mut state = self.context().state();
            Rebalance {
                assigned: std::mem::take(&mut state.assigned).into_iter().collect(),
                revoked: std::mem::take(&mut state.revoked).into_iter().collect(),
            }
        };
        self.refresh_partitions();
        (!rebalance.is_empty()).then_some(rebalance)
    }

    async fn poll(&mut self, max: usize, wait: Duration) -> Result<Vec<Record>> {
        if max == 0 {
            return Err(LogError::Invalid("poll needs max > 0".into()));
        }
        self.release_revoked();
        let deadline = tokio::time::Instant::now() + wait;
        let mut records = Vec::new();
        // An outage queues an error event per failed connection attempt, and librdkafka
        // recovers by itself. They are read through to the poll's deadline, not returned one
        // per poll: a caller backing off between polls would otherwise take minutes to drain
        // them, and the group's rebalance events queued behind them (the member's assignment
        // after the broker returns) would wait as long. The last one is reported if the poll
        // found nothing else.
        let mut failure = None;
        // `recv` is cancel-safe, and nothing below awaits once a message was taken. Records of
        // partitions no longer held are passed over, so the loop runs until one is held.
        while records.is_empty() {
            let first = match tokio::time::timeout_at(deadline, self.consumer.recv()).await {
                Err(_) => break,
                Ok(Err(e)) => {
                    failure = Some(e);
                    continue;
                }
                Ok(Ok(message)) => record(&message),
            };
            if self.holds(first.partition) {
                records.push(first);
            }
            while records.len() < max {
                match self.consumer.recv().now_or_never() {
                    Some(Ok(message)) => {
                        let next = record(&message);
                        if self.holds(next.partition) {
                            records.push(next);
                        }
                    }
                    // An error event carries no message, so nothing is lost by reporting it on
                    // the next poll instead (librdkafka retries the fetch itself meanwhile).
                    Some(Err(e)) => {
                        tracing::warn!(topic = %self.topic, error = %e, "kafka consumer error");
                        break;
                    }
                    None => break,
                }
            }
        }
        self.refresh_partitions();
        match failure {
            // librdkafka retries these itself (a group coordinator still loading or moving, a
            // leader being elected): they are news, not failures of the read.
            Some(e) if transient(&e) => {
                tracing::info!(topic = %self.topic, error = %e, "kafka: retrying a transient broker answer");
                Ok(records)
            }
            Some(e) if records.is_empty() => Err(unavailable("consuming", e)),
            _ => Ok(records),
        }
    }

    async fn commit(&mut self, processed: &[Position]) -> Result<()> {
        let resume = if self.member {
            // Partitions revoked and handed back since are someone else's: their positions
            // are dropped (see the trait). Those being given up are still committed.
            let owned: Vec<u32> = self.context().state().owned.iter().copied().collect();
            let held: Vec<Position> = processed
                .iter()
                .copied()
                .filter(|p| owned.binary_search(&p.partition).is_ok())
                .collect();
            if held.len() < processed.len() {
                tracing::info!(topic = %self.topic, dropped = processed.len() - held.len(), "kafka: commit of partitions no longer held dropped");
            }
            resume_offsets(&self.topic, &owned, &held)?
        } else {
            resume_offsets(&self.topic, &self.partitions, processed)?
        };
        if resume.is_empty() {
            return Ok(());
        }
        let mut offsets = TopicPartitionList::new();
        for (p, next) in resume {
            offsets
                .add_partition_offset(self.topic.as_str(), p as i32, Offset::Offset(next as i64))
                .map_err(|e| unavailable("commit", e))?;
        }
        // A rebalance in progress refuses commits until the group's next generation; a member
        // still holds the partitions it is giving up until its next poll, so the commit is
        // tried again for a while rather than dropped (their next owner would read again what
        // was processed). Past that, or for any other membership change, it is dropped.
        let retry_until = tokio::time::Instant::now() + REBALANCE_COMMIT_WAIT;
        let committed = loop {
            let consumer = Arc::clone(&self.consumer);
            let offsets = offsets.clone();
            // A synchronous commit blocks its thread until the coordinator answers.
            let committed =
                tokio::task::spawn_blocking(move || consumer.commit(&offsets, CommitMode::Sync))
                    .await
                    .map_err(|e| LogError::Unavailable(format!("kafka: commit: {e}")))?;
            match committed {
                Err(e)
                    if self.member
                        && e.rdkafka_error_code()
                            == Some(RDKafkaErrorCode::RebalanceInProgress)
                        && tokio::time::Instant::now() < retry_until =>
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => break other,
            }
        };
        match committed {
            Ok(()) => Ok(()),
            Err(e) if self.member && membership_changed(&e) => {
                tracing::info!(topic = %self.topic, error = %e, "kafka: commit dropped, the group is rebalancing; the records are read again by their partition's owner");
                Ok(())
            }
            Err(e) => Err(unavailable("commit", e)),
        }
    }
}
