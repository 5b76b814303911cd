//! The consent page itself: the HTML a person reads (the service, what approving shares, the
//! account a login names) with its protective headers, and the short notices shown instead
//! when there is nothing to decide.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use edge::body::PathParams;
use rand::TryRngCore;
use rand::rngs::OsRng;
use schemas::gate;
use store::{GateFlow, GateServiceRecord, GateSessionRecord};

use super::{CSRF_COOKIE, query_token, service_of, waiting};
use crate::AdminState;

pub(super) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// An HTML answer with the page's protective headers.
pub(super) fn html(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; img-src https: http: data:; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // `same-origin`: the consent token in the page's URL never reaches another site (its
    // terms or website links), while the form's own post still carries a real `Origin`
    // (under `no-referrer` it would be `null`).
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// A page with a title and a message, nothing to decide.
pub(super) fn notice(status: StatusCode, title: &str, message: &str) -> Response {
    html(
        status,
        layout(
            title,
            "#334155",
            &format!("<h1>{}</h1><p>{}</p>", escape(title), escape(message)),
        ),
    )
}

pub(super) fn layout(title: &str, accent: &str, main: &str) -> String {
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body {{ font: 16px/1.5 system-ui, sans-serif; margin: 0; background: #f8fafc; color: #0f172a; }}
main {{ max-width: 34rem; margin: 2rem auto; padding: 1.5rem; background: #fff;
       border-top: 6px solid {accent}; border-radius: 8px; box-shadow: 0 1px 4px #0002; }}
h1 {{ font-size: 1.4rem; margin: 0 0 .5rem; }}
img {{ max-height: 3rem; }}
ul {{ padding-left: 1.2rem; }}
pre {{ overflow-x: auto; font-size: .8rem; }}
.actions {{ display: flex; gap: .75rem; flex-wrap: wrap; margin-top: 1.5rem; }}
button {{ font: inherit; padding: .7rem 1.4rem; border-radius: 6px; border: 2px solid {accent};
         cursor: pointer; min-width: 8rem; }}
button.approve {{ background: {accent}; color: #fff; }}
button.deny {{ background: #fff; color: #0f172a; }}
button:focus-visible, a:focus-visible {{ outline: 3px solid #f59e0b; outline-offset: 2px; }}
small {{ color: #475569; }}
</style></head>
<body><main>{main}</main></body></html>
"#,
        title = escape(title),
    )
}

pub(super) fn already_decided() -> Response {
    notice(
        StatusCode::CONFLICT,
        "Already decided",
        "This request was approved or denied already. You can close this page.",
    )
}

pub(super) fn unavailable() -> Response {
    notice(
        StatusCode::SERVICE_UNAVAILABLE,
        "Try again in a moment",
        "Vigil could not reach its storage. Reload this page shortly.",
    )
}

pub(super) async fn show(
    State(state): State<AdminState>,
    params: PathParams,
    uri: axum::http::Uri,
) -> Response {
    let token = query_token(&uri);
    let session = match waiting(&state, &params, token.as_deref()).await {
        Ok(s) => s,
        Err(page) => return page,
    };
    let service = match service_of(&state, &session).await {
        Ok(s) => s,
        Err(page) => return page,
    };
    // A login names the account it logs in to, so a person sent someone else's link sees it.
    let account = match session.account_id {
        Some(id) => match state.auth.store.get_gate_account(id).await {
            Ok(found) => found.map(|a| a.name),
            Err(_) => return unavailable(),
        },
        None => None,
    };
    let mut csrf = [0u8; 32];
    OsRng
        .try_fill_bytes(&mut csrf)
        .expect("the OS random source is readable");
    let csrf = hex::encode(csrf);
    let mut response = html(
        StatusCode::OK,
        consent_html(
            &session,
            &service,
            account.as_deref(),
            token.as_deref().unwrap_or(""),
            &csrf,
        ),
    );
    let secure = if edge::context::public_url().starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!(
        "{CSRF_COOKIE}={csrf}; Path=/gate/consent/{}; HttpOnly; SameSite=Strict; Max-Age=900{secure}",
        session.id
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

pub(super) fn consent_html(
    session: &GateSessionRecord,
    service: &GateServiceRecord,
    account: Option<&str>,
    token: &str,
    csrf: &str,
) -> String {
    let accent = service
        .branding
        .primary_color
        .clone()
        .unwrap_or_else(|| "#2563eb".into());
    let name = escape(&service.name);
    let logo = service
        .branding
        .logo_url
        .as_deref()
        .map(|u| format!(r#"<img src="{}" alt="{name} logo">"#, escape(u)))
        .unwrap_or_default();
    let verified = if service.branding.verified {
        " <small>(verified by Vigil)</small>"
    } else {
        ""
    };
    let art = service
        .branding
        .ascii_art
        .as_deref()
        .map(|a| format!("<pre aria-hidden=\"true\">{}</pre>", escape(a)))
        .unwrap_or_default();
    let title = match session.flow {
        GateFlow::Signup => format!("Sign up to {}", service.name),
        GateFlow::Login => format!("Log in to {}", service.name),
    };
    let (heading, what) = match session.flow {
        GateFlow::Signup => {
            let mut shared: Vec<String> = service
                .env_vars
                .iter()
                .map(|v| {
                    format!(
                        "<li>{} (<code>{}</code>){}</li>",
                        escape(&v.name),
                        escape(&v.key),
                        if v.secret { ", a secret" } else { "" }
                    )
                })
                .collect();
            shared.push(format!(
                "<li>an agent token (<code>{}</code>) that lets the tool ask you to log in to {name} later; it can never log in by itself</li>",
                escape(&gate::agent_token_variable(&service.id))
            ));
            (
                format!("A tool wants to sign you up to {name}"),
                format!(
                    "<p>If you approve, {name} makes an account for you, and the tool that asked \
                     receives these values, once:</p><ul>{}</ul>",
                    shared.join("")
                ),
            )
        }
        GateFlow::Login => (
            format!("Log in to {name}?"),
            format!(
                "<p>A tool you signed up with asks to log you in to the {name} dashboard as \
                 <strong>{}</strong>. If that is not your account, deny. If you approve, this \
                 browser is sent to {name} with a one-time code, valid for 5 minutes.</p>",
                escape(account.unwrap_or("an account"))
            ),
        ),
    };
    let mut links = vec![format!(
        r#"<a href="{}">{} website</a>"#,
        escape(&service.website),
        name
    )];
    if let Some(u) = &service.consent.terms_url {
        links.push(format!(r#"<a href="{}">Terms</a>"#, escape(u)));
    }
    if let Some(u) = &service.consent.privacy_url {
        links.push(format!(r#"<a href="{}">Privacy policy</a>"#, escape(u)));
    }
    let main = format!(
        r#"{logo}{art}<h1>{heading}</h1><p><strong>{name}</strong>{verified}: {description}</p>
{what}
<p>{links}</p>
<p><small>Only approve if you started this from your own terminal or tool just now. This request expires at {expires} UTC.</small></p>
<form method="post" action="/gate/consent/{id}">
<input type="hidden" name="token" value="{token}">
<input type="hidden" name="csrf" value="{csrf}">
<div class="actions">
<button class="approve" type="submit" name="decision" value="approve">Approve</button>
<button class="deny" type="submit" name="decision" value="deny">Deny</button>
</div></form>"#,
        description = escape(&service.description),
        links = links.join(" · "),
        expires = session.expires_at.format("%H:%M"),
        id = session.id,
        token = escape(token),
        csrf = escape(csrf),
    );
    layout(&title, &accent, &main)
}
