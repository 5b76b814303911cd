//! The request id of the request being served. Every response carries it (`X-Request-Id`,
//! `meta.request_id`, `error.request_id`) and every log line of the request names it.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use schemas::RequestId;

tokio::task_local! {
    static REQUEST_ID: RequestId;
}

/// Named once: a name given as a string is parsed and checked on every insert.
pub const REQUEST_ID_HEADER: axum::http::HeaderName =
    axum::http::HeaderName::from_static("x-request-id");

/// The request id of the request this task is serving; a fresh one outside a request (which
/// only happens in unit tests).
pub fn request_id() -> RequestId {
    REQUEST_ID
        .try_with(|id| *id)
        .unwrap_or_else(|_| RequestId::generate())
}

/// Wraps `fut` so that it runs as part of the current request (for work spawned on its behalf).
pub fn in_current_request<F: std::future::Future>(
    fut: F,
) -> impl std::future::Future<Output = F::Output> {
    REQUEST_ID.scope(request_id(), fut)
}

/// Assigns the request id, runs the request inside it, echoes it as a header, and counts and
/// times the request by its matched route. Outermost layer, so errors from every other layer
/// carry the id and are counted too. One layer rather than two: each costs a boxed future.
pub async fn observe(mut req: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let matched = crate::metrics::route_label(&req);
    let method = crate::metrics::method_label(req.method());
    let id = RequestId::generate();
    req.extensions_mut().insert(id);
    // No tracing span per request: formatting one costs more than the rest of this layer. Log
    // lines written while serving a request name it with `request_id = %request_id()`.
    let mut response = REQUEST_ID.scope(id, next.run(req)).await;
    if let Ok(value) = HeaderValue::from_str(&id.to_string()) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    let status = response.status().as_u16();
    crate::metrics::record(matched.as_ref(), method, status, started);
    let route = matched.as_ref().map_or("unmatched", |m| m.as_str());
    // One line per answered request: refusals and failures at info and above, so their ids are
    // in the log; successes at debug, off by default. 429s are counted, not logged: a flood
    // would drown the log.
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    match status {
        500.. => {
            tracing::warn!(request_id = %id, method, route, status, elapsed_ms, "request failed")
        }
        429 => {}
        // Unknown routes and preflights cost a client nothing to send: their refusals are
        // logged at most once per interval, with how many went unlogged
        // (docs/architecture.md#connections).
        400.. if route == "unmatched" || method == "OPTIONS" => {
            if let Some(unlogged) = FLOOD_LOG.admit() {
                tracing::info!(request_id = %id, method, route, status, elapsed_ms, unlogged, "request refused (unknown routes and preflights are logged at most once every 10 s)")
            }
        }
        400.. => {
            tracing::info!(request_id = %id, method, route, status, elapsed_ms, "request refused")
        }
        _ => {
            tracing::debug!(request_id = %id, method, route, status, elapsed_ms, "request answered")
        }
    }
    response
}

/// Lets one log line through per interval and counts the rest.
struct LogThrottle {
    /// Seconds since the process's first request when a line was last let through.
    last: AtomicU64,
    suppressed: AtomicU64,
    interval_secs: u64,
}

static FLOOD_LOG: LogThrottle = LogThrottle {
    last: AtomicU64::new(u64::MAX),
    suppressed: AtomicU64::new(0),
    interval_secs: 10,
};

static STARTED: OnceLock<Instant> = OnceLock::new();

impl LogThrottle {
    /// `Some(lines suppressed since the last one)` when this line may be logged.
    fn admit(&self) -> Option<u64> {
        let now = STARTED.get_or_init(Instant::now).elapsed().as_secs();
        let last = self.last.load(Ordering::Relaxed);
        let due = last == u64::MAX || now >= last.saturating_add(self.interval_secs);
        if due
            && self
                .last
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

static PUBLIC_URL: OnceLock<String> = OnceLock::new();

/// Sets the service's public base URL once at start, for absolute links such as `docs_url`.
pub fn set_public_url(url: &str) {
    let _ = PUBLIC_URL.set(url.trim_end_matches('/').to_owned());
}

pub fn public_url() -> &'static str {
    PUBLIC_URL
        .get()
        .map(String::as_str)
        .unwrap_or("http://127.0.0.1:8080")
}
