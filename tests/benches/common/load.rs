//! The benchmarks' load generator, shared by the ingest, many-sessions, fleet, replay and IP
//! data benchmarks: a plain HTTP/1 connection per collect session with prepared headers (so the
//! client's share of the two cores stays small), short visits streamed for the CPU a batch they
//! cost, and percentiles, of samples or of the processor's batch-to-decision histogram.

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use serde_json::{Value, json};

/// The value at fraction `p` of `sorted` (nearest rank); `None` when there is none.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    (!sorted.is_empty()).then(|| sorted[((sorted.len() - 1) as f64 * p).round() as usize])
}

/// One session's HTTP/1 connection: the load generator sends each batch on its own kept-alive
/// connection with prepared headers, so it takes as little of the shared cores as it can.
pub struct Connection {
    sender: hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>,
    authority: String,
    authorization: String,
    /// Sent as `X-Forwarded-For`, as a trusted proxy names its client.
    pub forwarded_for: Option<String>,
}

impl Connection {
    pub async fn open(base: &str, pk: &str) -> Self {
        let authority = base.trim_start_matches("http://").to_owned();
        let stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(connection);
        Connection {
            sender,
            authority,
            authorization: format!("Bearer {pk}"),
            forwarded_for: None,
        }
    }

    /// POSTs `body` as JSON to `path`; the status and the answer's body.
    pub async fn post(&mut self, path: &str, body: Vec<u8>) -> (StatusCode, bytes::Bytes) {
        use http_body_util::BodyExt;
        let mut request = hyper::Request::post(path)
            .header("host", &self.authority)
            .header("authorization", &self.authorization)
            .header("content-type", "application/json");
        if let Some(client) = &self.forwarded_for {
            request = request.header("x-forwarded-for", client);
        }
        let request = request
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .unwrap();
        self.sender.ready().await.unwrap();
        let response = self.sender.send_request(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, body)
    }
}

/// A bare axum handler for the batch route, answering as Vigil does without doing anything:
/// the same requests against it, from the same client, measure the ceiling. Its base URL.
pub async fn bare_ceiling() -> String {
    let app = Router::new().route(
        "/v1/collect/sessions/{sessionId}/batches",
        post(|axum::Json(_): axum::Json<Value>| async {
            (
                StatusCode::ACCEPTED,
                axum::Json(json!({"data": {"accepted": true}})),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// The cumulative buckets (upper bound in ms, count) of the processor's batch-to-decision
/// histogram, `+Inf` last.
pub async fn decision_histogram(url: &str) -> Vec<(f64, f64)> {
    let text = metrics_text(url).await;
    let prefix = "vigil_processor_batch_to_decision_seconds_bucket{le=\"";
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(prefix)?;
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse::<f64>().ok()? * 1000.0
            };
            Some((le, count.trim().parse().ok()?))
        })
        .collect()
}

/// The value at fraction `p` of cumulative buckets, interpolated linearly within its bucket.
pub fn bucket_percentile(buckets: &[(f64, f64)], p: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total == 0.0 {
        return None;
    }
    let rank = p * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower);
            }
            let within = if count > below {
                (rank - below) / (count - below)
            } else {
                1.0
            };
            return Some(lower + (le - lower) * within);
        }
        (lower, below) = (le, count);
    }
    None
}

/// The Prometheus text a `/metrics` URL answers.
pub async fn metrics_text(url: &str) -> String {
    vigil_tests::http_client()
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// What short visit `n` sends: its batches' plaintexts in order, and the client address a trusted
/// proxy names for it (`None`: the connection's own).
pub type Visit = (Option<String>, Vec<Vec<u8>>);

/// Streams short visits (`visit(n)` for the `n`th) through the server at `s` for `seconds` from
/// `workers` tasks, each visit a new collect session; the process's CPU µs a batch (the
/// processor's share of the timed batches included), and batches a second.
pub async fn visits_cpu(
    s: &vigil_tests::TestServer,
    workers: usize,
    seconds: u64,
    visit: impl Fn(u64) -> Visit + Send + Sync + 'static,
) -> (f64, f64) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};
    let visit = Arc::new(visit);
    let accepted = Arc::new(AtomicU64::new(0));
    let visits = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let cpu_before = vigil_tests::process_cpu_seconds();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let (visit, accepted, visits) = (visit.clone(), accepted.clone(), visits.clone());
        let pk = s.creds.keys.publishable_test.clone();
        let base = s.base.clone();
        let opener = s.client.clone();
        tasks.push(tokio::spawn(async move {
            let mut connection = Connection::open(&base, &pk).await;
            while Instant::now() < deadline {
                let (from, batches) = visit(visits.fetch_add(1, Ordering::Relaxed));
                connection.forwarded_for = from;
                let session = vigil_tests::collect::open_session_at(&opener, &base, &pk)
                    .await
                    .expect("a session opens");
                let path = format!("/v1/collect/sessions/{}/batches", session.id);
                for (seq, plaintext) in batches.iter().enumerate() {
                    let body = serde_json::to_vec(&session.sealed_batch(seq as u64 + 1, plaintext))
                        .unwrap();
                    let (status, answer) = connection.post(&path, body).await;
                    assert_eq!(
                        status,
                        StatusCode::ACCEPTED,
                        "{}",
                        String::from_utf8_lossy(&answer)
                    );
                    accepted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // The processor's share of the timed batches, decided after the senders stop.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu = vigil_tests::process_cpu_seconds() - cpu_before;
    let batches = accepted.load(Ordering::Relaxed) as f64;
    (
        cpu * 1e6 / batches.max(1.0),
        batches / started.elapsed().as_secs_f64(),
    )
}

/// Runs `run(on)` two rounds of on then off (alternated, so a slow spell of the machine falls
/// on both), printing each round as `pipeline, <what> on|off (round n)`; the mean CPU µs a
/// batch on and off, and the rise in percent.
pub fn on_against_off(what: &str, mut run: impl FnMut(bool) -> (f64, f64)) -> (f64, f64, f64) {
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for round in 0..2 {
        for with in [true, false] {
            let (cpu, rate) = run(with);
            println!(
                "pipeline, {what} {} (round {}): {cpu:.1} µs CPU a batch, {rate:.0} batches/s",
                if with { "on" } else { "off" },
                round + 1,
            );
            if with { &mut on } else { &mut off }.push(cpu);
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (with, without) = (mean(&on), mean(&off));
    (with, without, (with / without - 1.0) * 100.0)
}
