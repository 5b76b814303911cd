//! A throwaway webhook receiver for tests and the delivery benchmark: an axum server on an
//! ephemeral port that records every request (headers, body, when) and answers as told: a
//! queue of one-time answers, then a standing one. It also verifies Standard Webhooks
//! signatures with its own few lines of HMAC, independent of the dispatcher's code.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use tokio::sync::Notify;

/// How the receiver answers one request.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    /// Waited before answering (longer than the dispatcher's timeout: no answer).
    pub delay: Duration,
    pub body: String,
}

impl Answer {
    pub fn status(status: u16) -> Self {
        Answer {
            status,
            headers: Vec::new(),
            delay: Duration::ZERO,
            body: "received".into(),
        }
    }

    /// Answers JSON `body`.
    pub fn json(mut self, body: serde_json::Value) -> Self {
        self.body = body.to_string();
        self.headers
            .push(("content-type", "application/json".into()));
        self
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// A request as the receiver got it.
#[derive(Clone, Debug)]
pub struct Received {
    /// The path and query.
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub at: Instant,
    /// When it arrived by the wall clock, to compare with an event's creation.
    pub wall: std::time::SystemTime,
    /// The status it was answered with.
    pub answered: u16,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("a delivery carries {name}: {:?}", self.headers))
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a delivery's body is JSON")
    }
}

#[derive(Default)]
struct State {
    /// Requests being answered now, and the most there were at once.
    answering: std::sync::atomic::AtomicUsize,
    most_at_once: std::sync::atomic::AtomicUsize,
    queue: Mutex<VecDeque<Answer>>,
    standing: Mutex<Option<Answer>>,
    received: Mutex<Vec<Received>>,
    arrived: Notify,
}

pub struct Receiver {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// A receiver answering 204 until told otherwise.
    pub async fn start() -> Self {
        let state = Arc::new(State::default());
        let shared = state.clone();
        let app = axum::Router::new().fallback(
            move |uri: axum::http::Uri, headers: HeaderMap, body: Bytes| {
                let state = shared.clone();
                async move {
                    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
                    answer(&state, path, headers, body).await
                }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the receiver");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { base, state, task }
    }

    /// Answers every request not answered by the queue with `answer`.
    pub fn answer(&self, answer: Answer) {
        *self.state.standing.lock().unwrap() = Some(answer);
    }

    /// Answers the next request (after those queued before) with `answer`.
    pub fn then(&self, answer: Answer) {
        self.state.queue.lock().unwrap().push_back(answer);
    }

    /// The most requests it was answering at once.
    pub fn most_at_once(&self) -> usize {
        self.state
            .most_at_once
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }

    /// Waits until `n` requests arrived (at most `within`); what arrived.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Received> {
        let deadline = Instant::now() + within;
        loop {
            let arrived = self.state.arrived.notified();
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "{n} deliveries expected within {within:?}; {} arrived: {:?}",
                got.len(),
                got.iter()
                    .map(|r| (&r.path, r.answered))
                    .collect::<Vec<_>>()
            );
            let _ = tokio::time::timeout(left, arrived).await;
        }
    }
}

async fn answer(state: &State, path: String, headers: HeaderMap, body: Bytes) -> Response {
    let at = Instant::now();
    let answer = state
        .queue
        .lock()
        .unwrap()
        .pop_front()
        .or_else(|| state.standing.lock().unwrap().clone())
        .unwrap_or(Answer::status(204));
    state.received.lock().unwrap().push(Received {
        path,
        headers,
        body,
        at,
        wall: std::time::SystemTime::now(),
        answered: answer.status,
    });
    state.arrived.notify_waiters();
    use std::sync::atomic::Ordering::SeqCst;
    let now = state.answering.fetch_add(1, SeqCst) + 1;
    state.most_at_once.fetch_max(now, SeqCst);
    if !answer.delay.is_zero() {
        tokio::time::sleep(answer.delay).await;
    }
    state.answering.fetch_sub(1, SeqCst);
    let mut response = (StatusCode::from_u16(answer.status).unwrap(), answer.body).into_response();
    for (name, value) in answer.headers {
        response
            .headers_mut()
            .insert(name, value.parse().expect("header value"));
    }
    response
}

/// Whether `received` carries a valid signature by `secret` (`whsec_…`): one of the
/// space-separated `v1,` signatures is the base64 HMAC-SHA256 of `id.timestamp.body` keyed by
/// the secret's base64-decoded bytes.
pub fn verify(secret: &str, received: &Received) -> bool {
    let key = STANDARD
        .decode(secret.strip_prefix("whsec_").expect("a whsec_ secret"))
        .expect("base64 after whsec_");
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key).unwrap();
    let signed = [
        received.header("webhook-id").as_bytes(),
        b".",
        received.header("webhook-timestamp").as_bytes(),
        b".",
        &received.body,
    ]
    .concat();
    mac.update(&signed);
    let expected = STANDARD.encode(mac.finalize().into_bytes());
    received
        .header("webhook-signature")
        .split(' ')
        .any(|s| s.strip_prefix("v1,") == Some(expected.as_str()))
}

/// The verification snippet of `docs/webhooks.md`, run by Node on a delivery: whether it says
/// valid.
pub fn docs_snippet_verifies(secret: &str, received: &Received, body: &[u8]) -> bool {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/webhooks.md"))
        .expect("docs/webhooks.md");
    let marker = page
        .find("<!-- webhook-verification-snippet -->")
        .expect("docs/webhooks.md marks its verification snippet");
    let block = &page[marker..];
    let start = block.find("```js\n").expect("a js block after the marker") + 6;
    let snippet = &block[start..start + block[start..].find("```").unwrap()];
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("verify.js");
    let body_file = dir.path().join("body");
    std::fs::write(&body_file, body).unwrap();
    std::fs::write(
        &script,
        format!(
            "{snippet}\nconst fs = require('node:fs');\n\
             const [secret, headers, bodyFile] = process.argv.slice(2);\n\
             console.log(verifyVigilWebhook(secret, JSON.parse(headers), fs.readFileSync(bodyFile)) ? 'valid' : 'invalid');\n"
        ),
    )
    .unwrap();
    let headers = serde_json::json!({
        "webhook-id": received.header("webhook-id"),
        "webhook-timestamp": received.header("webhook-timestamp"),
        "webhook-signature": received.header("webhook-signature"),
    });
    let said = crate::run_client(
        "node",
        &[
            script.to_str().unwrap(),
            secret,
            &headers.to_string(),
            body_file.to_str().unwrap(),
        ],
    );
    said == "valid"
}
