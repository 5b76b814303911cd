//! The request id of the request being served. Every response carries it (`X-Request-Id`,
//! `meta.request_id`, `error.request_id`) and every log line of the request names it.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
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

/// The most a request's headers may add up to (names, values, and the `: ` and line end of
/// each), on every listener: a header of hundreds of kilobytes is no client's, and a `User-Agent`
/// of that size was stored with every batch (docs/api.md#responses).
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// What a request's headers add up to, counted as HTTP/1 spells them.
fn header_bytes(headers: &HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum()
}

/// The outermost layer of every route: assigns the request id, runs the request inside it,
/// echoes it as a header, and counts and times the request by its matched route, so errors
/// from every other layer carry the id and are counted too. It also refuses headers over
/// [`MAX_HEADER_BYTES`] (431) before any route reads them, and marks every answer of the API
/// (`/v1/…`) `Cache-Control: no-store` unless its route chose otherwise: many show a secret or
/// a token once, and a default cannot be forgotten by a new route as a per-route header can.
/// A service of its own rather than `axum::middleware::from_fn`, which clones the wrapped route
/// a second time and boxes a future for every request (docs/performance.md#the-api).
#[derive(Clone, Copy, Default)]
pub struct ObserveLayer;

impl<S> tower_layer::Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe { inner }
    }
}

/// See [`ObserveLayer`].
#[derive(Clone)]
pub struct Observe<S> {
    inner: S,
}

// Infallible, as axum's routes are: every answer, errors included, is a response to stamp.
impl<S> tower_service::Service<Request> for Observe<S>
where
    S: tower_service::Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Observed<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let started = Instant::now();
        let matched = crate::metrics::route_label(&req);
        let method = crate::metrics::method_label(req.method());
        let id = RequestId::generate();
        let private = req.uri().path().starts_with("/v1/");
        if header_bytes(req.headers()) > MAX_HEADER_BYTES {
            let refused = REQUEST_ID.sync_scope(id, || {
                crate::ApiError::new(
                    schemas::ErrorCode::HeadersTooLarge,
                    format!(
                        "the request's headers add up to more than {} KiB",
                        MAX_HEADER_BYTES / 1024
                    ),
                )
                .into_response()
            });
            return Observed {
                answer: None,
                refused: Some(refused),
                id,
                matched,
                method,
                started,
                private,
            };
        }
        // The service readied by `poll_ready` is the one called, as tower requires: no clone.
        let answer = REQUEST_ID.sync_scope(id, || self.inner.call(req));
        Observed {
            answer: Some(REQUEST_ID.scope(id, answer)),
            refused: None,
            id,
            matched,
            method,
            started,
            private,
        }
    }
}

pin_project_lite::pin_project! {
    /// A request being answered inside its request id; see [`ObserveLayer`].
    pub struct Observed<F> {
        // None when the request was refused before reaching the route (`refused`).
        #[pin]
        answer: Option<tokio::task::futures::TaskLocalFuture<RequestId, F>>,
        refused: Option<Response>,
        id: RequestId,
        matched: Option<MatchedPath>,
        method: &'static str,
        started: Instant,
        private: bool,
    }
}

impl<F> Future for Observed<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = match (this.answer.as_pin_mut(), this.refused.take()) {
            (_, Some(refused)) => refused,
            (Some(answer), None) => {
                let Ok(response) = std::task::ready!(answer.poll(cx));
                response
            }
            // Polled again after its answer: a caller's bug, answered rather than panicked on.
            (None, None) => crate::ApiError::internal("request", "answered twice").into_response(),
        };
        if *this.private {
            response
                .headers_mut()
                .entry(header::CACHE_CONTROL)
                .or_insert(HeaderValue::from_static("no-store"));
        }
        answered(
            &mut response,
            *this.id,
            this.matched.as_ref(),
            this.method,
            *this.started,
        );
        Poll::Ready(Ok(response))
    }
}

/// Stamps the request id on an answer, counts and times it, and logs it. No tracing span per
/// request: formatting one costs more than the rest of this layer. Log lines written while
/// serving a request name it with `request_id = %request_id()`.
fn answered(
    response: &mut Response,
    id: RequestId,
    matched: Option<&MatchedPath>,
    method: &'static str,
    started: Instant,
) {
    if let Some(value) = header_value(id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    let status = response.status().as_u16();
    // One clock read for the metric and the log line.
    let elapsed = started.elapsed().as_secs_f64();
    crate::metrics::record(matched, method, status, elapsed);
    let route = matched.map_or("unmatched", |m| m.as_str());
    // One line per answered request: refusals and failures at info and above, so their ids are
    // in the log; successes at debug, off by default. 429s are counted, not logged: a flood
    // would drown the log.
    let elapsed_ms = elapsed * 1000.0;
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
}

/// The request id as a header value, spelled on the stack (the value copies it once).
fn header_value(id: RequestId) -> Option<HeaderValue> {
    let mut buf = [0u8; RequestId::PREFIX.len() + ulid::ULID_LEN];
    let (prefix, rest) = buf.split_at_mut(RequestId::PREFIX.len());
    prefix.copy_from_slice(RequestId::PREFIX.as_bytes());
    schemas::ids::base32_spelling(id.ulid(), rest.try_into().ok()?);
    HeaderValue::from_bytes(&buf).ok()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_id_header_spells_the_id_as_the_envelope_does() {
        for _ in 0..64 {
            let id = RequestId::generate();
            let value = header_value(id).expect("an id is a valid header value");
            let spelled = value.to_str().expect("ascii");
            assert_eq!(spelled, id.to_string());
            assert_eq!(spelled.len(), 30);
            assert_eq!(spelled.parse::<RequestId>(), Ok(id));
        }
    }
}
