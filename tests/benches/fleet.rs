//! Benchmark: collect throughput of a fleet, with one processor process and then with two.
//! Each run starts separate `vigil` processes (release build): one ingest, and one or two
//! processors sharing the batches topic through their consumer group, on librdkafka's mock
//! cluster (hosted here), a fresh PostgreSQL database and the in-process limiter. Many
//! sessions stream interaction batches into the ingest process as fast as each is
//! acknowledged; the figures are the batches/s acknowledged, and the batches/s folded into
//! stored decisions (from the first batch sent to the last one folded, counted by the
//! processors' `vigil_processor_records_folded_total`), and the latency from ingest's
//! acceptance of a batch to its stored decision (p50, p99, from the processors'
//! `vigil_processor_batch_to_decision_seconds`).
//!
//! Every process shares the machine's two cores with the others and with the load generator,
//! so a second processor is expected to gain little here: the figure says what scaling out
//! costs and gives on one machine, not on a fleet of them.
//!
//! Needs `VIGIL_TEST_POSTGRES_URL` (scripts/bench.sh starts PostgreSQL). `VIGIL_BENCH_SECONDS`
//! (default 10) and `VIGIL_BENCH_SESSIONS` (default 64) tune it.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::{Value, json};
use vigil_tests::collect::{CollectSession, open_session_at};
use vigil_tests::served::Served;
use vigil_tests::{http_client, postgres_database, vigil_binary};

#[path = "common/load.rs"]
#[allow(dead_code)] // its sample percentiles and short visits are the other benchmarks'
mod load;
use load::{Connection, bare_ceiling, bucket_percentile, decision_histogram, metrics_text};
#[path = "common/goals.rs"]
mod goals;
use goals::goal;

/// A realistic interactions batch: 40 pointer events.
fn interactions() -> Vec<u8> {
    let events: Vec<Value> = (0..40)
        .map(|i| json!({"t": i as f64 * 16.6, "type": "pointermove", "x": 100 + i * 3, "y": 200 + (i % 7), "trusted": true}))
        .collect();
    serde_json::to_vec(&json!({"kind": "interactions", "window_ms": [0, 2000], "events": events}))
        .unwrap()
}

fn vigil(args: &[&str]) -> String {
    let out = Command::new(vigil_binary())
        .args(args)
        .output()
        .expect("vigil runs");
    assert!(
        out.status.success(),
        "vigil {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Records folded so far by these processors.
async fn folded(processors: &[Served]) -> u64 {
    let mut total = 0.0;
    for p in processors {
        let text = metrics_text(&format!("{}/metrics", p.base)).await;
        total += text
            .lines()
            .find_map(|l| l.strip_prefix("vigil_processor_records_folded_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
    }
    total as u64
}

/// Waits until the processors have folded `n` records in all; how long it took.
async fn wait_folded(processors: &[Served], n: u64) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while folded(processors).await < n {
        assert!(Instant::now() < deadline, "the processors did not catch up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Figures {
    accepted_per_sec: f64,
    folded_per_sec: f64,
    /// From ingest's acceptance of a batch to its stored decision.
    decision_p50_ms: Option<f64>,
    decision_p99_ms: Option<f64>,
    /// The same requests from the same client against a bare handler, in the same run.
    ceiling_per_sec: f64,
}

/// Every session sends batches after `from` as fast as each is acknowledged, for `seconds`;
/// how many were acknowledged.
async fn stream(
    base: &str,
    pk: &str,
    sessions: &[Arc<CollectSession>],
    seconds: u64,
    from: u64,
) -> u64 {
    let plaintext = Arc::new(interactions());
    let accepted = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for session in sessions {
        let (base, pk, accepted, plaintext, session) = (
            base.to_owned(),
            pk.to_owned(),
            accepted.clone(),
            plaintext.clone(),
            session.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut connection = Connection::open(&base, &pk).await;
            let path = format!("/v1/collect/sessions/{}/batches", session.id);
            let mut seq = from;
            while Instant::now() < deadline {
                seq += 1;
                let body = serde_json::to_vec(&session.sealed_batch(seq, &plaintext)).unwrap();
                match connection.post(&path, body).await {
                    (StatusCode::ACCEPTED, _) => {
                        accepted.fetch_add(1, Ordering::Relaxed);
                    }
                    (status, body) => {
                        panic!("batch refused: {status} {}", String::from_utf8_lossy(&body))
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    accepted.load(Ordering::Relaxed)
}

async fn run(processors: usize, sessions: usize, seconds: u64) -> Figures {
    let cluster = log::kafka::mock::MockKafka::start(1).expect("mock Kafka cluster");
    vigil_tests::create_kafka_topics(&cluster);
    let store = postgres_database("fleet_bench").await;
    let secret = "6b".repeat(32);
    let bootstrap: Value = serde_json::from_str(&vigil(&[
        "bootstrap",
        "--store",
        &store,
        "--server-secret",
        &secret,
        "--name",
        "Bench",
        "--slug",
        "bench",
    ]))
    .unwrap();
    let pk = bootstrap["keys"]["publishable_test"]
        .as_str()
        .unwrap()
        .to_owned();
    vigil(&[
        "keys",
        "set-rate-limit",
        "--store",
        &store,
        "--server-secret",
        &secret,
        "--key",
        &pk,
        "--limit",
        "100000000",
    ]);
    let kafka = cluster.url();
    let flags = |roles: &'static str| {
        vec![
            "--roles",
            roles,
            "--store",
            &store,
            "--log",
            &kafka,
            "--server-secret",
            &secret,
            "--anonymous-rate-limit",
            "100000000",
        ]
    };
    let ingest = Served::start(&flags("ingest"));
    let members: Vec<Served> = (0..processors)
        .map(|_| Served::start(&flags("processor")))
        .collect();
    let client = http_client();
    let mut opened: Vec<CollectSession> = Vec::new();
    for _ in 0..sessions {
        opened.push(
            open_session_at(&client, &ingest.base, &pk)
                .await
                .expect("a session opens"),
        );
    }
    let plaintext = interactions();
    // Warm up: one batch per session, folded, so every processor has joined its group and
    // holds its partitions before the clock starts.
    let sessions: Vec<Arc<CollectSession>> = opened.into_iter().map(Arc::new).collect();
    for session in &sessions {
        let mut connection = Connection::open(&ingest.base, &pk).await;
        let body = serde_json::to_vec(&session.sealed_batch(1, &plaintext)).unwrap();
        let path = format!("/v1/collect/sessions/{}/batches", session.id);
        assert_eq!(connection.post(&path, body).await.0, StatusCode::ACCEPTED);
    }
    wait_folded(&members, sessions.len() as u64).await;
    let before = folded(&members).await;
    let histogram_before = decisions(&members).await;

    let started = Instant::now();
    let accepted = stream(&ingest.base, &pk, &sessions, seconds, 1).await;
    let sent_for = started.elapsed().as_secs_f64();
    wait_folded(&members, before + accepted).await;
    let folded_for = started.elapsed().as_secs_f64();
    let window: Vec<(f64, f64)> = decisions(&members)
        .await
        .iter()
        .zip(&histogram_before)
        .map(|((le, after), (_, before))| (*le, after - before))
        .collect();
    drop(members);
    let bare = bare_ceiling().await;
    let ceiling_started = Instant::now();
    let ceiling = stream(&bare, &pk, &sessions, seconds, 1).await;
    let ceiling_per_sec = ceiling as f64 / ceiling_started.elapsed().as_secs_f64();
    drop(ingest);
    Figures {
        accepted_per_sec: accepted as f64 / sent_for,
        folded_per_sec: accepted as f64 / folded_for,
        decision_p50_ms: bucket_percentile(&window, 0.5),
        decision_p99_ms: bucket_percentile(&window, 0.99),
        ceiling_per_sec,
    }
}

/// The processors' batch-to-decision histograms, summed bucket by bucket.
async fn decisions(processors: &[Served]) -> Vec<(f64, f64)> {
    let mut sum: Vec<(f64, f64)> = Vec::new();
    for p in processors {
        let one = decision_histogram(&format!("{}/metrics", p.base)).await;
        if sum.is_empty() {
            sum = one;
        } else {
            for (total, (_, count)) in sum.iter_mut().zip(one) {
                total.1 += count;
            }
        }
    }
    sum
}

fn main() {
    let seconds: u64 = std::env::var("VIGIL_BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let sessions: usize = std::env::var("VIGIL_BENCH_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        println!(
            "fleet: one ingest process and N processor processes on the mock Kafka cluster and PostgreSQL, {sessions} sessions streaming interaction batches for {seconds} s; 2 cores shared by every process and the load generator"
        );
        println!(
            "{:<12} {:>12} {:>10} {:>9} {:>9} {:>22}",
            "processors", "accepted/s", "folded/s", "p50 ms", "p99 ms", "bare handler (ceiling)"
        );
        let ms = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into());
        let mut first = None;
        for processors in [1, 2] {
            let f = run(processors, sessions, seconds).await;
            println!(
                "{processors:<12} {:>12.0} {:>10.0} {:>9} {:>9} {:>22.0}",
                f.accepted_per_sec,
                f.folded_per_sec,
                ms(f.decision_p50_ms),
                ms(f.decision_p99_ms),
                f.ceiling_per_sec
            );
            match first {
                None => {
                    first = Some(f.folded_per_sec);
                    goal(
                        "fleet (Kafka + PostgreSQL), one processor process",
                        format!(
                            "{:.0} folded/s, decision p99 {} ms (ceiling {:.0}/s)",
                            f.folded_per_sec,
                            ms(f.decision_p99_ms),
                            f.ceiling_per_sec
                        ),
                        ">= 5,000/s, p99 < 250 ms",
                        f.folded_per_sec >= 5_000.0
                            && f.decision_p99_ms.is_some_and(|p| p < 250.0),
                    );
                }
                Some(one) => println!(
                    "two processors fold {:.2}x what one does on this machine",
                    f.folded_per_sec / one
                ),
            }
        }
    });
}
