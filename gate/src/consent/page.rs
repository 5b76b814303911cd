//! The consent page itself: the HTML a person reads (the service, what approving shares, the
//! account a login names) with its protective headers, and the short notices shown instead
//! when there is nothing to decide. It also reads the link: the Gate session it names, if its
//! consent token matches and it still waits (`waiting`), with its service (`service_of`), and
//! names the cookie that carries the form's CSRF token; the decision starts from the same.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use edge::body::{FromPath, PathParams};
use rand::TryRngCore;
use rand::rngs::OsRng;
use schemas::gate::{self, TokenKind};
use schemas::ids::GateSessionId;
use schemas::time;
use store::{GateAccountRecord, GateFlow, GateServiceRecord, GateSessionRecord, GateSessionStatus};

use admin_api::AdminState;

/// The cookie that carries the form's CSRF token (`SameSite=Strict`, `HttpOnly`).
pub(super) const CSRF_COOKIE: &str = "vigil_gate_csrf";

// ---- The Gate session a consent link names: the page and the decision both start here ----

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
    let id: GateSessionId = FromPath::from_path(params).map_err(|_| refused())?;
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

fn query_token(uri: &axum::http::Uri) -> Option<String> {
    url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
}

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

/// What the pages may load: their own scripts (Vigil's SDK and the page's check), requests and
/// the SDK's WebSocket to this server, the SDK's worker, inline styles, and images for the
/// service's logo; no frame may embed them, and forms post only here (and follow a login's
/// redirect to `form_target`, the service's dashboard).
fn content_security_policy(form_target: Option<&str>) -> String {
    let public = edge::context::public_url().trim_end_matches('/');
    let socket = public
        .strip_prefix("https://")
        .map(|host| format!("wss://{host}"))
        .or_else(|| {
            public
                .strip_prefix("http://")
                .map(|host| format!("ws://{host}"))
        })
        .unwrap_or_default();
    let form_target = form_target.unwrap_or_default();
    format!(
        "default-src 'none'; script-src 'self'; connect-src 'self' {socket}; worker-src blob:; \
         style-src 'unsafe-inline'; img-src https: http: data:; form-action 'self' \
         {form_target}; frame-ancestors 'none'; base-uri 'none'"
    )
}

/// An HTML answer with the page's protective headers.
pub(super) fn html(status: StatusCode, body: String) -> Response {
    page_response(status, body, None)
}

/// [`html`], for a page whose form may be sent on to `form_target`.
fn page_response(status: StatusCode, body: String, form_target: Option<&str>) -> Response {
    let mut response = (status, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    if let Ok(policy) = HeaderValue::from_str(&content_security_policy(form_target)) {
        h.insert(header::CONTENT_SECURITY_POLICY, policy);
    }
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
button:focus-visible, a:focus-visible, input:focus-visible {{ outline: 3px solid #f59e0b; outline-offset: 2px; }}
button:disabled {{ opacity: .5; cursor: not-allowed; }}
#user-code {{ font: 1.3rem/1.4 ui-monospace, monospace; letter-spacing: .15em; padding: .4rem .6rem; text-transform: uppercase; }}
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
    if session.flow == GateFlow::Signup && session.env_var_keys != crate::delivered_keys(&service) {
        return variables_changed(&service);
    }
    render(
        &state,
        &session,
        &service,
        token.as_deref().unwrap_or(""),
        None,
    )
    .await
}

/// The page for a signup whose service changed its variables since the tool started it: what
/// the tool was told it would receive is no longer what approving would share.
pub(super) fn variables_changed(service: &GateServiceRecord) -> Response {
    notice(
        StatusCode::CONFLICT,
        "This request is out of date",
        &format!(
            "{} changed what it shares since your tool asked, so nothing was shared. Start \
             again from your tool.",
            service.name
        ),
    )
}

/// The consent page of a waiting session, with a fresh form token (and its cookie), and
/// `prompt` above the buttons when the last decision needs doing again.
pub(super) async fn render(
    state: &AdminState,
    session: &GateSessionRecord,
    service: &GateServiceRecord,
    token: &str,
    prompt: Option<&str>,
) -> Response {
    // A login names the account it logs in to, so a person sent someone else's link sees it.
    let account = match session.account_id {
        Some(id) => match state.auth.store.get_gate_account(id).await {
            Ok(found) => found,
            Err(_) => return unavailable(),
        },
        None => None,
    };
    let key = match super::check::page_key(state, session.environment).await {
        Ok(key) => key,
        Err(e) => {
            tracing::warn!(error = %e, "gate: the consent page's key could not be read");
            return unavailable();
        }
    };
    let mut csrf = [0u8; 32];
    OsRng
        .try_fill_bytes(&mut csrf)
        .expect("the OS random source is readable");
    let csrf = hex::encode(csrf);
    let ticket = super::check::ticket(state, session);
    let page = Page {
        session,
        service,
        account: account.as_ref(),
        token,
        csrf: &csrf,
        key: &key,
        ticket: &ticket,
        prompt,
    };
    // A login's approval redirects the browser to the service's dashboard.
    let dashboard = service
        .dashboard_login_url
        .as_deref()
        .and_then(|u| url::Url::parse(u).ok())
        .map(|u| u.origin().ascii_serialization())
        .filter(|_| session.flow == GateFlow::Login);
    let mut response = page_response(StatusCode::OK, consent_html(&page), dashboard.as_deref());
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

/// What one consent page shows.
struct Page<'a> {
    session: &'a GateSessionRecord,
    service: &'a GateServiceRecord,
    /// A login's account.
    account: Option<&'a GateAccountRecord>,
    /// The consent token, posted back with the form.
    token: &'a str,
    csrf: &'a str,
    /// The publishable key the page's check loads Vigil's SDK with.
    key: &'a str,
    /// The one-time ticket the page's SDK opens its collect session with.
    ticket: &'a str,
    prompt: Option<&'a str>,
}

fn consent_html(page: &Page<'_>) -> String {
    let (session, service) = (page.session, page.service);
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
                match &session.client_name {
                    Some(tool) => format!(
                        "A tool calling itself “{}” wants to sign you up to {name}",
                        escape(tool)
                    ),
                    None => format!("A tool wants to sign you up to {name}"),
                },
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
                 <strong>{}</strong>. If you do not recognise that account, deny: someone may \
                 have sent you their link. If you approve, this browser is sent to {name} with \
                 a one-time code, valid for 5 minutes.</p>",
                page.account
                    .map_or_else(|| "an account".into(), account_described)
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
    let prompt = page
        .prompt
        .map(|p| {
            format!(
                r#"<p class="prompt" role="alert"><strong>{}</strong></p>"#,
                escape(p)
            )
        })
        .unwrap_or_default();
    let main = format!(
        r#"{logo}{art}<h1>{heading}</h1><p><strong>{name}</strong>{verified}: {description}</p>
{what}
<p>{links}</p>
<p><small>Only approve if you started this from your own terminal or tool just now. This request expires at {expires} UTC.</small></p>
{prompt}<form class="consent" method="post" action="/gate/consent/{id}" data-key="{key}" data-ticket="{ticket}">
<input type="hidden" name="token" value="{token}">
<input type="hidden" name="csrf" value="{csrf}">
<input type="hidden" name="handoff" value="">
<p><label for="user-code"><strong>To approve, type the code your tool shows.</strong> It looks like <code>WDJB-MJHT</code>. If no tool of yours shows one, someone else started this request: deny it.</label></p>
<p><input id="user-code" name="user_code" data-vigil-field="code" required autocomplete="off" autocapitalize="characters" spellcheck="false" maxlength="12" size="12" placeholder="XXXX-XXXX" aria-describedby="code-help">
<small id="code-help">Letters only; dashes and spaces do not matter.</small></p>
<div class="actions">
<button class="approve" type="submit" name="decision" value="approve" data-vigil-field="approve" disabled>Approve</button>
<button class="deny" type="submit" name="decision" value="deny" formnovalidate>Deny</button>
</div>
<p id="check-status" role="status"><small>Vigil checks in this page that a person, not a program, decides.</small></p>
<noscript><p><strong>This page needs JavaScript.</strong> Vigil lets a decision through only from a
browser it has checked is a person's, and that check runs in this page. Turn JavaScript on for
this page and reload it.</p></noscript>
</form>
<script src="/sdk/v1/vigil.js" defer></script>
<script src="/gate/consent.js" defer></script>"#,
        description = escape(&service.description),
        links = links.join(" · "),
        expires = session.expires_at.format("%H:%M"),
        id = session.id,
        token = escape(page.token),
        csrf = escape(page.csrf),
        key = escape(page.key),
        ticket = escape(page.ticket),
    );
    layout(&title, &accent, &main)
}

/// A login's account as a person recognises it: the tool that signed it up, and when.
fn account_described(account: &GateAccountRecord) -> String {
    format!(
        "{}, signed up on {} UTC",
        escape(&account.name),
        account.created_at.format("%-d %B %Y at %H:%M")
    )
}
