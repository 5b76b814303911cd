//! `POST /v1/handoffs/open` (secret key): the site's backend opens the handoff its page passed
//! it and reads the session and its latest decision. A handoff of another organization or
//! environment is a 404, as its session would be. It opens once: the first open returns the
//! decision, a retry of that open with its `Idempotency-Key` replays the answer, and any other
//! later open is a 409 `handoff.already_opened`.

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use edge::ApiError;
use edge::SecretKey;
use edge::body::{Fields, JsonObject, Reply};
use edge::policy::OpenHandoff;
use schemas::time;
use schemas::{ErrorCode, SessionId};
use serde::Serialize;

use crate::QueryState;

pub fn router() -> Router<QueryState> {
    Router::new().route("/v1/handoffs/open", post(open))
}

#[derive(Serialize)]
struct Opened {
    object: &'static str,
    session_id: SessionId,
    /// The visitor and the latest decision, once the processor has scored the session.
    visitor_id: Option<String>,
    decision: Option<schemas::raw::RawJson>,
}

async fn open(
    State(state): State<QueryState>,
    caller: SecretKey<OpenHandoff>,
    body: JsonObject,
) -> Result<Reply, ApiError> {
    let mut f = Fields::new(body);
    let handoff = f.string("handoff", true);
    f.finish()?;
    let Some(handoff) = handoff else {
        return Err(ApiError::internal("handoff", "validated field missing"));
    };
    let now = time::now();
    let claims = secrets::handoff::open(&state.auth.secret, &handoff, now)
        .map_err(|e| ApiError::invalid_field("handoff", e.to_string(), None))?;
    if claims.organization_id != caller.organization.id
        || claims.environment != caller.environment()
    {
        return Err(ApiError::not_found("handoff"));
    }
    // Read first, claim last: once the opening is claimed nothing may fail, or the one open
    // would be spent on an answer the caller never got.
    let scored = state
        .auth
        .store
        .get_session(
            claims.organization_id,
            claims.environment,
            claims.session_id,
        )
        .await?;
    if let Some(first) = state
        .auth
        .store
        .open_handoff_once(
            &secrets::handoff::opening_id(&handoff),
            now,
            claims.expires_at,
        )
        .await?
    {
        let mut e = ApiError::new(
            ErrorCode::HandoffAlreadyOpened,
            "this handoff was opened before; a handoff opens once (retry the first open with its Idempotency-Key to get its answer again)",
        );
        e.details.first_opened_at = Some(time::format(&first));
        return Err(e);
    }
    Ok(Reply::ok(Opened {
        object: "handoff",
        session_id: claims.session_id,
        visitor_id: scored
            .as_ref()
            .and_then(|s| s.visitor_id)
            .map(|v| v.to_string()),
        decision: scored.and_then(|s| s.latest_decision),
    }))
}
