//! The embedded log's retention (`LogBackend::expire`): records older than the retention go once
//! every group still about (with a member, or a commit within the retention) has read them, a
//! step at most a budget long; a partition's last record stays, so its offsets go on after a
//! reopen; a topic nobody reads (the dead letters) expires by age alone, and so do records a
//! gone group never read; a log written before retention gets its marks when opened.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use log::{Group, Log, LogError, Position, Topic};

const RETENTION: Duration = Duration::from_secs(4);
/// Past the retention, with room for the appends before it (an fsync each).
const PAST: Duration = Duration::from_millis(4600);

async fn open(dir: &Path) -> Log {
    log::open(&format!("embedded:{}", dir.display()))
        .await
        .expect("open embedded log")
}

fn batches() -> Topic {
    Topic::new("retention.batches").unwrap()
}

fn dead() -> Topic {
    Topic::new("retention.dead").unwrap()
}

/// Appends `n` records to `topic` (one partition), answering their offsets.
async fn append(log: &Log, topic: &Topic, n: usize) -> Vec<u64> {
    let mut offsets = Vec::new();
    for i in 0..n {
        let at = log
            .append(topic, b"session", format!("record {i}").as_bytes())
            .await
            .unwrap();
        offsets.push(at.offset);
    }
    offsets
}

/// The offsets a new group reads of `topic`, from its beginning.
async fn stored(log: &Log, topic: &Topic) -> Vec<u64> {
    static READERS: AtomicUsize = AtomicUsize::new(0);
    let n = READERS.fetch_add(1, Ordering::Relaxed);
    let group = Group::new(&format!("reader-{n}")).unwrap();
    let mut consumer = log.consumer_of_all(&group, topic).await.unwrap();
    let records = consumer
        .read_to_end(Duration::from_millis(100))
        .await
        .unwrap();
    records.iter().map(|r| r.offset).collect()
}

/// Runs retention steps of `budget` until one says nothing more expired; answers how many steps
/// said more remained.
async fn expire_all(log: &Log, budget: usize) -> usize {
    let mut more = 0;
    while log.expire(RETENTION, budget).await.unwrap() {
        more += 1;
        assert!(more < 1000, "retention never finishes");
    }
    more
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_every_group_read_go_once_past_the_retention() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path()).await;
    log.create_topic(&batches(), 1).await.unwrap();
    log.create_topic(&dead(), 1).await.unwrap();
    // The first step tells the log how fine its time marks must be; nothing is old yet.
    assert!(!log.expire(RETENTION, 8).await.unwrap());
    assert_eq!(
        append(&log, &batches(), 30).await,
        (0..30).collect::<Vec<_>>()
    );
    append(&log, &dead(), 5).await;

    // The processor (a member, as the role is) read everything and committed the first twenty.
    let processor = Group::new("processor").unwrap();
    let mut consumer = log.member(&processor, &batches()).await.unwrap();
    let read = consumer
        .poll(100, Duration::from_millis(100))
        .await
        .unwrap();
    assert_eq!(read.len(), 30);
    let first_twenty: Vec<Position> = read[..20].iter().map(|r| r.position()).collect();
    consumer.commit(&first_twenty).await.unwrap();

    // Nothing goes before the retention has passed.
    assert_eq!(expire_all(&log, 8).await, 0);
    assert_eq!(stored(&log, &batches()).await.len(), 30);

    tokio::time::sleep(PAST).await;
    let young = append(&log, &batches(), 3).await;
    assert_eq!(young, vec![30, 31, 32]);

    // Twenty-four records are old and read (twenty batches, four of the five dead letters):
    // three full steps of 8 drop them, and a fourth finds nothing more.
    assert_eq!(expire_all(&log, 8).await, 3);
    assert_eq!(
        stored(&log, &batches()).await,
        (20..33).collect::<Vec<_>>(),
        "old records the processor has yet to read stay, and young ones"
    );
    // Nobody reads the dead letters: all old, all go but the last.
    assert_eq!(stored(&log, &dead()).await, vec![4]);

    // Once the processor has read the rest, the old ones among them go too.
    let all: Vec<Position> = read.iter().map(|r| r.position()).collect();
    consumer.commit(&all).await.unwrap();
    expire_all(&log, 8).await;
    assert_eq!(stored(&log, &batches()).await, young);
    // The processor's own consumer reads on where it was.
    let next = consumer
        .poll(100, Duration::from_millis(100))
        .await
        .unwrap();
    assert_eq!(
        next.iter().map(|r| r.offset).collect::<Vec<_>>(),
        young,
        "the processor reads the young records next"
    );
    let read: Vec<Position> = next.iter().map(|r| r.position()).collect();
    consumer.commit(&read).await.unwrap();
    assert_eq!(log.end_offsets(&batches()).await.unwrap(), vec![33]);
    drop(consumer);

    // When the young records are old too, all but the last go.
    tokio::time::sleep(PAST).await;
    expire_all(&log, 8).await;
    assert_eq!(stored(&log, &batches()).await, vec![32]);

    // Offsets go on from the kept records after a reopen.
    drop(log);
    let log = open(dir.path()).await;
    assert_eq!(append(&log, &batches(), 1).await, vec![33]);
    assert_eq!(append(&log, &dead(), 1).await, vec![5]);
    let mut consumer = log.consumer_of_all(&processor, &batches()).await.unwrap();
    let next = consumer
        .poll(100, Duration::from_millis(100))
        .await
        .unwrap();
    assert_eq!(next.iter().map(|r| r.offset).collect::<Vec<_>>(), vec![33]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_needs_a_budget() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path()).await;
    assert!(matches!(
        log.expire(RETENTION, 0).await,
        Err(LogError::Invalid(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_holds_back_what_it_has_not_read_and_a_gone_group_stops_holding() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path()).await;
    log.create_topic(&batches(), 1).await.unwrap();
    assert!(!log.expire(RETENTION, 8).await.unwrap());
    // A processor that joined and is stuck (a store outage, say): it never commits.
    let processor = Group::new("processor").unwrap();
    let member = log.member(&processor, &batches()).await.unwrap();
    append(&log, &batches(), 10).await;
    tokio::time::sleep(PAST).await;
    append(&log, &batches(), 1).await;
    expire_all(&log, 8).await;
    assert_eq!(
        stored(&log, &batches()).await,
        (0..11).collect::<Vec<_>>(),
        "a member's unread records stay, however old"
    );

    // The group is gone (no member, no commit within the retention): it holds nothing back.
    drop(member);
    expire_all(&log, 8).await;
    assert_eq!(stored(&log, &batches()).await, vec![10]);
}

/// A log written before retention: its partitions have records but no time marks. Opened now,
/// they are marked, and their records expire a retention later rather than never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_written_before_retention_expire_a_retention_after_the_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let open = |name: &str| {
            db.keyspace(name, fjall::KeyspaceCreateOptions::default)
                .unwrap()
        };
        open("log_topics")
            .insert(batches().as_str(), 1u32.to_be_bytes())
            .unwrap();
        let records = open(&format!("{}#0", batches().as_str()));
        for offset in 0..5u64 {
            let mut value = 7u32.to_be_bytes().to_vec();
            value.extend_from_slice(b"session");
            value.extend_from_slice(format!("old {offset}").as_bytes());
            records.insert(offset.to_be_bytes(), value).unwrap();
        }
        db.persist(fjall::PersistMode::SyncAll).unwrap();
    }
    let log = open(dir.path()).await;
    assert!(!log.expire(RETENTION, 8).await.unwrap());
    assert_eq!(stored(&log, &batches()).await.len(), 5, "kept a retention");
    tokio::time::sleep(PAST).await;
    expire_all(&log, 8).await;
    assert_eq!(stored(&log, &batches()).await, vec![4]);
    assert_eq!(append(&log, &batches(), 1).await, vec![5]);
}
