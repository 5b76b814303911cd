//! Gate's consent page (docs/architecture.md#gate), in two parts: the page a person reads (`page`)
//! and the approval or denial its form posts (`decision`).
//! `GET /gate/consent/{gateSessionId}?token=gtc_…` shows a person
//! the service (its name, branding, website, terms and privacy links) and what approving
//! shares, with Approve and Deny buttons in a plain form that works without JavaScript; the
//! form posts back to the same path.
//!
//! An approval cannot be forged from another site: the form carries a token that must equal a
//! `SameSite=Strict`, `HttpOnly` cookie set with the page (a cross-site post carries neither),
//! and a post whose `Origin` or `Sec-Fetch-Site` says it came from elsewhere is refused. The
//! page cannot be framed (`frame-ancestors 'none'`, `X-Frame-Options: DENY`), is never cached,
//! and sends no referrer to other sites (its URL holds the consent token).
//!
//! Approving a signup makes the account and its agent token, asks the service's `webhook_url`
//! (a signed `gate.session.approved`) for the values of its variables, and seals the delivery
//! for the tool's next poll. Approving a login sends the browser to the service's
//! `dashboard_login_url` with a one-time numeric code.

mod check;
mod decision;
mod page;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use edge::body::{PathParams, path_param};
use schemas::gate::{self, TokenKind};
use schemas::ids::GateSessionId;
use schemas::time;
use store::{GateServiceRecord, GateSessionRecord, GateSessionStatus};

use self::page::{already_decided, notice, unavailable};
use crate::AdminState;

pub(super) const CSRF_COOKIE: &str = "vigil_gate_csrf";

pub fn router() -> Router<AdminState> {
    Router::new()
        .route(
            "/gate/consent/{gateSessionId}",
            get(page::show).post(decision::decide),
        )
        .route("/gate/consent.js", get(script))
}

/// The session the path names, if `token` is its consent token and it still waits.
pub(super) async fn waiting(
    state: &AdminState,
    params: &PathParams,
    token: Option<&str>,
) -> Result<GateSessionRecord, Response> {
    let refused = || {
        notice(
            StatusCode::NOT_FOUND,
            "This link does not work",
            "The approval link is incomplete, or it is not for this request. Start again from your tool.",
        )
    };
    let id: GateSessionId = path_param(params, "gateSessionId").map_err(|_| refused())?;
    let token = token
        .filter(|t| gate::well_formed(TokenKind::Consent, t))
        .ok_or_else(refused)?;
    let session = state
        .auth
        .store
        .get_gate_session(id)
        .await
        .map_err(|_| unavailable())?
        .filter(|s| s.consent_token == state.auth.secret.hash_token(token))
        .ok_or_else(refused)?;
    if session.status == GateSessionStatus::Approving {
        return Err(notice(
            StatusCode::CONFLICT,
            "Being approved",
            "This request is being approved now. Return to your tool.",
        ));
    }
    if session.status != GateSessionStatus::Pending {
        return Err(already_decided());
    }
    // A login whose agent token was revoked, or ran out, since it started can never complete.
    if let Some(hash) = &session.agent_token {
        let usable = state
            .auth
            .store
            .get_agent_token(hash)
            .await
            .map_err(|_| unavailable())?
            .is_some_and(|t| t.revoked_at.is_none() && t.expires_at > time::now());
        if !usable {
            return Err(notice(
                StatusCode::GONE,
                "This login is no longer possible",
                "The tool's access was revoked or has expired. Sign up again from your tool.",
            ));
        }
    }
    if time::now() >= session.expires_at {
        return Err(notice(
            StatusCode::GONE,
            "This request expired",
            "Approval requests last 15 minutes. Start again from your tool.",
        ));
    }
    Ok(session)
}

pub(super) async fn service_of(
    state: &AdminState,
    session: &GateSessionRecord,
) -> Result<GateServiceRecord, Response> {
    state
        .auth
        .store
        .get_gate_service(&session.service_id)
        .await
        .map_err(|_| unavailable())?
        .filter(|s| s.is_published() && s.organization_id == session.organization_id)
        .ok_or_else(|| {
            notice(
                StatusCode::GONE,
                "This service is not available",
                "The service was disabled or unpublished since this request started.",
            )
        })
}

pub(super) fn query_token(uri: &axum::http::Uri) -> Option<String> {
    url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
}

/// The page's check, run by every consent page after Vigil's SDK.
const SCRIPT: &str = include_str!("consent.js");

/// `GET /gate/consent.js`: the consent page's own script (the page's policy runs no inline
/// script).
async fn script() -> Response {
    let mut response = SCRIPT.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/javascript; charset=utf-8"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    response
}
