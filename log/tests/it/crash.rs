//! Crash durability of the embedded log: a child process appends (from several tasks at once,
//! so group commits are in flight) and consumes with commits, printing each acknowledgement;
//! the parent kills it with SIGKILL, reopens the directory, and checks that every acknowledged
//! record is there, whole, at its acknowledged position, and that the consumer group re-reads
//! from its last commit.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use log::{Group, Log, Position, Record, Topic};

/// Set (to the log directory) only in the child process the crash test starts.
const WRITER_DIR: &str = "VIGIL_BUS_CRASH_WRITER_DIR";
/// Precede each line the parent reads. The test harness may print `test crash_writer ... ` on
/// the same line, so the parent searches for them rather than matching line starts.
const APPENDED: &str = "@@appended@@ ";
const COMMITTING: &str = "@@committing@@ ";
const COMMITTED: &str = "@@committed@@ ";
/// The parent kills the child once it saw this many appends and commits acknowledged.
const APPENDS_BEFORE_KILL: usize = 400;
const COMMITS_BEFORE_KILL: usize = 5;

const PARTITIONS: u32 = 3;
const APPENDERS: usize = 4;

fn topic() -> Topic {
    Topic::new("crash.batches").unwrap()
}

fn group() -> Group {
    Group::new("processor").unwrap()
}

async fn open(dir: &Path) -> Log {
    log::open(&format!("embedded:{}", dir.display()))
        .await
        .expect("open embedded log")
}

/// The child half of `acknowledged_records_and_commits_survive_sigkill`: appends and consumes
/// until killed. Ignored, so only that test runs it (in a child process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the writer process of acknowledged_records_and_commits_survive_sigkill"]
async fn crash_writer() {
    let Ok(dir) = std::env::var(WRITER_DIR) else {
        return;
    };
    let log = open(Path::new(&dir)).await;
    log.create_topic(&topic(), PARTITIONS).await.unwrap();

    // The processor: reads, "processes" (here: nothing), commits what it read, again and again.
    // Each commit is announced before it starts and after it returned, so the parent knows the
    // commit on disk is one of the last two.
    let processor = {
        let mut consumer = log.consumer_of_all(&group(), &topic()).await.unwrap();
        tokio::spawn(async move {
            loop {
                let records = consumer.poll(50, Duration::from_secs(1)).await.unwrap();
                if records.is_empty() {
                    continue;
                }
                let positions: Vec<Position> = records.iter().map(Record::position).collect();
                let line = commit_line(&positions);
                println!("{COMMITTING}{line}");
                consumer.commit(&positions).await.unwrap();
                println!("{COMMITTED}{line}");
            }
        })
    };

    // Bounded so an orphaned writer stops; printing also fails (and ends it) once the parent
    // has gone and the pipe is closed.
    let mut appenders = tokio::task::JoinSet::new();
    for task in 0..APPENDERS {
        let log = log.clone();
        appenders.spawn(async move {
            for i in 0..25_000 {
                let key = format!("sid_{task}_{}", i % 5);
                let payload = format!("{task}/{i}");
                let at = log
                    .append(&topic(), key.as_bytes(), payload.as_bytes())
                    .await
                    .unwrap();
                println!("{APPENDED}{} {} {key} {payload}", at.partition, at.offset);
            }
        });
    }
    appenders.join_all().await;
    processor.abort();
}

/// `partition:next_offset` for each partition, the next offset being one past the highest
/// position committed there.
fn commit_line(positions: &[Position]) -> String {
    let mut next: BTreeMap<u32, u64> = BTreeMap::new();
    for p in positions {
        let n = next.entry(p.partition).or_default();
        *n = (*n).max(p.offset + 1);
    }
    next.iter()
        .map(|(p, n)| format!("{p}:{n}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_commit_line(line: &str) -> Vec<(u32, u64)> {
    line.split(',')
        .map(|part| {
            let (p, n) = part.split_once(':').unwrap();
            (p.parse().unwrap(), n.parse().unwrap())
        })
        .collect()
}

/// Kills the writer if the parent test fails before it does.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[derive(Default)]
struct Seen {
    /// Acknowledged appends: position → (key, payload).
    appended: HashMap<Position, (String, String)>,
    /// Per partition, the next offsets of the commits acknowledged, in order.
    committed: HashMap<u32, Vec<u64>>,
    /// Per partition, the next offset of the last commit started (it may or may not be on disk).
    committing: HashMap<u32, u64>,
    commits: usize,
}

impl Seen {
    fn take(&mut self, line: &str) {
        if let Some((_, ack)) = line.split_once(APPENDED) {
            let mut parts = ack.split(' ');
            let mut next = || parts.next().unwrap();
            let position = Position {
                partition: next().parse().unwrap(),
                offset: next().parse().unwrap(),
            };
            let (key, payload) = (next().to_owned(), next().to_owned());
            assert!(
                self.appended.insert(position, (key, payload)).is_none(),
                "two appends acknowledged at {position:?}"
            );
        } else if let Some((_, started)) = line.split_once(COMMITTING) {
            for (p, n) in parse_commit_line(started) {
                self.committing.insert(p, n);
            }
        } else if let Some((_, done)) = line.split_once(COMMITTED) {
            for (p, n) in parse_commit_line(done) {
                self.committed.entry(p).or_default().push(n);
            }
            self.commits += 1;
        }
    }
}

#[test]
fn acknowledged_records_and_commits_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "crash::crash_writer",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(WRITER_DIR, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the writer"),
    );
    let mut lines = BufReader::new(writer.0.stdout.take().unwrap()).lines();
    let mut seen = Seen::default();
    while seen.appended.len() < APPENDS_BEFORE_KILL || seen.commits < COMMITS_BEFORE_KILL {
        let line = lines
            .next()
            .expect("the writer stopped before it was killed")
            .unwrap();
        seen.take(&line);
    }
    // `Child::kill` is SIGKILL on Unix: no destructor, no flush, no clean close of the log.
    writer.0.kill().unwrap();
    let status = writer.0.wait().unwrap();
    assert!(
        !status.success(),
        "the writer must die by the signal, not finish: {status}"
    );
    // Lines still in the pipe were printed after their acknowledgement: count them too.
    for line in lines {
        seen.take(&line.unwrap());
    }

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let log = open(dir.path()).await;
        assert_eq!(log.partitions(&topic()).await.unwrap(), PARTITIONS);

        // Everything on disk, through a group that never committed.
        let audit = Group::new("audit").unwrap();
        let mut reader = log.consumer_of_all(&audit, &topic()).await.unwrap();
        let on_disk = read_all(reader.as_mut()).await;
        drop(reader);
        let by_position: HashMap<Position, &Record> =
            on_disk.iter().map(|r| (r.position(), r)).collect();

        // Every acknowledged append is there, whole, where it was acknowledged.
        for (position, (key, payload)) in &seen.appended {
            let record = by_position
                .get(position)
                .unwrap_or_else(|| panic!("acknowledged record at {position:?} is missing"));
            assert_eq!(&record.key[..], key.as_bytes(), "key at {position:?}");
            assert_eq!(&record.payload[..], payload.as_bytes(), "payload at {position:?}");
        }
        // What else reached the disk (appends in flight at the kill) is whole and dense: each
        // partition holds offsets 0..n with no gap.
        let mut ends = HashMap::new();
        for p in 0..PARTITIONS {
            let offsets: Vec<u64> = on_disk
                .iter()
                .filter(|r| r.partition == p)
                .map(|r| r.offset)
                .collect();
            assert_eq!(offsets, (0..offsets.len() as u64).collect::<Vec<_>>(), "partition {p}");
            ends.insert(p, offsets.len() as u64);
        }

        // The processor group resumes from its last commit on disk: the last one acknowledged,
        // or the one in flight at the kill; never earlier, never past it.
        let mut resumed = log.consumer_of_all(&group(), &topic()).await.unwrap();
        let again = read_all(resumed.as_mut()).await;
        for p in 0..PARTITIONS {
            let acked = seen.committed.get(&p).and_then(|c| c.last()).copied().unwrap_or(0);
            let in_flight = seen.committing.get(&p).copied().unwrap_or(acked);
            let offsets: Vec<u64> = again
                .iter()
                .filter(|r| r.partition == p)
                .map(|r| r.offset)
                .collect();
            let from = ends[&p] - offsets.len() as u64;
            assert!(
                from == acked || from == in_flight,
                "partition {p}: resumed at {from}, last acknowledged commit {acked}, in flight {in_flight}"
            );
            assert_eq!(offsets, (from..ends[&p]).collect::<Vec<_>>(), "partition {p} re-read");
        }
        eprintln!(
            "{} acknowledged appends and {} commits checked; {} records on disk, {} re-read",
            seen.appended.len(),
            seen.commits,
            on_disk.len(),
            again.len()
        );
    });
}

/// Polls until the log has nothing more for this consumer.
async fn read_all(consumer: &mut dyn log::LogConsumer) -> Vec<Record> {
    consumer
        .read_to_end(Duration::from_millis(300))
        .await
        .unwrap()
}
