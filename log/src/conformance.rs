//! The log conformance suite: the behaviour every `LogBackend` must show, as test bodies a
//! backend's tests instantiate in one line with [`log_conformance_suite!`](crate::log_conformance_suite).
//!
//! Each body takes a fresh [`Log`] but never assumes it is empty: topics and groups carry a
//! unique suffix, so a backend may share one cluster among all the cases. The module is built
//! with the `testsuite` feature rather than only under `cfg(test)`, so other crates' tests can
//! run it by enabling that feature in their dev-dependencies, while the binary never carries it;
//! it needs tokio only in the macro's expansion.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::{
    Group, Log, LogConsumer, LogError, MAX_RECORD_BYTES, Position, Record, Topic, partition_for,
};

/// Expands into one `#[tokio::test]` per conformance case.
///
/// `$make` is an expression evaluated afresh in every test, yielding a future of
/// `(Log, guard)`; the guard (a temp dir, a broker to stop, or `()`) is dropped after the log,
/// so the log can shut down before its files or broker go away. The calling crate needs this
/// crate with the `testsuite` feature and `tokio` (with `macros` and `rt-multi-thread`) among its
/// dev-dependencies.
///
/// ```ignore
/// async fn embedded() -> (log::Log, tempfile::TempDir) { /* open in a temp dir */ }
/// log::log_conformance_suite!(embedded());
/// ```
#[macro_export]
macro_rules! log_conformance_suite {
    ($make:expr) => {
        $crate::log_conformance_suite!(@cases $make;
            ping_answers,
            topics_are_created_once,
            unknown_topics_are_refused_and_never_created,
            bad_arguments_are_refused,
            offsets_are_dense_per_partition,
            end_offsets_follow_appends,
            keys_keep_their_partition,
            records_round_trip_in_order_per_key,
            odd_records_round_trip,
            oversize_records_are_refused,
            poll_waits_for_new_records,
            poll_returns_at_most_max,
            consumer_reads_only_its_partitions,
            commit_and_resume,
            commit_keeps_the_highest_offset_per_partition,
            uncommitted_records_are_redelivered,
            groups_are_independent,
            a_lone_member_reads_every_partition_from_the_commit,
            concurrent_appends_are_delivered_once_in_order,
        );
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            // Multi-threaded, so the concurrent cases really race.
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let (log, guard) = $make.await;
                $crate::conformance::$case(::std::clone::Clone::clone(&log)).await;
                ::std::mem::drop(log);
                ::std::mem::drop(guard);
            }
        )*
    };
}

// ---- fixtures ----

/// How long a poll may take to see records that are already durable: a Kafka consumer's first
/// poll includes finding the coordinator, fetching committed offsets and the first fetch.
const ARRIVAL: Duration = Duration::from_secs(15);
/// How long a poll waits to show that nothing more is coming.
const QUIET: Duration = Duration::from_millis(500);

/// `prefix` plus a suffix no other call in any process shares.
fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!(
        "{prefix}-{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh topic with `partitions` partitions.
async fn topic(log: &Log, partitions: u32) -> Topic {
    let topic = Topic::new(&unique("conformance")).unwrap();
    assert_eq!(
        log.create_topic(&topic, partitions).await.unwrap(),
        partitions
    );
    topic
}

fn group(prefix: &str) -> Group {
    Group::new(&unique(prefix)).unwrap()
}

/// Polls until exactly `n` records arrived, then checks that no more come.
async fn read_exactly(consumer: &mut dyn LogConsumer, n: usize) -> Vec<Record> {
    let deadline = Instant::now() + ARRIVAL;
    let mut records = Vec::new();
    while records.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "only {} of {n} records arrived in {ARRIVAL:?}",
            records.len()
        );
        records.extend(consumer.poll(n - records.len(), left).await.unwrap());
    }
    assert_eq!(records.len(), n, "poll returned more than `max` records");
    assert_nothing_more(consumer).await;
    records
}

async fn assert_nothing_more(consumer: &mut dyn LogConsumer) {
    let extra = consumer.poll(100, QUIET).await.unwrap();
    assert!(extra.is_empty(), "unexpected records: {extra:?}");
}

/// Checks that a consumer is at the end of its partitions, already on its first poll.
///
/// Waiting for a quiet spell cannot show that on a fresh consumer (a Kafka consumer's first
/// fetch may take longer than any such wait), so this appends a marker to each of the
/// consumer's partitions and reads until every marker arrived: anything read before them is a
/// record the consumer should not have had (records of a partition are read in order).
async fn assert_at_end(log: &Log, consumer: &mut dyn LogConsumer) {
    let topic = consumer.topic().clone();
    let count = log.partitions(&topic).await.unwrap();
    let mut markers = HashSet::new();
    for &p in consumer.partitions() {
        let key = (0..)
            .map(|i| format!("marker-{i}"))
            .find(|k| partition_for(k.as_bytes(), count) == p)
            .unwrap();
        markers.insert(log.append(&topic, key.as_bytes(), b"marker").await.unwrap());
    }
    let records = read_exactly(consumer, markers.len()).await;
    let read: HashSet<Position> = records.iter().map(Record::position).collect();
    assert_eq!(
        read, markers,
        "the consumer read records before the end: {records:?}"
    );
}

/// The payloads of `key`'s records, in the order they were read.
fn payloads_of<'r>(records: &'r [Record], key: &[u8]) -> Vec<&'r [u8]> {
    records
        .iter()
        .filter(|r| r.key == key)
        .map(|r| &r.payload[..])
        .collect()
}

/// The positions of `records`: what a processor commits once it has processed them.
fn positions(records: &[Record]) -> Vec<Position> {
    records.iter().map(Record::position).collect()
}

// ---- cases ----

pub async fn ping_answers(log: Log) {
    log.ping().await.unwrap();
}

pub async fn topics_are_created_once(log: Log) {
    let t = topic(&log, 3).await;
    assert_eq!(log.partitions(&t).await.unwrap(), 3);
    // A second creation keeps the first partition count.
    assert_eq!(log.create_topic(&t, 5).await.unwrap(), 3);
    assert_eq!(log.partitions(&t).await.unwrap(), 3);

    // Concurrent creations of one new topic agree on one count.
    let racing = Topic::new(&unique("racing")).unwrap();
    let mut set = JoinSet::new();
    for n in 1..=4 {
        let (log, racing) = (log.clone(), racing.clone());
        set.spawn(async move { log.create_topic(&racing, n).await.unwrap() });
    }
    let counts: HashSet<u32> = set.join_all().await.into_iter().collect();
    assert_eq!(counts.len(), 1, "racing creations disagree: {counts:?}");
    let count = *counts.iter().next().unwrap();
    assert_eq!(log.partitions(&racing).await.unwrap(), count);
}

pub async fn unknown_topics_are_refused_and_never_created(log: Log) {
    let missing = Topic::new(&unique("missing")).unwrap();
    assert!(matches!(
        log.partitions(&missing).await,
        Err(LogError::UnknownTopic(_))
    ));
    assert!(matches!(
        log.append(&missing, b"k", b"v").await,
        Err(LogError::UnknownTopic(_))
    ));
    assert!(matches!(
        log.consumer(&group("g"), &missing, &[0]).await,
        Err(LogError::UnknownTopic(_))
    ));
    assert!(matches!(
        log.consumer_of_all(&group("g"), &missing).await,
        Err(LogError::UnknownTopic(_))
    ));
    assert!(matches!(
        log.member(&group("g"), &missing).await.err(),
        Some(LogError::UnknownTopic(_))
    ));
    // None of that created it.
    assert!(matches!(
        log.partitions(&missing).await,
        Err(LogError::UnknownTopic(_))
    ));
}

pub async fn bad_arguments_are_refused(log: Log) {
    let t = Topic::new(&unique("bad")).unwrap();
    assert!(matches!(
        log.create_topic(&t, 0).await,
        Err(LogError::Invalid(_))
    ));
    let t = topic(&log, 2).await;
    let g = group("g");
    assert!(matches!(
        log.consumer(&g, &t, &[]).await.err(),
        Some(LogError::Invalid(_))
    ));
    assert!(matches!(
        log.consumer(&g, &t, &[1, 1]).await.err(),
        Some(LogError::Invalid(_))
    ));
    assert!(matches!(
        log.consumer(&g, &t, &[0, 2]).await.err(),
        Some(LogError::UnknownPartition { partition: 2, .. })
    ));

    let mut consumer = log.consumer(&g, &t, &[1]).await.unwrap();
    assert_eq!(consumer.partitions(), &[1]);
    assert_eq!(consumer.topic(), &t);
    assert_eq!(consumer.group(), &g);
    assert!(matches!(
        consumer.poll(0, QUIET).await,
        Err(LogError::Invalid(_))
    ));
    let other = Position {
        partition: 0,
        offset: 0,
    };
    assert!(matches!(
        consumer.commit(&[other]).await,
        Err(LogError::UnknownPartition { partition: 0, .. })
    ));
    // Committing nothing is a no-op.
    consumer.commit(&[]).await.unwrap();
}

pub async fn offsets_are_dense_per_partition(log: Log) {
    let t = topic(&log, 1).await;
    for i in 0..30u64 {
        let at = log
            .append(&t, format!("k{}", i % 3).as_bytes(), b"x")
            .await
            .unwrap();
        assert_eq!(
            at,
            Position {
                partition: 0,
                offset: i
            }
        );
    }
}

pub async fn end_offsets_follow_appends(log: Log) {
    let t = topic(&log, 3).await;
    assert_eq!(log.end_offsets(&t).await.unwrap(), vec![0, 0, 0]);
    let mut ends = vec![0u64; 3];
    for i in 0..10u32 {
        let at = log.append(&t, &i.to_be_bytes(), b"x").await.unwrap();
        ends[at.partition as usize] = at.offset + 1;
    }
    assert_eq!(log.end_offsets(&t).await.unwrap(), ends);
    let missing = Topic::new(&unique("missing")).unwrap();
    assert!(matches!(
        log.end_offsets(&missing).await,
        Err(LogError::UnknownTopic(_))
    ));
}

pub async fn keys_keep_their_partition(log: Log) {
    let t = topic(&log, 5).await;
    let mut keys: Vec<Vec<u8>> = (0..40)
        .map(|i| format!("sid_{i:03}").into_bytes())
        .collect();
    keys.push(Vec::new());
    keys.push(vec![0xff; 300]);
    let mut last: HashMap<Vec<u8>, Position> = HashMap::new();
    for round in 0..2 {
        for key in &keys {
            let at = log.append(&t, key, b"p").await.unwrap();
            assert_eq!(at.partition, partition_for(key, 5), "round {round}");
            if let Some(before) = last.insert(key.clone(), at) {
                assert_eq!(before.partition, at.partition);
                assert!(at.offset > before.offset);
            }
        }
    }
    // The spread is real: 42 keys over 5 partitions use more than one.
    let used: HashSet<u32> = last.values().map(|p| p.partition).collect();
    assert!(used.len() > 1);
}

pub async fn records_round_trip_in_order_per_key(log: Log) {
    let t = topic(&log, 4).await;
    let keys: Vec<String> = (0..6).map(|i| format!("sid_{i}")).collect();
    let mut appended = HashMap::new();
    for seq in 0..20 {
        for key in &keys {
            let payload = format!("{key}/{seq}");
            let at = log
                .append(&t, key.as_bytes(), payload.as_bytes())
                .await
                .unwrap();
            appended.insert(at, (key.clone(), payload));
        }
    }
    let mut consumer = log.consumer_of_all(&group("g"), &t).await.unwrap();
    assert_eq!(consumer.partitions(), &[0, 1, 2, 3]);
    let records = read_exactly(consumer.as_mut(), 120).await;

    // Each record is the one appended at its position, whole.
    for record in &records {
        let (key, payload) = &appended[&record.position()];
        assert_eq!(&record.key[..], key.as_bytes());
        assert_eq!(&record.payload[..], payload.as_bytes());
    }
    // Per key, the order of appending.
    for key in &keys {
        let expected: Vec<String> = (0..20).map(|seq| format!("{key}/{seq}")).collect();
        let got: Vec<&[u8]> = payloads_of(&records, key.as_bytes());
        let expected: Vec<&[u8]> = expected.iter().map(|s| s.as_bytes()).collect();
        assert_eq!(got, expected, "order of {key}");
    }
    // Per partition, offset order.
    for p in 0..4 {
        let offsets: Vec<u64> = records
            .iter()
            .filter(|r| r.partition == p)
            .map(|r| r.offset)
            .collect();
        assert!(offsets.windows(2).all(|w| w[0] < w[1]), "partition {p}");
    }
}

pub async fn odd_records_round_trip(log: Log) {
    let t = topic(&log, 2).await;
    let binary: Vec<u8> = (0..=255).collect();
    let largest = vec![b'x'; MAX_RECORD_BYTES - 3];
    let cases: Vec<(&[u8], &[u8])> = vec![
        (b"", b""),
        (b"k", b""),
        (b"", b"payload of an empty key"),
        (&binary, &binary),
        (b"big", &largest),
    ];
    let mut at = Vec::new();
    for (key, payload) in &cases {
        at.push(log.append(&t, key, payload).await.unwrap());
    }
    let mut consumer = log.consumer_of_all(&group("g"), &t).await.unwrap();
    let records = read_exactly(consumer.as_mut(), cases.len()).await;
    for ((key, payload), position) in cases.iter().zip(&at) {
        let record = records
            .iter()
            .find(|r| r.position() == *position)
            .expect("every appended record is read");
        assert_eq!(&record.key[..], *key);
        assert_eq!(&record.payload[..], *payload);
    }
}

pub async fn oversize_records_are_refused(log: Log) {
    let t = topic(&log, 1).await;
    let payload = vec![0u8; MAX_RECORD_BYTES];
    assert!(matches!(
        log.append(&t, b"k", &payload).await,
        Err(LogError::TooLarge { .. })
    ));
    // Nothing was written: the next record takes offset 0.
    assert_eq!(log.append(&t, b"k", b"small").await.unwrap().offset, 0);
}

pub async fn poll_waits_for_new_records(log: Log) {
    let t = topic(&log, 2).await;
    let mut consumer = log.consumer_of_all(&group("g"), &t).await.unwrap();
    // Nothing there: an empty answer after about `wait`.
    let started = Instant::now();
    assert!(consumer.poll(10, QUIET).await.unwrap().is_empty());
    assert!(started.elapsed() >= QUIET - Duration::from_millis(50));

    // A record appended while the consumer waits ends the wait, well before it would time out.
    let writer = {
        let (log, t) = (log.clone(), t.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            log.append(&t, b"late", b"arrival").await.unwrap()
        })
    };
    let started = Instant::now();
    let mut got = Vec::new();
    while got.is_empty() && started.elapsed() < ARRIVAL {
        got = consumer.poll(10, ARRIVAL).await.unwrap();
    }
    let at = writer.await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].position(), at);
    assert_eq!(&got[0].payload[..], b"arrival");
    assert!(
        started.elapsed() < ARRIVAL / 2,
        "the wait did not end on arrival: {:?}",
        started.elapsed()
    );
}

pub async fn poll_returns_at_most_max(log: Log) {
    let t = topic(&log, 1).await;
    for i in 0..10 {
        log.append(&t, b"k", format!("{i}").as_bytes())
            .await
            .unwrap();
    }
    let mut consumer = log.consumer_of_all(&group("g"), &t).await.unwrap();
    let mut records = Vec::new();
    let deadline = Instant::now() + ARRIVAL;
    while records.len() < 10 && Instant::now() < deadline {
        let batch = consumer.poll(3, ARRIVAL).await.unwrap();
        assert!(batch.len() <= 3, "poll(3) returned {}", batch.len());
        records.extend(batch);
    }
    let offsets: Vec<u64> = records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (0..10).collect::<Vec<_>>());
    assert_nothing_more(consumer.as_mut()).await;
}

pub async fn consumer_reads_only_its_partitions(log: Log) {
    let t = topic(&log, 4).await;
    let mut wanted = 0;
    for i in 0..40 {
        let at = log
            .append(&t, format!("key{i}").as_bytes(), b"v")
            .await
            .unwrap();
        if at.partition == 1 || at.partition == 3 {
            wanted += 1;
        }
    }
    // Given out of order: the consumer answers them sorted.
    let mut consumer = log.consumer(&group("g"), &t, &[3, 1]).await.unwrap();
    assert_eq!(consumer.partitions(), &[1, 3]);
    let records = read_exactly(consumer.as_mut(), wanted).await;
    assert!(records.iter().all(|r| r.partition == 1 || r.partition == 3));
}

pub async fn commit_and_resume(log: Log) {
    let t = topic(&log, 2).await;
    let g = group("g");
    let mut appended = Vec::new();
    for i in 0..20 {
        let key = format!("k{}", i % 4);
        appended.push(
            log.append(&t, key.as_bytes(), format!("{i}").as_bytes())
                .await
                .unwrap(),
        );
    }
    let mut first = log.consumer_of_all(&g, &t).await.unwrap();
    let records = read_exactly(first.as_mut(), 20).await;
    // Process the first 12 read, commit them, and stop.
    first.commit(&positions(&records[..12])).await.unwrap();
    drop(first);

    let committed: HashSet<Position> = records[..12].iter().map(Record::position).collect();
    // The committed prefix of each partition: everything at or below its highest committed
    // offset (records of a partition are read in order, so that is exactly what was processed).
    let through = |p: u32| {
        committed
            .iter()
            .filter(|c| c.partition == p)
            .map(|c| c.offset)
            .max()
    };
    let expected: HashSet<Position> = appended
        .iter()
        .copied()
        .filter(|a| through(a.partition).is_none_or(|last| a.offset > last))
        .collect();

    let mut second = log.consumer_of_all(&g, &t).await.unwrap();
    let rest = read_exactly(second.as_mut(), expected.len()).await;
    let rest: HashSet<Position> = rest.iter().map(Record::position).collect();
    assert_eq!(rest, expected, "a new consumer resumes after the commit");

    // Once everything is committed, a third consumer has nothing to read.
    second.commit(&appended).await.unwrap();
    drop(second);
    let mut third = log.consumer_of_all(&g, &t).await.unwrap();
    assert_at_end(&log, third.as_mut()).await;
}

pub async fn commit_keeps_the_highest_offset_per_partition(log: Log) {
    let t = topic(&log, 1).await;
    let g = group("g");
    for i in 0..6 {
        log.append(&t, b"k", format!("{i}").as_bytes())
            .await
            .unwrap();
    }
    let mut consumer = log.consumer_of_all(&g, &t).await.unwrap();
    read_exactly(consumer.as_mut(), 6).await;
    let at = |offset| Position {
        partition: 0,
        offset,
    };
    // Unordered positions within one commit: the highest counts.
    consumer.commit(&[at(3), at(1), at(2)]).await.unwrap();
    drop(consumer);
    let mut resumed = log.consumer_of_all(&g, &t).await.unwrap();
    let records = read_exactly(resumed.as_mut(), 2).await;
    assert_eq!(records.iter().map(|r| r.offset).collect::<Vec<_>>(), [4, 5]);
}

pub async fn uncommitted_records_are_redelivered(log: Log) {
    let t = topic(&log, 3).await;
    let g = group("g");
    for i in 0..15 {
        log.append(
            &t,
            format!("k{}", i % 5).as_bytes(),
            format!("{i}").as_bytes(),
        )
        .await
        .unwrap();
    }
    let mut first = log.consumer_of_all(&g, &t).await.unwrap();
    let seen = read_exactly(first.as_mut(), 15).await;
    // Crashed before committing anything.
    drop(first);

    let mut second = log.consumer_of_all(&g, &t).await.unwrap();
    let again = read_exactly(second.as_mut(), 15).await;
    for key in (0..5).map(|k| format!("k{k}")) {
        assert_eq!(
            payloads_of(&again, key.as_bytes()),
            payloads_of(&seen, key.as_bytes()),
            "redelivery of {key}"
        );
    }
    let seen: HashSet<Position> = seen.iter().map(Record::position).collect();
    let again: HashSet<Position> = again.iter().map(Record::position).collect();
    assert_eq!(seen, again);
}

pub async fn groups_are_independent(log: Log) {
    let t = topic(&log, 2).await;
    for i in 0..8 {
        log.append(&t, format!("k{i}").as_bytes(), b"v")
            .await
            .unwrap();
    }
    let (processor, dispatcher) = (group("processor"), group("dispatcher"));
    let mut a = log.consumer_of_all(&processor, &t).await.unwrap();
    let read = read_exactly(a.as_mut(), 8).await;
    a.commit(&positions(&read)).await.unwrap();
    drop(a);

    // The other group starts from the beginning, whatever the first committed.
    let mut b = log.consumer_of_all(&dispatcher, &t).await.unwrap();
    read_exactly(b.as_mut(), 8).await;
    drop(b);
    let mut a = log.consumer_of_all(&processor, &t).await.unwrap();
    assert_at_end(&log, a.as_mut()).await;
}

pub async fn a_lone_member_reads_every_partition_from_the_commit(log: Log) {
    let t = topic(&log, 3).await;
    let g = group("members");
    let mut appended = Vec::new();
    for i in 0..18 {
        appended.push(
            log.append(&t, format!("k{i}").as_bytes(), b"v")
                .await
                .unwrap(),
        );
    }
    // A member alone in its group gets every partition (on Kafka once it joined, which the
    // first polls wait for).
    let mut member = log.member(&g, &t).await.unwrap();
    assert_eq!(member.group(), &g);
    assert_eq!(member.topic(), &t);
    let records = read_exactly(member.as_mut(), appended.len()).await;
    assert_eq!(member.partitions(), &[0, 1, 2]);
    let told = member
        .take_rebalance()
        .expect("a member is told of its partitions");
    assert_eq!(told.assigned, [0, 1, 2]);
    assert!(told.revoked.is_empty(), "{told:?}");
    assert_eq!(member.take_rebalance(), None, "told once");

    member.commit(&positions(&records[..9])).await.unwrap();
    drop(member);
    let committed: HashSet<Position> = records[..9].iter().map(Record::position).collect();
    let through = |p: u32| {
        committed
            .iter()
            .filter(|c| c.partition == p)
            .map(|c| c.offset)
            .max()
    };
    let expected: HashSet<Position> = appended
        .iter()
        .copied()
        .filter(|a| through(a.partition).is_none_or(|last| a.offset > last))
        .collect();
    // The group's next member resumes after the commit.
    let mut next = log.member(&g, &t).await.unwrap();
    let rest = read_exactly(next.as_mut(), expected.len()).await;
    let rest: HashSet<Position> = rest.iter().map(Record::position).collect();
    assert_eq!(rest, expected, "the next member resumes after the commit");
}

pub async fn concurrent_appends_are_delivered_once_in_order(log: Log) {
    const TASKS: usize = 8;
    const KEYS_PER_TASK: usize = 4;
    const PER_KEY: usize = 25;
    let t = topic(&log, 4).await;

    // Each task owns its keys and appends to them in sequence, so the log's order per key is
    // the task's order, while the tasks race each other.
    let mut set = JoinSet::new();
    for task in 0..TASKS {
        let (log, t) = (log.clone(), t.clone());
        set.spawn(async move {
            let mut acked = Vec::new();
            for seq in 0..PER_KEY {
                for k in 0..KEYS_PER_TASK {
                    let key = format!("t{task}k{k}");
                    let at = log
                        .append(&t, key.as_bytes(), format!("{seq}").as_bytes())
                        .await
                        .unwrap();
                    acked.push(at);
                }
            }
            acked
        });
    }
    let acked: Vec<Position> = set.join_all().await.into_iter().flatten().collect();
    let total = TASKS * KEYS_PER_TASK * PER_KEY;
    assert_eq!(acked.len(), total);
    let distinct: HashSet<Position> = acked.iter().copied().collect();
    assert_eq!(distinct.len(), total, "two appends were given one position");

    let mut consumer = log.consumer_of_all(&group("g"), &t).await.unwrap();
    let records = read_exactly(consumer.as_mut(), total).await;
    let read: HashSet<Position> = records.iter().map(Record::position).collect();
    assert_eq!(read, distinct, "every acknowledged record is read, once");
    for task in 0..TASKS {
        for k in 0..KEYS_PER_TASK {
            let key = format!("t{task}k{k}");
            let seqs: Vec<usize> = payloads_of(&records, key.as_bytes())
                .iter()
                .map(|p| std::str::from_utf8(p).unwrap().parse().unwrap())
                .collect();
            assert_eq!(seqs, (0..PER_KEY).collect::<Vec<_>>(), "order of {key}");
        }
    }
}
