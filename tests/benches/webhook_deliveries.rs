//! Benchmark: webhook deliveries per second from the dispatcher role to a local receiver, and
//! the time from an event's creation to its first delivery attempt arriving (p50, p99), on two
//! cores shared by the server, the dispatcher and the receiver.
//!
//! Events are appended to `events.v1` as the processor appends them (each to four endpoints of
//! one organization), so the dispatcher does all of its work: fan-out, storing the event and
//! its deliveries, signing, POSTing, recording each outcome. The ceiling is a bare client
//! POSTing the same bytes to the same receiver, with the same concurrency the dispatcher gets
//! (four endpoints' turns), measured in the same run. Two runs: a burst (everything appended
//! at once: deliveries/s until the last has arrived and is recorded), and a steady offered rate
//! (2,000 deliveries/s: latency).
//!
//! Run with `scripts/bench.sh`. Settings: `VIGIL_BENCH_WEBHOOK_EVENTS` (events of the burst,
//! default 5,000), `VIGIL_BENCH_SECONDS` (the steady run, default 10).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use schemas::credential::Environment;
use schemas::events::{Event, EventSubject, EventType, LoggedEvent};
use vigil_tests::receiver::Receiver;
use vigil_tests::{TestServer, json};

#[path = "common/load.rs"]
#[allow(dead_code)]
mod load;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Endpoints every event goes to.
const ENDPOINTS: usize = 4;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A `session.result.persisted` event of about the size the processor makes, created now.
fn event_record(org: schemas::OrgId) -> Vec<u8> {
    let logged = LoggedEvent::new(
        org,
        Environment::Test,
        Event {
            id: schemas::EventId::generate(),
            object: "event".into(),
            event_type: EventType::SessionResultPersisted,
            subject: EventSubject {
                kind: "session".into(),
                id: schemas::SessionId::generate().to_string(),
            },
            data: json!({
                "session_id": schemas::SessionId::generate().to_string(),
                "visitor_id": null,
                "decision": {"event_id": "evt_01", "automation_status": "automated",
                             "verdict": "bot", "risk_score": 100, "phase": "interactive",
                             "decision_status": "final", "manipulation": false}
            }),
            webhook_deliveries: Vec::new(),
            created_at: schemas::time::now(),
        },
    );
    serde_json::to_vec(&logged).unwrap()
}

async fn append(s: &TestServer, org: schemas::OrgId, n: usize) {
    let log = s.running.as_ref().unwrap().log.clone();
    let topic = log::Topic::from_static(schemas::events::EVENTS_TOPIC);
    let key = org.to_string();
    let appends = (0..n).map(|_| {
        let (log, topic, key) = (log.clone(), topic.clone(), key.clone());
        async move {
            log.append(&topic, key.as_bytes(), &event_record(org))
                .await
                .unwrap()
        }
    });
    futures::future::join_all(appends).await;
}

/// Waits until the receiver has `n` requests and the dispatcher recorded `n` successes.
async fn delivered(s: &TestServer, receiver: &Receiver, n: usize) -> (Duration, Duration) {
    let started = Instant::now();
    receiver.wait_for(n, Duration::from_secs(600)).await;
    let arrived = started.elapsed();
    while (s
        .metric("vigil_dispatcher_attempts_total{result=\"succeeded\"}")
        .await as usize)
        < n
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (arrived, started.elapsed())
}

/// From each arrival's event creation (its id's time) to the arrival, in ms, sorted.
fn latencies(received: &[vigil_tests::receiver::Received]) -> Vec<f64> {
    let mut ms: Vec<f64> = received
        .iter()
        .map(|r| {
            let id: schemas::EventId = r.header("webhook-id").parse().unwrap();
            let created = SystemTime::UNIX_EPOCH + Duration::from_millis(id.ulid().timestamp_ms());
            r.wall
                .duration_since(created)
                .unwrap_or_default()
                .as_secs_f64()
                * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    ms
}

/// A bare client POSTing `body` to the receiver from `concurrency` tasks for `for_`: requests/s.
async fn ceiling(url: &str, body: Vec<u8>, concurrency: usize, for_: Duration) -> f64 {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + for_;
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, done, body, url) =
                (client.clone(), done.clone(), body.clone(), url.to_owned());
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    let r = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .header("webhook-id", "wevt_x")
                        .header("webhook-timestamp", "0")
                        .header("webhook-signature", "v1,x")
                        .body(body.clone())
                        .send()
                        .await
                        .unwrap();
                    let _ = r.bytes().await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / for_.as_secs_f64()
}

fn main() {
    let events = env_or("VIGIL_BENCH_WEBHOOK_EVENTS", 5_000) as usize;
    let seconds = env_or("VIGIL_BENCH_SECONDS", 10);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let s = TestServer::start_with(|a| a.allow_private_webhooks = true).await;
        let org: schemas::OrgId = s.creds.org_id().parse().unwrap();
        let receiver = Receiver::start().await;
        for i in 0..ENDPOINTS {
            let r = s
                .post(&format!("{}/webhooks/endpoints", s.org_path()))
                .key(&s.creds.keys.secret_test)
                .json(json!({"name": format!("bench {i}"), "url": format!("{}/hooks/{i}", receiver.base),
                             "event_types": ["session.result.persisted"]}))
                .send()
                .await;
            r.ok(201);
        }
        println!("webhook deliveries: {ENDPOINTS} endpoints on one local receiver (answering 204), 2 cores shared by server, dispatcher, receiver and the bare client");

        // The ceiling: the same bytes from a bare client with the dispatcher's concurrency.
        let sample = event_record(org);
        let concurrency = ENDPOINTS * dispatcher::scheduling::PER_ENDPOINT;
        let bare = Receiver::start().await;
        let ceiling = ceiling(&format!("{}/hooks/0", bare.base), sample, concurrency, Duration::from_secs(5)).await;
        drop(bare);
        println!("  ceiling, bare client -> receiver ({concurrency} at once): {ceiling:.0} requests/s");

        // Burst: every event appended at once.
        let n = events * ENDPOINTS;
        let started = Instant::now();
        append(&s, org, events).await;
        let appended = started.elapsed();
        let (arrived, recorded) = delivered(&s, &receiver, n).await;
        let arrived = arrived + appended;
        let recorded = recorded + appended;
        let burst = latencies(&receiver.received());
        println!(
            "  burst: {events} events x {ENDPOINTS} = {n} deliveries (appended in {:.2} s): all arrived in {:.2} s = {:.0} deliveries/s ({:.0}% of the ceiling); all recorded in {:.2} s = {:.0}/s; event -> first attempt p50 {:.0} ms, p99 {:.0} ms",
            appended.as_secs_f64(),
            arrived.as_secs_f64(),
            n as f64 / arrived.as_secs_f64(),
            100.0 * n as f64 / arrived.as_secs_f64() / ceiling,
            recorded.as_secs_f64(),
            n as f64 / recorded.as_secs_f64(),
            load::percentile(&burst, 0.5).unwrap(),
            load::percentile(&burst, 0.99).unwrap(),
        );

        // Steady: 2,000 deliveries/s offered (500 events/s to four endpoints), in 10 ms steps.
        let per_step = 5;
        let steps = seconds * 100;
        let before = receiver.received().len();
        let started = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        for _ in 0..steps {
            tick.tick().await;
            append(&s, org, per_step).await;
        }
        let offered_for = started.elapsed();
        let n = steps as usize * per_step * ENDPOINTS;
        let (_, _) = delivered(&s, &receiver, before + n).await;
        let took = started.elapsed();
        let steady = latencies(&receiver.received()[before..]);
        println!(
            "  steady: {:.0} deliveries/s offered for {:.1} s ({n} deliveries, all delivered and recorded {:.2} s after the first event): event -> first attempt p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            n as f64 / offered_for.as_secs_f64(),
            offered_for.as_secs_f64(),
            took.as_secs_f64(),
            load::percentile(&steady, 0.5).unwrap(),
            load::percentile(&steady, 0.99).unwrap(),
            steady.last().copied().unwrap_or(0.0),
        );
    });
}
