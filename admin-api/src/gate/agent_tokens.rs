//! Agent tokens for the organization's backend (docs/gate.md#agent-tokens,
//! docs/architecture.md#gate): `POST /v1/gate/agent-tokens/verify` tells whether an `agt_` token is
//! valid, for which account, and until when; `POST /v1/gate/agent-tokens/revoke` revokes it at
//! once. Both see only the tokens of the caller's organization and environment: any other reads as
//! invalid.

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use edge::body::{Fields, JsonObject, Reply};
use edge::policy::{RevokeAgentTokens, VerifyAgentTokens};
use edge::{ApiError, AuthContext, SecretKey};
use schemas::gate::{self, TokenKind};
use schemas::time;
use serde_json::json;
use store::AgentTokenRecord;

use crate::AdminState;

pub fn router() -> Router<AdminState> {
    Router::new()
        .route("/v1/gate/agent-tokens/verify", post(verify))
        .route("/v1/gate/agent-tokens/revoke", post(revoke))
}

/// The `agent_token` member of the body: a string, which verify also requires to carry the
/// `agt_` prefix (docs/gate.md#agent-tokens). Otherwise checked for shape only: a token of the
/// right form that is not one of ours reads as invalid rather than failing the call.
fn presented(body: JsonObject, prefixed: bool) -> Result<String, ApiError> {
    let mut f = Fields::new(body);
    let token = f.checked_string("agent_token", true, |s| {
        if prefixed && !s.starts_with(TokenKind::Agent.prefix()) {
            return Err(format!("must start with `{}`", TokenKind::Agent.prefix()));
        }
        Ok(())
    });
    f.finish()?;
    token.ok_or_else(|| ApiError::internal("agent token", "validated token missing"))
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

async fn verify(
    State(state): State<AdminState>,
    caller: SecretKey<VerifyAgentTokens>,
    body: JsonObject,
) -> Result<Reply, ApiError> {
    let token = presented(body, true)?;
    let now = time::now();
    let Some(record) = owned(&state, &caller, &token).await? else {
        return Ok(Reply::ok(json!({"valid": false, "status": "invalid"})));
    };
    let status = match (record.revoked_at, record.expires_at > now) {
        (Some(_), _) => "revoked",
        (None, false) => "expired",
        (None, true) => "active",
    };
    Ok(Reply::ok(json!({
        "valid": status == "active",
        "status": status,
        "gate_account_id": record.account_id,
        "service_id": record.service_id,
        "created_at": time::format(&record.created_at),
        "expires_at": time::format(&record.expires_at),
    })))
}

async fn revoke(
    State(state): State<AdminState>,
    caller: SecretKey<RevokeAgentTokens>,
    body: JsonObject,
) -> Result<Reply, ApiError> {
    let token = presented(body, false)?;
    let mut record = owned(&state, &caller, &token)
        .await?
        .ok_or_else(|| ApiError::not_found("agent token"))?;
    if record.revoked_at.is_none() {
        record.revoked_at = Some(time::now());
        state.auth.store.update_agent_token(&record).await?;
    }
    Ok(Reply::ok(json!({
        "object": "agent_token_revocation",
        "revoked": true,
        "gate_account_id": record.account_id,
        "revoked_at": record.revoked_at.as_ref().map(time::format),
    })))
}
