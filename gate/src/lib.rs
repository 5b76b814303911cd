//! Gate: organizations publish services that developer tools sign up to and log their person
//! in to, each step approved by a person in a browser (docs/architecture.md#gate). One module per
//! resource: `services` (an organization's services), `registry` (the public registry of every
//! discoverable one, served with the query role's reads), `flows` (signups, polls,
//! acknowledgements, login sessions and the consumption of login codes), `agent_tokens` (the
//! organization's backend verifying and revoking tokens) and `consent` (the page a person
//! approves on). Its management routes are served with the admin API's, on its state
//! ([`router`]). What several of them share is here.

pub mod agent_tokens;
pub mod consent;
pub mod flows;
pub mod registry;
pub mod services;

use axum::http::HeaderMap;
use edge::ApiError;
use rand::TryRngCore;
use rand::rngs::OsRng;
use schemas::error::ErrorCode;
use schemas::gate::{self, TokenKind};
use schemas::ids::GateSessionId;
use schemas::time;
use serde::Serialize;
use serde_json::{Map, Value};
use store::{AgentTokenRecord, GateServiceRecord, GateSessionRecord};

use admin_api::AdminState;

/// Gate's routes beside the admin API's, on its state.
pub fn router() -> utoipa_axum::router::OpenApiRouter<AdminState> {
    utoipa_axum::router::OpenApiRouter::new()
        .merge(services::router())
        .merge(flows::router())
        .merge(agent_tokens::router())
        .merge(consent::router().into())
}

/// The public registry's routes, on the query role's state, apart from its secret-key reads:
/// pages call them with a publishable key, so the server wraps them in CORS, which those reads
/// never get.
pub fn registry_router(state: query_api::QueryState) -> axum::Router {
    registry::router().with_state(state).into()
}

/// Gate's part of the OpenAPI document.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = router().into_openapi();
    doc.merge(registry::router().into_openapi());
    doc
}

/// The bearer token of `kind` on the request, well formed; 401 otherwise.
pub(crate) fn bearer_token(headers: &HeaderMap, kind: TokenKind) -> Result<String, ApiError> {
    let token = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    match token {
        Some(t) if gate::well_formed(kind, t) => Ok(t.to_owned()),
        Some(_) => Err(invalid_token(kind)),
        None => Err(ApiError::new(
            ErrorCode::MissingCredentials,
            format!(
                "this route needs `Authorization: Bearer {}…`",
                kind.prefix()
            ),
        )
        .with_header_name("Authorization")),
    }
}

pub(crate) fn invalid_token(kind: TokenKind) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidCredentials,
        format!(
            "the {}… token is not valid here (unknown, expired, revoked or for another session)",
            kind.prefix()
        ),
    )
}

/// What a signup delivers once approved: the variables (the agent token among them) and the
/// token that acknowledges them. Sealed in the session until acknowledged.
#[derive(Serialize, serde::Deserialize)]
pub(crate) struct Delivery {
    pub env_vars: Map<String, Value>,
    pub ack_token: String,
}

pub(crate) fn delivery_context(id: GateSessionId) -> Vec<u8> {
    format!("gate-delivery:{id}").into_bytes()
}

/// The agent token on the request: known, active, not expired.
pub(crate) async fn agent_token(
    state: &AdminState,
    token: &str,
) -> Result<Option<AgentTokenRecord>, ApiError> {
    let hash = state.auth.secret.hash_token(token);
    let now = time::now();
    Ok(state
        .auth
        .store
        .get_agent_token(&hash)
        .await?
        .filter(|t| t.revoked_at.is_none() && t.expires_at > now))
}

/// A new account's name: the name the signing-up tool gave itself, which a person recognises
/// on a later login's consent page (with the day it signed up).
pub(crate) fn account_name(session: &GateSessionRecord) -> String {
    session
        .client_name
        .clone()
        .unwrap_or_else(|| "a developer tool".into())
}

/// A login code: [`gate::LOGIN_CODE_DIGITS`] digits from the OS random source.
pub(crate) fn new_login_code() -> String {
    use rand::Rng;
    let mut rng = OsRng.unwrap_err();
    (0..gate::LOGIN_CODE_DIGITS)
        .map(|_| char::from(b'0' + rng.random_range(0..10u8)))
        .collect()
}

pub(crate) fn is_login_code(s: &str) -> bool {
    s.len() == gate::LOGIN_CODE_DIGITS && s.bytes().all(|b| b.is_ascii_digit())
}

/// The names of the variables an approved signup of `service` delivers: its declared ones, and
/// the agent token's.
pub(crate) fn delivered_keys(service: &GateServiceRecord) -> Vec<String> {
    service
        .env_vars
        .iter()
        .map(|v| v.key.clone())
        .chain([gate::agent_token_variable(&service.id)])
        .collect()
}
