//! librdkafka's mock Kafka cluster, for tests and benchmarks: brokers in this process that
//! speak the real Kafka protocol over loopback TCP, so the Kafka backend runs unchanged against
//! them (`kafka://` + [`MockKafka::bootstrap_servers`]). Built with the `testsuite` feature
//! only, so the binary never carries it.
//!
//! Three things differ from a real cluster (librdkafka marks the mock experimental):
//! - it has no CreateTopics API, so [`LogBackend::create_topic`](crate::LogBackend::create_topic)
//!   fails on a topic it does not know; make topics with [`MockKafka::create_topic`] first;
//! - its handle is a raw pointer, neither `Send` nor `Sync`, so the cluster lives on a thread
//!   of its own and this handle talks to it through a channel;
//! - it refuses every offset commit while a group is joining (a real broker accepts one of the
//!   current generation), and under load a member whose SyncGroup arrives after the leader's is
//!   refused and joins again, so a commit made between two joins can be dropped.

use std::sync::mpsc;
use std::thread::JoinHandle;

use rdkafka::error::RDKafkaErrorCode;
use rdkafka::mocking::MockCluster;

use crate::{LogError, Result, Topic, check_partition_count};

enum Request {
    CreateTopic {
        topic: String,
        partitions: i32,
        done: mpsc::Sender<Result<()>>,
    },
    /// Takes a broker down (its connections closed, new ones refused) or back up.
    SetBroker {
        broker: i32,
        up: bool,
        done: mpsc::Sender<Result<()>>,
    },
    Stop,
}

/// A running mock cluster; dropping it stops the brokers (drop the clients first).
pub struct MockKafka {
    bootstrap: String,
    requests: mpsc::Sender<Request>,
    brokers: i32,
    thread: Option<JoinHandle<()>>,
}

impl MockKafka {
    /// Starts `brokers` brokers on ephemeral loopback ports. Topics are replicated on all of
    /// them, so `acks=all` waits for more than one.
    pub fn start(brokers: i32) -> Result<Self> {
        let (requests, queue) = mpsc::channel();
        let (ready, started) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("mock-kafka".into())
            .spawn(move || {
                let cluster = match MockCluster::new(brokers) {
                    Ok(cluster) => cluster,
                    Err(e) => {
                        let _ = ready.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = ready.send(Ok(cluster.bootstrap_servers()));
                for request in queue {
                    match request {
                        Request::CreateTopic {
                            topic,
                            partitions,
                            done,
                        } => {
                            let created = match cluster.create_topic(&topic, partitions, brokers) {
                                Err(e)
                                    if e.rdkafka_error_code()
                                        == Some(RDKafkaErrorCode::TopicAlreadyExists) =>
                                {
                                    Ok(())
                                }
                                other => other.map_err(|e| {
                                    LogError::Unavailable(format!("mock kafka: {topic}: {e}"))
                                }),
                            };
                            let _ = done.send(created);
                        }
                        Request::SetBroker { broker, up, done } => {
                            let set = match up {
                                true => cluster.broker_up(broker),
                                false => cluster.broker_down(broker),
                            };
                            let _ = done.send(set.map_err(|e| {
                                LogError::Unavailable(format!("mock kafka: broker {broker}: {e}"))
                            }));
                        }
                        Request::Stop => break,
                    }
                }
            })
            .map_err(|e| LogError::Unavailable(format!("mock kafka thread: {e}")))?;
        let bootstrap = started
            .recv()
            .map_err(|_| LogError::Unavailable("mock kafka thread died".into()))?
            .map_err(|e| LogError::Unavailable(format!("mock kafka: {e}")))?;
        Ok(Self {
            bootstrap,
            requests,
            brokers,
            thread: Some(thread),
        })
    }

    /// `host:port,...` of the brokers.
    pub fn bootstrap_servers(&self) -> &str {
        &self.bootstrap
    }

    /// The log URL of this cluster, for [`crate::open`].
    pub fn url(&self) -> String {
        format!("kafka://{}", self.bootstrap)
    }

    pub fn brokers(&self) -> i32 {
        self.brokers
    }

    /// Creates `topic` unless it exists (an existing topic keeps its partition count). Blocks
    /// for a moment on the mock's thread.
    pub fn create_topic(&self, topic: &Topic, partitions: u32) -> Result<()> {
        check_partition_count(partitions)?;
        let (done, created) = mpsc::channel();
        let request = Request::CreateTopic {
            topic: topic.to_string(),
            partitions: partitions as i32,
            done,
        };
        let stopped = || LogError::Unavailable("mock kafka has stopped".into());
        self.requests.send(request).map_err(|_| stopped())?;
        created.recv().map_err(|_| stopped())?
    }
}

impl MockKafka {
    /// Takes broker `broker` (its id, or -1 for every broker) down, as a crash or a restart
    /// would: its connections close and new ones are refused until [`MockKafka::broker_up`].
    pub fn broker_down(&self, broker: i32) -> Result<()> {
        self.set_broker(broker, false)
    }

    /// Brings a broker taken down back.
    pub fn broker_up(&self, broker: i32) -> Result<()> {
        self.set_broker(broker, true)
    }

    fn set_broker(&self, broker: i32, up: bool) -> Result<()> {
        let (done, set) = mpsc::channel();
        let stopped = || LogError::Unavailable("mock kafka has stopped".into());
        self.requests
            .send(Request::SetBroker { broker, up, done })
            .map_err(|_| stopped())?;
        set.recv().map_err(|_| stopped())?
    }
}

impl Drop for MockKafka {
    fn drop(&mut self) {
        let _ = self.requests.send(Request::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
