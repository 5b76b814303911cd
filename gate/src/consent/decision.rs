//! What the consent page's form posts: an approval or a denial, accepted only from the page
//! itself. Approving a signup makes the account and its agent token, asks the service's
//! `webhook_url` for its variables' values and seals them for the tool's next poll; approving a
//! login sends the browser to the service's dashboard with a one-time code.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use edge::body::PathParams;
use schemas::events::{self, EventData, EventSubject};
use schemas::gate::{self, TokenKind};
use schemas::ids::GateAccountId;
use schemas::time;
use serde_json::{Map, Value, json};
use store::{
    AgentTokenRecord, EventRecord, GateAccountRecord, GateApproval, GateAttempt, GateAttemptCount,
    GateDenial, GateDenialReason, GateFlow, GateServiceRecord, GateSessionRecord,
    GateSessionStatus,
};

use super::check::{self, Judgement, Unjudged};
use super::page::{
    self, CSRF_COOKIE, already_decided, notice, service_of, unavailable, variables_changed, waiting,
};
use crate::{Delivery, account_name, delivered_keys, delivery_context, new_login_code};
use admin_api::AdminState;

/// The most of the service's answer read: its variables' values.
const SERVICE_ANSWER_BYTES: usize = 64 * 1024;

/// How long the service's webhook has to answer an approval.
const SERVICE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

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
    // What a browser sends when this page's own form posts. Browsers do not let a page set
    // these headers, so another site's script cannot fake them; a program outside a browser
    // can, which is why a decision also needs the page's scored session (`check`).
    let header_is = |name: &str, want: &[&str]| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| want.contains(&v))
    };
    // `Sec-Fetch-User` is not asked for: the page's script posts the form once the check has
    // answered, which may be after the click's activation has lapsed.
    let from_the_page =
        header_is("sec-fetch-site", &["same-origin"]) && header_is("sec-fetch-mode", &["navigate"]);
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

pub(super) async fn decide(
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
    let choice = match field("decision") {
        Some(choice @ ("approve" | "deny")) => choice,
        _ => {
            return notice(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Choose Approve or Deny",
                "Go back and press one of the two buttons.",
            );
        }
    };
    let token = field("token").unwrap_or_default();
    // The user code first: a wrong one is refused before anything is judged or spent, and
    // counts against the session's attempts (RFC 8628 §5.4: the person types what their tool
    // shows, which a page elsewhere cannot have them do unawares).
    if choice == "approve"
        && let Err(page) =
            check_user_code(&state, &session, &service, token, field("user_code")).await
    {
        return page;
    }
    let approval = match check::judge(&state, &session, field("handoff")).await {
        Ok(Judgement::Person(approval)) => approval,
        // One judgement: a browser judged automated closes the session, so the same link
        // cannot be tried again with another tweak.
        Ok(Judgement::Automated(approval)) => {
            return close(
                &state,
                &session,
                &service,
                GateDenialReason::Automated,
                Some(approval),
            )
            .await;
        }
        // Denying gives nothing away: it needs no second try.
        Ok(Judgement::AskAgain(approval)) if choice == "deny" => approval,
        Ok(Judgement::AskAgain(approval)) => {
            return ask_again(&state, &session, &service, token, approval).await;
        }
        Err(Unjudged::NoScript) => {
            return notice(
                StatusCode::FORBIDDEN,
                "This page needs JavaScript",
                "Vigil lets a decision through only from a browser it has checked is a person's, \
                 and that check runs in the page. Turn JavaScript on for this page, reload it and \
                 decide again.",
            );
        }
        Err(Unjudged::Refused(why)) => {
            return notice(
                StatusCode::FORBIDDEN,
                "This decision could not be checked",
                why,
            );
        }
        Err(Unjudged::NotYet) => {
            return notice(
                StatusCode::SERVICE_UNAVAILABLE,
                "Still checking",
                "Vigil has not finished checking this browser. Go back, reload the page and \
                 decide again.",
            );
        }
        Err(Unjudged::Unavailable) => return unavailable(),
    };
    if choice == "deny" {
        return deny(&state, session, &service, approval).await;
    }
    match session.flow {
        GateFlow::Signup => approve_signup(&state, session, &service, approval).await,
        GateFlow::Login => approve_login(&state, session, &service, approval).await,
    }
}

/// Checks the user code typed on the page against `session`'s, in the store's one counting step
/// (so parallel posts cannot pass the budget): a wrong code is counted, a right one never is. A
/// form without a well-formed code costs nothing and is asked again; the last wrong code
/// closes the session.
async fn check_user_code(
    state: &AdminState,
    session: &GateSessionRecord,
    service: &GateServiceRecord,
    token: &str,
    typed: Option<&str>,
) -> Result<(), Response> {
    if session.user_code.is_none() {
        return Err(notice(
            StatusCode::GONE,
            "Start again from your tool",
            "This request has no code to check. Start it again from your tool.",
        ));
    }
    let Some(typed) = typed.and_then(gate::normalize_user_code) else {
        return Err(page::render(
            state,
            session,
            service,
            token,
            Some("Type the code your tool shows (8 letters, like WDJB-MJHT), then press Approve."),
        )
        .await);
    };
    // Compared as keyed hashes: in constant time, and the code is never stored.
    let typed = GateAttempt::UserCode(state.auth.secret.hash_token(&typed));
    let counted = state
        .auth
        .store
        .count_gate_attempt(session.id, typed, gate::USER_CODE_ATTEMPTS)
        .await;
    let number = match counted {
        Ok(Some(GateAttemptCount::Matched(_))) => return Ok(()),
        Ok(Some(GateAttemptCount::Counted(_, number))) => number,
        Ok(Some(GateAttemptCount::Refused(stored))) => {
            return Err(match stored.status {
                GateSessionStatus::Pending => {
                    close(state, session, service, GateDenialReason::UserCode, None).await
                }
                _ => already_decided(),
            });
        }
        Ok(None) => return Err(already_decided()),
        Err(_) => return Err(unavailable()),
    };
    let left = gate::USER_CODE_ATTEMPTS.saturating_sub(number);
    if left == 0 {
        return Err(close(state, session, service, GateDenialReason::UserCode, None).await);
    }
    Err(page::render(
        state,
        session,
        service,
        token,
        Some(&format!(
            "That is not the code your tool shows. Check it and type it again ({left} {} left).",
            if left == 1 { "try" } else { "tries" }
        )),
    )
    .await)
}

/// Asks for another try after a judgement that was not a person's for sure, within the
/// session's budget; the last closes the session.
async fn ask_again(
    state: &AdminState,
    session: &GateSessionRecord,
    service: &GateServiceRecord,
    token: &str,
    approval: GateApproval,
) -> Response {
    match state
        .auth
        .store
        .count_gate_attempt(
            session.id,
            GateAttempt::UnsureJudgement,
            gate::UNCERTAIN_JUDGEMENTS,
        )
        .await
    {
        Ok(Some(GateAttemptCount::Counted(_, number))) if number < gate::UNCERTAIN_JUDGEMENTS => {
            page::render(
                state,
                session,
                service,
                token,
                Some("One more step: Vigil could not yet tell that a person is here. Type the code, then press Approve once more."),
            )
            .await
        }
        Ok(Some(
            GateAttemptCount::Counted(..)
            | GateAttemptCount::Refused(_)
            | GateAttemptCount::Matched(_),
        )) => {
            close(state, session, service, GateDenialReason::Uncertain, Some(approval)).await
        }
        Ok(None) => already_decided(),
        Err(_) => unavailable(),
    }
}

/// Closes a waiting session as denied for `reason` (recording it, and the judgement, in the
/// session and a `gate.session.denied` event), and answers the page that says why.
async fn close(
    state: &AdminState,
    session: &GateSessionRecord,
    service: &GateServiceRecord,
    reason: GateDenialReason,
    judgement: Option<GateApproval>,
) -> Response {
    let mut denied = match state.auth.store.get_gate_session(session.id).await {
        Ok(Some(stored)) => stored,
        Ok(None) => return already_decided(),
        Err(_) => return unavailable(),
    };
    denied.status = GateSessionStatus::Denied;
    denied.denial = Some(GateDenial {
        reason,
        judgement: judgement.clone(),
        denied_at: time::now(),
    });
    match state
        .auth
        .store
        .transition_gate_session(&denied, GateSessionStatus::Pending, None)
        .await
    {
        Ok(true) => {
            let event = denied_event(&denied, service, reason, judgement.as_ref());
            announce(state, &event).await
        }
        Ok(false) => return already_decided(),
        Err(_) => return unavailable(),
    }
    let (title, why) = match reason {
        GateDenialReason::Automated => (
            "A person must approve",
            format!(
                "Vigil judged the browser that pressed the button to be automated (risk {} of \
                 100), and access to an account is granted only to a person, so nothing was \
                 approved and this request is closed. If you are a person, start again from your \
                 tool and open the new link in your everyday browser.",
                judgement.as_ref().map_or(100, |j| j.risk_score)
            ),
        ),
        GateDenialReason::Uncertain => (
            "Not approved",
            "Vigil could not tell that a person was deciding, after every try this request \
             allows, so nothing was approved and this request is closed. Start again from your \
             tool and open the new link in your everyday browser."
                .to_owned(),
        ),
        GateDenialReason::UserCode => (
            "Too many wrong codes",
            "The code was typed wrong too many times, so nothing was approved and this request \
             is closed. If someone sent you this link, do not approve it. Otherwise start again \
             from your tool."
                .to_owned(),
        ),
        GateDenialReason::Denied => (
            "Denied",
            "Nothing was shared. You can close this page.".to_owned(),
        ),
    };
    notice(StatusCode::FORBIDDEN, title, &why)
}

/// The `gate.session.denied` event of a session just denied for `reason` (schemas/events.md),
/// with what Vigil made of the browser when the denial came from a judged page.
fn denied_event(
    session: &GateSessionRecord,
    service: &GateServiceRecord,
    reason: GateDenialReason,
    judged: Option<&GateApproval>,
) -> EventRecord {
    gate_event(
        session,
        EventData::GateSessionDenied(events::GateSessionDenied {
            gate_session_id: session.id,
            flow: session.flow,
            service_id: service.id.clone(),
            reason,
            judgement: judged.map(judgement),
        }),
    )
}

/// An event about `session`.
fn gate_event(session: &GateSessionRecord, data: EventData) -> EventRecord {
    EventRecord {
        id: schemas::EventId::generate(),
        organization_id: session.organization_id,
        environment: session.environment,
        event_type: data.event_type(),
        subject: EventSubject {
            kind: "gate_session".into(),
            id: session.id.to_string(),
        },
        data: data.into_value(),
        created_at: time::now(),
    }
}

/// What Vigil made of a consent page's browser, as events carry it.
fn judgement(approval: &GateApproval) -> events::Judgement {
    events::Judgement {
        automation_status: approval.automation_status,
        verdict: approval.verdict,
        risk_score: approval.risk_score,
    }
}

/// Vigil's judgement as the approver is shown it: the same values the session records.
fn judged(approval: &GateApproval) -> String {
    let who = match approval.automation_status {
        schemas::decision::AutomationStatus::Human => "a person's",
        _ => "used by a person",
    };
    format!(
        "Vigil judged this browser {who} (risk {} of 100).",
        approval.risk_score
    )
}

/// Denies a waiting session; says "Denied" only when the denial took effect, and otherwise what
/// the session became (an approval that won the race has shared what it shares).
async fn deny(
    state: &AdminState,
    session: GateSessionRecord,
    service: &GateServiceRecord,
    approval: GateApproval,
) -> Response {
    // The stored session, with the attempts the page counted.
    let mut denied = match state.auth.store.get_gate_session(session.id).await {
        Ok(Some(stored)) => stored,
        Ok(None) => return already_decided(),
        Err(_) => return unavailable(),
    };
    denied.status = GateSessionStatus::Denied;
    denied.approval = Some(approval.clone());
    denied.denial = Some(GateDenial {
        reason: GateDenialReason::Denied,
        judgement: Some(approval),
        denied_at: time::now(),
    });
    match state
        .auth
        .store
        .transition_gate_session(&denied, GateSessionStatus::Pending, None)
        .await
    {
        Ok(true) => {
            let judged = denied.approval.as_ref();
            let event = denied_event(&denied, service, GateDenialReason::Denied, judged);
            announce(state, &event).await;
            notice(
                StatusCode::OK,
                "Denied",
                "Nothing was shared. You can close this page.",
            )
        }
        Ok(false) => match state.auth.store.get_gate_session(session.id).await {
            Ok(Some(now)) => match now.status {
                GateSessionStatus::Denied => notice(
                    StatusCode::OK,
                    "Denied",
                    "This request was denied already; nothing was shared. You can close this page.",
                ),
                GateSessionStatus::Approving
                | GateSessionStatus::Approved
                | GateSessionStatus::Completed => notice(
                    StatusCode::CONFLICT,
                    "Not denied: this request was approved",
                    "An approval of this request arrived before your denial, so the tool has been \
                     given access. If you did not mean to approve it, revoke the tool's access at \
                     the service.",
                ),
                GateSessionStatus::Pending => notice(
                    StatusCode::CONFLICT,
                    "Not denied yet",
                    "The request changed while you decided. Reload the page and decide again.",
                ),
            },
            _ => unavailable(),
        },
        Err(_) => unavailable(),
    }
}

/// The `gate.session.approved` event of `session` (schemas/events.md).
fn approved_event(
    session: &GateSessionRecord,
    service: &GateServiceRecord,
    account: GateAccountId,
    approval: &GateApproval,
) -> EventRecord {
    gate_event(
        session,
        EventData::GateSessionApproved(events::GateSessionApproved {
            gate_session_id: session.id,
            flow: session.flow,
            service_id: service.id.clone(),
            gate_account_id: account,
            env_vars: service.env_vars.iter().map(|v| v.key.clone()).collect(),
            // What Vigil made of the approver's browser: the same values the page showed.
            approval: judgement(approval),
        }),
    )
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
        .and_then(sender::signing::secret_key)
        .unwrap_or(secret);
    let sender = sender::sending::Sender::new(state.allow_private_webhooks, SERVICE_TIMEOUT)
        .reading_up_to(SERVICE_ANSWER_BYTES);
    let id = event.id.to_string();
    let outcome = sender
        .send(
            sender::sending::Request {
                url,
                id: &id,
                body: std::sync::Arc::new(sender::sending::body(event)),
                keys: &[key],
            },
            time::now(),
        )
        .await;
    let body = match outcome {
        sender::Outcome::Answered { status, body, .. } if (200..300).contains(&status) => body,
        sender::Outcome::Answered { status, .. } => {
            return Err(format!("the service answered HTTP {status}"));
        }
        sender::Outcome::NoAnswer(e) | sender::Outcome::Undeliverable(e) => return Err(e),
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
    approval: GateApproval,
) -> Response {
    if session.env_var_keys != delivered_keys(service) {
        return variables_changed(service);
    }
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
        name: account_name(&session),
        ..account
    };
    let event = approved_event(&session, service, account.id, &approval);
    // Claimed first, so a second approval (a double click) asks the service nothing.
    // From the stored session, not the copy the post started from: the page's attempts were
    // counted on it since, and must survive a failed approval.
    let mut approving = match state.auth.store.get_gate_session(session.id).await {
        Ok(Some(stored)) => stored,
        Ok(None) => return already_decided(),
        Err(_) => return unavailable(),
    };
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
            // Back to waiting, as stored: the person may try again.
            let mut waiting = approving.clone();
            waiting.status = GateSessionStatus::Pending;
            let _ = state
                .auth
                .store
                .transition_gate_session(&waiting, GateSessionStatus::Approving, None)
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
    approved.approval = Some(approval.clone());
    approved.account_id = Some(account.id);
    approved.agent_token = Some(token.hash);
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
            "Your {} account is ready. Return to your terminal: the tool receives it now. {}",
            service.name,
            judged(&approval)
        ),
    )
}

async fn approve_login(
    state: &AdminState,
    session: GateSessionRecord,
    service: &GateServiceRecord,
    approval: GateApproval,
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
        approved.approval = Some(approval.clone());
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
    announce(
        state,
        &approved_event(&session, service, account, &approval),
    )
    .await;
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

/// Records and publishes a Gate event (an approval or a denial) for the organization's
/// webhooks; a failure is logged, the decision stands.
async fn announce(state: &AdminState, event: &EventRecord) {
    if let Err(e) = admin_api::emit_event(state, event).await {
        tracing::warn!(error = ?e.code, event_type = event.event_type.as_str(), "gate: a decision's event was not recorded");
    }
}
