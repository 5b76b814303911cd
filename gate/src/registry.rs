//! The Gate registry (docs/gate.md#the-registry, docs/architecture.md#gate):
//! `GET /v1/gate/registry` and `GET /v1/gate/registry/{serviceId}` with a publishable or a secret
//! key. Public metadata of the published (active and discoverable) services of the key's
//! environment, the built-in `vigil` service first; never a secret, a webhook URL or the owning
//! organization.

use axum::extract::State;
use edge::ApiError;
use edge::auth::AnyKey;
use edge::body::{GateServiceId, InPath, QueryParams, Reply};
use edge::openapi::{PageQuery, SecretKeyErrors};
use edge::pagination::encode_cursor;
use schemas::error::ErrorEnvelope;
use schemas::gate::SYSTEM_SERVICE_ID;
use schemas::resources::Pagination;
use schemas::resources::{List, Single};
use serde::Serialize;
use store::{GateBranding, GateConsent, GateEnvVar, GateSdk, GateServiceRecord};

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use query_api::QueryState;

pub fn router() -> OpenApiRouter<QueryState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(read))
}

/// A published service as the registry shows it (`object: gate_registry_entry`).
#[derive(Serialize, utoipa::ToSchema)]
struct Entry {
    id: String,
    #[schema(value_type = String, pattern = "^gate_registry_entry$")]
    object: &'static str,
    name: String,
    description: String,
    website: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    docs_url: Option<String>,
    /// What a signup delivers: each variable's name, key and whether it is a secret.
    #[schema(value_type = Vec<crate::services::EnvVarBody>)]
    env_vars: Vec<GateEnvVar>,
    /// The variable the agent token is delivered under.
    agent_token_variable: String,
    #[schema(value_type = Vec<crate::services::SdkBody>)]
    sdks: Vec<GateSdk>,
    /// Members never set are left out.
    #[schema(value_type = schemas::gate::BrandingDoc)]
    branding: GateBranding,
    #[schema(value_type = crate::services::ConsentBody)]
    consent: GateConsent,
    /// Whether a person can log in to its dashboard through Gate.
    dashboard_login: bool,
}

fn entry(s: GateServiceRecord) -> Entry {
    Entry {
        agent_token_variable: schemas::gate::agent_token_variable(&s.id),
        dashboard_login: s.dashboard_login_url.is_some(),
        id: s.id,
        object: "gate_registry_entry",
        name: s.name,
        description: s.description,
        website: s.website,
        docs_url: s.docs_url,
        env_vars: s.env_vars,
        sdks: s.sdks,
        branding: s.branding,
        consent: s.consent,
    }
}

/// The published services of the key's environment, the built-in `vigil` first.
#[utoipa::path(
    get,
    operation_id = "list_gate_registry",
    path = "/v1/gate/registry",
    tag = "gate",
    params(PageQuery),
    security(("publishable_key" = []), ("secret_key" = [])),
    responses(
        (status = 200, description = "A page of published services.", body = List<Entry>),
        (status = 422, description = "`request.validation_failed`: a query parameter or path id (`details.parameter_set`).", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn list(
    State(state): State<QueryState>,
    caller: AnyKey,
    query: QueryParams,
) -> Result<Reply, ApiError> {
    query.only(&["limit", "cursor"])?;
    let limit = query.limit(50, 200)? as usize;
    let env = caller.ctx.environment();
    let binding = format!("gate_registry:{env}");
    let after = query.cursor::<String>(&state.auth.secret, &binding)?;
    // The first page opens with the built-in service; the store's follow by id.
    let mut rows = Vec::with_capacity(limit + 1);
    if after.is_none() {
        rows.push(GateServiceRecord::system(env, edge::context::public_url()));
    }
    let want = limit + 1 - rows.len();
    rows.extend(
        state
            .auth
            .store
            .list_gate_registry(env, after.as_deref(), want)
            .await?,
    );
    let has_more = rows.len() > limit;
    rows.truncate(limit);
    let next_cursor = match (has_more, rows.last()) {
        (true, Some(last)) => Some(encode_cursor(&state.auth.secret, &binding, &last.id)),
        _ => None,
    };
    Ok(Reply::list(
        rows.into_iter().map(entry).collect(),
        Pagination {
            limit: limit as u32,
            has_more,
            next_cursor,
        },
    ))
}

/// One published service.
#[utoipa::path(
    get,
    operation_id = "read_gate_registry_entry",
    path = "/v1/gate/registry/{serviceId}",
    tag = "gate",
    params(("serviceId" = String, Path, example = "vigil", description = "A published service.")),
    security(("publishable_key" = []), ("secret_key" = [])),
    responses(
        (status = 200, description = "The service.", body = Single<Entry>),
        (status = 404, description = "`resource.not_found`: not published in the key's environment.", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn read(
    State(state): State<QueryState>,
    caller: AnyKey,
    InPath(GateServiceId(id)): InPath<GateServiceId>,
) -> Result<Reply, ApiError> {
    let env = caller.ctx.environment();
    let service = if id == SYSTEM_SERVICE_ID {
        Some(GateServiceRecord::system(env, edge::context::public_url()))
    } else {
        state
            .auth
            .store
            .get_gate_service(&id)
            .await?
            .filter(|s| s.environment == env && s.is_published())
    };
    service
        .map(|s| Reply::ok(entry(s)))
        .ok_or_else(|| ApiError::not_found("gate service"))
}
