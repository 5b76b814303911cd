//! The log conformance suite against both backends: the embedded log in a fresh directory, and
//! the Kafka backend against librdkafka's mock cluster (the real Kafka protocol over loopback
//! TCP, served in-process by the bundled librdkafka), plus checks particular to each.

mod embedded {
    use std::path::Path;

    use log::{Group, Log, Position, Topic};

    /// Each case gets its own directory, removed after the log is closed.
    async fn embedded_log() -> (Log, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = open(dir.path()).await;
        (log, dir)
    }

    async fn open(dir: &Path) -> Log {
        // Through the URL, as the binary opens it.
        log::open(&format!("embedded:{}", dir.display()))
            .await
            .expect("open embedded log")
    }

    log::log_conformance_suite!(embedded_log());

    /// A log written when every partition's records shared one `log_records` keyspace (keys
    /// `[len][topic][partition u32 BE][offset u64 BE]`): opened now, its records are moved into
    /// a keyspace per partition, read in order from the group's committed position, and appends
    /// continue after them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_log_with_all_partitions_in_one_keyspace_is_moved_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let (topic, group) = ("collect.batches", "processor");
        let legacy_key = |partition: u32, offset: u64| {
            let mut k = vec![topic.len() as u8];
            k.extend_from_slice(topic.as_bytes());
            k.extend_from_slice(&partition.to_be_bytes());
            k.extend_from_slice(&offset.to_be_bytes());
            k
        };
        let value = |key: &str, payload: &str| {
            let mut v = (key.len() as u32).to_be_bytes().to_vec();
            v.extend_from_slice(key.as_bytes());
            v.extend_from_slice(payload.as_bytes());
            v
        };
        {
            let db = fjall::Database::builder(dir.path()).open().unwrap();
            let open = |name: &str| {
                db.keyspace(name, fjall::KeyspaceCreateOptions::default)
                    .unwrap()
            };
            let (topics, records, committed) = (
                open("log_topics"),
                open("log_records"),
                open("log_committed"),
            );
            topics.insert(topic, 2u32.to_be_bytes()).unwrap();
            for offset in 0..3 {
                records
                    .insert(legacy_key(0, offset), value("sid_a", &format!("a{offset}")))
                    .unwrap();
            }
            for offset in 0..2 {
                records
                    .insert(legacy_key(1, offset), value("sid_b", &format!("b{offset}")))
                    .unwrap();
            }
            let mut k = vec![group.len() as u8];
            k.extend_from_slice(group.as_bytes());
            k.push(topic.len() as u8);
            k.extend_from_slice(topic.as_bytes());
            k.extend_from_slice(&0u32.to_be_bytes());
            committed.insert(k, 1u64.to_be_bytes()).unwrap();
            db.persist(fjall::PersistMode::SyncAll).unwrap();
        }

        let (topic, group) = (Topic::new(topic).unwrap(), Group::new(group).unwrap());
        let log = open(dir.path()).await;
        assert_eq!(log.partitions(&topic).await.unwrap(), 2);
        assert_eq!(log.end_offsets(&topic).await.unwrap(), vec![3, 2]);
        let mut consumer = log.consumer_of_all(&group, &topic).await.unwrap();
        let mut read = Vec::new();
        while read.len() < 4 {
            let batch = consumer
                .poll(10, std::time::Duration::from_secs(5))
                .await
                .unwrap();
            assert!(
                !batch.is_empty(),
                "only {} of 4 records came back",
                read.len()
            );
            read.extend(batch);
        }
        let mut got: Vec<(u32, u64, String)> = read
            .iter()
            .map(|r| {
                (
                    r.partition,
                    r.offset,
                    String::from_utf8(r.payload.to_vec()).unwrap(),
                )
            })
            .collect();
        got.sort();
        let expected = [(0, 1, "a1"), (0, 2, "a2"), (1, 0, "b0"), (1, 1, "b1")]
            .map(|(p, o, v)| (p, o, v.to_owned()));
        assert_eq!(got, expected);
        assert_eq!(
            &read[0].key[..],
            if read[0].partition == 0 {
                b"sid_a"
            } else {
                b"sid_b"
            }
        );
        drop(consumer);
        let next = log.append(&topic, b"sid_a", b"a3").await.unwrap();
        assert_eq!(next.offset, if next.partition == 0 { 3 } else { 2 });
        drop(log);

        // Moved once: the old keyspace is gone, and the records stay where they were moved.
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        assert!(!db.keyspace_exists("log_records"));
        drop(db);
        let log = open(dir.path()).await;
        let mut ends = log.end_offsets(&topic).await.unwrap();
        ends[next.partition as usize] -= 1;
        assert_eq!(ends, vec![3, 2]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_topics_and_commits_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let topic = Topic::new("collect.batches").unwrap();
        let group = Group::new("processor").unwrap();
        let wait = std::time::Duration::from_secs(5);

        let log = open(dir.path()).await;
        log.create_topic(&topic, 3).await.unwrap();
        let mut appended = Vec::new();
        for i in 0..50 {
            let key = format!("sid_{}", i % 7);
            appended.push(
                log.append(&topic, key.as_bytes(), format!("{i}").as_bytes())
                    .await
                    .unwrap(),
            );
        }
        let mut consumer = log.consumer_of_all(&group, &topic).await.unwrap();
        let mut read = Vec::new();
        while read.len() < 50 {
            read.extend(consumer.poll(50, wait).await.unwrap());
        }
        let processed: Vec<Position> = read[..20].iter().map(|r| r.position()).collect();
        consumer.commit(&processed).await.unwrap();
        drop(consumer);
        drop(log);

        let log = open(dir.path()).await;
        // The topic is known without being created again.
        assert_eq!(log.partitions(&topic).await.unwrap(), 3);
        // Offsets continue where they stopped, per partition.
        let next = log.append(&topic, b"sid_0", b"after").await.unwrap();
        let last_before = appended
            .iter()
            .filter(|a| a.partition == next.partition)
            .map(|a| a.offset)
            .max()
            .unwrap();
        assert_eq!(next.offset, last_before + 1);

        // The group resumes after its commit: the 30 it had not committed, then the new one.
        let mut resumed = log.consumer_of_all(&group, &topic).await.unwrap();
        let mut again = Vec::new();
        while again.len() < 31 {
            let batch = resumed.poll(100, wait).await.unwrap();
            assert!(
                !batch.is_empty(),
                "only {} of 31 records came back",
                again.len()
            );
            again.extend(batch);
        }
        let expected: std::collections::HashSet<Position> = read[20..]
            .iter()
            .map(|r| r.position())
            .chain([next])
            .collect();
        let got: std::collections::HashSet<Position> = again.iter().map(|r| r.position()).collect();
        assert_eq!(got, expected);
        for record in &again {
            if let Some(before) = read.iter().find(|r| r.position() == record.position()) {
                assert_eq!(record, before, "a record changed across reopening");
            }
        }
    }

    #[tokio::test]
    async fn a_bare_embedded_url_is_refused() {
        assert!(matches!(
            log::open("embedded:").await.err(),
            Some(log::LogError::Invalid(_))
        ));
        assert!(matches!(
            log::open("nats://localhost").await.err(),
            Some(log::LogError::NotEnabled(_))
        ));
    }
}

#[cfg(feature = "kafka")]
mod kafka {
    use std::sync::Arc;
    use std::time::Duration;

    use log::kafka::mock::MockKafka;
    use log::kafka::{KafkaConfig, KafkaLog};
    use log::{Log, LogCall, LogError, LogLayer, Result, Topic};
    use rdkafka::ClientConfig;
    use rdkafka::producer::{FutureProducer, FutureRecord};

    /// Brokers in the mock cluster: more than one, so leaders, replicas and `acks=all` are
    /// exercised rather than trivially true.
    const BROKERS: i32 = 3;

    /// Group timing for tests on the mock cluster (see `kafka_log`).
    const GROUP_TIMING: &str = "session.timeout.ms=6000&heartbeat.interval.ms=500";

    /// The Kafka log with one difference: the mock cluster has no CreateTopics API, so a topic
    /// is first made on the mock directly, then the backend's own `create_topic` runs and finds
    /// it through its metadata lookup. Everything else goes to the backend untouched.
    struct OnMockCluster {
        log: Log,
        cluster: Arc<MockKafka>,
    }

    impl LogLayer for OnMockCluster {
        async fn around<'a, T: Send + 'a>(
            &'a self,
            call: LogCall<'a>,
            run: impl std::future::Future<Output = Result<T>> + Send + 'a,
        ) -> Result<T> {
            if let LogCall::CreateTopic { topic, partitions } = call {
                let legal = (1..=log::MAX_PARTITIONS).contains(&partitions);
                if legal
                    && matches!(
                        self.log.partitions(topic).await,
                        Err(LogError::UnknownTopic(_))
                    )
                {
                    self.cluster.create_topic(topic, partitions)?;
                }
            }
            run.await
        }
    }

    /// The guard is the cluster, dropped after the log so the clients close before the brokers.
    async fn kafka_log() -> (Log, Arc<MockKafka>) {
        let cluster = Arc::new(MockKafka::start(BROKERS).expect("start the mock cluster"));
        // Through the URL, as the binary opens it, with a short group session: the mock
        // cluster waits up to the session timeout for the members of a group that changed,
        // and librdkafka's default (45 s) would make every membership case wait that long.
        let url = format!("{}?{GROUP_TIMING}", cluster.url());
        let log = log::open(&url).await.expect("open the kafka log");
        let layer = OnMockCluster {
            log: Arc::clone(&log),
            cluster: Arc::clone(&cluster),
        };
        let log: Log = Arc::new(log::Layered::new(log, layer));
        (log, cluster)
    }

    log::log_conformance_suite!(kafka_log());

    /// Our partitioner is Kafka's: librdkafka's own `murmur2` partitioner, choosing for records
    /// sent without a partition, puts every key where `partition_for` says.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn partition_for_agrees_with_librdkafkas_murmur2_partitioner() {
        let cluster = MockKafka::start(BROKERS).unwrap();
        let topic = Topic::new("murmur2-check").unwrap();
        cluster.create_topic(&topic, 7).unwrap();
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .set("partitioner", "murmur2")
            .create()
            .unwrap();
        for i in 0..100 {
            let key = format!("sid_{i:04}");
            let delivery = producer
                .send(
                    FutureRecord::to(topic.as_str()).key(&key).payload("x"),
                    Duration::from_secs(10),
                )
                .await
                .unwrap();
            assert_eq!(
                delivery.partition as u32,
                log::partition_for(key.as_bytes(), 7),
                "key {key}"
            );
        }
    }

    #[test]
    fn urls_are_checked() {
        let config =
            KafkaConfig::parse("k1:9092,k2:9093?linger.ms=5&client.id=vigil%20one").unwrap();
        assert_eq!(config.brokers, "k1:9092,k2:9093");
        assert_eq!(
            config.properties,
            [
                ("linger.ms".to_owned(), "5".to_owned()),
                ("client.id".to_owned(), "vigil one".to_owned())
            ]
        );
        assert_eq!(config.namespace, None);
        // The namespace is the log's, never handed to librdkafka.
        let config = KafkaConfig::parse("k1:9092?namespace=staging&linger.ms=5").unwrap();
        assert_eq!(config.namespace.as_deref(), Some("staging"));
        assert_eq!(
            config.properties,
            [("linger.ms".to_owned(), "5".to_owned())]
        );
        for bad in [
            "k1:9092?namespace=",
            "k1:9092?namespace=a%20b",
            format!("k1:9092?namespace={}", "n".repeat(101)).as_str(),
            "",
            "k1",
            "k1:notaport",
            "k1:9092,",
            ":9092",
            "k1:9092?acks=1",
            "k1:9092?group.id=x",
        ] {
            assert!(
                matches!(KafkaConfig::parse(bad), Err(LogError::Invalid(_))),
                "`{bad}` was accepted"
            );
        }
        assert!(KafkaLog::connect(&KafkaConfig::new("localhost:9092")).is_ok());
    }

    #[test]
    fn user_info_is_sasl_and_no_secret_is_shown() {
        let config = KafkaConfig::parse("app:hun%40ter2@k1:9092,k2:9093?linger.ms=5").unwrap();
        assert_eq!(config.brokers, "k1:9092,k2:9093");
        let property = |name: &str| {
            config
                .properties
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(property("sasl.username"), Some("app"));
        assert_eq!(
            property("sasl.password"),
            Some("hun@ter2"),
            "percent-decoded"
        );
        assert_eq!(property("sasl.mechanism"), Some("PLAIN"));
        assert_eq!(
            property("security.protocol"),
            Some("sasl_ssl"),
            "never in the clear unless asked"
        );
        let chosen = KafkaConfig::parse(
            "app:pw@k1:9092?security.protocol=sasl_plaintext&sasl.mechanism=SCRAM-SHA-256",
        )
        .unwrap();
        assert!(
            chosen
                .properties
                .iter()
                .any(|(n, v)| n == "security.protocol" && v == "sasl_plaintext")
        );
        assert_eq!(
            chosen
                .properties
                .iter()
                .filter(|(n, _)| n.starts_with("sasl.mechanism") || n == "security.protocol")
                .count(),
            2,
            "the URL's choices stand"
        );
        for bad in [
            "app@k1:9092",
            ":pw@k1:9092",
            "app:pw@k1:9092?sasl.password=other",
            "app:pw@",
        ] {
            match KafkaConfig::parse(bad) {
                Err(LogError::Invalid(message)) => assert!(!message.contains("pw"), "{message}"),
                other => panic!("`{bad}` was accepted: {other:?}"),
            }
        }

        let debug = format!(
            "{:?}",
            KafkaConfig::parse("k1:9092?sasl.username=u&sasl.password=hunter2&ssl.key.pem=hunter2")
                .unwrap()
        );
        assert!(
            !debug.contains("hunter2") && debug.contains("sasl.username"),
            "{debug}"
        );
        // A secret property librdkafka refuses is named, its value is not. (This build has
        // OpenSSL, which takes a key password alone; a build without it refuses every `ssl.*`
        // property, and the refusal is checked here.)
        if let Err(e) =
            KafkaLog::connect(&KafkaConfig::parse("k1:9092?ssl.key.password=hunter2").unwrap())
        {
            let message = e.to_string();
            assert!(
                !message.contains("hunter2") && message.contains("ssl.key.password"),
                "{message}"
            );
        }
    }
}
