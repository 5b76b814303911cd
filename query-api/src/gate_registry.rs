//! The Gate registry (docs/gate.md#the-registry, docs/architecture.md#gate):
//! `GET /v1/gate/registry` and `GET /v1/gate/registry/{serviceId}` with a publishable or a secret
//! key. Public metadata of the published (active and discoverable) services of the key's
//! environment, the built-in `vigil` service first; never a secret, a webhook URL or the owning
//! organization.

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use edge::ApiError;
use edge::auth::AnyKey;
use edge::body::{PathParams, QueryParams, Reply, path_param};
use edge::pagination::{decode_cursor, encode_cursor};
use schemas::gate::SYSTEM_SERVICE_ID;
use schemas::resources::Pagination;
use serde::Serialize;
use store::{GateEnvVar, GateSdk, GateServiceRecord};

use crate::QueryState;

pub fn router() -> Router<QueryState> {
    Router::new()
        .route("/v1/gate/registry", get(list))
        .route("/v1/gate/registry/{serviceId}", get(read))
}

/// A published service as the registry shows it (`object: gate_registry_entry`).
#[derive(Serialize)]
struct Entry {
    id: String,
    object: &'static str,
    name: String,
    description: String,
    website: String,
    docs_url: Option<String>,
    /// What a signup delivers: each variable's name, key and whether it is a secret.
    env_vars: Vec<GateEnvVar>,
    /// The variable the agent token is delivered under.
    agent_token_variable: String,
    sdks: Vec<GateSdk>,
    branding: Branding,
    consent: Consent,
    /// Whether a person can log in to its dashboard through Gate.
    dashboard_login: bool,
}

#[derive(Serialize)]
struct Branding {
    logo_url: Option<String>,
    primary_color: Option<String>,
    secondary_color: Option<String>,
    ascii_art: Option<String>,
    verified: bool,
}

#[derive(Serialize)]
struct Consent {
    terms_url: Option<String>,
    privacy_url: Option<String>,
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
        branding: Branding {
            logo_url: s.branding.logo_url,
            primary_color: s.branding.primary_color,
            secondary_color: s.branding.secondary_color,
            ascii_art: s.branding.ascii_art,
            verified: s.branding.verified,
        },
        consent: Consent {
            terms_url: s.consent.terms_url,
            privacy_url: s.consent.privacy_url,
        },
    }
}

async fn list(
    State(state): State<QueryState>,
    caller: AnyKey,
    query: QueryParams,
) -> Result<Reply, ApiError> {
    query.only(&["limit", "cursor"])?;
    let limit = query.limit(50, 200)? as usize;
    let env = caller.ctx.environment();
    let binding = format!("gate_registry:{env}");
    let after = match query.get("cursor") {
        None => None,
        Some(c) => Some(decode_cursor(&state.auth.secret, &binding, c)?),
    };
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

async fn read(
    State(state): State<QueryState>,
    caller: AnyKey,
    params: PathParams,
) -> Result<Reply, ApiError> {
    let id: String = path_param(&params, "serviceId")?;
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
