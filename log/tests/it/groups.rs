//! Consumer groups: on Kafka (librdkafka's mock cluster), the members of a group share a
//! topic's partitions, each record is read by one of them, and a partition that moves goes on
//! from the group's last commit; the embedded log has one member per group and says so.

mod embedded {
    use log::{Group, LogError, Topic};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_member_of_a_group_is_refused_with_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let log = log::open(&format!("embedded:{}", dir.path().display()))
            .await
            .unwrap();
        let (batches, events) = (
            Topic::new("collect.batches").unwrap(),
            Topic::new("events").unwrap(),
        );
        log.create_topic(&batches, 4).await.unwrap();
        log.create_topic(&events, 2).await.unwrap();
        let processor = Group::new("processor").unwrap();

        let mut first = log.member(&processor, &batches).await.unwrap();
        assert_eq!(first.partitions(), &[0, 1, 2, 3], "one member reads all");
        match log.member(&processor, &batches).await.err() {
            Some(LogError::Invalid(message)) => assert!(
                message.contains("one consumer per group") && message.contains("kafka://"),
                "{message}"
            ),
            other => panic!("a second member was not refused: {other:?}"),
        }
        // Another group, or the same group on another topic, is another member.
        let dispatcher = Group::new("dispatcher").unwrap();
        drop(log.member(&dispatcher, &batches).await.unwrap());
        drop(log.member(&processor, &events).await.unwrap());

        // The member is told of its partitions once, like a Kafka member after joining.
        let told = first.take_rebalance().unwrap();
        assert_eq!(told.assigned, [0, 1, 2, 3]);
        assert!(told.revoked.is_empty());
        assert_eq!(first.take_rebalance(), None);

        // Once the first is gone, its group may have a member again.
        drop(first);
        let again = log.member(&processor, &batches).await.unwrap();
        assert_eq!(again.partitions(), &[0, 1, 2, 3]);
    }
}

#[cfg(feature = "kafka")]
mod kafka {
    use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use log::kafka::mock::MockKafka;
    use log::{Group, Log, LogConsumer, Position, Rebalance, Record, Topic, partition_for};
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};

    const PARTITIONS: u32 = 4;
    /// How long a group may take to settle: the mock cluster waits about three seconds for the
    /// members of a new group, and each cooperative round (revoke, then assign) takes another
    /// join of everyone.
    const SETTLE: Duration = Duration::from_secs(60);
    /// How long records already appended may take to be read.
    const ARRIVAL: Duration = Duration::from_secs(20);
    /// One poll of a member while several are driven in turn: short, so that each member's
    /// rebalance callbacks (which run inside its polls) are served promptly.
    const TURN: Duration = Duration::from_millis(100);

    /// A mock cluster, the log on it (through its URL, with a short group session: the mock
    /// waits up to the session timeout for the members of a changed group) and a fresh topic.
    async fn setup() -> (MockKafka, Log, Topic) {
        static N: AtomicU64 = AtomicU64::new(0);
        let cluster = MockKafka::start(1).unwrap();
        let log = log::open(&group_url(&cluster)).await.unwrap();
        let topic = Topic::new(&format!("groups-{}", N.fetch_add(1, Ordering::Relaxed))).unwrap();
        cluster.create_topic(&topic, PARTITIONS).unwrap();
        assert_eq!(log.partitions(&topic).await.unwrap(), PARTITIONS);
        (cluster, log, topic)
    }

    /// The cluster's URL with a short group session.
    fn group_url(cluster: &MockKafka) -> String {
        format!(
            "{}?session.timeout.ms=6000&heartbeat.interval.ms=500",
            cluster.url()
        )
    }

    /// A member with what it read and was told so far.
    struct Member {
        consumer: Box<dyn LogConsumer>,
        read: Vec<Record>,
        told: Vec<Rebalance>,
    }

    impl Member {
        async fn join(log: &Log, group: &Group, topic: &Topic) -> Self {
            Member {
                consumer: log.member(group, topic).await.unwrap(),
                read: Vec::new(),
                told: Vec::new(),
            }
        }

        async fn turn(&mut self) {
            let records = self.consumer.poll(100, TURN).await.unwrap();
            // What a processor does: records are only of partitions it reads.
            for r in &records {
                assert!(
                    self.consumer.partitions().contains(&r.partition),
                    "record of partition {} read by a member of {:?}",
                    r.partition,
                    self.consumer.partitions()
                );
            }
            self.read.extend(records);
            if let Some(rebalance) = self.consumer.take_rebalance() {
                self.told.push(rebalance);
            }
        }

        fn partitions(&self) -> BTreeSet<u32> {
            self.consumer.partitions().iter().copied().collect()
        }
    }

    /// Polls every member in turn until `done` holds, or fails after `within`.
    async fn drive(
        members: &mut [&mut Member],
        within: Duration,
        what: &str,
        done: impl Fn(&[&mut Member]) -> bool,
    ) {
        let deadline = Instant::now() + within;
        while !done(members) {
            let held: Vec<_> = members.iter().map(|m| m.partitions()).collect();
            assert!(
                Instant::now() < deadline,
                "{what}: not within {within:?}; partitions held: {held:?}"
            );
            for m in members.iter_mut() {
                m.turn().await;
            }
        }
    }

    /// Whether the members hold every partition between them, each some, none twice.
    fn split(members: &[&mut Member]) -> bool {
        let held: Vec<BTreeSet<u32>> = members.iter().map(|m| m.partitions()).collect();
        let total: usize = held.iter().map(BTreeSet::len).sum();
        let all: BTreeSet<u32> = held.iter().flatten().copied().collect();
        held.iter().all(|h| !h.is_empty())
            && total == PARTITIONS as usize
            && all == (0..PARTITIONS).collect()
    }

    /// Appends `n` records spread over every partition.
    async fn append(log: &Log, topic: &Topic, prefix: &str, n: usize) -> Vec<Position> {
        let mut at = Vec::new();
        for i in 0..n {
            at.push(
                log.append(topic, format!("{prefix}-{i}").as_bytes(), b"v")
                    .await
                    .unwrap(),
            );
        }
        let used: HashSet<u32> = at.iter().map(|p| p.partition).collect();
        assert_eq!(
            used.len(),
            PARTITIONS as usize,
            "every partition has records"
        );
        at
    }

    /// One record appended to each of `partitions`, to show where a reader stands.
    async fn markers(log: &Log, topic: &Topic, partitions: &BTreeSet<u32>) -> HashSet<Position> {
        let mut at = HashSet::new();
        for &p in partitions {
            let key = (0..)
                .map(|i| format!("marker-{i}"))
                .find(|k| partition_for(k.as_bytes(), PARTITIONS) == p)
                .unwrap();
            at.insert(log.append(topic, key.as_bytes(), b"marker").await.unwrap());
        }
        at
    }

    fn positions(records: &[Record]) -> Vec<Position> {
        records.iter().map(Record::position).collect()
    }

    /// Every position read by the members, checking that none was read twice.
    fn read_once(members: &[&mut Member]) -> HashSet<Position> {
        let mut count: HashMap<Position, usize> = HashMap::new();
        for m in members {
            for r in &m.read {
                *count.entry(r.position()).or_default() += 1;
            }
        }
        let twice: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "read more than once: {twice:?}");
        count.into_keys().collect()
    }

    fn group() -> Group {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        Group::new(&format!("g-{nanos}")).unwrap()
    }

    /// Two members split the partitions and read each record once; when one leaves, the other
    /// takes its partitions over from the group's last commit: the records after it, not those
    /// before. A commit of a partition a member does not hold is dropped, not an error.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn members_split_the_partitions_and_a_leavers_move_from_its_last_commit() {
        let (cluster, log, topic) = setup().await;
        let g = group();
        let mut a = Member::join(&log, &g, &topic).await;
        let mut b = Member::join(&log, &g, &topic).await;
        drive(&mut [&mut a, &mut b], SETTLE, "the split", split).await;
        assert!(
            a.read.is_empty() && b.read.is_empty(),
            "nothing was appended"
        );

        let appended: HashSet<Position> = append(&log, &topic, "k", 40).await.into_iter().collect();
        drive(&mut [&mut a, &mut b], ARRIVAL, "reading", |m| {
            read_once(m).len() == appended.len()
        })
        .await;
        // A quiet spell: nothing more, nothing twice.
        for _ in 0..5 {
            a.turn().await;
            b.turn().await;
        }
        assert_eq!(read_once(&[&mut a, &mut b]), appended);
        assert!(split(&[&mut a, &mut b]), "the split held while reading");
        assert!(!a.read.is_empty() && !b.read.is_empty());

        // `a` commits all it read, `b` the first half of what it read.
        a.consumer.commit(&positions(&a.read)).await.unwrap();
        let half = b.read.len() / 2;
        b.consumer
            .commit(&positions(&b.read[..half]))
            .await
            .unwrap();
        let b_partitions = b.partitions();
        // `a` has no business committing `b`'s partitions: dropped. Had it landed, `a` would
        // find nothing to read there after the takeover.
        let foreign: Vec<Position> = b_partitions
            .iter()
            .map(|&partition| Position {
                partition,
                offset: 1_000,
            })
            .collect();
        a.consumer.commit(&foreign).await.unwrap();

        let committed: HashMap<u32, u64> =
            b.read[..half].iter().fold(HashMap::new(), |mut m, r| {
                let e = m.entry(r.partition).or_insert(r.offset);
                *e = (*e).max(r.offset);
                m
            });
        let expected: HashSet<Position> = b
            .read
            .iter()
            .map(Record::position)
            .filter(|p| committed.get(&p.partition).is_none_or(|&c| p.offset > c))
            .collect();
        assert!(!expected.is_empty());
        drop(b);

        a.read.clear();
        a.told.clear();
        drive(&mut [&mut a], SETTLE, "the takeover", |m| {
            m[0].partitions().len() == PARTITIONS as usize
        })
        .await;
        let told: BTreeSet<u32> = a.told.iter().flat_map(|r| r.assigned.clone()).collect();
        assert_eq!(told, b_partitions, "`a` is told what it took over");
        drive(&mut [&mut a], ARRIVAL, "reading after the takeover", |m| {
            m[0].read.len() >= expected.len()
        })
        .await;
        for _ in 0..5 {
            a.turn().await;
        }
        let reread: HashSet<Position> = a.read.iter().map(Record::position).collect();
        assert_eq!(reread.len(), a.read.len(), "nothing twice");
        assert_eq!(
            reread, expected,
            "the takeover reads exactly what `b` had not committed"
        );
        drop(a);
        drop(log);
        drop(cluster);
    }

    /// The group's committed resume offsets for `partitions`, read by a client outside the
    /// group (an `OffsetFetch`, which joins nothing): what a partition's next owner starts at.
    async fn committed(
        cluster: &MockKafka,
        group: &Group,
        topic: &Topic,
        partitions: &BTreeSet<u32>,
    ) -> BTreeMap<u32, Option<u64>> {
        let reader: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .set("group.id", group.as_str())
            .create()
            .unwrap();
        let mut list = TopicPartitionList::new();
        for &p in partitions {
            list.add_partition(topic.as_str(), p as i32);
        }
        let found = tokio::task::spawn_blocking(move || {
            reader.committed_offsets(list, Duration::from_secs(10))
        })
        .await
        .unwrap()
        .unwrap();
        found
            .elements()
            .iter()
            .map(|e| {
                let at = match e.offset() {
                    Offset::Offset(n) => Some(n as u64),
                    _ => None,
                };
                (e.partition() as u32, at)
            })
            .collect()
    }

    /// A member told that partitions are revoked still owns them until its next poll: it
    /// commits what it processed of them, and their next owner starts after that, reading
    /// nothing again.
    ///
    /// The mock cluster ends a round at the leader's SyncGroup: a member whose SyncGroup comes
    /// after it is answered "invalid request" and joins again, and while a group is joining
    /// the mock refuses every commit (a real broker accepts a commit of the current generation
    /// while a join is pending). Were `a` the leader, a late SyncGroup from `b` after `a` was
    /// told would start a join that waits for `a`, which rejoins only once it hands the
    /// partitions back, so its commit could not land; under load that happened in most
    /// rounds. So the group's static member ids make `b` the leader (the mock elects the
    /// smallest): the only SyncGroup that can come late is `a`'s own, and `a` is then told
    /// nothing and joins again. Once `a` is told, every member has synced and nothing starts
    /// another join before `a` hands the partitions back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_member_commits_revoked_partitions_before_it_hands_them_over() {
        let (cluster, log, topic) = setup().await;
        let url = group_url(&cluster);
        let log_a = log::open(&format!("{url}&group.instance.id=1-follower"))
            .await
            .unwrap();
        let log_b = log::open(&format!("{url}&group.instance.id=0-leader"))
            .await
            .unwrap();
        let g = group();
        let mut a = Member::join(&log_a, &g, &topic).await;
        drive(&mut [&mut a], SETTLE, "the first member's join", |m| {
            m[0].partitions().len() == PARTITIONS as usize
        })
        .await;
        let appended = append(&log, &topic, "k", 40).await;
        drive(&mut [&mut a], ARRIVAL, "reading", |m| {
            m[0].read.len() == appended.len()
        })
        .await;
        a.told.clear();

        // A second member joins: the group takes some partitions from `a`, which is told.
        let mut b = Member::join(&log_b, &g, &topic).await;
        drive(&mut [&mut a, &mut b], SETTLE, "the revocation", |m| {
            m[0].told.iter().any(|r| !r.revoked.is_empty())
        })
        .await;
        let revoked: BTreeSet<u32> = a.told.iter().flat_map(|r| r.revoked.clone()).collect();
        // Still `a`'s until its next poll. Were they not, the group went on without `a` (its
        // assignment lost, which it is told as a revocation too, under a starved CPU), and the
        // commit below could not land.
        assert!(
            a.partitions().is_superset(&revoked),
            "`a` no longer holds {revoked:?}: {:?}",
            a.partitions()
        );
        // Processed, stored: committed before the next poll hands the partitions over.
        a.consumer.commit(&positions(&a.read)).await.unwrap();
        let resume: BTreeMap<u32, Option<u64>> = revoked
            .iter()
            .map(|&p| {
                let last = a
                    .read
                    .iter()
                    .filter(|r| r.partition == p)
                    .map(|r| r.offset)
                    .max();
                (p, last.map(|o| o + 1))
            })
            .collect();
        // Read from outside the group: the group is fresh, so a commit that did not land (a
        // member that had already handed the partitions back) leaves nothing committed.
        assert_eq!(
            committed(&cluster, &g, &topic, &revoked).await,
            resume,
            "the group resumes after what was processed"
        );

        drive(&mut [&mut a, &mut b], SETTLE, "the split", split).await;
        assert_eq!(b.partitions(), revoked, "`b` got what `a` gave up");
        assert!(b.read.is_empty(), "`b` read again: {:?}", b.read);

        // Where each stands: at the end, so the markers are all either reads.
        let ends = markers(&log, &topic, &(0..PARTITIONS).collect()).await;
        a.read.clear();
        drive(&mut [&mut a, &mut b], ARRIVAL, "reading the markers", |m| {
            read_once(m).len() >= ends.len()
        })
        .await;
        for _ in 0..5 {
            a.turn().await;
            b.turn().await;
        }
        assert_eq!(read_once(&[&mut a, &mut b]), ends, "only the markers");
        drop((a, b));
        drop((log, log_a, log_b));
        drop(cluster);
    }
}
