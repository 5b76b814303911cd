//! The log port's trait, [`LogBackend`], written once through `log_port!`, and [`Layered`]: a
//! log wrapped in a [`LogLayer`] that sees every call, its consumers' polls and commits
//! included, as a [`LogCall`] (the metrics of `instrumented`, the tests' fault injection). So no
//! wrapper forwards a method by hand, and a method added to the port, or a backend's own version
//! of a provided one (Kafka's `try_append`), reaches every wrapper by itself.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::{Group, LogConsumer, Position, Rebalance, Record, Result, Topic};

/// One call of the log port as a layer sees it: the method, and what it was given.
#[derive(Debug, Clone, Copy)]
pub enum LogCall<'a> {
    Ping,
    CreateTopic {
        topic: &'a Topic,
        partitions: u32,
    },
    Partitions {
        topic: &'a Topic,
    },
    Append {
        topic: &'a Topic,
        key: &'a [u8],
        payload: &'a [u8],
    },
    TryAppend {
        topic: &'a Topic,
        key: &'a [u8],
        payload: &'a [u8],
    },
    EndOffsets {
        topic: &'a Topic,
    },
    Consumer {
        group: &'a Group,
        topic: &'a Topic,
        partitions: &'a [u32],
    },
    ConsumerOfAll {
        group: &'a Group,
        topic: &'a Topic,
    },
    Member {
        group: &'a Group,
        topic: &'a Topic,
    },
    Expire {
        retention: Duration,
        budget: usize,
    },
    /// A consumer's [`LogConsumer::poll`].
    Poll {
        group: &'a Group,
        topic: &'a Topic,
        max: usize,
        wait: Duration,
    },
    /// A consumer's [`LogConsumer::commit`].
    Commit {
        group: &'a Group,
        topic: &'a Topic,
        processed: &'a [Position],
    },
}

impl LogCall<'_> {
    /// The operation's name, as the metrics label it (`try_append` is an `append`).
    pub fn operation(&self) -> &'static str {
        match self {
            LogCall::Ping => "ping",
            LogCall::CreateTopic { .. } => "create_topic",
            LogCall::Partitions { .. } => "partitions",
            LogCall::Append { .. } | LogCall::TryAppend { .. } => "append",
            LogCall::EndOffsets { .. } => "end_offsets",
            LogCall::Consumer { .. } | LogCall::ConsumerOfAll { .. } => "consumer",
            LogCall::Member { .. } => "member",
            LogCall::Expire { .. } => "expire",
            LogCall::Poll { .. } => "poll",
            LogCall::Commit { .. } => "commit",
        }
    }
}

/// What a [`Layered`] log does around each call of the log it wraps.
pub trait LogLayer: Send + Sync + 'static {
    /// Runs `run`, the wrapped log's answer to `call`, and answers in its place: it may time
    /// it, fail it without running it, or do something first.
    fn around<'a, T: Send + 'a>(
        &'a self,
        call: LogCall<'a>,
        run: impl Future<Output = Result<T>> + Send + 'a,
    ) -> impl Future<Output = Result<T>> + Send + 'a;
}

/// A layer shared with whoever controls it (a test switching its faults on and off).
impl<L: LogLayer> LogLayer for Arc<L> {
    fn around<'a, T: Send + 'a>(
        &'a self,
        call: LogCall<'a>,
        run: impl Future<Output = Result<T>> + Send + 'a,
    ) -> impl Future<Output = Result<T>> + Send + 'a {
        L::around(self, call, run)
    }
}

/// A log whose every call, and every call of the consumers it hands out, goes through `layer`.
pub struct Layered<L> {
    inner: crate::Log,
    layer: Arc<L>,
}

impl<L: LogLayer> Layered<L> {
    pub fn new(inner: crate::Log, layer: L) -> Self {
        Layered {
            inner,
            layer: Arc::new(layer),
        }
    }
}

/// What a layered call answers, made to go on through the layer: a consumer is wrapped so its
/// polls and commits do too; everything else is as the wrapped log answered it.
pub trait ThroughLayer: Sized {
    fn through<L: LogLayer>(self, _layer: &Arc<L>) -> Self {
        self
    }
}

impl ThroughLayer for () {}
impl ThroughLayer for bool {}
impl ThroughLayer for u32 {}
impl ThroughLayer for Position {}
impl ThroughLayer for Vec<u64> {}

impl ThroughLayer for Box<dyn LogConsumer> {
    fn through<L: LogLayer>(self, layer: &Arc<L>) -> Self {
        Box::new(LayeredConsumer {
            group: self.group().clone(),
            topic: self.topic().clone(),
            inner: self,
            layer: Arc::clone(layer),
        })
    }
}

/// Declares [`LogBackend`] and makes [`Layered`] implement it: each method's call goes through
/// the layer as the [`LogCall`] variant named after `as`, whose fields are the method's
/// arguments. A method ends in `;`, or in a body that makes it a provided one: a backend may
/// replace it, and a layered log calls the wrapped log's own, never the default.
macro_rules! log_port {
    (
        $(#[$trait_meta:meta])*
        pub trait LogBackend {
            $(
                $(#[$meta:meta])*
                async fn $method:ident(&$this:ident $(, $arg:ident: $ty:ty)* $(,)?) -> Result<$ret:ty>
                    as $variant:ident $body:tt
            )*
        }
    ) => {
        $(#[$trait_meta])*
        #[async_trait]
        pub trait LogBackend: Send + Sync + 'static {
            $(
                $(#[$meta])*
                // `self` as the invocation wrote it, so a provided method's body can call it.
                async fn $method(&$this $(, $arg: $ty)*) -> Result<$ret> $body
            )*
        }

        #[async_trait]
        impl<L: LogLayer> LogBackend for Layered<L> {
            $(
                async fn $method(&self $(, $arg: $ty)*) -> Result<$ret> {
                    let answer = self
                        .layer
                        .around(LogCall::$variant { $($arg),* }, self.inner.$method($($arg),*))
                        .await?;
                    Ok(ThroughLayer::through(answer, &self.layer))
                }
            )*
        }
    };
}

log_port! {
    /// A log backend: the embedded log or Kafka, or either wrapped in a [`Layered`] log.
    pub trait LogBackend {
        /// Answers when the backend is reachable (`/readyz`).
        async fn ping(&self) -> Result<()> as Ping;

        /// Creates `topic` with `partitions` partitions unless it exists, and answers the
        /// topic's partition count: an existing topic keeps its count, whatever `partitions`
        /// says.
        async fn create_topic(&self, topic: &Topic, partitions: u32) -> Result<u32> as CreateTopic;

        /// The partition count of an existing topic; `UnknownTopic` otherwise.
        async fn partitions(&self, topic: &Topic) -> Result<u32> as Partitions;

        /// Appends a record to the partition of its key and returns once it is durable.
        ///
        /// `UnknownTopic` if the topic was not created (topics are never created implicitly,
        /// so a typo cannot start a new stream), `TooLarge` over [`crate::MAX_RECORD_BYTES`].
        /// If the returned future is dropped before it completes, the record may or may not
        /// have been appended: the caller did not get an acknowledgement, so it must treat the
        /// append as failed (and a retry may then duplicate the record, which consumers
        /// tolerate: delivery is at least once).
        async fn append(&self, topic: &Topic, key: &[u8], payload: &[u8]) -> Result<Position>
            as Append;

        /// As [`LogBackend::append`], but refused at once with [`crate::LogError::Busy`] when
        /// the backend holds as many appends in flight as it takes, instead of waiting for
        /// room: for a client's request, which the client retries, where internal work waits.
        /// A backend without such a bound appends as `append` does.
        async fn try_append(&self, topic: &Topic, key: &[u8], payload: &[u8]) -> Result<Position>
            as TryAppend {
            self.append(topic, key, payload).await
        }

        /// The offset the next append to each partition of `topic` will get (index =
        /// partition): with a group's position, the group's lag. `UnknownTopic` if the topic
        /// does not exist.
        async fn end_offsets(&self, topic: &Topic) -> Result<Vec<u64>> as EndOffsets;

        /// A consumer of `partitions` of `topic` for `group`, starting in each partition at the
        /// group's committed position (the beginning if it never committed there).
        ///
        /// `UnknownTopic` / `UnknownPartition` if the topic or a partition does not exist,
        /// `Invalid` if `partitions` is empty or repeats one.
        async fn consumer(
            &self,
            group: &Group,
            topic: &Topic,
            partitions: &[u32],
        ) -> Result<Box<dyn LogConsumer>> as Consumer;

        /// A consumer of every partition of `topic`, outside any membership: for tools and
        /// tests (the roles use [`LogBackend::member`]).
        async fn consumer_of_all(&self, group: &Group, topic: &Topic) -> Result<Box<dyn LogConsumer>>
            as ConsumerOfAll {
            let count = self.partitions(topic).await?;
            let all: Vec<u32> = (0..count).collect();
            self.consumer(group, topic, &all).await
        }

        /// A member of `group` reading `topic`: the log decides which partitions it reads, each
        /// from the group's committed position, and moves them between the group's members as
        /// members join and leave; [`LogConsumer::take_rebalance`] tells the member what moved.
        ///
        /// On Kafka the members of a group share the partitions (a new member has none until
        /// the group has rebalanced, which takes a few seconds). The embedded log belongs to
        /// one process, so its one member reads every partition, and a second member of the
        /// same (group, topic) while the first lives is refused as `Invalid`. `UnknownTopic` if
        /// the topic does not exist.
        async fn member(&self, group: &Group, topic: &Topic) -> Result<Box<dyn LogConsumer>>
            as Member;

        /// One step of the log's retention: drops at most `budget` records appended more than
        /// `retention` ago, short of what a consumer group still about has yet to read in their
        /// partition, and answers whether more such records remain (call again after a pause).
        /// A group is about while it has a member, or committed within the retention, or in the
        /// first minutes after the log was opened (its members joining again); one gone longer
        /// holds nothing back. A partition's last record is kept, so its offsets go on from it.
        ///
        /// The embedded log's retention (`--log-retention`). On Kafka the brokers apply each
        /// topic's own retention (`retention.ms`, by default the brokers'
        /// `log.retention.hours`), so this does nothing there.
        async fn expire(&self, retention: Duration, budget: usize) -> Result<bool> as Expire;
    }
}

/// A consumer of a layered log: its polls and commits go through the layer too.
struct LayeredConsumer<L> {
    inner: Box<dyn LogConsumer>,
    layer: Arc<L>,
    // The consumer's own, copied so a call can name them while the consumer is borrowed to
    // run it.
    group: Group,
    topic: Topic,
}

#[async_trait]
impl<L: LogLayer> LogConsumer for LayeredConsumer<L> {
    fn group(&self) -> &Group {
        &self.group
    }

    fn topic(&self) -> &Topic {
        &self.topic
    }

    fn partitions(&self) -> &[u32] {
        self.inner.partitions()
    }

    fn take_rebalance(&mut self) -> Option<Rebalance> {
        self.inner.take_rebalance()
    }

    async fn poll(&mut self, max: usize, wait: Duration) -> Result<Vec<Record>> {
        let call = LogCall::Poll {
            group: &self.group,
            topic: &self.topic,
            max,
            wait,
        };
        self.layer.around(call, self.inner.poll(max, wait)).await
    }

    async fn commit(&mut self, processed: &[Position]) -> Result<()> {
        let call = LogCall::Commit {
            group: &self.group,
            topic: &self.topic,
            processed,
        };
        self.layer.around(call, self.inner.commit(processed)).await
    }
}
