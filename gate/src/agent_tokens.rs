//! Agent tokens for the organization's backend (docs/gate.md#agent-tokens,
//! docs/architecture.md#gate): `POST /v1/gate/agent-tokens/verify` tells whether an `agt_` token is
//! valid, for which account, and until when; `POST /v1/gate/agent-tokens/revoke` revokes it at
//! once. Both see only the tokens of the caller's organization and environment: any other reads as
//! invalid.

use axum::extract::State;
use edge::body::{Reply, RequestBody, Valid};
use edge::openapi::{BodyErrors, SecretKeyErrors};
use edge::policy::{RevokeAgentTokens, VerifyAgentTokens};
use edge::{ApiError, AuthContext, SecretKey};
use schemas::error::ErrorEnvelope;
use schemas::gate::{self, TokenKind};
use schemas::resources::Single;
use schemas::time;
use store::AgentTokenRecord;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use admin_api::AdminState;

pub fn router() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(verify))
        .routes(routes!(revoke))
}

/// What verify answers. A token that is not one of the caller's is `{valid: false, status:
/// invalid}` and nothing more.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct Verification {
    valid: bool,
    #[schema(value_type = String, pattern = "^(active|expired|revoked|invalid)$")]
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    gate_account_id: Option<schemas::ids::GateAccountId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    service_id: Option<String>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "time::ser_opt"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    created_at: Option<time::Timestamp>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "time::ser_opt"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    expires_at: Option<time::Timestamp>,
}

/// What revoke answers.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct Revocation {
    #[schema(value_type = String, pattern = "^agent_token_revocation$")]
    object: &'static str,
    revoked: bool,
    gate_account_id: schemas::ids::GateAccountId,
    #[serde(serialize_with = "time::ser_opt")]
    #[schema(value_type = String, format = DateTime)]
    revoked_at: Option<time::Timestamp>,
}

/// The body of `POST /v1/gate/agent-tokens/verify` (docs/gate.md#agent-tokens). A token of the
/// right form that is not one of the caller's reads as invalid rather than failing the call.
#[derive(utoipa::ToSchema, RequestBody)]
struct TokenToVerify {
    #[schema(pattern = "^agt_")]
    agent_token: String,
}

/// The body of `POST /v1/gate/agent-tokens/revoke`.
#[derive(utoipa::ToSchema, RequestBody)]
struct TokenToRevoke {
    agent_token: String,
}

/// The caller's token record, whatever its state.
async fn owned(
    state: &AdminState,
    caller: &AuthContext,
    token: &str,
) -> Result<Option<AgentTokenRecord>, ApiError> {
    if !gate::well_formed(TokenKind::Agent, token) {
        return Ok(None);
    }
    Ok(state
        .auth
        .store
        .get_agent_token(&state.auth.secret.hash_token(token))
        .await?
        .filter(|t| {
            t.organization_id == caller.organization.id && t.environment == caller.environment()
        }))
}

/// Whether an agent token is the caller's and active, for which account, and until when.
#[utoipa::path(
    post,
    operation_id = "verify_agent_token",
    path = "/v1/gate/agent-tokens/verify",
    tag = "gate",
    request_body = TokenToVerify,
    security(("secret_key" = ["gate:agent_tokens:verify"])),
    responses(
        (status = 200, description = "The verification.", body = Single<Verification>),
        BodyErrors,
        SecretKeyErrors,
    )
)]
async fn verify(
    State(state): State<AdminState>,
    caller: SecretKey<VerifyAgentTokens>,
    Valid(TokenToVerify { agent_token: token }): Valid<TokenToVerify>,
) -> Result<Reply, ApiError> {
    let now = time::now();
    let Some(record) = owned(&state, &caller, &token).await? else {
        return Ok(Reply::ok(Verification {
            valid: false,
            status: "invalid",
            gate_account_id: None,
            service_id: None,
            created_at: None,
            expires_at: None,
        }));
    };
    let status = match (record.revoked_at, record.expires_at > now) {
        (Some(_), _) => "revoked",
        (None, false) => "expired",
        (None, true) => "active",
    };
    Ok(Reply::ok(Verification {
        valid: status == "active",
        status,
        gate_account_id: Some(record.account_id),
        service_id: Some(record.service_id),
        created_at: Some(record.created_at),
        expires_at: Some(record.expires_at),
    }))
}

/// Revokes one of the caller's agent tokens at once.
#[utoipa::path(
    post,
    operation_id = "revoke_agent_token",
    path = "/v1/gate/agent-tokens/revoke",
    tag = "gate",
    request_body = TokenToRevoke,
    security(("secret_key" = ["gate:agent_tokens:revoke"])),
    responses(
        (status = 200, description = "The token is revoked (it may have been before).", body = Single<Revocation>),
        (status = 404, description = "`resource.not_found`: not one of the caller's tokens.", body = ErrorEnvelope),
        BodyErrors,
        SecretKeyErrors,
    )
)]
async fn revoke(
    State(state): State<AdminState>,
    caller: SecretKey<RevokeAgentTokens>,
    Valid(TokenToRevoke { agent_token: token }): Valid<TokenToRevoke>,
) -> Result<Reply, ApiError> {
    let mut record = owned(&state, &caller, &token)
        .await?
        .ok_or_else(|| ApiError::not_found("agent token"))?;
    if record.revoked_at.is_none() {
        record.revoked_at = Some(time::now());
        state.auth.store.update_agent_token(&record).await?;
    }
    Ok(Reply::ok(Revocation {
        object: "agent_token_revocation",
        revoked: true,
        gate_account_id: record.account_id,
        revoked_at: record.revoked_at,
    }))
}
