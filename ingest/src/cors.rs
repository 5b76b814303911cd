//! CORS for the routes a publishable key reaches (docs/architecture.md#cors). Preflights are
//! answered here, before the credential layer, so they need no key and never count against one;
//! they are charged to the client address's anonymous bucket (docs/architecture.md#connections), so
//! a flood of them stays cheap. Other answers name the request's origin (the credential layer has
//! already refused an origin the key does not allow, and that refusal is not shared with the page)
//! and expose the headers the SDK reads.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

const EXPOSED: &str = "x-request-id, x-ratelimit-limit, x-ratelimit-remaining, retry-after";

pub async fn cors(
    State(auth): State<Arc<edge::Authenticator>>,
    req: Request,
    next: Next,
) -> Response {
    let origin = req.headers().get(header::ORIGIN).cloned();
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if preflight {
        let (parts, _) = req.into_parts();
        let client = edge::transport::client_info(&parts, &auth.trusted_proxies);
        return edge::auth::charge_anonymous(&auth, client, || async { preflight_answer(origin) })
            .await;
    }
    let mut response = next.run(req).await;
    if let Some(origin) = origin
        && response.status() != StatusCode::FORBIDDEN
    {
        let h = response.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        h.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSED),
        );
        h.append(header::VARY, HeaderValue::from_static("origin"));
    }
    response
}

/// The answer to a preflight: the request's origin (the credential layer decides on the actual
/// request whether the key allows it), the methods and headers the SDK uses, cached 10 minutes.
fn preflight_answer(origin: Option<HeaderValue>) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    let h = response.headers_mut();
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        origin.unwrap_or(HeaderValue::from_static("*")),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        // The session proof travels in its own header (`crate::proof`).
        HeaderValue::from_static("authorization, content-type, vigil-session-proof"),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    h.insert(header::VARY, HeaderValue::from_static("origin"));
    response
}
