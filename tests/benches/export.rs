//! The export benchmark (docs/performance.md#exports): a million stored sessions streamed through
//! `GET /v1/sessions/export` by a `vigil serve` process into a client that decodes and counts
//! the Arrow stream, beside the ceiling measured in the same run: the same rows written by
//! `arrow-ipc` from memory. Prints rows/s, the ratio to the ceiling, bytes per row, and the
//! server's peak resident memory exporting 100k rows and 1M rows (each in a fresh process); on
//! the embedded store, then on PostgreSQL.
//!
//! Each stored session is a copy of a real one (scored through the Collect API from a desktop
//! Chrome's probes), its state split as the processor stores it, under ids minted a millisecond
//! apart, so a window of N milliseconds holds N sessions.
//!
//! `VIGIL_BENCH_EXPORT_ROWS` (default 1,000,000) sets how many; `VIGIL_TEST_POSTGRES_URL` names
//! the PostgreSQL server (scripts/bench.sh starts one).

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use arrow_ipc::reader::StreamDecoder;
use arrow_ipc::writer::StreamWriter;
use schemas::credential::Environment;
use schemas::{OrgId, SessionId, VisitorId};
use serde_json::Value;
use store::{SessionRecord, SessionSave, Store};
use vigil_tests::served::Served;
use vigil_tests::{TestServer, vigil_binary};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Sessions written per store call while populating.
const SAVE_ROWS: usize = 1_000;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A real session, scored from a desktop Chrome's probes by an in-process server, read back
/// whole from its store.
async fn template() -> SessionRecord {
    let s = TestServer::start().await;
    let ids = vigil_tests::analysts::scored(&s, 1).await;
    let org: OrgId = s.creds.org_id().parse().unwrap();
    let sid: SessionId = ids[0].parse().unwrap();
    s.store()
        .get_session(org, Environment::Test, sid)
        .await
        .unwrap()
        .expect("the scored session is stored")
}

/// The state as the processor saves it: its probes and kept events apart (`SessionSave`).
fn split(state: &store::RawJson) -> (store::RawJson, store::RawJson) {
    let mut whole: Value = state.decode().unwrap();
    let observations = whole["observations"].as_object_mut().unwrap();
    let settled = serde_json::json!({"observations": {
        "probes": observations.remove("probes").unwrap_or(Value::Null),
        "events": observations.remove("events").unwrap_or(Value::Null),
    }});
    (
        store::RawJson::encode(&whole).unwrap(),
        store::RawJson::encode(&settled).unwrap(),
    )
}

/// `rows` copies of `template` for `org`'s test environment, the i-th minted at `start + i` ms.
async fn populate(store: &Store, template: &SessionRecord, org: OrgId, start: u64, rows: u64) {
    let (unsettled, settled) = split(&template.state);
    let began = Instant::now();
    let mut next = 0;
    while next < rows {
        let saves: Vec<SessionSave> = (next..(next + SAVE_ROWS as u64).min(rows))
            .map(|i| {
                let at = start + i;
                let id = SessionId::from_ulid(ulid::Ulid::from_parts(at, rand::random()));
                let when = chrono::DateTime::from_timestamp_millis(at as i64).unwrap();
                SessionSave {
                    session: SessionRecord {
                        id,
                        organization_id: org,
                        environment: Environment::Test,
                        visitor_id: Some(VisitorId::generate()),
                        opened_at: when,
                        updated_at: when,
                        state: unsettled.clone(),
                        ..template.clone()
                    },
                    decision: None,
                    events: Vec::new(),
                    settled: Some(settled.clone()),
                    fence: None,
                }
            })
            .collect();
        next += saves.len() as u64;
        store.save_sessions(&saves).await.unwrap();
    }
    println!(
        "  stored {rows} sessions in {:.0} s",
        began.elapsed().as_secs_f64()
    );
}

/// What one export moved.
struct Streamed {
    rows: u64,
    bytes: u64,
    seconds: f64,
    /// The server's peak resident memory after it (VmHWM).
    peak: u64,
    batches: Vec<RecordBatch>,
}

/// The server's peak resident memory, in bytes.
fn peak_resident(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// Exports `[from, to)` from `served` (a fresh process, so its peak is this export's) into a
/// client that decodes and counts the stream; keeps the batches when asked.
async fn stream(served: &Served, key: &str, window: (u64, u64), keep: bool) -> Streamed {
    let ms = |t: u64| {
        chrono::DateTime::from_timestamp_millis(t as i64)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string()
    };
    let client = vigil_tests::http_client();
    let began = Instant::now();
    let mut response = client
        .get(format!(
            "{}/v1/sessions/export?from={}&to={}",
            served.base,
            ms(window.0),
            ms(window.1)
        ))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{:?}", response.text().await);
    let (mut rows, mut bytes, mut batches) = (0, 0, Vec::new());
    let mut decoder = StreamDecoder::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        bytes += chunk.len() as u64;
        let mut buffer = Buffer::from(chunk);
        while !buffer.is_empty() {
            if let Some(batch) = decoder.decode(&mut buffer).unwrap() {
                rows += batch.num_rows() as u64;
                if keep {
                    batches.push(batch);
                }
            }
        }
    }
    decoder.finish().unwrap();
    let seconds = began.elapsed().as_secs_f64();
    Streamed {
        rows,
        bytes,
        seconds,
        peak: peak_resident(served.child.id()),
        batches,
    }
}

/// The ceiling: `total` rows of `batches` (cycled) written as an Arrow stream by `arrow-ipc`
/// from memory; rows/s.
fn ceiling(batches: &[RecordBatch], total: u64) -> f64 {
    struct Counting(u64);
    impl Write for Counting {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let schema = batches[0].schema();
    let began = Instant::now();
    let mut writer = StreamWriter::try_new(Counting(0), &schema).unwrap();
    let mut written = 0;
    for batch in batches.iter().cycle() {
        if written >= total {
            break;
        }
        writer.write(batch).unwrap();
        written += batch.num_rows() as u64;
    }
    writer.finish().unwrap();
    written as f64 / began.elapsed().as_secs_f64()
}

/// The exports of one store: 100k rows and all of them, each from a fresh server process.
fn measure(
    runtime: &tokio::runtime::Runtime,
    label: &str,
    start: impl Fn() -> Served,
    key: &str,
    (first, rows): (u64, u64),
) {
    let small = rows.min(100_000);
    let mut served = start();
    let hundred_k = runtime.block_on(stream(
        &served,
        key,
        (first + rows - small, first + rows),
        true,
    ));
    served.terminate();
    let mut served = start();
    let all = runtime.block_on(stream(&served, key, (first, first + rows), false));
    served.terminate();
    assert_eq!(hundred_k.rows, small, "every row of the small window");
    assert_eq!(all.rows, rows, "every row of the window");
    let ceiling = ceiling(&hundred_k.batches, rows);
    let rate = all.rows as f64 / all.seconds;
    println!(
        "{label}: {} rows in {:.2} s = {:.0} rows/s; ceiling (arrow-ipc from memory) {:.0} rows/s, ratio {:.3}; {:.0} bytes/row",
        all.rows,
        all.seconds,
        rate,
        ceiling,
        rate / ceiling,
        all.bytes as f64 / all.rows as f64
    );
    println!(
        "{label}: server peak resident memory {:.1} MB exporting {} rows, {:.1} MB exporting {} rows ({:+.1}%)",
        hundred_k.peak as f64 / 1e6,
        hundred_k.rows,
        all.peak as f64 / 1e6,
        all.rows,
        (all.peak as f64 / hundred_k.peak as f64 - 1.0) * 100.0
    );
}

fn bootstrap(store_flags: &[&str]) -> (OrgId, String) {
    let out = Command::new(vigil_binary())
        .arg("bootstrap")
        .args(store_flags)
        .args(["--name", "Export bench", "--slug", "export-bench"])
        .output()
        .expect("vigil bootstrap");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let creds: vigil_tests::DevCredentials = serde_json::from_slice(&out.stdout).unwrap();
    (creds.org_id().parse().unwrap(), creds.keys.secret_test)
}

fn embedded(runtime: &tokio::runtime::Runtime, template: &SessionRecord, rows: u64, start: u64) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap().to_owned();
    let (org, key) = bootstrap(&["--data-dir", &data]);
    runtime.block_on(async {
        let store = store::open(&format!(
            "embedded:{}",
            Path::new(&data).join("store").display()
        ))
        .await
        .unwrap();
        populate(&store, template, org, start, rows).await;
    });
    measure(
        runtime,
        "embedded store",
        || Served::start_in(dir.path()),
        &key,
        (start, rows),
    );
}

fn postgres(runtime: &tokio::runtime::Runtime, template: &SessionRecord, rows: u64, start: u64) {
    let url = runtime.block_on(vigil_tests::postgres_database("bench_export"));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap().to_owned();
    let (org, key) = bootstrap(&["--store", &url, "--data-dir", &data]);
    runtime.block_on(async {
        let store = store::open(&url).await.unwrap();
        populate(&store, template, org, start, rows).await;
    });
    measure(
        runtime,
        "PostgreSQL store",
        || Served::start_in_with(dir.path(), &["--store", &url]),
        &key,
        (start, rows),
    );
}

fn main() {
    let rows: u64 = env_or("VIGIL_BENCH_EXPORT_ROWS", 1_000_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let template = runtime.block_on(template());
    println!(
        "\nexport: {rows} sessions, each {} bytes of state and {} of decision, streamed as Arrow",
        template.state.as_str().len(),
        template
            .latest_decision
            .as_ref()
            .map_or(0, |d| d.as_str().len())
    );
    // Minted a millisecond apart, ending a minute ago.
    let now = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap();
    let start = now - rows - 60_000;
    embedded(&runtime, &template, rows, start);
    postgres(&runtime, &template, rows, start);
}
