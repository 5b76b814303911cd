//! Prints what retention costs the embedded log and what it saves: the same steady load twice,
//! once with nothing expiring and once swept the way `vigil serve` sweeps (`expire` steps of
//! 2,048 records 5 ms apart while more remain, a pass every tenth of the retention). The load
//! is 64 tasks appending records of a batch's size at a fixed total rate, and one consumer
//! reading and committing as the processor does. Each run prints its appends per second, their
//! latency, the log directory's size on disk as it goes and at the end, and the records left;
//! the swept run also prints its steps' times.
//!
//! ```text
//! cargo run --release -p vigil-log --example log_retention [SECONDS] [RATE] [RETENTION_SECONDS]
//! ```
//!
//! Defaults: 60 seconds at 4,000 appends/s, a retention of 10 s; records of 2,500 bytes (an
//! interaction batch's record, see docs/operations.md#sizing-and-retention).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use log::{Group, Log, Position, Record, Topic};

const APPENDERS: usize = 64;
const PAYLOAD_BYTES: usize = 2500;
const STEP_BUDGET: usize = 2048;
const BETWEEN_STEPS: Duration = Duration::from_millis(5);

#[tokio::main]
async fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let seconds = args.first().copied().unwrap_or(60);
    let rate = args.get(1).copied().unwrap_or(4000);
    let retention = Duration::from_secs(args.get(2).copied().unwrap_or(10));
    println!(
        "embedded log: {APPENDERS} appenders, {rate} appends/s of {PAYLOAD_BYTES} bytes for {seconds} s, one consumer committing; 8 partitions"
    );
    for swept in [false, true] {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = log::open(&format!("embedded:{}", dir.path().display()))
            .await
            .expect("open the log");
        run(&log, dir.path(), seconds, rate, swept.then_some(retention)).await;
    }
}

async fn run(log: &Log, dir: &Path, seconds: u64, rate: u64, retention: Option<Duration>) {
    let topic = Topic::new("collect.batches.v1").unwrap();
    log.create_topic(&topic, 8).await.expect("create the topic");
    let stop = Arc::new(AtomicBool::new(false));
    let consumer = tokio::spawn(consume(log.clone(), topic.clone(), stop.clone()));
    let sweep = retention.map(|r| tokio::spawn(sweep(log.clone(), r, stop.clone())));

    let started = Instant::now();
    let mut appenders = tokio::task::JoinSet::new();
    let payload: Arc<[u8]> = vec![b'x'; PAYLOAD_BYTES].into();
    let per_task = Duration::from_secs_f64(APPENDERS as f64 / rate as f64);
    for task in 0..APPENDERS {
        let (log, topic, payload) = (log.clone(), topic.clone(), payload.clone());
        appenders.spawn(async move {
            let mut latencies = Vec::new();
            let mut tick = tokio::time::interval(per_task);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut i = 0u64;
            while started.elapsed() < Duration::from_secs(seconds) {
                tick.tick().await;
                let key = format!("sid_{task}_{}", i % 64);
                let sent = Instant::now();
                log.append(&topic, key.as_bytes(), &payload)
                    .await
                    .expect("append");
                latencies.push(sent.elapsed());
                i += 1;
            }
            latencies
        });
    }
    // The directory's size every tenth of the run.
    let mut sizes = Vec::new();
    let sample = Duration::from_secs(seconds.div_ceil(10).max(1));
    while started.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(sample).await;
        sizes.push(format!("{:.0}", on_disk(dir) as f64 / 1e6));
    }
    let mut latencies: Vec<Duration> = appenders.join_all().await.into_iter().flatten().collect();
    let elapsed = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    consumer.await.expect("consumer");
    let steps = match sweep {
        Some(sweep) => sweep.await.expect("sweep"),
        None => Vec::new(),
    };
    latencies.sort_unstable();
    let at = |v: &[Duration], q: f64| v[((v.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
    let appended = latencies.len();
    let left = count(log, &topic).await;
    match retention {
        None => println!("\nwithout retention:"),
        Some(r) => println!("\nwith a retention of {} s:", r.as_secs()),
    }
    println!(
        "  {appended} appends at {:.0}/s: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        appended as f64 / elapsed.as_secs_f64(),
        at(&latencies, 0.5),
        at(&latencies, 0.99),
        at(&latencies, 1.0)
    );
    println!(
        "  on disk every {} s, MB: {}",
        sample.as_secs(),
        sizes.join(", ")
    );
    println!(
        "  at the end: {:.0} MB on disk, {left} records left of {appended}",
        on_disk(dir) as f64 / 1e6
    );
    if !steps.is_empty() {
        let mut steps = steps;
        steps.sort_unstable();
        println!(
            "  {} expire steps: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            steps.len(),
            at(&steps, 0.5),
            at(&steps, 0.99),
            at(&steps, 1.0)
        );
    }
}

/// Reads and commits as the processor does, until `stop`.
async fn consume(log: Log, topic: Topic, stop: Arc<AtomicBool>) {
    let group = Group::new("processor").unwrap();
    let mut consumer = log.member(&group, &topic).await.expect("member");
    while !stop.load(Ordering::SeqCst) {
        let records = consumer
            .poll(1000, Duration::from_millis(100))
            .await
            .expect("poll");
        let positions: Vec<Position> = records.iter().map(Record::position).collect();
        consumer.commit(&positions).await.expect("commit");
    }
}

/// The sweep of `vigil serve`, until `stop`; answers each step's time.
async fn sweep(log: Log, retention: Duration, stop: Arc<AtomicBool>) -> Vec<Duration> {
    let between_passes =
        (retention / 10).clamp(Duration::from_millis(100), Duration::from_secs(60));
    let mut steps = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let started = Instant::now();
        let more = log.expire(retention, STEP_BUDGET).await.expect("expire");
        steps.push(started.elapsed());
        tokio::time::sleep(if more { BETWEEN_STEPS } else { between_passes }).await;
    }
    steps
}

/// The records a new group reads of `topic`.
async fn count(log: &Log, topic: &Topic) -> usize {
    let group = Group::new("counter").unwrap();
    let mut consumer = log.consumer_of_all(&group, topic).await.expect("consumer");
    consumer
        .read_to_end(Duration::from_millis(500))
        .await
        .expect("poll")
        .len()
}

/// Bytes the directory takes on disk (allocated blocks: the journal is preallocated).
fn on_disk(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        total += if meta.is_dir() {
            on_disk(&entry.path())
        } else {
            meta.blocks() * 512
        };
    }
    total
}
