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
use axum::routing::{get, post};
use edge::Authenticator;

/// What the ingest handlers share.
#[derive(Clone)]
pub struct IngestState {
    pub auth: Arc<Authenticator>,
    pub log: bus::Log,
    pub batches: bus::Topic,
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

/// The Collect API routes (publishable key); the caller adds the credential layer, and CORS
/// outside it.
pub fn router(state: IngestState) -> Router {
    Router::new()
        .route("/v1/collect/sessions", post(sessions::open))
        .route("/v1/collect/pings/{pingId}", get(sessions::ping))
        .route(
            "/v1/collect/sessions/{sessionId}/batches",
            post(batches::accept),
        )
        .route(
            "/v1/collect/sessions/{sessionId}/results",
            post(handoff::mint),
        )
        .route("/v1/collect/network-checks", post(network::check))
        .route("/v1/collect/ws", get(network::websocket))
        .with_state(state)
}

/// Makes sure the log has the topics ingest writes (the embedded log and Kafka both refuse
/// unknown topics, so a typo cannot start a new stream).
pub async fn prepare_log(log: &bus::Log) -> Result<bus::Topic, bus::BusError> {
    let topic = bus::Topic::from_static(schemas::collect::BATCHES_TOPIC);
    log.create_topic(&topic, schemas::collect::BATCHES_PARTITIONS)
        .await?;
    Ok(topic)
}
