//! Prometheus metrics, served as text at `/metrics`. Labels are bounded: the matched route
//! template (never the raw path), the method and the status. Each telemetry event below both
//! counts and logs, so the two never disagree.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{MatchedPath, Request};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use prometheus::{Encoder, IntCounter, IntCounterVec, TextEncoder};
use telemetry::{PerThreadHistogramVec, ThreadSeries};

telemetry::metrics! {
    owner: "http";
    requests: IntCounterVec = counters(
        "vigil_http_requests_total",
        "HTTP requests answered, by matched route, method and status",
        &["route", "method", "status"],
    );
    // Observed on every request by both cores: counted per thread (see the type).
    latency: PerThreadHistogramVec = seconds_per_thread(
        "vigil_http_request_duration_seconds",
        "Time to answer HTTP requests, by matched route, method and status",
        &["route", "method", "status"],
    );
    limiter_fallbacks: IntCounter = counter(
        "vigil_rate_limiter_fallbacks_total",
        "Requests limited in-process because the shared (Redis) limiter did not answer",
    );
    rate_limited: IntCounterVec = counters(
        "vigil_rate_limited_total",
        "Requests refused with 429, by bucket kind",
        &["bucket"],
    );
    keys_exposed: IntCounter = counter(
        "vigil_secret_keys_exposed_total",
        "Secret keys revoked because they arrived with browser-only headers",
    );
    retention_steps: IntCounterVec = counters(
        "vigil_retention_steps_total",
        "Steps of the retention sweeps, by what they drop from (store: sessions, events, \
         visitors; log: the embedded log's records) and outcome: more (expired rows \
         remained), done, failed",
        &["of", "outcome"],
    );
}

/// The label of the route a request matched: its template, never the raw path.
pub fn route_label(req: &Request) -> Option<MatchedPath> {
    // The route's template is shared by every request it matches: cloned, not copied.
    req.extensions().get::<MatchedPath>().cloned()
}

/// The method label: one of the standard methods or `OTHER`, so that a client inventing
/// methods cannot mint new series.
pub fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// One series' counter and histogram.
type Series = (prometheus::IntCounter, ThreadSeries);
/// A worker's series of one route, by method and status.
type RouteSeries = std::collections::HashMap<(&'static str, u16), Series>;

thread_local! {
    /// The series each worker thread has answered, by route: looking a series up in the
    /// vectors hashes its labels and takes their lock on every request, which a worker does
    /// once per series instead. Bounded as the series are: by the routes, the methods of
    /// `method_label` and the statuses.
    static SERIES: std::cell::RefCell<std::collections::HashMap<Box<str>, RouteSeries>> =
        std::cell::RefCell::default();
}

/// Counts one answered request and its time to answer, `elapsed` seconds.
pub fn record(route: Option<&MatchedPath>, method: &'static str, status: u16, elapsed: f64) {
    let route = route.map_or("unmatched", MatchedPath::as_str);
    SERIES.with(|series| {
        let mut series = series.borrow_mut();
        if !series.contains_key(route) {
            series.insert(route.into(), std::collections::HashMap::new());
        }
        let Some(by_route) = series.get_mut(route) else {
            return;
        };
        let (requests, latency) = by_route.entry((method, status)).or_insert_with(|| {
            let digits = itoa_status(status);
            let labels = [route, method, std::str::from_utf8(&digits).unwrap_or("000")];
            (
                METRICS.requests.with_label_values(&labels),
                METRICS.latency.thread_series(&labels),
            )
        });
        requests.inc();
        latency.observe(elapsed);
    });
}

fn itoa_status(status: u16) -> [u8; 3] {
    let s = status.min(999);
    [
        b'0' + (s / 100) as u8,
        b'0' + (s / 10 % 10) as u8,
        b'0' + (s % 10) as u8,
    ]
}

/// `GET /metrics`.
pub async fn render() -> Response {
    let mut out = Vec::new();
    // Every part registers in the process's default registry (`telemetry::Registrar`); the
    // HTTP layer's own are made before the first answer.
    LazyLock::force(&METRICS);
    let families = prometheus::gather();
    if let Err(e) = TextEncoder::new().encode(&families, &mut out) {
        tracing::error!(error = %e, "encoding metrics");
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

static LAST_FALLBACK_LOG: AtomicU64 = AtomicU64::new(0);

/// The shared limiter did not answer; the request was limited in-process. Counted every time;
/// the fall-backs so far, when a log line is due: at most once every ten seconds, so an outage
/// does not flood the log (the caller writes it, naming its request).
pub fn limiter_fell_back() -> Option<u64> {
    METRICS.limiter_fallbacks.inc();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let last = LAST_FALLBACK_LOG.load(Ordering::Relaxed);
    if now >= last + 10
        && LAST_FALLBACK_LOG
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        return Some(METRICS.limiter_fallbacks.get());
    }
    None
}

/// A step of a retention sweep (docs/architecture.md#retention) ran, dropping from `of` (`store` or
/// `log`); `more`: expired rows remained after it.
pub fn retention_step(of: &'static str, more: bool) {
    let outcome = if more { "more" } else { "done" };
    METRICS
        .retention_steps
        .with_label_values(&[of, outcome])
        .inc();
}

/// A step of a retention sweep failed; the rows it would have dropped stay until the next
/// pass, which costs disk, never data.
pub fn retention_step_failed(of: &'static str, error: &str) {
    METRICS
        .retention_steps
        .with_label_values(&[of, "failed"])
        .inc();
    tracing::warn!(%error, of, "retention sweep: a step failed; retrying at the next pass");
}

pub fn rate_limited(bucket_kind: &'static str) {
    METRICS.rate_limited.with_label_values(&[bucket_kind]).inc();
}

/// A secret key arrived on a browser route and was revoked (docs/architecture.md#exposed-keys).
pub fn secret_key_exposed() {
    METRICS.keys_exposed.inc();
}
