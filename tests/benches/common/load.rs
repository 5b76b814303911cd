//! The benchmarks' load generator, shared by the ingest, many-sessions and fleet benchmarks: a
//! plain HTTP/1 connection per collect session with prepared headers (so the client's share of
//! the two cores stays small), and percentiles, of samples or of the processor's
//! batch-to-decision histogram.

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
