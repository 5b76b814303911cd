//! Wires the roles into one axum router: probes and metrics, the management API behind the
//! credential, rate-limit and idempotency layers, the envelope for unknown routes and methods,
//! and the request-id and metrics layers around everything.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use edge::auth::Guard;
use edge::{ApiError, Authenticator};
use schemas::ErrorCode;

/// Request bodies of the management API are small JSON objects.
const ADMIN_BODY_LIMIT: usize = 64 * 1024;
/// A collect batch: 64 KiB of plaintext, base64url-encoded, in a small JSON envelope.
const COLLECT_BODY_LIMIT: usize = 96 * 1024;

pub struct AppParts {
    /// The roles whose routes are served; the probes are always.
    pub roles: crate::config::Roles,
    pub auth: Arc<Authenticator>,
    pub rotation_grace: chrono::Duration,
    /// `--allow-private-webhooks`.
    pub allow_private_webhooks: bool,
    pub log: log::Log,
    /// Whether the log's topics are prepared (they are, in the background: `log_roles`).
    pub log_preparation: crate::server::log_roles::LogPreparation,
    pub batches: log::Topic,
    /// The agents whose Web Bot Auth signatures ingest can verify.
    pub agents: Arc<ingest::web_bot_auth::TrustedAgents>,
    /// The demo page's routes, when it is served (docs/architecture.md#demo-page).
    pub demo: Option<Router>,
    /// `--export-concurrency`.
    pub export_concurrency: usize,
    /// Whether `/metrics` is served beside the API; not when `--metrics-listen` gives it a
    /// listener of its own ([`metrics_router`]).
    pub metrics_on_api: bool,
}

pub fn router(parts: AppParts) -> Router {
    let exports = query_api::export::Slots::new(parts.export_concurrency);
    let admin_preparation = parts.log_preparation.clone();
    let admin = admin_api::router(
        gate::router(),
        Arc::new(admin_api::AdminParts {
            auth: parts.auth.clone(),
            rotation_grace: parts.rotation_grace,
            allow_private_webhooks: parts.allow_private_webhooks,
            log: parts.log.clone(),
            log_ready: Arc::new(move || admin_preparation.status().is_ok()),
        }),
    )
    // Set here, inside the credential layer, so that a wrong method on an API route is counted
    // and carries the key's rate-limit headers like any other answer.
    .method_not_allowed_fallback(method_not_allowed)
    .layer(Guard::server_routes(parts.auth.clone(), ADMIN_BODY_LIMIT).with_idempotent_posts());
    let probe_state = Probes {
        auth: parts.auth.clone(),
        log: parts.log.clone(),
        log_preparation: parts.log_preparation.clone(),
        roles: parts.roles,
    };
    let preparation = parts.log_preparation.clone();
    let ingest_state = Arc::new(ingest::IngestParts {
        auth: parts.auth.clone(),
        log: parts.log.clone(),
        log_ready: Arc::new(move || preparation.status().is_ok()),
        batches: parts.batches.clone(),
        agents: parts.agents.clone(),
        opened: Arc::default(),
    });
    let backend = query_api::handoff_router(query_api::QueryState {
        auth: parts.auth.clone(),
        exports: exports.clone(),
    })
    .method_not_allowed_fallback(method_not_allowed)
    .layer(Guard::server_routes(parts.auth.clone(), ADMIN_BODY_LIMIT).with_idempotent_posts());
    let reads = query_api::router(query_api::QueryState {
        auth: parts.auth.clone(),
        exports: exports.clone(),
    })
    .method_not_allowed_fallback(method_not_allowed)
    .layer(Guard::server_routes(parts.auth.clone(), ADMIN_BODY_LIMIT));
    // Read by pages (publishable key) and backends (secret key): CORS, but not a browser-only
    // route, so a secret key here is not taken for exposed.
    let registry = gate::registry_router(query_api::QueryState {
        auth: parts.auth.clone(),
        exports: exports.clone(),
    })
    .method_not_allowed_fallback(method_not_allowed)
    .layer(Guard::server_routes(parts.auth.clone(), ADMIN_BODY_LIMIT))
    .layer(from_fn_with_state(parts.auth.clone(), ingest::cors::cors));
    let collect = ingest::router(ingest_state)
        .method_not_allowed_fallback(method_not_allowed)
        // Only browsers call these routes: a secret key arriving here is revoked
        // (docs/architecture.md#exposed-keys).
        .layer(Guard::browser_routes(
            parts.auth.clone(),
            COLLECT_BODY_LIMIT,
        ))
        // Outside the credential layer: preflights carry no key and never count against one
        // (docs/architecture.md#cors); the CORS layer charges them to the client address instead
        // (docs/architecture.md#connections).
        .layer(from_fn_with_state(parts.auth.clone(), ingest::cors::cors));
    let mut probes = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(probe_state);
    if parts.metrics_on_api {
        probes = probes.route("/metrics", get(edge::metrics::render));
    }
    // The error reference goes with any API role (errors link to it), the SDK with ingest.
    let docs = Router::new()
        .route("/docs/errors", get(error_docs))
        .route("/v1/openapi.json", get(crate::server::openapi::serve));
    let sdk = Router::new()
        .route("/sdk/v1/vigil.js", get(ingest::sdk::script))
        .route(
            "/sdk/v1/{version}/vigil.js",
            get(ingest::sdk::versioned_script),
        );
    let demo = parts.demo.unwrap_or_default();
    let roles = parts.roles;
    let mut app = Router::new().merge(probes);
    if roles.serves_http() {
        app = app.merge(docs);
    }
    if roles.ingest {
        ingest::sdk::warm(); // brotli at quality 11 takes a moment: once, before serving
        app = app.merge(sdk);
    }
    if roles.admin {
        app = app.merge(demo).merge(admin);
    }
    if roles.ingest {
        app = app.merge(collect);
    }
    // Opening a handoff is a read of the session's result by the customer's backend: the
    // query role's (docs/architecture.md#data-flow), though its sealing is ingest's.
    if roles.query {
        app = app.merge(backend).merge(reads).merge(registry);
    }
    app.fallback(move |req: Request| route_not_found(parts.auth.clone(), req))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(edge::context::ObserveLayer)
        // Turns the handlers without state (the probes, the docs, the fallbacks) into routes
        // once, rather than on each request they answer.
        .with_state(())
}

/// What `--metrics-listen` serves: `/metrics` alone, with the same request ids and envelope
/// for anything else as the API.
pub fn metrics_router() -> Router {
    Router::new()
        .route("/metrics", get(edge::metrics::render))
        .fallback(|| async {
            ApiError::new(
                ErrorCode::RouteNotFound,
                "this listener serves /metrics alone",
            )
        })
        .method_not_allowed_fallback(method_not_allowed)
        .layer(edge::context::ObserveLayer)
}

async fn healthz() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"status":"ok"}"#,
    )
        .into_response()
}

/// What `/readyz` checks.
#[derive(Clone)]
struct Probes {
    /// Named in `/readyz`.
    roles: crate::config::Roles,
    auth: Arc<Authenticator>,
    log: log::Log,
    log_preparation: crate::server::log_roles::LogPreparation,
}

/// How long `/readyz` waits for one backend: a load balancer's probe must not hang on a
/// broker that does not answer (the Kafka client's own timeout is ten seconds).
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// `/readyz`'s body (docs/operations.md#readiness-and-failures).
#[derive(serde::Serialize)]
struct Readiness {
    /// `ready`, `degraded` (the shared limiter is down) or `unavailable`.
    status: &'static str,
    /// `ok`, or why the store does not answer.
    store: String,
    /// `ok`, `not used`, or why the log does not answer.
    log: String,
    /// The limiter's name, or why the shared one does not answer.
    limiter: String,
    /// The roles this process runs.
    roles: Vec<&'static str>,
}

/// Ready (200) when the store and the log answer; otherwise 503 with `Retry-After`, and the
/// same JSON naming each dependency's state (`"ok"` or why not, e.g. `"store": "store
/// unavailable: disk full: …"`), so an operator sees which one is missing. The limiter does
/// not gate readiness: without Redis the API keeps answering on the in-process limiter
/// (docs/architecture.md#rate-limits), and says so here: `"status": "degraded"`, and the
/// limiter's entry says why Redis did not answer.
async fn readyz(State(probes): State<Probes>) -> Response {
    let limiter_name = probes.auth.limiter.backend_name();
    let limiter = async {
        match tokio::time::timeout(PROBE_TIMEOUT, probes.auth.limiter.ping()).await {
            Ok(answer) => answer,
            Err(_) => Err("no answer in time".to_owned()),
        }
    };
    let store = async {
        match tokio::time::timeout(PROBE_TIMEOUT, probes.auth.store.ping()).await {
            Ok(answer) => answer.map_err(|e| e.to_string()),
            Err(_) => Err("store unavailable: no answer in time".to_owned()),
        }
    };
    let uses_log = probes.roles.use_log();
    let log = async {
        // A query-only process reads the store alone: a broker outage is not its to report.
        if !uses_log {
            return Ok(());
        }
        probes.log_preparation.status()?;
        match tokio::time::timeout(PROBE_TIMEOUT, probes.log.ping()).await {
            Ok(answer) => answer.map_err(|e| e.to_string()),
            Err(_) => Err("log unavailable: no answer in time".to_owned()),
        }
    };
    let (store, log, limiter) = tokio::join!(store, log, limiter);
    let ready = store.is_ok() && log.is_ok();
    let limiter = match limiter {
        Ok(()) => limiter_name.to_owned(),
        Err(why) => {
            tracing::warn!(dependency = "limiter", reason = %why, "readiness: the shared limiter is unavailable; limits count in this process");
            format!("{limiter_name} unavailable: {why}; limits count in this process")
        }
    };
    let degraded = limiter != limiter_name;
    let state = |checked: Result<(), String>, name: &str| match checked {
        Ok(()) if name == "log" && !uses_log => "not used".to_owned(),
        Ok(()) => "ok".to_owned(),
        Err(why) => {
            tracing::warn!(dependency = name, reason = %why, "readiness: a dependency is unavailable");
            why
        }
    };
    let body = Readiness {
        status: match (ready, degraded) {
            (false, _) => "unavailable",
            (true, true) => "degraded",
            (true, false) => "ready",
        },
        store: state(store, "store"),
        log: state(log, "log"),
        limiter,
        roles: probes.roles.names(),
    };
    let mut response = (
        if ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        axum::Json(body),
    )
        .into_response();
    if !ready {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    response
}

async fn error_docs() -> Response {
    (
        [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
        include_str!("../../docs/errors.md"),
    )
        .into_response()
}

/// An unknown route costs the client address a step of its anonymous bucket
/// (docs/architecture.md#connections), so scanning for routes is as slow as guessing keys.
async fn route_not_found(auth: Arc<Authenticator>, req: Request) -> Response {
    let (parts, _) = req.into_parts();
    let client = edge::transport::client_info(&parts, &auth.trusted_proxies);
    edge::auth::charge_anonymous(&auth, client, || async {
        ApiError::new(ErrorCode::RouteNotFound, "no route matches this path").into_response()
    })
    .await
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "this route does not accept this method",
    )
}
