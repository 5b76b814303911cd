//! Idempotent POSTs (docs/architecture.md#idempotency): a POST with an `Idempotency-Key` header is
//! answered once per (credential, key); a retry with the same body gets the stored answer (marked
//! `Idempotent-Replayed: true`) instead of acting twice, so a client whose connection dropped
//! while creating or rotating a key can retry without minting a second secret. The stored
//! answer is sealed under the server key, because it may hold a secret key in full.
//!
//! A replay re-checks the caller: the credential layer has just refused a revoked or expired
//! key, and the scope the route demanded the first time must still be held, so a stored secret
//! is never handed to a key that could no longer make the request.

use std::future::Future;
use std::sync::Arc;

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Duration;
use schemas::{ErrorCode, Scope};
use sha2::{Digest, Sha256};
use store::{IdempotencyBegin, IdempotencyRecord, IdempotencyScope, StoredResponse};

use crate::auth::{AuthContext, Authenticator, RequiredScope, insufficient_scope};
use crate::error::ApiError;

pub const HEADER: &str = "idempotency-key";
/// How long an answer is kept for replay.
const RETENTION_HOURS: i64 = 24;
/// How long a request may hold its key before a crashed attempt is presumed dead.
const IN_FLIGHT_SECONDS: i64 = 60;
/// The largest body this layer buffers; routes have their own, smaller limits.
const MAX_BODY: usize = 1024 * 1024;

/// What the first request of an idempotency key needs kept beside its answer.
struct FirstRequest {
    scope: IdempotencyScope,
    fingerprint: [u8; 32],
    seal_context: Vec<u8>,
    demanded: RequiredScope,
}

fn conflict(message: &str) -> Response {
    ApiError::new(ErrorCode::IdempotencyConflict, message)
        .with_header_name("Idempotency-Key")
        .into_response()
}

/// Runs inside the credential layer's future (a `Guard` with idempotent POSTs): as a layer of its
/// own it cost every request, GETs included, a boxed future and a clone of the routes it wraps.
/// `route` answers the request; `auth` is there when the credential layer resolved a key.
pub(crate) async fn idempotent_posts<F, Fut>(
    auth: Option<Arc<Authenticator>>,
    req: Request,
    route: F,
) -> Response
where
    F: FnOnce(Request) -> Fut + Send + 'static,
    Fut: Future<Output = Response> + Send,
{
    if req.method() != Method::POST {
        return route(req).await;
    }
    let Some(raw_key) = req.headers().get(HEADER) else {
        return route(req).await;
    };
    let key = match raw_key.to_str() {
        Ok(k) if (1..=255).contains(&k.len()) && k.bytes().all(|b| b.is_ascii_graphic()) => {
            k.to_owned()
        }
        _ => {
            return ApiError::new(
                ErrorCode::ValidationFailed,
                "Idempotency-Key must be 1 to 255 visible ASCII characters",
            )
            .with_header_name("Idempotency-Key")
            .into_response();
        }
    };
    // Without a valid credential there is nothing to scope the key to; the route will refuse.
    let (Some(auth), Some(ctx)) = (auth, req.extensions().get::<Arc<AuthContext>>().cloned())
    else {
        return route(req).await;
    };

    let (parts, body) = req.into_parts();
    let bytes = match to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(_) => {
            return ApiError::new(ErrorCode::TooLarge, "request body is too large").into_response();
        }
    };
    let mut hasher = Sha256::new();
    hasher.update(parts.method.as_str().as_bytes());
    hasher.update(b" ");
    hasher.update(parts.uri.path().as_bytes());
    hasher.update(b"\n");
    hasher.update(&bytes);
    let fingerprint: [u8; 32] = hasher.finalize().into();

    let scope = IdempotencyScope {
        credential: ctx.credential_hash,
        key,
    };
    let seal_context = [&ctx.credential_hash.0[..], scope.key.as_bytes()].concat();
    let mut request = Request::from_parts(parts, Body::from(bytes));
    let demanded = RequiredScope::default();
    request.extensions_mut().insert(demanded.clone());
    // From here the request runs to its end in a task of its own. If the client hangs up, hyper
    // drops this future; were the work part of it, a key held or an action committed without
    // its answer being stored would leave the retry stuck, or act twice (a second secret key
    // nobody ever saw).
    let work = crate::context::in_current_request(async move {
        let held = IdempotencyRecord {
            request_fingerprint: fingerprint,
            expires_at: schemas::time::now() + Duration::seconds(IN_FLIGHT_SECONDS),
            response: None,
        };
        match auth.store.idempotency_begin(&scope, &held).await {
            Err(e) => ApiError::from(e).into_response(),
            Ok(IdempotencyBegin::Existing(existing)) => {
                replay(&auth, &ctx, existing, fingerprint, &seal_context)
            }
            Ok(IdempotencyBegin::Started) => {
                let first = FirstRequest {
                    scope,
                    fingerprint,
                    seal_context,
                    demanded,
                };
                answer_and_keep(auth, route, request, first).await
            }
        }
    });
    match tokio::spawn(work).await {
        Ok(response) => response,
        Err(e) => ApiError::internal("idempotent request task", e).into_response(),
    }
}

/// The answer to a retry: the kept answer, or a 409 when the key was used for another request
/// or its first request is still being answered.
fn replay(
    auth: &Authenticator,
    caller: &AuthContext,
    existing: IdempotencyRecord,
    fingerprint: [u8; 32],
    seal_context: &[u8],
) -> Response {
    if existing.request_fingerprint != fingerprint {
        return conflict("this Idempotency-Key was used with a different request");
    }
    let Some(stored) = existing.response else {
        return conflict(
            "a request with this Idempotency-Key is still being answered; retry shortly",
        );
    };
    if let Some(needed) = stored.required_scope.as_deref().and_then(Scope::parse)
        && !caller.holds(needed)
    {
        return insufficient_scope(needed).into_response();
    }
    let Some(body) = auth.secret.open(&stored.sealed_body, seal_context) else {
        return ApiError::internal("idempotency", "stored response failed to open").into_response();
    };
    let body = with_current_request_id(body);
    let mut response = (
        StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK),
        body,
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    // A replay may show what the first answer did (a new key's secret): never cached.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Runs the request and keeps its answer for replay, or releases the key when no action was
/// taken (so the client may retry with the same key after fixing the request).
async fn answer_and_keep<F, Fut>(
    auth: Arc<Authenticator>,
    route: F,
    request: Request,
    first: FirstRequest,
) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    let FirstRequest {
        scope,
        fingerprint,
        seal_context,
        demanded,
    } = first;
    let response = route(request).await;
    let status = response.status();
    // Kept: answers of requests that acted (2xx), and 409s, which say the state forbids the
    // action and would say so again. Everything else (refusals before the handler ran,
    // validation, 429, 5xx) took no action: the key is released.
    if !(status.is_success() || status == StatusCode::CONFLICT) {
        if let Err(e) = auth.store.idempotency_abandon(&scope).await {
            tracing::warn!(request_id = %crate::context::request_id(), error = %e, "releasing an idempotency key");
        }
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let body = match to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => return ApiError::internal("buffering a response", e).into_response(),
    };
    let record = IdempotencyRecord {
        request_fingerprint: fingerprint,
        expires_at: schemas::time::now() + Duration::hours(RETENTION_HOURS),
        response: Some(StoredResponse {
            status: status.as_u16(),
            sealed_body: auth.secret.seal(&body, &seal_context),
            required_scope: demanded.get().map(|s| s.as_str().to_owned()),
        }),
    };
    if let Err(e) = auth.store.idempotency_complete(&scope, &record).await {
        // The action happened; the client gets its answer, but a retry could not be replayed.
        tracing::error!(request_id = %crate::context::request_id(), error = %e, "storing an idempotent response");
    }
    parts
        .headers
        .insert("idempotent-replayed", HeaderValue::from_static("false"));
    Response::from_parts(parts, Body::from(body))
}

/// A replayed body names the request that replayed it, as its `X-Request-Id` does, so the id in
/// hand always finds this request's log lines.
fn with_current_request_id(body: Vec<u8>) -> Vec<u8> {
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return body;
    };
    let id = serde_json::Value::String(crate::context::request_id().to_string());
    if let Some(meta) = value.get_mut("meta").and_then(|m| m.as_object_mut()) {
        meta.insert("request_id".into(), id.clone());
    }
    if let Some(error) = value.get_mut("error").and_then(|e| e.as_object_mut()) {
        error.insert("request_id".into(), id);
    }
    serde_json::to_vec(&value).unwrap_or(body)
}
