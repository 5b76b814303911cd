//! Benchmark: the replay check (docs/detection.md#replayed-sessions). Prints
//! - what it adds to the whole embedded pipeline's CPU a batch: short visits (probes and four
//!   interaction batches, every one leaving a mark) streamed through ingest and the processor
//!   with the replay record on and off (`--replay-memory 0s`), alternated in the same run;
//! - its own cost a batch: a mark made from a real visit's probes and interaction batches, and a
//!   mark left in the embedded store (and in PostgreSQL, when `VIGIL_TEST_POSTGRES_URL` names
//!   one), in calls of 64 as a processor's poll leaves them;
//! - the record's size: bytes a mark takes on disk (embedded, after a flush) and in PostgreSQL,
//!   and what 10,000 batches a second for 24 hours keep, every batch leaving a mark.
//!
//! `VIGIL_BENCH_SECONDS` (default 8) sets each pipeline run's length.

use std::time::{Duration, Instant};

use processor::observations::Batch;
use schemas::collect::{BATCH_RECORD_SCHEMA, BatchRecord, BatchRequest};
use serde_json::Value;
use store::{CollectStore, ReplayMark};
use vigil_tests::TestServer;
use vigil_tests::collect::open_session;

#[path = "common/goals.rs"]
mod goals;
#[path = "common/load.rs"]
#[allow(dead_code)] // the other benchmarks' helpers
mod load;
use goals::goal;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Batches a day at 10,000 a second.
const BATCHES_A_DAY: f64 = 10_000.0 * 86_400.0;
/// Marks left to measure the record's size.
const MARKS: usize = 200_000;

/// A real visit recorded from Chromium: its probes, and its interaction batches.
fn visit() -> (Value, Vec<Value>) {
    let fixture: Value = serde_json::from_str(include_str!(
        "../../processor/tests/fixtures/recorded_chromium_headful_input.json"
    ))
    .unwrap();
    let batches = fixture["batches"].as_array().unwrap().clone();
    (batches[0].clone(), batches[1..].to_vec())
}

/// `visit`, made a new visit's: the probes' own timings and every event's time and place moved
/// by `n`, so no two visits leave one mark.
fn fresh(probes: &Value, interactions: &[Value], n: u64) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut probes = probes.clone();
    probes["collected_in_ms"] = (100.0 + (n % 997) as f64 / 10.0).into();
    // The challenge answered, as SDK 1.4 answers it: its render leaves the probes' mark.
    probes["challenge"] = serde_json::json!({
        "nonce": format!("bench-nonce-{n}"),
        "render": format!("{:064x}", u128::from(n) * 0x9e37_79b9_7f4a_7c15),
    });
    let shift = |v: &Value, by: f64| v.as_f64().map_or(Value::Null, |x| (x + by).into());
    let batches = interactions
        .iter()
        .map(|batch| {
            let mut batch = batch.clone();
            if let Some(events) = batch["events"].as_array_mut() {
                for (i, event) in events.iter_mut().enumerate() {
                    let wobble = ((n * 7 + i as u64 * 13) % 29) as f64;
                    event["t"] = shift(&event["t"], wobble);
                    event["x"] = shift(&event["x"], (n % 40) as f64);
                    event["y"] = shift(&event["y"], (n % 23) as f64);
                }
            }
            serde_json::to_vec(&batch).unwrap()
        })
        .collect();
    (serde_json::to_vec(&probes).unwrap(), batches)
}

async fn server(replay_memory: Duration) -> TestServer {
    let s = TestServer::start_with(move |a| a.replay_memory = replay_memory).await;
    s.unlimit(&s.creds.keys.publishable_test).await;
    // Unmeasured: the first visits warm the caches.
    let _ = open_session(&s, &s.creds.keys.publishable_test).await;
    s
}

/// A batch record of `observations`, as the processor reads it.
fn record(seq: u64) -> BatchRecord {
    BatchRecord {
        schema: BATCH_RECORD_SCHEMA,
        organization_id: schemas::OrgId::generate(),
        environment: schemas::credential::Environment::Test,
        session_id: schemas::SessionId::generate(),
        seq,
        received_at: schemas::time::now(),
        request: BatchRequest {
            ip: "203.0.113.1".into(),
            user_agent: "Mozilla/5.0".into(),
            header_names: Vec::new(),
            url: "https://shop.example/".into(),
            web_bot_auth: None,
            user_agent_bytes: None,
            http_version: None,
            tls: None,
        },
        kind: None,
        observations: schemas::raw::RawJson::null(),
    }
}

/// Microseconds a mark takes to make from a real visit's batches: (probes, interactions).
fn mark_cost() -> (f64, f64) {
    let (mut probes, interactions) = visit();
    probes["challenge"] = serde_json::json!({
        "nonce": "Zm9yLXRoZS1iZW5jaG1hcms",
        "render": "3b5e".repeat(16),
    });
    let probes = Batch::from_value(probes).unwrap();
    let streams: Vec<Batch> = interactions
        .into_iter()
        .map(|b| Batch::from_value(b).unwrap())
        .collect();
    let time = |batch: &Batch, seq: u64| {
        let record = record(seq);
        let rounds = 20_000;
        let started = Instant::now();
        let mut made = 0;
        for _ in 0..rounds {
            made += usize::from(
                processor::replay::mark(&record, std::hint::black_box(batch)).is_some(),
            );
        }
        assert!(made > 0, "the batch leaves a mark");
        started.elapsed().as_secs_f64() * 1e6 / rounds as f64
    };
    let stream = streams
        .iter()
        .find(|b| processor::replay::mark(&record(2), b).is_some())
        .expect("an interaction batch that leaves a mark");
    (time(&probes, 1), time(stream, 2))
}

/// Marks as a poll leaves them: a quarter probes' (no sketch), the rest streams' (a sketch of
/// 16 events).
fn marks(n: usize) -> Vec<ReplayMark> {
    (0..n)
        .map(|i| {
            let mut key = [0u8; 16];
            key.copy_from_slice(&ulid::Ulid::generate().to_bytes());
            ReplayMark {
                key,
                session_id: schemas::SessionId::generate(),
                sketch: if i % 4 == 0 { Vec::new() } else { vec![7; 112] },
            }
        })
        .collect()
}

/// Leaves `MARKS` marks in calls of 64; microseconds a mark.
async fn leave_cost(store: &impl CollectStore) -> f64 {
    let all = marks(MARKS);
    let until = schemas::time::now() + chrono::TimeDelta::hours(24);
    let started = Instant::now();
    for poll in all.chunks(64) {
        store.leave_replay_marks(poll, until).await.unwrap();
    }
    started.elapsed().as_secs_f64() * 1e6 / MARKS as f64
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let meta = e.metadata().unwrap();
                    if meta.is_dir() {
                        dir_bytes(&e.path())
                    } else {
                        meta.len()
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

fn main() {
    let seconds: u64 = std::env::var("VIGIL_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();

    // The whole pipeline, record on and off, alternated.
    let (with, without, rise) = load::on_against_off("record", |on| {
        let memory = if on {
            Duration::from_secs(86_400)
        } else {
            Duration::ZERO
        };
        runtime.block_on(async {
            let s = server(memory).await;
            let (probes, interactions) = visit();
            load::visits_cpu(&s, 16, seconds, move |n| {
                let (probes, batches) = fresh(&probes, &interactions, n);
                (None, std::iter::once(probes).chain(batches).collect())
            })
            .await
        })
    });
    println!(
        "pipeline CPU a batch: {with:.1} µs with the record, {without:.1} µs without ({rise:+.1}%)"
    );
    goal(
        "replay check: CPU a batch of short visits, every batch marked, record on against off",
        format!("{with:.1} µs against {without:.1} µs ({rise:+.1}%)"),
        "≤ +5%",
        rise <= 5.0,
    );

    // Its own cost.
    let (probes_us, stream_us) = mark_cost();
    println!(
        "a mark made: {probes_us:.2} µs from a probes batch, {stream_us:.2} µs from an interaction batch"
    );
    let dir = tempfile::tempdir().unwrap();
    let (leave_us, bytes) = runtime.block_on(async {
        let store = store::embedded::EmbeddedStore::open(dir.path()).unwrap();
        let before = dir_bytes(dir.path());
        let us = leave_cost(&store).await;
        store.flush_tables().unwrap();
        (us, (dir_bytes(dir.path()) - before) as f64 / MARKS as f64)
    });
    println!(
        "embedded: {leave_us:.2} µs a mark left (calls of 64), {bytes:.0} bytes a mark on disk; at 10,000 batches/s for 24 h, every batch marked: {:.1} GB",
        bytes * BATCHES_A_DAY / 1e9
    );
    if std::env::var_os("VIGIL_TEST_POSTGRES_URL").is_some() {
        let (pg_us, pg_bytes) = runtime.block_on(async {
            let url = vigil_tests::postgres_database("bench_replay").await;
            store::postgres::migrations::migrate(&url).await.unwrap();
            let store = store::postgres::PostgresStore::open(&url).await.unwrap();
            let us = leave_cost(&store).await;
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            let size: i64 = client
                .query_one("SELECT pg_total_relation_size('replay_marks')", &[])
                .await
                .unwrap()
                .get(0);
            (us, size as f64 / MARKS as f64)
        });
        println!(
            "PostgreSQL: {pg_us:.2} µs a mark left (calls of 64), {pg_bytes:.0} bytes a mark with its indexes; at 10,000 batches/s for 24 h: {:.1} GB",
            pg_bytes * BATCHES_A_DAY / 1e9
        );
    }
}
