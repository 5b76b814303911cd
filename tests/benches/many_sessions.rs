//! Benchmark: many sessions at once, as real traffic is (each page sends a batch now and then),
//! rather than a few sessions streaming as fast as they can. Two runs:
//!
//! - **concurrent**: 4,096 sessions open together, each sending its probes and then an
//!   interactions batch about once a second, against the whole service in this process. Prints
//!   the latency from sending a batch to its stored decision (p50, p99), with the same requests
//!   against a bare axum handler in the same run as the ceiling of the HTTP round trip alone.
//! - **soak**: 100,000 distinct sessions over 10 minutes against a `vigil serve` process with
//!   `--processor-cache-mb`, about 1,024 alive at any time, each sending 6 batches a second apart
//!   (about 1,000 batches/s). Samples the
//!   server's resident memory and the processor's cache gauges, and prints their peaks: memory
//!   levels off at a bound instead of growing with the sessions seen.
//!
//! Sessions come from a pool of devices (the probes of `desktop_chrome_human.json` with
//! per-device rendering hashes), so some link to visitors already seen and some make new ones.
//!
//! Tuning: `VIGIL_BENCH_CONCURRENT_SESSIONS` (4096), `VIGIL_BENCH_CONCURRENT_SECONDS` (60),
//! `VIGIL_BENCH_SOAK_SESSIONS` (100000), `VIGIL_BENCH_SOAK_SECONDS` (600),
//! `VIGIL_BENCH_SOAK_ALIVE` (1024), `VIGIL_BENCH_SOAK_CACHE_MB` (64); `VIGIL_BENCH_SKIP_SOAK` or `VIGIL_BENCH_SKIP_CONCURRENT`
//! (any value) skip a run; `VIGIL_BENCH_METRICS_OUT` (a path) keeps the server's `/metrics` after the
//! concurrent run, to see where the time went. The soak needs the release `vigil` built (`scripts/bench.sh` does).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::{Value, json};
use tokio::sync::{Mutex, Semaphore};
use vigil_tests::TestServer;
use vigil_tests::collect::{CollectSession, open_session_at};
use vigil_tests::served::Served;

#[path = "common/load.rs"]
#[allow(dead_code)] // the short visits are the replay and IP data benchmarks'
mod load;
use load::{Connection, bare_ceiling, bucket_percentile, decision_histogram, percentile};
#[path = "common/goals.rs"]
mod goals;
use goals::goal;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const FIXTURE: &str = include_str!("../../processor/tests/fixtures/desktop_chrome_human.json");
/// Distinct devices the sessions come from: a session's device is drawn at random, so over a
/// soak most sessions are a returning visitor and a good share a new one.
const DEVICES: u64 = 30_000;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What each session sends: its device's probes, then real interaction batches in turn.
struct Script {
    probes: Value,
    interactions: Vec<Vec<u8>>,
}

impl Script {
    fn load() -> Self {
        let fixture: Value = serde_json::from_str(FIXTURE).expect("fixture parses");
        let batches = fixture["batches"].as_array().expect("batches");
        Script {
            probes: batches[0].clone(),
            interactions: batches[1..]
                .iter()
                .map(|b| serde_json::to_vec(b).unwrap())
                .collect(),
        }
    }

    /// The probes of `device`: the fixture's, with rendering hashes of its own.
    fn probes(&self, device: u64) -> Vec<u8> {
        let mut probes = self.probes.clone();
        let rendering = &mut probes["rendering"];
        for (n, field) in [
            "webgl_hash",
            "webgl_parameters_hash",
            "canvas_hash",
            "audio_hash",
        ]
        .into_iter()
        .enumerate()
        {
            rendering[field] = json!(format!("{device:016x}{n:048x}"));
        }
        serde_json::to_vec(&probes).unwrap()
    }

    /// Batch `seq` (from 1) of a session from `device`.
    fn batch(&self, device: u64, seq: u64) -> Vec<u8> {
        if seq == 1 {
            self.probes(device)
        } else {
            self.interactions[(seq as usize - 2) % self.interactions.len()].clone()
        }
    }
}

/// The request body of batch `seq` of `session`, sealed as the SDK seals it.
fn sealed(session: &CollectSession, seq: u64, plaintext: &[u8]) -> Vec<u8> {
    serde_json::to_vec(&session.sealed_batch(seq, plaintext)).unwrap()
}

/// How long the sessions of the concurrent run take to all be open.
const RAMP: Duration = Duration::from_secs(10);

/// Opens `n` sessions, a few at a time.
async fn open_sessions(base: &str, pk: &str, n: usize) -> Vec<CollectSession> {
    let client = vigil_tests::http_client();
    let gate = Arc::new(Semaphore::new(16));
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (client, base, pk, gate) =
            (client.clone(), base.to_owned(), pk.to_owned(), gate.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire().await.unwrap();
            open_session_at(&client, &base, &pk)
                .await
                .expect("session opens")
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

struct Latencies {
    accepted: u64,
    elapsed: Duration,
    /// The sampled HTTP round trips.
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    samples: usize,
    /// From the server's histogram: acceptance to stored decision, after the ramp.
    decision_p50_ms: Option<f64>,
    decision_p99_ms: Option<f64>,
    decided: usize,
}

/// Every session sends its probes, then an interactions batch each second, for `seconds`.
/// Sessions start spread over the first [`RAMP`] (pages open one after another, not all in one
/// instant), and only batches sent after it are timed: the figures are of the steady state of
/// `sessions` open at once. One batch in `sample` has its HTTP round trip timed; given
/// `metrics` (the server's `/metrics` URL), every batch accepted after the ramp is timed from
/// its acceptance to its stored decision by the processor's own histogram, read before and
/// after (its buckets are fine enough for the p99 to be read to a few milliseconds).
async fn concurrent(
    base: String,
    pk: String,
    sessions: Vec<CollectSession>,
    seconds: u64,
    metrics: Option<String>,
    sample: usize,
) -> Latencies {
    let before = metrics.clone().map(|url| {
        tokio::spawn(async move {
            tokio::time::sleep(RAMP).await;
            decision_histogram(&url).await
        })
    });
    let script = Arc::new(Script::load());
    let accepted = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let n = sessions.len();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for (i, session) in sessions.into_iter().enumerate() {
        let (base, pk, script, accepted, latencies) = (
            base.clone(),
            pk.clone(),
            script.clone(),
            accepted.clone(),
            latencies.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let path = format!("/v1/collect/sessions/{}/batches", session.id);
            let device = rand::random::<u64>() % DEVICES;
            let first = tokio::time::Instant::now() + RAMP.mul_f64(i as f64 / n as f64);
            let mut clock = tokio::time::interval_at(first, Duration::from_secs(1));
            clock.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut seq = 0u64;
            // Connected when the page first sends, as a browser does.
            clock.tick().await;
            let mut connection = Connection::open(&base, &pk).await;
            loop {
                if seq > 0 {
                    clock.tick().await;
                }
                if Instant::now() >= deadline {
                    break;
                }
                seq += 1;
                let body = sealed(&session, seq, &script.batch(device, seq));
                let sent = Instant::now();
                match connection.post(&path, body).await {
                    (StatusCode::ACCEPTED, _) => {
                        accepted.fetch_add(1, Ordering::Relaxed);
                    }
                    (status, body) => {
                        panic!("batch refused: {status} {}", String::from_utf8_lossy(&body))
                    }
                }
                if sent < started + RAMP || !(seq as usize + i).is_multiple_of(sample) {
                    continue;
                }
                latencies
                    .lock()
                    .await
                    .push(sent.elapsed().as_secs_f64() * 1000.0);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed();
    let mut l = latencies.lock().await.clone();
    l.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let accepted = accepted.load(Ordering::Relaxed);
    let mut figures = Latencies {
        accepted,
        elapsed,
        p50_ms: percentile(&l, 0.5),
        p99_ms: percentile(&l, 0.99),
        samples: l.len(),
        decision_p50_ms: None,
        decision_p99_ms: None,
        decided: 0,
    };
    let (Some(url), Some(before)) = (metrics, before) else {
        return figures;
    };
    let before = before.await.unwrap();
    // Let the processor catch up with the last batches.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = decision_histogram(&url).await;
    let window: Vec<(f64, f64)> = after
        .iter()
        .zip(&before)
        .map(|((le, a), (_, b))| (*le, a - b))
        .collect();
    figures.decision_p50_ms = bucket_percentile(&window, 0.5);
    figures.decision_p99_ms = bucket_percentile(&window, 0.99);
    figures.decided = window.last().map(|(_, n)| *n as usize).unwrap_or(0);
    figures
}

fn ms(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into())
}

fn print_latencies(name: &str, l: &Latencies) {
    println!(
        "{name:<48} {:>10.0} {:>9} {:>9} {:>8}",
        l.accepted as f64 / l.elapsed.as_secs_f64(),
        ms(l.p50_ms),
        ms(l.p99_ms),
        l.samples
    );
}

fn run_concurrent(runtime: &tokio::runtime::Runtime) {
    let n: usize = env_or("VIGIL_BENCH_CONCURRENT_SESSIONS", 4096);
    let seconds: u64 = env_or("VIGIL_BENCH_CONCURRENT_SECONDS", 60);
    runtime.block_on(async {
        println!("concurrent: {n} sessions opening over the first {} s, each sending its probes then an interactions batch a second, {seconds} s, timed after the ramp; loopback, 2 cores shared by client and server", RAMP.as_secs());
        println!("{:<48} {:>10} {:>9} {:>9} {:>8}", "target", "batches/s", "p50 ms", "p99 ms", "timed");
        let s = Arc::new(TestServer::start().await);
        let pk = s.creds.keys.publishable_test.clone();
        s.unlimit(&pk).await;
        let bare = bare_ceiling().await;
        let ceiling = concurrent(
            bare,
            pk.clone(),
            open_sessions(&s.base, &pk, n).await,
            seconds.min(30),
            None,
            50,
        )
        .await;
        print_latencies("bare axum handler, HTTP round trip (ceiling)", &ceiling);
        let sessions = open_sessions(&s.base, &pk, n).await;
        let metrics = format!("{}/metrics", s.base);
        let vigil = concurrent(s.base.clone(), pk, sessions, seconds, Some(metrics.clone()), 50).await;
        print_latencies("vigil, embedded engines, HTTP round trip", &vigil);
        println!(
            "{:<48} {:>10} {:>9} {:>9} {:>8}",
            "vigil, embedded engines, batch to stored decision",
            "",
            ms(vigil.decision_p50_ms),
            ms(vigil.decision_p99_ms),
            vigil.decided
        );
        goal(
            &format!("{n} sessions at once, batch to stored decision"),
            format!(
                "p99 {} ms ({:.0} batches/s; ceiling {:.0}/s)",
                ms(vigil.decision_p99_ms),
                vigil.accepted as f64 / vigil.elapsed.as_secs_f64(),
                ceiling.accepted as f64 / ceiling.elapsed.as_secs_f64()
            ),
            "p99 < 100 ms",
            vigil.decision_p99_ms.is_some_and(|p| p < 100.0),
        );
        // Every metric of the run, for looking into where the time went.
        if let Ok(path) = std::env::var("VIGIL_BENCH_METRICS_OUT") {
            let text = vigil_tests::http_client().get(&metrics).send().await.unwrap().text().await.unwrap();
            std::fs::write(path, text).unwrap();
        }
        println!(
            "processor: {:.0} session states cached, {:.1} MB (estimated)",
            s.metric("vigil_processor_cached_sessions").await,
            s.metric("vigil_processor_cache_bytes").await / 1e6
        );
    });
}

/// The resident memory of process `pid`, in bytes (`VmRSS`), and its peak (`VmHWM`).
fn resident(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// A metric's value from a `/metrics` text (labelled series summed).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn run_soak(runtime: &tokio::runtime::Runtime) {
    let total: u64 = env_or("VIGIL_BENCH_SOAK_SESSIONS", 100_000);
    let seconds: u64 = env_or("VIGIL_BENCH_SOAK_SECONDS", 600);
    let cache_mb: u64 = env_or("VIGIL_BENCH_SOAK_CACHE_MB", 64);
    let alive: u64 = env_or("VIGIL_BENCH_SOAK_ALIVE", 1024);
    // Each session sends a batch a second for this long, so `alive` at a time make `total`.
    let batches_each = (alive * seconds / total).max(2);
    println!(
        "\nsoak: {total} sessions over {seconds} s, ~{alive} alive at once, {batches_each} batches each (a second apart), `vigil serve --processor-cache-mb {cache_mb}` in its own process"
    );
    // A first start makes the data dir and its credentials; the publishable key is then
    // unlimited offline (all the load comes from one address), and the server started again.
    let dir = tempfile::tempdir().unwrap();
    let mut first = Served::start_in_with(dir.path(), &[]);
    let pk = first.creds().keys.publishable_test.clone();
    first.terminate();
    let unlimited = std::process::Command::new(vigil_tests::vigil_binary())
        .args([
            "keys",
            "set-rate-limit",
            "--data-dir",
            dir.path().to_str().unwrap(),
        ])
        .args(["--key", &pk, "--limit", &u32::MAX.to_string()])
        .output()
        .expect("vigil keys set-rate-limit");
    assert!(
        unlimited.status.success(),
        "{}",
        String::from_utf8_lossy(&unlimited.stderr)
    );
    let cache = cache_mb.to_string();
    let served = Served::start_in_with(dir.path(), &["--processor-cache-mb", &cache]);
    let pid = served.child.id();
    let base = served.base.clone();
    runtime.block_on(async move {
        let script = Arc::new(Script::load());
        let opened = Arc::new(AtomicU64::new(0));
        let accepted = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let deadline = started + Duration::from_secs(seconds);
        let client = vigil_tests::http_client();
        let mut workers = Vec::new();
        for w in 0..alive {
            let (script, opened, accepted, base, pk, client) = (
                script.clone(),
                opened.clone(),
                accepted.clone(),
                base.clone(),
                pk.clone(),
                client.clone(),
            );
            workers.push(tokio::spawn(async move {
                // Workers start spread over one session's life, so sessions end and begin
                // steadily rather than all together.
                tokio::time::sleep(Duration::from_secs_f64(batches_each as f64 * w as f64 / alive as f64)).await;
                while Instant::now() < deadline && opened.fetch_add(1, Ordering::Relaxed) < total {
                    let Some(session) = open_session_at(&client, &base, &pk).await else {
                        panic!("a session did not open");
                    };
                    let mut connection = Connection::open(&base, &pk).await;
                    let path = format!("/v1/collect/sessions/{}/batches", session.id);
                    let device = rand::random::<u64>() % DEVICES;
                    let mut clock = tokio::time::interval(Duration::from_secs(1));
                    clock.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    for seq in 1..=batches_each {
                        clock.tick().await;
                        let body = sealed(&session, seq, &script.batch(device, seq));
                        match connection.post(&path, body).await {
                            (StatusCode::ACCEPTED, _) => {
                                accepted.fetch_add(1, Ordering::Relaxed);
                            }
                            (status, body) => panic!("batch refused: {status} {}", String::from_utf8_lossy(&body)),
                        }
                    }
                }
            }));
        }
        let http = vigil_tests::http_client();
        println!("{:>6} {:>9} {:>10} {:>9} {:>11} {:>10} {:>8}", "s", "sessions", "batches/s", "RSS MB", "cache MB", "cached", "lag");
        let (mut peak_rss, mut peak_cache, mut last_accepted) = (0u64, 0f64, 0u64);
        let mut samples = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        tick.tick().await;
        while workers.iter().any(|w| !w.is_finished()) {
            tick.tick().await;
            let text = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
            let (rss, _) = resident(pid);
            let cache = metric(&text, "vigil_processor_cache_bytes");
            let now_accepted = accepted.load(Ordering::Relaxed);
            peak_rss = peak_rss.max(rss);
            peak_cache = peak_cache.max(cache);
            samples.push(rss);
            println!(
                "{:>6.0} {:>9} {:>10.0} {:>9.1} {:>11.1} {:>10.0} {:>8.0}",
                started.elapsed().as_secs_f64(),
                opened.load(Ordering::Relaxed).min(total),
                (now_accepted - last_accepted) as f64 / 10.0,
                rss as f64 / 1e6,
                cache / 1e6,
                metric(&text, "vigil_processor_cached_sessions"),
                metric(&text, "vigil_processor_lag"),
            );
            last_accepted = now_accepted;
        }
        for w in workers {
            w.await.unwrap();
        }
        let (_, hwm) = resident(pid);
        let half = samples.len() / 2;
        let second_half_growth = samples[half..].iter().max().copied().unwrap_or(0) as f64
            - samples[..half].iter().max().copied().unwrap_or(0) as f64;
        println!(
            "soak: {} sessions, {} batches in {:.0} s; server memory peak {:.1} MB (VmHWM {:.1} MB), processor cache peak {:.1} MiB of {cache_mb} MiB; the second half's peak minus the first's: {:+.1} MB",
            opened.load(Ordering::Relaxed).min(total),
            accepted.load(Ordering::Relaxed),
            started.elapsed().as_secs_f64(),
            peak_rss as f64 / 1e6,
            hwm as f64 / 1e6,
            peak_cache / 1048576.0,
            second_half_growth / 1e6
        );
    });
    let mut served = served;
    served.terminate();
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(vigil::server::BLOCKING_THREADS)
        .enable_all()
        .build()
        .unwrap();
    if std::env::var("VIGIL_BENCH_SKIP_CONCURRENT").is_err() {
        run_concurrent(&runtime);
    }
    if std::env::var("VIGIL_BENCH_SKIP_SOAK").is_err() {
        run_soak(&runtime);
    }
}
