//! `POST /v1/handoffs/open` (secret key): the site's backend opens the handoff its page passed
//! it and reads the session and its latest decision. A handoff of another organization or
//! environment is a 404, as its session would be. It opens once: the first open returns the
//! decision, a retry of that open with its `Idempotency-Key` replays the answer, and any other
//! later open is a 409 `handoff.already_opened`.

use axum::extract::State;
use edge::ApiError;
use edge::SecretKey;
use edge::body::{Reply, RequestBody, Valid};
use edge::openapi::{BodyErrors, SecretKeyErrors};
use edge::policy::OpenHandoff;
use schemas::error::ErrorEnvelope;
use schemas::resources::Single;
use schemas::time;
use schemas::{ErrorCode, SessionId};
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::QueryState;

pub fn router() -> OpenApiRouter<QueryState> {
    OpenApiRouter::new().routes(routes!(open))
}

/// The body of `POST /v1/handoffs/open`.
#[derive(utoipa::ToSchema, RequestBody)]
struct OpenHandoffBody {
    /// The sealed handoff the page's SDK obtained and passed to the backend.
    handoff: String,
}

#[derive(Serialize, utoipa::ToSchema)]
struct Opened {
    #[schema(value_type = String, pattern = "^handoff$")]
    object: &'static str,
    session_id: SessionId,
    /// The visitor and the latest decision, once the processor has scored the session.
    #[schema(required = true)]
    visitor_id: Option<String>,
    /// The latest decision as the session detail shows it; null before the first.
    #[schema(required = true, value_type = Option<schemas::decision::Decision>)]
    decision: Option<schemas::raw::RawJson>,
}

/// Opens a handoff once and answers its session's latest decision.
#[utoipa::path(
    post,
    operation_id = "open_handoff",
    path = "/v1/handoffs/open",
    tag = "handoffs",
    request_body = OpenHandoffBody,
    security(("secret_key" = ["sessions:read"])),
    responses(
        (status = 200, description = "The session and its latest decision.", body = Single<Opened>),
        (status = 404, description = "`resource.not_found`: another organization's or environment's handoff.", body = ErrorEnvelope),
        (status = 409, description = "`handoff.already_opened`, with `details.first_opened_at`.", body = ErrorEnvelope),
        BodyErrors,
        SecretKeyErrors,
    )
)]
async fn open(
    State(state): State<QueryState>,
    caller: SecretKey<OpenHandoff>,
    Valid(OpenHandoffBody { handoff }): Valid<OpenHandoffBody>,
) -> Result<Reply, ApiError> {
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
        .open_handoff_once(&store::HandoffOpening {
            handoff: secrets::handoff::opening_id(&handoff),
            at: now,
            expires_at: claims.expires_at,
        })
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
