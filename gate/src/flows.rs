//! Gate's flows (docs/architecture.md#gate): a developer tool signs up to a service, or logs its
//! person in to the service's dashboard, and a person approves each on a consent page
//! ([`super::consent`]).
//!
//! - Signup: `POST /v1/gate/services/{serviceId}/signups` (no key; the client address's limit)
//!   answers a `gate_` session, its consent URL, a `gtpoll_` token and the poll interval. The
//!   tool polls `GET /v1/gate/sessions/{id}` with the poll token, per RFC 8628: `pending`, a
//!   `gate.slow_down` (and 5 s more) when it polls sooner than the interval, then `approved`
//!   with the variables, the agent token and an `ack_` token; after
//!   `POST /v1/gate/sessions/{id}/ack` they are gone and the session reads `acknowledged`.
//! - Login: `POST /v1/gate/login-sessions` with `Bearer agt_…` answers a pending login session
//!   and its consent URL; the approval sends the browser to the service's
//!   `dashboard_login_url` with a one-time numeric code, which the service's backend exchanges
//!   once, within 5 minutes, at `POST /v1/gate/login-sessions/consume`.
//!
//! Every token is single-purpose, stored as a keyed hash, and shown once.

use axum::extract::State;
use axum::http::HeaderMap;
use edge::body::{FromPath, GateServiceId, JsonObject, PathParams, Reply, RequestBody, Valid};
use edge::openapi::{BodyErrors, SecretKeyErrors};
use edge::policy::ConsumeLoginSessions;
use edge::{ApiError, SecretKey};
use schemas::error::{ErrorCode, ErrorEnvelope};
use schemas::gate::{self, TokenKind};
use schemas::ids::GateSessionId;
use schemas::resources::Single;
use schemas::time::{self, Timestamp};
use serde::Serialize;
use serde_json::Value;
use store::{
    AgentLogin, CredentialHash, GateFlow, GatePoll, GateServiceRecord, GateSessionRecord,
    GateSessionStatus,
};

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{Delivery, agent_token, bearer_token, delivery_context, invalid_token};
use admin_api::AdminState;

pub fn router() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(start_signup))
        .routes(routes!(poll))
        .routes(routes!(acknowledge))
        .routes(routes!(start_login))
        .routes(routes!(consume_login))
}

/// A started signup (`object: gate_signup`): everything the tool needs, shown once.
#[derive(Serialize, utoipa::ToSchema)]
struct Signup {
    id: GateSessionId,
    #[schema(value_type = String, pattern = "^gate_signup$")]
    object: &'static str,
    service_id: String,
    #[schema(value_type = String, pattern = "^pending$")]
    status: &'static str,
    /// Where the person approves; open it in their browser.
    consent_url: String,
    /// The code the person types on the consent page before Approve counts (RFC 8628's
    /// `user_code`): show it to them first, as `WDJB-MJHT`.
    #[schema(
        pattern = "^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$",
        example = "WDJB-MJHT"
    )]
    user_code: String,
    /// `gtpoll_…`, the bearer token of the polls.
    poll_token: String,
    /// Seconds between polls.
    interval: u32,
    /// The names of the variables an approval delivers (the agent token's among them), so the
    /// tool can tell before the person approves whether it would replace one it holds.
    env_vars: Vec<String>,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    expires_at: Timestamp,
}

/// A started login (`object: gate_login_session`).
#[derive(Serialize, utoipa::ToSchema)]
struct LoginSession {
    id: GateSessionId,
    #[schema(value_type = String, pattern = "^gate_login_session$")]
    object: &'static str,
    #[schema(value_type = String, pattern = "^pending$")]
    status: &'static str,
    consent_url: String,
    /// The code the person types on the consent page before Approve counts: show it to them
    /// first, as `WDJB-MJHT`.
    #[schema(
        pattern = "^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$",
        example = "WDJB-MJHT"
    )]
    user_code: String,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    expires_at: Timestamp,
}

/// The optional body of a signup: the tool's name, shown on the consent pages.
#[derive(utoipa::ToSchema, RequestBody)]
struct SignupBody {
    #[schema(
        nullable = false,
        min_length = 1,
        max_length = 64,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$"
    )]
    #[member(check = shown_name)]
    client_name: Option<String>,
}

/// A name shown on one line, with something besides white space in it.
fn shown_name(s: &str) -> Result<(), String> {
    schemas::validate::shown_text(s, false)?;
    if s.trim().is_empty() {
        return Err("must not be blank".into());
    }
    Ok(())
}

/// The body of an acknowledgement.
#[derive(utoipa::ToSchema, RequestBody)]
struct AckBody {
    /// The `ack_` token the approved poll answered.
    #[schema(pattern = "^ack_")]
    #[member(check = ack_token)]
    ack_token: String,
}

fn ack_token(t: &str) -> Result<(), String> {
    if gate::well_formed(TokenKind::Ack, t) {
        Ok(())
    } else {
        Err("must be the ack_ token the approved poll answered".into())
    }
}

/// The body of a login session's start.
#[derive(utoipa::ToSchema, RequestBody)]
struct LoginBody {
    /// The service whose dashboard the person logs in to.
    #[member(check = gate::service_id)]
    service_id: String,
}

/// The body of a login code's exchange: the code, and the login session the redirect to the
/// dashboard carried beside it, if the dashboard kept it.
#[derive(utoipa::ToSchema, RequestBody)]
struct ConsumeBody {
    /// The numeric login code.
    #[schema(pattern = "^[0-9]{8}$")]
    #[member(check = login_code)]
    code: String,
    /// The login session the code belongs to; when given, the code is checked against that
    /// session alone, else it is looked up among the caller's live codes.
    #[schema(nullable = false)]
    gate_session_id: Option<GateSessionId>,
    /// The service the dashboard is; when given, a code of another service is unknown.
    #[schema(nullable = false)]
    #[member(check = gate::service_id)]
    service_id: Option<String>,
}

fn login_code(c: &str) -> Result<(), String> {
    if super::is_login_code(c) {
        Ok(())
    } else {
        Err("must be the numeric login code Gate sent to the dashboard".into())
    }
}

/// A signup as its poll shows it (`object: gate_session`); the delivery only while approved
/// and unacknowledged.
#[derive(Serialize, utoipa::ToSchema)]
struct Polled {
    id: GateSessionId,
    #[schema(value_type = String, pattern = "^gate_session$")]
    object: &'static str,
    service_id: String,
    #[schema(value_type = String, pattern = "^(pending|approved|denied|expired|acknowledged)$")]
    status: &'static str,
    /// Seconds to wait between polls; a poll sooner is `gate.slow_down`.
    interval: u32,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    expires_at: Timestamp,
    /// Approved: the variables to set, by name, the agent token's among them.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<std::collections::BTreeMap<String, String>>)]
    env_vars: Option<serde_json::Map<String, Value>>,
    /// Approved: the token that acknowledges the delivery.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, pattern = "^ack_")]
    ack_token: Option<String>,
    /// Approved: the account the signup made.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    gate_account_id: Option<schemas::ids::GateAccountId>,
}

/// An acknowledged delivery (`object: gate_session_delivery`).
#[derive(Serialize, utoipa::ToSchema)]
struct Acknowledged {
    gate_session_id: GateSessionId,
    #[schema(value_type = String, pattern = "^gate_session_delivery$")]
    object: &'static str,
    #[schema(value_type = String, pattern = "^acknowledged$")]
    status: &'static str,
}

/// The account an approved login is for (`object: gate_dashboard_login`).
#[derive(Serialize, utoipa::ToSchema)]
struct DashboardLogin {
    #[schema(value_type = String, pattern = "^gate_dashboard_login$")]
    object: &'static str,
    gate_account_id: schemas::ids::GateAccountId,
    account_name: String,
    service_id: String,
}

/// The consent page's address for a session and its `gtc_` token.
fn consent_url(id: GateSessionId, token: &str) -> String {
    format!(
        "{}/gate/consent/{id}?token={token}",
        edge::context::public_url().trim_end_matches('/')
    )
}

/// A published service by id (the system service is not one a tool signs up to here).
async fn published(state: &AdminState, id: &str) -> Result<GateServiceRecord, ApiError> {
    if id == gate::SYSTEM_SERVICE_ID {
        return Err(ApiError::not_found("gate service"));
    }
    gate::service_id(id).map_err(|issue| {
        ApiError::invalid_field("service_id", issue, Some(Value::String(id.to_owned())))
    })?;
    state
        .auth
        .store
        .get_gate_service(id)
        .await?
        .filter(GateServiceRecord::is_published)
        .ok_or_else(|| ApiError::not_found("gate service"))
}

fn new_session(
    flow: GateFlow,
    service: &GateServiceRecord,
    consent: &CredentialHash,
    user_code: &CredentialHash,
    now: Timestamp,
) -> GateSessionRecord {
    GateSessionRecord {
        id: GateSessionId::generate(),
        flow,
        service_id: service.id.clone(),
        organization_id: service.organization_id,
        environment: service.environment,
        status: GateSessionStatus::Pending,
        consent_token: *consent,
        poll_token: None,
        interval_secs: gate::POLL_INTERVAL_SECS,
        polls: 0,
        last_poll_at: None,
        account_id: None,
        sealed_delivery: Vec::new(),
        ack_token: None,
        login_code: None,
        agent_token: None,
        code_expires_at: None,
        approval: None,
        client_name: None,
        env_var_keys: Vec::new(),
        user_code: Some(*user_code),
        code_attempts: 0,
        uncertain_judgements: 0,
        denial: None,
        created_at: now,
        expires_at: now + chrono::TimeDelta::from_std(gate::SESSION_TTL).expect("a short ttl"),
    }
}

/// `POST /v1/gate/services/{serviceId}/signups`: no key; limited per client address by the
/// credential layer, like every request without one. An optional JSON body names the tool
/// (`{ "client_name": "acme-cli 1.4" }`), which names the account on the consent pages.
#[utoipa::path(
    post,
    operation_id = "start_gate_signup",
    path = "/v1/gate/services/{serviceId}/signups",
    tag = "gate",
    params(("serviceId" = String, Path, example = "vigil", description = "A published service.")),
    request_body(content = Option<SignupBody>, description = "Optional: a signup may carry no body."),
    security(()),
    responses(
        (status = 201, description = "The signup, its consent URL and its poll token.", body = Single<Signup>),
        (status = 401, description = "The route takes no key, and one was sent anyway: \
            `auth.invalid_credentials` for an `Authorization` header that is no valid Vigil key, \
            `auth.key_exposed` for a secret key (revoked on the spot). Send none.", body = ErrorEnvelope),
        (status = 404, description = "`resource.not_found`: no such published service.", body = ErrorEnvelope),
        (status = 429, description = "`rate.limited`: too many signups waiting, from this address \
            or for this service, or the address's own limit.", body = ErrorEnvelope),
        BodyErrors,
    )
)]
async fn start_signup(
    State(state): State<AdminState>,
    params: PathParams,
    request: axum::extract::Request,
) -> Result<Reply, ApiError> {
    let GateServiceId(id) = FromPath::from_path(&params)?;
    let (parts, body) = request.into_parts();
    let client = edge::transport::client_info(&parts, &state.auth.trusted_proxies);
    let request = axum::extract::Request::from_parts(parts, body);
    let client_name = if request
        .headers()
        .contains_key(axum::http::header::CONTENT_TYPE)
    {
        use axum::extract::FromRequest;
        let body = JsonObject::from_request(request, &()).await?;
        let SignupBody { client_name } = SignupBody::from_object(body)?;
        client_name.map(|n| n.trim().to_owned())
    } else {
        None
    };
    let service = published(&state, &id).await?;
    // A signup needs no key, and each one is stored until a day after it expires: the ones a
    // client address, and the ones a service, may have waiting are bounded.
    for (bucket, quota) in [
        (
            format!(
                "gate-signups:address:{}",
                edge::transport::network_bucket(client.ip)
            ),
            gate::SIGNUPS_PER_ADDRESS,
        ),
        (
            format!("gate-signups:service:{}", service.id),
            gate::SIGNUPS_PER_SERVICE,
        ),
    ] {
        let decision = state
            .auth
            .limiter
            .check_within(&bucket, quota, gate::SESSION_TTL)
            .await;
        if !decision.allowed {
            let mut e = ApiError::new(
                ErrorCode::RateLimited,
                "too many signups are waiting for a person's approval; try again later",
            )
            .with_next_action("retry");
            e.retry_after = Some(decision.retry_after_secs);
            return Err(e);
        }
    }
    let (consent, poll) = (gate::mint(TokenKind::Consent), gate::mint(TokenKind::Poll));
    let user_code = gate::mint_user_code();
    let now = time::now();
    let secret = &state.auth.secret;
    let mut session = new_session(
        GateFlow::Signup,
        &service,
        &secret.hash_token(&consent),
        &user_code_hash(&state, &user_code),
        now,
    );
    session.poll_token = Some(secret.hash_token(&poll));
    session.client_name = client_name;
    session.env_var_keys = super::delivered_keys(&service);
    state.auth.store.create_gate_session(&session).await?;
    Ok(Reply::created(Signup {
        id: session.id,
        object: "gate_signup",
        service_id: service.id.clone(),
        status: "pending",
        consent_url: consent_url(session.id, &consent),
        user_code,
        poll_token: poll,
        interval: session.interval_secs,
        env_vars: session.env_var_keys.clone(),
        expires_at: session.expires_at,
    })
    .showing_secrets())
}

/// The session the path names, if `token` is its `ack_` token.
async fn acknowledged_by(
    state: &AdminState,
    params: &PathParams,
    token: &str,
) -> Result<GateSessionRecord, ApiError> {
    let id: GateSessionId = FromPath::from_path(params)?;
    let hash = state.auth.secret.hash_token(token);
    let session = state.auth.store.get_gate_session(id).await?;
    session
        .filter(|s| s.ack_token == Some(hash))
        .ok_or_else(|| invalid_token(TokenKind::Ack))
}

/// `GET /v1/gate/sessions/{gateSessionId}` with `Bearer gtpoll_…`, per RFC 8628.
#[utoipa::path(
    get,
    operation_id = "poll_gate_session",
    path = "/v1/gate/sessions/{gateSessionId}",
    tag = "gate",
    params(("gateSessionId" = GateSessionId, Path, description = "The signup's `gate_` session.")),
    security(("gate_poll_token" = [])),
    responses(
        (status = 200, description = "`status` pending, denied, expired or acknowledged; approved \
            with the variables, the agent token and an `ack_token`, shown until acknowledged.",
            body = Single<Polled>),
        (status = 429, description = "`gate.slow_down`: polled sooner than the interval (which \
            grows by 5 s); or `rate.limited`: the session's polls are spent, start a new signup.",
            body = ErrorEnvelope),
        (status = 401, description = "`auth.invalid_credentials`: not this session's poll token.", body = ErrorEnvelope),
    )
)]
async fn poll(
    State(state): State<AdminState>,
    headers: HeaderMap,
    params: PathParams,
) -> Result<Reply, ApiError> {
    let token = bearer_token(&headers, TokenKind::Poll)?;
    let id: GateSessionId = FromPath::from_path(&params)?;
    let now = time::now();
    // Counted in one step with its checks, so parallel polls pass neither the interval nor
    // the cap.
    let (session, counted) = state
        .auth
        .store
        .count_gate_poll(
            id,
            &state.auth.secret.hash_token(&token),
            now,
            gate::SLOW_DOWN_SECS,
            gate::MAX_POLLS,
        )
        .await?
        .ok_or_else(|| invalid_token(TokenKind::Poll))?;
    match counted {
        GatePoll::Counted => {}
        GatePoll::Exhausted => {
            // Every 429 carries `Retry-After` (docs/api.md#rate-limits); this one's is the
            // poll interval, though only a new signup gets an answer again.
            let mut e = ApiError::new(
                ErrorCode::RateLimited,
                format!(
                    "a Gate session answers {} polls; start a new one",
                    gate::MAX_POLLS
                ),
            );
            e.retry_after = Some(u64::from(session.interval_secs));
            return Err(e);
        }
        GatePoll::TooSoon => {
            let mut e = ApiError::new(
                ErrorCode::GateSlowDown,
                format!(
                    "polled sooner than the interval; poll every {} s",
                    session.interval_secs
                ),
            )
            .with_next_action("retry");
            e.retry_after = Some(u64::from(session.interval_secs));
            return Err(e);
        }
    }
    let mut answer = Polled {
        id: session.id,
        object: "gate_session",
        service_id: session.service_id.clone(),
        status: status_text(&session, now),
        interval: session.interval_secs,
        expires_at: session.expires_at,
        env_vars: None,
        ack_token: None,
        gate_account_id: None,
    };
    if session.status == GateSessionStatus::Approved && !session.delivery_expired(now) {
        let opened = state
            .auth
            .secret
            .open(&session.sealed_delivery, &delivery_context(session.id))
            .and_then(|d| serde_json::from_slice::<Delivery>(&d).ok())
            .ok_or_else(|| {
                ApiError::internal("gate delivery", "the sealed delivery does not open")
            })?;
        answer.env_vars = Some(opened.env_vars);
        answer.ack_token = Some(opened.ack_token);
        answer.gate_account_id = session.account_id;
    }
    Ok(Reply::ok(answer).showing_secrets())
}

fn status_text(session: &GateSessionRecord, now: Timestamp) -> &'static str {
    match session.status {
        GateSessionStatus::Pending if now >= session.expires_at => "expired",
        GateSessionStatus::Pending | GateSessionStatus::Approving => "pending",
        GateSessionStatus::Approved if session.delivery_expired(now) => "expired",
        GateSessionStatus::Approved => "approved",
        GateSessionStatus::Denied => "denied",
        GateSessionStatus::Completed => "acknowledged",
    }
}

/// `POST /v1/gate/sessions/{gateSessionId}/ack` with `{ "ack_token": "ack_…" }`: the delivery
/// is dropped and never shown again.
#[utoipa::path(
    post,
    operation_id = "acknowledge_gate_session",
    path = "/v1/gate/sessions/{gateSessionId}/ack",
    tag = "gate",
    params(("gateSessionId" = GateSessionId, Path, description = "The signup's `gate_` session.")),
    request_body = AckBody,
    security(()),
    responses(
        (status = 200, description = "The delivery, acknowledged: never shown again.", body = Single<Acknowledged>),
        (status = 401, description = "`auth.invalid_credentials`: not this session's ack token.", body = ErrorEnvelope),
        BodyErrors,
    )
)]
async fn acknowledge(
    State(state): State<AdminState>,
    params: PathParams,
    Valid(AckBody { ack_token: token }): Valid<AckBody>,
) -> Result<Reply, ApiError> {
    let mut session = acknowledged_by(&state, &params, &token).await?;
    // Past its window the delivery was (or is about to be) withdrawn, with the account and
    // token it carried: acknowledging it now would confirm what no longer exists.
    if session.status == GateSessionStatus::Approved
        && (session.delivery_expired(time::now()) || session.sealed_delivery.is_empty())
    {
        return Err(ApiError::new(
            ErrorCode::InvalidCredentials,
            "this signup's delivery expired unacknowledged, and its account and token were \
             withdrawn; sign up again",
        ));
    }
    if session.status == GateSessionStatus::Approved {
        session.status = GateSessionStatus::Completed;
        session.sealed_delivery = Vec::new();
        state
            .auth
            .store
            .transition_gate_session(&session, GateSessionStatus::Approved, None)
            .await?;
    }
    Ok(Reply::ok(Acknowledged {
        gate_session_id: session.id,
        object: "gate_session_delivery",
        status: "acknowledged",
    }))
}

/// `POST /v1/gate/login-sessions` with `Bearer agt_…` and `{ "service_id": … }`: a login
/// waiting for a person's approval. An agent token alone never logs anyone in.
#[utoipa::path(
    post,
    operation_id = "start_gate_login",
    path = "/v1/gate/login-sessions",
    tag = "gate",
    request_body = LoginBody,
    security(("agent_token" = [])),
    responses(
        (status = 201, description = "The login session and its consent URL.", body = Single<LoginSession>),
        (status = 401, description = "`auth.invalid_credentials`: an agent token that is unknown, \
            revoked, expired or not for this service.", body = ErrorEnvelope),
        (status = 404, description = "`resource.not_found`: no such published service.", body = ErrorEnvelope),
        BodyErrors,
    )
)]
async fn start_login(
    State(state): State<AdminState>,
    headers: HeaderMap,
    body: JsonObject,
) -> Result<Reply, ApiError> {
    let token = bearer_token(&headers, TokenKind::Agent)?;
    let LoginBody { service_id } = LoginBody::from_object(body)?;
    let hash = state.auth.secret.hash_token(&token);
    let agent = agent_token(&state, &token)
        .await?
        .ok_or_else(|| invalid_token(TokenKind::Agent))?;
    // The token acts for its own service's account only.
    if agent.service_id != service_id {
        return Err(invalid_token(TokenKind::Agent));
    }
    let service = published(&state, &service_id).await?;
    if service.environment != agent.environment || service.organization_id != agent.organization_id
    {
        return Err(invalid_token(TokenKind::Agent));
    }
    if service.dashboard_login_url.is_none() {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            "this service offers no dashboard login",
        ));
    }
    let now = time::now();
    // Checked and counted in one step, so parallel starts cannot pass the cap and a
    // revocation is never undone.
    let agent = match state
        .auth
        .store
        .count_agent_login(&hash, now, gate::LOGINS_PER_HOUR)
        .await?
    {
        AgentLogin::Counted(agent) => agent,
        AgentLogin::Unusable => return Err(invalid_token(TokenKind::Agent)),
        AgentLogin::CapReached(oldest) => {
            let mut e = ApiError::new(
                ErrorCode::RateLimited,
                format!(
                    "an agent token starts at most {} login sessions an hour",
                    gate::LOGINS_PER_HOUR
                ),
            )
            .with_next_action("retry");
            e.retry_after = Some(
                (oldest + chrono::TimeDelta::hours(1) - now)
                    .num_seconds()
                    .max(1) as u64,
            );
            return Err(e);
        }
    };
    let consent = gate::mint(TokenKind::Consent);
    let user_code = gate::mint_user_code();
    let mut session = new_session(
        GateFlow::Login,
        &service,
        &state.auth.secret.hash_token(&consent),
        &user_code_hash(&state, &user_code),
        now,
    );
    session.account_id = Some(agent.account_id);
    session.agent_token = Some(hash);
    state.auth.store.create_gate_session(&session).await?;
    Ok(Reply::created(LoginSession {
        id: session.id,
        object: "gate_login_session",
        status: "pending",
        consent_url: consent_url(session.id, &consent),
        user_code,
        expires_at: session.expires_at,
    })
    .showing_secrets())
}

/// A user code's keyed hash, of the form the consent page compares (`WDJBMJHT`).
fn user_code_hash(state: &AdminState, code: &str) -> CredentialHash {
    let plain = gate::normalize_user_code(code).expect("a minted user code reads back");
    state.auth.secret.hash_token(&plain)
}

/// `POST /v1/gate/login-sessions/consume` with a secret key and `{ "code": … }`, with the
/// `gate_session_id` the redirect to the dashboard carried beside it if the dashboard kept it:
/// the account the approved login is for, once. With the session, the code is checked against
/// that session alone; without, it is looked up among the caller's live codes. A wrong code is
/// as unknown as a used one.
#[utoipa::path(
    post,
    operation_id = "consume_gate_login",
    path = "/v1/gate/login-sessions/consume",
    tag = "gate",
    request_body = ConsumeBody,
    security(("secret_key" = ["gate:login_sessions:consume"])),
    responses(
        (status = 200, description = "The account the approved login is for, once.", body = Single<DashboardLogin>),
        BodyErrors,
        SecretKeyErrors,
    )
)]
async fn consume_login(
    State(state): State<AdminState>,
    caller: SecretKey<ConsumeLoginSessions>,
    Valid(ConsumeBody {
        code,
        gate_session_id,
        service_id,
    }): Valid<ConsumeBody>,
) -> Result<Reply, ApiError> {
    let unknown = || {
        ApiError::new(
            ErrorCode::InvalidCredentials,
            "the login code is unknown, used or expired",
        )
    };
    let (org, env) = (caller.organization.id, caller.environment());
    let presented = state.auth.secret.hash_token(&code);
    // Every attempt counts before the code is compared, so parallel guesses cannot pass the
    // budget: one live code among 10^8 stays out of reach.
    let (named, bucket, budget) = match gate_session_id {
        // A code is its login session's alone: anything but one of the caller's login sessions
        // is unknown at once, and only that session's budget is charged, so nobody can use up
        // another login's (or another service's) attempts.
        Some(id) => {
            let session = state
                .auth
                .store
                .get_gate_session(id)
                .await?
                .filter(|s| s.organization_id == org && s.environment == env)
                .filter(|s| s.flow == GateFlow::Login)
                .ok_or_else(unknown)?;
            let bucket = format!("gate-codes:{}", session.id);
            (Some(session), bucket, gate::CODE_ATTEMPTS_PER_LOGIN)
        }
        // Looked up among every live code of the caller's: one budget for the organization's
        // environment, whatever service the body names, so naming services cannot add budgets.
        None => (
            None,
            format!("gate-code-lookups:{org}:{}", env.as_str()),
            gate::CODE_LOOKUPS_PER_ENVIRONMENT,
        ),
    };
    let decision = state
        .auth
        .limiter
        .check_within(&bucket, budget, gate::LOGIN_CODE_TTL)
        .await;
    if !decision.allowed {
        let mut e = ApiError::new(
            ErrorCode::RateLimited,
            "too many login codes presented; wait before trying again",
        )
        .with_next_action("retry");
        e.retry_after = Some(decision.retry_after_secs);
        return Err(e);
    }
    let session = match named {
        Some(session) => Some(session),
        None => state.auth.store.get_login_by_code(&presented).await?,
    };
    let now = time::now();
    let mut session = session
        .filter(|s| s.organization_id == org && s.environment == env)
        .filter(|s| s.flow == GateFlow::Login)
        .filter(|s| {
            s.status == GateSessionStatus::Approved
                && s.login_code.is_some_and(|stored| {
                    use subtle::ConstantTimeEq;
                    bool::from(stored.0.ct_eq(&presented.0))
                })
                && s.code_expires_at.is_some_and(|at| at > now)
                && service_id.as_ref().is_none_or(|id| *id == s.service_id)
        })
        .ok_or_else(unknown)?;
    // A revocation since the login started stops it here too.
    if let Some(hash) = &session.agent_token {
        let usable = state
            .auth
            .store
            .get_agent_token(hash)
            .await?
            .is_some_and(|t| t.revoked_at.is_none() && t.expires_at > now);
        if !usable {
            return Err(unknown());
        }
    }
    let account_id = session.account_id.ok_or_else(unknown)?;
    session.status = GateSessionStatus::Completed;
    session.login_code = None;
    if !state
        .auth
        .store
        .transition_gate_session(&session, GateSessionStatus::Approved, None)
        .await?
    {
        return Err(unknown());
    }
    let account = state
        .auth
        .store
        .get_gate_account(account_id)
        .await?
        .ok_or_else(unknown)?;
    Ok(Reply::ok(DashboardLogin {
        object: "gate_dashboard_login",
        gate_account_id: account.id,
        account_name: account.name,
        service_id: account.service_id,
    }))
}
