//! Benchmark: the scoring pipeline's ingest. Many collect sessions stream encrypted batches
//! through the whole stack over loopback HTTP (credential, limiter, decryption, the log), and
//! the processor turns them into stored decisions. Prints accepted batches/s and the latency
//! from sending a batch to its acknowledgement and to its decision being stored (p50, p99), on the embedded log and on
//! Kafka (librdkafka's mock cluster: the Kafka protocol over loopback TCP), with a bare axum
//! handler taking the same requests from the same client in the same run as the ceiling.
//!
//! `VIGIL_BENCH_SECONDS` (default 10) and `VIGIL_BENCH_SESSIONS` (default 64) tune it;
//! `VIGIL_BENCH_SKIP_KAFKA` (any value) stops after the embedded log, and
//! `VIGIL_BENCH_SKIP_EMBEDDED` goes from the ceiling straight to Kafka, for profiling;
//! `VIGIL_BENCH_KAFKA_QUERY` (`?name=value&...`) adds librdkafka properties to the Kafka URL,
//! for tuning.
//!
//! The embedded log runs twice: saturated (each session sends its next batch as soon as the
//! last is acknowledged: the throughput), then paced at 5,000 batches/s offered (the decision
//! latency at the goal's rate, without the queueing of a saturated machine).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Mutex;
use vigil_tests::TestServer;
use vigil_tests::collect::{CollectSession, open_session};

#[path = "common/load.rs"]
#[allow(dead_code)] // its histogram readers and short visits are the other benchmarks'
mod load;
use load::{Connection, bare_ceiling, percentile};
#[path = "common/goals.rs"]
mod goals;
use goals::goal;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A realistic interactions batch: 40 pointer events, its members in the SDK's order (`kind`
/// first; a `json!` object would sort them).
fn interactions() -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Batch {
        kind: &'static str,
        window_ms: [u32; 2],
        events: Vec<Value>,
    }
    let events: Vec<Value> = (0..40)
        .map(|i| json!({"t": i as f64 * 16.6, "type": "pointermove", "x": 100 + i * 3, "y": 200 + (i % 7), "trusted": true}))
        .collect();
    serde_json::to_vec(&Batch {
        kind: "interactions",
        window_ms: [0, 2000],
        events,
    })
    .unwrap()
}

async fn open_sessions(s: &TestServer, n: usize) -> Vec<CollectSession> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(open_session(s, &s.creds.keys.publishable_test).await);
    }
    out
}

struct Figures {
    per_sec: f64,
    /// From sending a batch to its acknowledgement.
    ack_p50_ms: Option<f64>,
    ack_p99_ms: Option<f64>,
    /// CPU time this process spent per accepted batch while streaming: the load generator's
    /// and every server's in it (the bare handler, and Vigil whole: ingest, the log, the
    /// processor, idle while the ceiling runs). Steadier between runs than the throughput, so it
    /// shows small changes; the ceiling's figure is what Vigil's is compared with.
    cpu_us: f64,
    /// From sending a batch to its decision being stored.
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
}

/// Streams batches from every session for `seconds`: as fast as each session's last batch is
/// acknowledged, or, given `rate`, at that many batches/s in all (each session on its own
/// steady clock, as pages send). Every batch after a session's first is timed to its
/// acknowledgement, and every 50th to its stored decision when `server` is given.
///
/// Each session has sent its first batch, and (given `server`) seen it decided, before the
/// clock starts: the window measures sessions already streaming. A session's first batch is its
/// cold start (ingest reads and opens its row, the processor makes its row), and all of them
/// sent in one millisecond are a burst no steady load has; sessions starting at real rates are
/// the many-sessions benchmark's.
async fn stream(
    base: String,
    pk: String,
    sessions: Vec<CollectSession>,
    seconds: u64,
    server: Option<Arc<TestServer>>,
    rate: Option<f64>,
) -> Figures {
    let period = rate.map(|r| Duration::from_secs_f64(sessions.len() as f64 / r));
    let accepted = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let acks = Arc::new(Mutex::new(Vec::new()));
    let plaintext = Arc::new(interactions());
    // Every session's first batch is in (and decided) before any is timed; the window opens
    // when each session has said so, or failed (a failed session's sender is dropped with it, so
    // the wait ends either way and the failure surfaces when its task is joined).
    let (ready, mut readied) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (open, opened) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for (n, session) in sessions.into_iter().enumerate() {
        let (ready, mut opened) = (ready.clone(), opened.clone());
        let (base, pk, accepted, latencies, acks, plaintext, server) = (
            base.clone(),
            pk.clone(),
            accepted.clone(),
            latencies.clone(),
            acks.clone(),
            plaintext.clone(),
            server.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut connection = Connection::open(&base, &pk).await;
            let path = format!("/v1/collect/sessions/{}/batches", session.id);
            let (status, body) = connection
                .post(&path, batch_body(&session, 1, &plaintext))
                .await;
            assert_eq!(
                status,
                StatusCode::ACCEPTED,
                "first batch refused: {}",
                String::from_utf8_lossy(&body)
            );
            if let Some(server) = &server {
                assert!(
                    decided(server, &session.id, 1).await,
                    "the first batch was not decided within 30 s"
                );
            }
            let _ = ready.send(());
            drop(ready);
            // An error only if the caller is gone, and then nothing waits for the figures.
            let _ = opened.wait_for(|open| *open).await;
            let deadline = Instant::now() + Duration::from_secs(seconds);
            let mut seq = 1u64;
            let mut clock = period.map(|p| {
                let mut clock = tokio::time::interval_at(
                    tokio::time::Instant::now() + p.mul_f64(n as f64 / 64.0),
                    p,
                );
                clock.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                clock
            });
            while Instant::now() < deadline {
                if let Some(clock) = &mut clock {
                    clock.tick().await;
                }
                seq += 1;
                let body = batch_body(&session, seq, &plaintext);
                let sent = Instant::now();
                match connection.post(&path, body).await {
                    (StatusCode::ACCEPTED, _) => {
                        accepted.fetch_add(1, Ordering::Relaxed);
                        acked.push(sent.elapsed().as_secs_f64() * 1000.0);
                    }
                    (status, body) => {
                        panic!("batch refused: {status} {}", String::from_utf8_lossy(&body))
                    }
                }
                if let Some(server) = &server
                    && (seq as usize + n).is_multiple_of(50)
                {
                    let (server, latencies, id) =
                        (server.clone(), latencies.clone(), session.id.clone());
                    tokio::spawn(async move {
                        if decided(&server, &id, seq).await {
                            latencies
                                .lock()
                                .await
                                .push(sent.elapsed().as_secs_f64() * 1000.0);
                        }
                    });
                }
            }
            acks.lock().await.extend(acked);
        }));
    }
    drop(ready);
    while readied.recv().await.is_some() {}
    open.send_replace(true);
    let started = Instant::now();
    let cpu_before = vigil_tests::process_cpu_seconds();
    for t in tasks {
        t.await.unwrap();
    }
    let cpu_used = vigil_tests::process_cpu_seconds() - cpu_before;
    let batches = accepted.load(Ordering::Relaxed) as f64;
    let per_sec = batches / started.elapsed().as_secs_f64();
    // Let the processor catch up with the timed batches.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut l = latencies.lock().await.clone();
    l.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mut a = acks.lock().await.clone();
    a.sort_by(|x, y| x.partial_cmp(y).unwrap());
    Figures {
        per_sec,
        cpu_us: cpu_used * 1e6 / batches.max(1.0),
        ack_p50_ms: percentile(&a, 0.5),
        ack_p99_ms: percentile(&a, 0.99),
        p50_ms: percentile(&l, 0.5),
        p99_ms: percentile(&l, 0.99),
    }
}

/// The request body of batch `seq` of `session`.
fn batch_body(session: &CollectSession, seq: u64, plaintext: &[u8]) -> Vec<u8> {
    serde_json::to_vec(&session.sealed_batch(seq, plaintext)).unwrap()
}

/// Waits, for at most 30 s, until session `id`'s decision has taken in its batch `seq`; says
/// whether it did.
async fn decided(server: &TestServer, id: &str, seq: u64) -> bool {
    let sid: schemas::SessionId = id.parse().unwrap();
    let org: schemas::OrgId = server.creds.org_id().parse().unwrap();
    let env = schemas::credential::Environment::Test;
    let give_up = Instant::now() + Duration::from_secs(30);
    while Instant::now() < give_up {
        if let Ok(Some(s)) = server.store().get_session(org, env, sid).await
            && s.has_processed(seq)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    false
}

async fn vigil(bus: Option<String>) -> Arc<TestServer> {
    let s = TestServer::start_with(move |a| {
        if let Some(url) = &bus {
            a.log = url.clone();
        }
    })
    .await;
    s.unlimit(&s.creds.keys.publishable_test).await;
    // Unmeasured: the processor joins its consumer group (seconds on Kafka) and the first
    // sessions warm the caches, which the first timed run would otherwise count.
    let pk = s.creds.keys.publishable_test.clone();
    stream(
        s.base.clone(),
        pk,
        open_sessions(&s, 8).await,
        2,
        None,
        Some(1_000.0),
    )
    .await;
    Arc::new(s)
}

fn ms(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into())
}

fn print(name: &str, f: &Figures, ceiling: f64) {
    println!(
        "{name:<44} {:>10.0} {:>7.0}% {:>8.1} {:>9} {:>9} {:>9} {:>9}",
        f.per_sec,
        100.0 * f.per_sec / ceiling,
        f.cpu_us,
        ms(f.ack_p50_ms),
        ms(f.ack_p99_ms),
        ms(f.p50_ms),
        ms(f.p99_ms)
    );
}

/// The goal rate, offered in the paced run to read the decision latency at it (the
/// saturated run's latency is mostly queueing behind a full machine).
const TARGET_RATE: f64 = 5_000.0;

fn main() {
    let seconds: u64 = std::env::var("VIGIL_BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let n: usize = std::env::var("VIGIL_BENCH_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    // The mock cluster lives on its own thread and must be started outside the runtime.
    let kafka = log::kafka::mock::MockKafka::start(1).expect("mock Kafka cluster");
    vigil_tests::create_kafka_topics(&kafka);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(vigil::server::BLOCKING_THREADS)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        println!("collect batches of {} B plaintext, {n} sessions streaming, {seconds} s, loopback, 2 cores shared by client and server", interactions().len());
        println!("{:<44} {:>10} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9}", "target", "batches/s", "ratio", "CPU µs", "ack p50", "ack p99", "dec p50", "dec p99");
        let bare = bare_ceiling().await;
        let s = vigil(None).await;
        let sessions = open_sessions(&s, n).await;
        let pk = s.creds.keys.publishable_test.clone();
        let ceiling = stream(
            bare,
            pk.clone(),
            open_sessions(&s, n).await,
            seconds,
            None,
            None,
        )
        .await;
        print("bare axum handler, same requests (ceiling)", &ceiling, ceiling.per_sec);
        if std::env::var("VIGIL_BENCH_SKIP_EMBEDDED").is_err() {
        let embedded = stream(
            s.base.clone(),
            pk.clone(),
            sessions,
            seconds,
            Some(s.clone()),
            None,
        )
        .await;
        print("vigil, embedded log, saturated", &embedded, ceiling.per_sec);
        let ratio = embedded.per_sec / ceiling.per_sec;
        goal(
            "collect batches, embedded log, saturated",
            // One decimal, so that a share just under the goal does not print as the goal.
            format!(
                "{:.0}/s = {:.1}% of {:.0}, decision p99 {} ms",
                embedded.per_sec,
                100.0 * ratio,
                ceiling.per_sec,
                ms(embedded.p99_ms)
            ),
            ">= 20% of the ceiling, p99 < 50 ms",
            ratio >= 0.20 && embedded.p99_ms.is_some_and(|p| p < 50.0),
        );
        let paced = stream(
            s.base.clone(),
            pk,
            open_sessions(&s, n).await,
            seconds,
            Some(s.clone()),
            Some(TARGET_RATE),
        )
        .await;
        print("vigil, embedded log, offered 5,000/s", &paced, ceiling.per_sec);
        }
        if std::env::var("VIGIL_BENCH_SKIP_KAFKA").is_ok() {
            return;
        }
        let k = vigil(Some(format!(
            "{}{}",
            kafka.url(),
            std::env::var("VIGIL_BENCH_KAFKA_QUERY").unwrap_or_default()
        )))
        .await;
        let kpk = k.creds.keys.publishable_test.clone();
        // Paced first: the saturated run leaves a backlog behind that would be scored during it.
        let kafka_paced = stream(
            k.base.clone(),
            k.creds.keys.publishable_test.clone(),
            open_sessions(&k, n).await,
            seconds,
            Some(k.clone()),
            Some(TARGET_RATE),
        )
        .await;
        print("vigil, Kafka (mock cluster), offered 5,000/s", &kafka_paced, ceiling.per_sec);
        goal(
            "collect batches, Kafka (mock cluster), 5,000/s offered",
            format!(
                "{:.0}/s, decision p99 {} ms",
                kafka_paced.per_sec,
                ms(kafka_paced.p99_ms)
            ),
            "p99 < 250 ms",
            kafka_paced.p99_ms.is_some_and(|p| p < 250.0),
        );
        let ksessions = open_sessions(&k, n).await;
        let on_kafka = stream(
            k.base.clone(),
            kpk,
            ksessions,
            seconds,
            Some(k.clone()),
            None,
        )
        .await;
        print("vigil, Kafka (mock cluster), saturated", &on_kafka, ceiling.per_sec);
        goal(
            "collect batches, Kafka (mock cluster), saturated",
            format!(
                "{:.0}/s = {:.0}% of {:.0}, decision p99 {} ms",
                on_kafka.per_sec,
                100.0 * on_kafka.per_sec / ceiling.per_sec,
                ceiling.per_sec,
                ms(on_kafka.p99_ms)
            ),
            "p99 < 500 ms",
            on_kafka.p99_ms.is_some_and(|p| p < 500.0),
        );

    });
}
