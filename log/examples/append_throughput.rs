//! Prints how many durable appends per second a log takes, and their latency, for a few
//! numbers of concurrent appenders (each awaiting its own appends one at a time, as ingest's
//! request handlers do); then how fast one consumer reads it all back, committing after each
//! batch as the processor does.
//!
//! ```text
//! cargo run --release -p vigil-log --example append_throughput [URL] [RECORDS] [PAYLOAD_BYTES]
//! ```
//!
//! URL defaults to an embedded log in a fresh temporary directory; `kafka-mock` starts
//! librdkafka's in-process mock cluster (3 brokers) and uses the Kafka backend on it. RECORDS
//! (per run, default 20000) and PAYLOAD_BYTES (default 1024) size the runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use log::{Group, Log, Position, Record, Topic};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let temp = tempfile::tempdir().expect("temp dir");
    let url = args
        .first()
        .cloned()
        .unwrap_or_else(|| format!("embedded:{}", temp.path().display()));
    let records: usize = args.get(1).map_or(20_000, |n| n.parse().expect("RECORDS"));
    let payload_bytes: usize = args
        .get(2)
        .map_or(1024, |n| n.parse().expect("PAYLOAD_BYTES"));

    let topic = Topic::new(&format!("throughput-{}", std::process::id())).unwrap();
    // The mock cluster has no CreateTopics API: the topic is made on it directly.
    let mock = (url == "kafka-mock").then(|| {
        let mock = log::kafka::mock::MockKafka::start(3).expect("start the mock cluster");
        mock.create_topic(&topic, 8).expect("create the topic");
        mock
    });
    let url = mock.as_ref().map_or(url, |mock| mock.url());
    let log = log::open(&url).await.expect("open the log");
    log.create_topic(&topic, 8).await.expect("create the topic");
    let payload: Arc<[u8]> = vec![b'x'; payload_bytes].into();

    println!("log: {url}; {records} records of {payload_bytes} bytes per run, 8 partitions");
    println!(
        "{:>12} {:>12} {:>10} {:>10} {:>10}",
        "appenders", "appends/s", "p50 ms", "p99 ms", "max ms"
    );
    let mut written = 0;
    for appenders in [1, 4, 16, 64, 256] {
        // Fewer records for the slow serial run, so it stays short.
        let total = if appenders == 1 {
            records.min(2000)
        } else {
            records
        };
        let (rate, mut latencies) = run(&log, &topic, &payload, appenders, total).await;
        written += total;
        latencies.sort_unstable();
        let at =
            |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
        println!(
            "{appenders:>12} {rate:>12.0} {:>10.2} {:>10.2} {:>10.2}",
            at(0.5),
            at(0.99),
            at(1.0)
        );
    }

    // Read until the log runs dry. Fewer than written come back from the mock cluster, which
    // keeps only about 5 MiB per partition.
    let group = Group::new("throughput").unwrap();
    let mut consumer = log.consumer_of_all(&group, &topic).await.expect("consumer");
    let mut read = 0;
    let mut started = None;
    let mut last = Instant::now();
    loop {
        let records = consumer
            .poll(1000, Duration::from_secs(2))
            .await
            .expect("poll");
        if records.is_empty() {
            break;
        }
        // Timed from the first batch, so a consumer's start-up does not count.
        started.get_or_insert_with(Instant::now);
        read += records.len();
        let positions: Vec<Position> = records.iter().map(Record::position).collect();
        consumer.commit(&positions).await.expect("commit");
        last = Instant::now();
    }
    let elapsed = started.map_or(Duration::ZERO, |s| last - s);
    println!(
        "consumed and committed {read} of {written} records at {:.0} records/s (polls of up to 1000, a commit after each)",
        read as f64 / elapsed.as_secs_f64()
    );
    drop(consumer);
    drop(log);
    drop(mock);
}

/// `total` appends spread over `appenders` tasks; answers appends per second and every latency.
async fn run(
    log: &Log,
    topic: &Topic,
    payload: &Arc<[u8]>,
    appenders: usize,
    total: usize,
) -> (f64, Vec<Duration>) {
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..appenders {
        let (log, topic, payload) = (log.clone(), topic.clone(), payload.clone());
        let count = total / appenders + usize::from(task < total % appenders);
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(count);
            for i in 0..count {
                let key = format!("sid_{task}_{}", i % 16);
                let sent = Instant::now();
                log.append(&topic, key.as_bytes(), &payload)
                    .await
                    .expect("append");
                latencies.push(sent.elapsed());
            }
            latencies
        });
    }
    let latencies: Vec<Duration> = tasks.join_all().await.into_iter().flatten().collect();
    let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
    (rate, latencies)
}
