//! Vigil's management API, served with a secret key unless said otherwise. One module per
//! resource, each with its handlers, validation and `router()`, merged here:
//! - `organizations`: `/v1/organizations` and `/v1/organizations/{organizationId}`;
//! - `api_keys`: `/v1/organizations/{organizationId}/api-keys`, with rotation and revocation;
//! - `events`: `/v1/organizations/{organizationId}/events`;
//! - `webhook_endpoints`: `/v1/organizations/{organizationId}/webhooks/endpoints`, with secret
//!   rotation and test events;
//! - `gate`: Gate services (`/v1/gate/services`), signups, polls and acknowledgements (no key;
//!   Gate's own tokens), login sessions and login-code consumption, agent-token verification
//!   and revocation (`/v1/gate/agent-tokens`), and the consent page a person approves on
//!   (`/gate/consent/{gateSessionId}`). The public registry is the query API's.
//!
//! `bootstrap` is the operator's organization-and-keys creation that `vigil bootstrap` and
//! the development organization share.

pub mod api_keys;
pub mod bootstrap;
pub mod events;
pub mod organizations;
pub mod webhook_endpoints;

use std::sync::Arc;

use axum::Router;
use edge::Authenticator;
use utoipa_axum::router::OpenApiRouter;

/// What the management handlers share, behind one `Arc`: axum clones a handler's state for
/// every request, and one reference count is cheaper than one per member.
pub type AdminState = Arc<AdminParts>;

/// The members of [`AdminState`].
pub struct AdminParts {
    pub auth: Arc<Authenticator>,
    /// How long a rotated key keeps working (`--rotation-grace`, docs/architecture.md#api-keys).
    pub rotation_grace: chrono::Duration,
    /// Webhook endpoints may use plain http and private addresses (`--allow-private-webhooks`,
    /// local stacks and tests only; docs/architecture.md#webhooks).
    pub allow_private_webhooks: bool,
    /// Where a webhook endpoint's test event is published (`events.v1`), as the processor
    /// publishes session events.
    pub log: log::Log,
    /// Whether the log's topics are prepared (the server prepares them in the background);
    /// until they are, a test event is a retryable 503.
    pub log_ready: Arc<dyn Fn() -> bool + Send + Sync>,
}

/// The management routes, with their part of the OpenAPI document.
fn routes() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .merge(organizations::router())
        .merge(api_keys::router())
        .merge(events::router())
        .merge(webhook_endpoints::router())
}

/// The admin API's routes and `more` on its state: Gate's, which build on this crate.
pub fn router(more: OpenApiRouter<AdminState>, state: AdminState) -> Router {
    routes().merge(more).with_state(state).into()
}

/// The management API's part of the OpenAPI document.
pub fn openapi() -> utoipa::openapi::OpenApi {
    routes().into_openapi()
}

/// The path of an organization's routes, for their OpenAPI description.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path, names("organizationId"))]
pub(crate) struct OrgPath(
    /// The caller's organization; any other is a 404.
    #[allow(dead_code)]
    schemas::OrgId,
);

/// The organization in the path, which must be the caller's own: any other is a 404, so
/// another organization's ids cannot even be probed.
pub(crate) fn own_organization(
    ctx: &edge::AuthContext,
    params: &edge::body::PathParams,
) -> Result<schemas::OrgId, edge::ApiError> {
    let id: schemas::OrgId = edge::body::FromPath::from_path(params)?;
    if id != ctx.organization.id {
        return Err(edge::ApiError::not_found("organization"));
    }
    Ok(id)
}

/// Emits an event the admin API makes (a webhook endpoint's test, a Gate approval): published
/// to `events.v1` first, then recorded, as the processor does with session events, so one
/// that is listed was published. A log that is not ready is a retryable 503.
pub async fn emit_event(
    state: &AdminState,
    event: &store::EventRecord,
) -> Result<(), edge::ApiError> {
    use edge::ApiError;
    if !(state.log_ready)() {
        return Err(ApiError::log_unavailable());
    }
    let logged = schemas::events::LoggedEvent::new(
        event.organization_id,
        event.environment,
        event.to_event(Vec::new()),
    );
    let payload = serde_json::to_vec(&logged).map_err(|e| ApiError::internal("an event", e))?;
    let topic = log::Topic::from_static(schemas::events::EVENTS_TOPIC);
    state
        .log
        .append(
            &topic,
            event.organization_id.to_string().as_bytes(),
            &payload,
        )
        .await
        .map_err(|e| {
            if e.is_transient() || matches!(e, log::LogError::UnknownTopic(_)) {
                tracing::error!(error = %e, "publishing an event");
                ApiError::log_unavailable()
            } else {
                ApiError::internal("publishing an event", e)
            }
        })?;
    state
        .auth
        .store
        .record_events(std::slice::from_ref(event))
        .await?;
    Ok(())
}
