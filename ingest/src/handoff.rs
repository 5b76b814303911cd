//! `POST /v1/collect/sessions/{sessionId}/results`: the handoff a page passes to the site's
//! backend (sealed by `secrets::handoff`, opened by the query API's `POST /v1/handoffs/open`),
//! and the first call makes the session's decision final. It expires after ten minutes and
//! opens once, so one person's handoff cannot be shared across a bot farm.

use axum::extract::State;
use axum::http::HeaderMap;
use chrono::Duration;
use edge::body::{FromPath, PathParams, Reply};
use edge::{ApiError, PublishableKey};
use schemas::SessionId;
use schemas::collect::ServerRecord;
use schemas::time::{self, Timestamp};
use secrets::handoff::{HandoffClaims, seal};
use serde::Serialize;

use crate::proof::{self, ProofHeader};
use crate::sessions::own_session;
use crate::{IngestState, ProvenCallErrors};
use schemas::resources::Single;

/// How long a handoff can be opened.
pub const HANDOFF_LIFETIME_MINUTES: i64 = 10;

/// A handoff for the site's backend (`object: handoff`).
#[derive(Serialize, utoipa::ToSchema)]
struct Minted {
    #[schema(value_type = String, pattern = "^handoff$")]
    object: &'static str,
    session_id: SessionId,
    /// Sealed; `POST /v1/handoffs/open` opens it once, within ten minutes.
    #[schema(pattern = "^vh1\\.")]
    handoff: String,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    expires_at: Timestamp,
    /// The signed visitor token (docs/architecture.md#visitors) once the processor has linked the
    /// session to a visitor, for the SDK to keep in first-party storage; `null` before.
    #[schema(required = true)]
    visitor_token: Option<String>,
}

/// `POST /v1/collect/sessions/{sessionId}/results`: proven (`crate::proof`), since the handoff
/// and the visitor token it returns are the visitor's, and the first call finalises the session.
#[utoipa::path(
    post,
    operation_id = "mint_collect_handoff",
    path = "/v1/collect/sessions/{sessionId}/results",
    tag = "collect",
    params(
        ("sessionId" = SessionId, Path, description = "The opened session."),
        ProofHeader,
    ),
    security(("publishable_key" = [])),
    responses(
        (status = 200, description = "A fresh handoff; the first makes the decision final.", body = Single<Minted>),
        ProvenCallErrors,
    )
)]
pub async fn mint(
    State(state): State<IngestState>,
    caller: PublishableKey,
    params: PathParams,
    headers: HeaderMap,
) -> Result<Reply, ApiError> {
    proof::presented(&headers)?;
    let id: SessionId = FromPath::from_path(&params)?;
    let session = own_session(&state, &caller.ctx, id).await?;
    proof::require(&state, &session, &headers, proof::Call::Results(id)).await?;
    let now = time::now();
    // The first call makes the decision final (docs/architecture.md#decisions): recorded on the
    // session, and told to the processor through the session's stream in the log; later calls mint
    // fresh handoffs.
    state.auth.store.mark_collect_results(id, now).await?;
    crate::network::append_server_record(&state, &caller.ctx, id, &ServerRecord::Results).await?;
    let claims = HandoffClaims {
        organization_id: session.organization_id,
        environment: session.environment,
        session_id: id,
        expires_at: now + Duration::minutes(HANDOFF_LIFETIME_MINUTES),
    };
    let visitor_token = state
        .auth
        .store
        .get_session(session.organization_id, session.environment, id)
        .await?
        .and_then(|s| s.visitor_id)
        .map(|v| {
            state
                .auth
                .secret
                .visitor_token(session.organization_id, session.environment, v)
        });
    Ok(Reply::ok(Minted {
        object: "handoff",
        session_id: id,
        handoff: seal(&state.auth.secret, &claims),
        expires_at: claims.expires_at,
        visitor_token,
    }))
}
