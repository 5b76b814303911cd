//! The request id of the request being served. Every response carries it (`X-Request-Id`,
//! `meta.request_id`, `error.request_id`) and every log line of the request names it.

use std::sync::OnceLock;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use schemas::RequestId;

tokio::task_local! {
    static REQUEST_ID: RequestId;
}

pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The request id of the request this task is serving; a fresh one outside a request (which
/// only happens in unit tests).
pub fn request_id() -> RequestId {
    REQUEST_ID
        .try_with(|id| *id)
        .unwrap_or_else(|_| RequestId::generate())
}

/// Assigns the request id, runs the request inside it, echoes it as a header, and counts and
/// times the request by its matched route. Outermost layer, so errors from every other layer
/// carry the id and are counted too. One layer rather than two: each costs a boxed future.
pub async fn observe(mut req: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let route = crate::metrics::route_label(&req);
    let method = req.method().clone();
    let id = RequestId::generate();
    req.extensions_mut().insert(id);
    // No tracing span per request: formatting one costs more than the rest of this layer. Log
    // lines written while serving a request name it with `request_id = %request_id()`.
    let mut response = REQUEST_ID.scope(id, next.run(req)).await;
    if let Ok(value) = HeaderValue::from_str(&id.to_string()) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    crate::metrics::record(&route, method.as_str(), response.status().as_u16(), started);
    response
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
