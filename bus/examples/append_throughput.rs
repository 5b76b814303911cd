//! Prints how many durable appends per second a log takes, and their latency, for a few
//! numbers of concurrent appenders (each awaiting its own appends one at a time, as ingest's
//! request handlers do).
//!
//! ```text
//! cargo run --release -p vigil-bus --example append_throughput [URL] [RECORDS] [PAYLOAD_BYTES]
//! ```
//!
//! URL defaults to an embedded log in a fresh temporary directory; RECORDS (per run, default
//! 20000) and PAYLOAD_BYTES (default 1024) size the runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bus::{Log, Topic};

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

    let log = bus::open(&url).await.expect("open the log");
    let topic = Topic::new(&format!("throughput-{}", std::process::id())).unwrap();
    log.create_topic(&topic, 8).await.expect("create the topic");
    let payload: Arc<[u8]> = vec![b'x'; payload_bytes].into();

    println!("log: {url}; {records} records of {payload_bytes} bytes per run, 8 partitions");
    println!(
        "{:>12} {:>12} {:>10} {:>10} {:>10}",
        "appenders", "appends/s", "p50 ms", "p99 ms", "max ms"
    );
    for appenders in [1, 4, 16, 64, 256] {
        // Fewer records for the slow serial run, so it stays short.
        let total = if appenders == 1 {
            records.min(2000)
        } else {
            records
        };
        let (rate, mut latencies) = run(&log, &topic, &payload, appenders, total).await;
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
