//! Vigil's ingest edge (docs/architecture.md: #collect-transport, #cors; wire contract in
//! `schemas/collect.md`): the Collect API that the browser SDK talks to with a publishable key, its
//! encrypted transport, CORS for pages on other origins, and the SDK script itself. Accepted
//! batches are appended to the log (`collect.batches.v1`, keyed by session) and acknowledged only
//! once the log has them.

pub mod batches;
pub mod cors;
pub mod handoff;
pub mod network;
pub mod opened;
pub mod proof;
pub mod sdk;
pub mod sessions;
pub mod transport;
pub mod web_bot_auth;

use std::sync::Arc;

use axum::Router;
use edge::Authenticator;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// What the ingest handlers share, behind one `Arc`: axum clones a handler's state for every
/// request, and one reference count is cheaper than one per member.
pub type IngestState = Arc<IngestParts>;

/// The members of [`IngestState`].
pub struct IngestParts {
    pub auth: Arc<Authenticator>,
    pub log: log::Log,
    pub batches: log::Topic,
    /// Whether the log's topics are prepared (the server prepares them in the background while
    /// the log is unreachable); until they are, a batch is refused at once with a retryable
    /// 503 rather than waiting out the log client's timeout.
    pub log_ready: Arc<dyn Fn() -> bool + Send + Sync>,
    /// The agents whose Web Bot Auth signatures can be verified
    /// (docs/architecture.md#collect-transport).
    pub agents: Arc<web_bot_auth::TrustedAgents>,
    /// The collect sessions seen lately, as a batch needs them.
    pub opened: Arc<opened::OpenedSessions>,
}

/// The Collect API routes (publishable key), with their part of the OpenAPI document; the
/// caller adds the credential layer, and CORS outside it.
fn routes() -> OpenApiRouter<IngestState> {
    OpenApiRouter::new()
        .routes(routes!(sessions::open))
        .routes(routes!(sessions::ping))
        .routes(routes!(batches::accept))
        .routes(routes!(handoff::mint))
        .routes(routes!(network::check))
        .routes(routes!(network::websocket))
}

pub fn router(state: IngestState) -> Router {
    routes().with_state(state).into()
}

/// The Collect API's part of the OpenAPI document.
pub fn openapi() -> utoipa::openapi::OpenApi {
    routes().into_openapi()
}

/// What a proven call on an opened session may answer besides its own outcomes: the key's
/// refusals and the proof's share the 401, so they are one set (a second 401 would replace the
/// first in the document).
#[derive(utoipa::IntoResponses)]
pub enum ProvenCallErrors {
    /// `auth.*` (no key, or one that is unknown, revoked or of the wrong kind), or
    /// `collect.session_proof_invalid`: the `Vigil-Session-Proof` header is missing,
    /// malformed, spent, or not this call's.
    #[response(status = 401)]
    Unauthenticated(#[to_schema] schemas::error::ErrorEnvelope),
    /// The key's origin, environment or organization may not do this.
    #[response(status = 403)]
    Forbidden(#[to_schema] schemas::error::ErrorEnvelope),
    /// `resource.not_found`: no such session (or ping) for this key's organization and
    /// environment.
    #[response(status = 404)]
    NotFound(#[to_schema] schemas::error::ErrorEnvelope),
    /// `collect.session_expired`: open a new session.
    #[response(status = 410)]
    Expired(#[to_schema] schemas::error::ErrorEnvelope),
    /// `rate.limited`: retry after `Retry-After` seconds.
    #[response(status = 429)]
    RateLimited(#[to_schema] schemas::error::ErrorEnvelope),
    /// `internal.error` (logged with the request id) or `service.unavailable`.
    #[response(status = "5XX")]
    ServerError(#[to_schema] schemas::error::ErrorEnvelope),
}

/// Makes sure the log has the topics ingest writes (the embedded log and Kafka both refuse
/// unknown topics, so a typo cannot start a new stream).
pub async fn prepare_log(log: &log::Log) -> Result<log::Topic, log::LogError> {
    let topic = log::Topic::from_static(schemas::collect::BATCHES_TOPIC);
    log.create_topic(&topic, schemas::collect::BATCHES_PARTITIONS)
        .await?;
    Ok(topic)
}

/// The answer to an append the log did not take. A full producer queue is load shed, refused
/// without an error line each (a saturated ingest would log thousands a second); an unknown
/// topic is the log not prepared yet (the server prepares it in the background while the log
/// is unreachable), as retryable as the log being down.
fn append_failed(context: &'static str, e: log::LogError) -> edge::ApiError {
    match e {
        log::LogError::Busy(_) => edge::ApiError::log_busy(),
        e if e.is_transient() || matches!(e, log::LogError::UnknownTopic(_)) => {
            tracing::error!(request_id = %edge::context::request_id(), error = %e, "{context}");
            edge::ApiError::log_unavailable()
        }
        e => edge::ApiError::internal(context, e),
    }
}
