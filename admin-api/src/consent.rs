//! Gate's consent page (D14): `GET /gate/consent/{gateSessionId}?token=gtc_…` shows a person
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

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use edge::body::{PathParams, path_param};
use rand::TryRngCore;
use rand::rngs::OsRng;
use schemas::events::{EventSubject, EventType};
use schemas::gate::{self, TokenKind};
use schemas::ids::{GateAccountId, GateSessionId};
use schemas::time;
use serde_json::{Map, Value, json};
use store::{
    AgentTokenRecord, EventRecord, GateAccountRecord, GateFlow, GateServiceRecord,
    GateSessionRecord, GateSessionStatus,
};

use crate::AdminState;
use crate::gate_flows::{Delivery, account_name, delivery_context};

const CSRF_COOKIE: &str = "vigil_gate_csrf";
/// The most of the service's answer read: its variables' values.
const SERVICE_ANSWER_BYTES: usize = 64 * 1024;
/// How long the service's webhook has to answer an approval.
const SERVICE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub fn router() -> Router<AdminState> {
    Router::new().route("/gate/consent/{gateSessionId}", get(page).post(decide))
}

/// A login code: [`gate::LOGIN_CODE_DIGITS`] digits from the OS random source.
fn new_login_code() -> String {
    use rand::Rng;
    let mut rng = OsRng.unwrap_err();
    (0..gate::LOGIN_CODE_DIGITS)
        .map(|_| char::from(b'0' + rng.random_range(0..10u8)))
        .collect()
}

pub fn is_login_code(s: &str) -> bool {
    s.len() == gate::LOGIN_CODE_DIGITS && s.bytes().all(|b| b.is_ascii_digit())
}

fn escape(s: &str) -> String {
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
fn html(status: StatusCode, body: String) -> Response {
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
fn notice(status: StatusCode, title: &str, message: &str) -> Response {
    html(
        status,
        layout(
            title,
            "#334155",
            &format!("<h1>{}</h1><p>{}</p>", escape(title), escape(message)),
        ),
    )
}

fn layout(title: &str, accent: &str, main: &str) -> String {
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

/// The session the path names, if `token` is its consent token and it still waits.
async fn waiting(
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
    if time::now() >= session.expires_at {
        return Err(notice(
            StatusCode::GONE,
            "This request expired",
            "Approval requests last 15 minutes. Start again from your tool.",
        ));
    }
    Ok(session)
}

fn already_decided() -> Response {
    notice(
        StatusCode::CONFLICT,
        "Already decided",
        "This request was approved or denied already. You can close this page.",
    )
}

fn unavailable() -> Response {
    notice(
        StatusCode::SERVICE_UNAVAILABLE,
        "Try again in a moment",
        "Vigil could not reach its storage. Reload this page shortly.",
    )
}

async fn service_of(
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

async fn page(
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

fn consent_html(
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

/// Whether the post came from this page: its form token equals the cookie set with the page,
/// and the browser does not say it came from another site.
fn same_site_post(headers: &HeaderMap, form_csrf: Option<&str>) -> bool {
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == CSRF_COOKIE)
        .map(|(_, v)| v.to_owned());
    let tokens_match = match (cookie, form_csrf) {
        (Some(c), Some(f)) if c.len() == 64 && f.len() == 64 => {
            use subtle::ConstantTimeEq;
            bool::from(c.as_bytes().ct_eq(f.as_bytes()))
        }
        _ => false,
    };
    // What a browser sends when a person presses a button of this page's own form. Browsers
    // do not let a page set these headers, so another site's script cannot fake them; a
    // program outside a browser can, which is why the approval is worth only what the
    // person's own browser session is (see docs/gate.md#the-consent-page).
    let header_is = |name: &str, want: &[&str]| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| want.contains(&v))
    };
    let from_the_page = header_is("sec-fetch-site", &["same-origin"])
        && header_is("sec-fetch-mode", &["navigate"])
        && header_is("sec-fetch-user", &["?1"]);
    let public = url::Url::parse(edge::context::public_url()).ok();
    let origin_ok = headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|o| {
            public
                .as_ref()
                .is_some_and(|p| p.origin().ascii_serialization() == o)
        });
    let ok = tokens_match && from_the_page && origin_ok;
    if !ok {
        tracing::info!(
            tokens_match,
            from_the_page,
            origin_ok,
            "gate: a consent post that did not come from its page"
        );
    }
    ok
}

async fn decide(
    State(state): State<AdminState>,
    params: PathParams,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form: Map<String, Value> = url::form_urlencoded::parse(&body)
        .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
        .collect();
    let field = |name: &str| form.get(name).and_then(Value::as_str);
    if !same_site_post(&headers, field("csrf")) {
        return notice(
            StatusCode::FORBIDDEN,
            "This approval did not come from its page",
            "Open the approval link again and decide there.",
        );
    }
    let session = match waiting(&state, &params, field("token")).await {
        Ok(s) => s,
        Err(page) => return page,
    };
    let service = match service_of(&state, &session).await {
        Ok(s) => s,
        Err(page) => return page,
    };
    match field("decision") {
        Some("approve") => match session.flow {
            GateFlow::Signup => approve_signup(&state, session, &service).await,
            GateFlow::Login => approve_login(&state, session, &service).await,
        },
        Some("deny") => {
            let mut denied = session.clone();
            denied.status = GateSessionStatus::Denied;
            match state
                .auth
                .store
                .transition_gate_session(&denied, GateSessionStatus::Pending, None)
                .await
            {
                Ok(_) => notice(
                    StatusCode::OK,
                    "Denied",
                    "Nothing was shared. You can close this page.",
                ),
                Err(_) => unavailable(),
            }
        }
        _ => notice(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Choose Approve or Deny",
            "Go back and press one of the two buttons.",
        ),
    }
}

/// The `gate.session.approved` event of `session` (D12).
fn approved_event(
    session: &GateSessionRecord,
    service: &GateServiceRecord,
    account: GateAccountId,
) -> EventRecord {
    EventRecord {
        id: schemas::EventId::generate(),
        organization_id: session.organization_id,
        environment: session.environment,
        event_type: EventType::GateSessionApproved,
        subject: EventSubject {
            kind: "gate_session".into(),
            id: session.id.to_string(),
        },
        data: json!({
            "gate_session_id": session.id,
            "flow": match session.flow { GateFlow::Signup => "signup", GateFlow::Login => "login" },
            "service_id": service.id,
            "gate_account_id": account,
            "env_vars": service.env_vars.iter().map(|v| v.key.clone()).collect::<Vec<_>>(),
        }),
        created_at: time::now(),
    }
}

/// Asks the service's webhook for its variables' values: a signed POST of the event; the
/// answer's `env_vars` object (or `env`) gives the values of the declared keys.
async fn values_from_service(
    state: &AdminState,
    service: &GateServiceRecord,
    event: &EventRecord,
) -> Result<Map<String, Value>, String> {
    let Some(url) = &service.webhook_url else {
        return Ok(Map::new());
    };
    let secret = state
        .auth
        .secret
        .open(
            &service.sealed_webhook_secret,
            &GateServiceRecord::secret_context(&service.id),
        )
        .ok_or("the service's webhook secret does not open")?;
    // A `whsec_` secret signs with its decoded bytes, as Standard Webhooks libraries expect;
    // any other secret with its own bytes.
    let key = std::str::from_utf8(&secret)
        .ok()
        .and_then(dispatcher::signing::secret_key)
        .unwrap_or(secret);
    let sender = dispatcher::sending::Sender::new(state.allow_private_webhooks, SERVICE_TIMEOUT)
        .reading_up_to(SERVICE_ANSWER_BYTES);
    let id = event.id.to_string();
    let outcome = sender
        .send(
            dispatcher::sending::Request {
                url,
                id: &id,
                body: std::sync::Arc::new(dispatcher::sending::body(event)),
                keys: &[key],
            },
            time::now(),
        )
        .await;
    let body = match outcome {
        dispatcher::attempts::Outcome::Answered { status, body, .. }
            if (200..300).contains(&status) =>
        {
            body
        }
        dispatcher::attempts::Outcome::Answered { status, .. } => {
            return Err(format!("the service answered HTTP {status}"));
        }
        dispatcher::attempts::Outcome::NoAnswer(e)
        | dispatcher::attempts::Outcome::Undeliverable(e) => return Err(e),
    };
    let answer: Value = if body.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(&body).map_err(|e| format!("the service's answer is not JSON: {e}"))?
    };
    let given = answer
        .get("env_vars")
        .or_else(|| answer.get("env"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut values = Map::new();
    for declared in &service.env_vars {
        match given.get(&declared.key) {
            Some(Value::String(v)) => {
                values.insert(declared.key.clone(), Value::String(v.clone()));
            }
            _ => return Err(format!("the service gave no value for {}", declared.key)),
        }
    }
    Ok(values)
}

async fn approve_signup(
    state: &AdminState,
    session: GateSessionRecord,
    service: &GateServiceRecord,
) -> Response {
    let now = time::now();
    let account = GateAccountRecord {
        id: GateAccountId::generate(),
        service_id: service.id.clone(),
        organization_id: service.organization_id,
        environment: service.environment,
        name: String::new(),
        created_at: now,
    };
    let account = GateAccountRecord {
        name: account_name(service, account.id),
        ..account
    };
    let event = approved_event(&session, service, account.id);
    // Claimed first, so a second approval (a double click) asks the service nothing.
    let mut approving = session.clone();
    approving.status = GateSessionStatus::Approving;
    match state
        .auth
        .store
        .transition_gate_session(&approving, GateSessionStatus::Pending, None)
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            return already_decided();
        }
        Err(_) => return unavailable(),
    }
    let mut env_vars = match values_from_service(state, service, &event).await {
        Ok(values) => values,
        Err(why) => {
            tracing::warn!(service = %service.id, error = %why, "gate: the service did not confirm a signup");
            // Back to waiting: the person may try again.
            let _ = state
                .auth
                .store
                .transition_gate_session(&session, GateSessionStatus::Approving, None)
                .await;
            return notice(
                StatusCode::BAD_GATEWAY,
                "The service did not confirm",
                &format!(
                    "{} did not answer the signup as expected, so nothing was shared. Try again in a moment.",
                    service.name
                ),
            );
        }
    };
    let agent = gate::mint(TokenKind::Agent);
    env_vars.insert(
        gate::agent_token_variable(&service.id),
        Value::String(agent.clone()),
    );
    let ack = gate::mint(TokenKind::Ack);
    let delivery = Delivery {
        env_vars,
        ack_token: ack.clone(),
    };
    let Ok(delivery) = serde_json::to_vec(&delivery) else {
        return unavailable();
    };
    let token = AgentTokenRecord {
        hash: state.auth.secret.hash_token(&agent),
        account_id: account.id,
        service_id: service.id.clone(),
        organization_id: service.organization_id,
        environment: service.environment,
        created_at: now,
        expires_at: now + chrono::TimeDelta::from_std(gate::AGENT_TOKEN_TTL).expect("90 days"),
        revoked_at: None,
        recent_logins: Vec::new(),
    };
    // The stored session as polls left it, with the approval's fields set.
    let mut approved = match state.auth.store.get_gate_session(session.id).await {
        Ok(Some(stored)) => stored,
        _ => return unavailable(),
    };
    approved.status = GateSessionStatus::Approved;
    approved.account_id = Some(account.id);
    approved.ack_token = Some(state.auth.secret.hash_token(&ack));
    approved.sealed_delivery = state
        .auth
        .secret
        .seal(&delivery, &delivery_context(session.id));
    match state
        .auth
        .store
        .transition_gate_session(
            &approved,
            GateSessionStatus::Approving,
            Some((&account, &token)),
        )
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            return already_decided();
        }
        Err(_) => return unavailable(),
    }
    announce(state, &event).await;
    notice(
        StatusCode::OK,
        "Approved",
        &format!(
            "Your {} account is ready. Return to your terminal: the tool receives it now.",
            service.name
        ),
    )
}

async fn approve_login(
    state: &AdminState,
    session: GateSessionRecord,
    service: &GateServiceRecord,
) -> Response {
    let Some(dashboard) = service
        .dashboard_login_url
        .as_deref()
        .and_then(|u| url::Url::parse(u).ok())
    else {
        return notice(
            StatusCode::CONFLICT,
            "No dashboard to log in to",
            "This service has no dashboard login address.",
        );
    };
    let Some(account) = session.account_id else {
        return unavailable();
    };
    // A revocation since the login started stops it.
    if let Some(hash) = &session.agent_token {
        let now = time::now();
        match state.auth.store.get_agent_token(hash).await {
            Ok(Some(t)) if t.revoked_at.is_none() && t.expires_at > now => {}
            Ok(_) => {
                return notice(
                    StatusCode::GONE,
                    "This login is no longer possible",
                    "The tool's access was revoked or has expired. Sign up again from your tool.",
                );
            }
            Err(_) => return unavailable(),
        }
    }
    // A new code is drawn in the rare case one is another live login's.
    let mut code = new_login_code();
    let mut attempts = 0;
    loop {
        let mut approved = session.clone();
        approved.status = GateSessionStatus::Approved;
        approved.login_code = Some(state.auth.secret.hash_token(&code));
        approved.code_expires_at = Some(
            time::now() + chrono::TimeDelta::from_std(gate::LOGIN_CODE_TTL).expect("5 minutes"),
        );
        match state
            .auth
            .store
            .transition_gate_session(&approved, GateSessionStatus::Pending, None)
            .await
        {
            Ok(true) => break,
            Ok(false) => {
                let still_waiting = matches!(
                    state.auth.store.get_gate_session(session.id).await,
                    Ok(Some(s)) if s.status == GateSessionStatus::Pending
                );
                attempts += 1;
                if !still_waiting || attempts >= 5 {
                    return already_decided();
                }
                code = new_login_code();
            }
            Err(_) => return unavailable(),
        }
    }
    announce(state, &approved_event(&session, service, account)).await;
    let mut target = dashboard;
    target
        .query_pairs_mut()
        .append_pair("code", &code)
        .append_pair("gate_session_id", &session.id.to_string());
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(target.as_str()) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// Records and publishes the approval for the organization's webhooks; a failure is logged,
/// the approval stands.
async fn announce(state: &AdminState, event: &EventRecord) {
    if let Err(e) = crate::emit_event(state, event).await {
        tracing::warn!(error = ?e.code, "gate: the approval event was not recorded");
    }
}
