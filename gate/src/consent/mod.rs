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
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use admin_api::AdminState;

pub fn router() -> Router<AdminState> {
    Router::new()
        .route(
            "/gate/consent/{gateSessionId}",
            get(page::show).post(decision::decide),
        )
        .route("/gate/consent.js", get(script))
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
