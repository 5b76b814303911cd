//! `POST /v1/collect/sessions` (open an encrypted collect session) and
//! `GET /v1/collect/pings/{pingId}` (round-trip timing), with their validation.

use axum::extract::State;
use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::Duration;
use edge::body::{FromPath, PathParams, Reply, RequestBody, Valid};
use edge::openapi::{BodyErrors, SecretKeyErrors};
use edge::{ApiError, AuthContext, PublishableKey};
use rand::TryRngCore;
use rand::rngs::OsRng;
use schemas::resources::Single;
use schemas::time::{self, Timestamp};
use schemas::{ErrorCode, PingId, SessionId};
use secrets::consent_ticket::ConsentTicket;
use serde::Serialize;
use sha2::{Digest, Sha256};
use store::{CollectSessionRecord, PingRecord};

use crate::IngestState;
use crate::ProvenCallErrors;
use crate::proof::{self, ProofHeader};
use crate::transport::{self, TransportError, seal_key};

/// How long a collect session accepts requests (schemas/collect.md, section 1).
pub const SESSION_LIFETIME_MINUTES: i64 = 30;
/// The largest plaintext batch (`max_batch_bytes`).
pub const MAX_BATCH_BYTES: usize = 64 * 1024;
const PINGS_PER_SESSION: usize = 3;

/// An opened collect session (`object: collect_session`): what the SDK needs to encrypt its
/// batches and prove its calls.
#[derive(Serialize, utoipa::ToSchema)]
struct OpenedSession {
    #[schema(value_type = String, pattern = "^collect_session$")]
    object: &'static str,
    id: SessionId,
    /// The server's P-256 public key (SEC1, uncompressed), base64url without padding.
    server_public_key: String,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    expires_at: Timestamp,
    /// The ping ids the SDK times round trips with.
    pings: Vec<PingId>,
    max_batch_bytes: usize,
    /// The token of `GET /v1/collect/ws`.
    network_check_token: String,
    /// A fresh nonce the SDK folds into its probes batch (schemas/collect.md §1): a batch
    /// recorded in another session carries another.
    #[schema(pattern = "^[A-Za-z0-9_-]{22}$")]
    challenge: String,
}

/// The body of a session's opening.
#[derive(utoipa::ToSchema, RequestBody)]
pub(crate) struct OpenBody {
    /// The SDK's ephemeral P-256 public key (SEC1, the 65-byte uncompressed point), base64url
    /// without padding; a string of this form that is not a point on the curve is a 422.
    #[schema(value_type = String, pattern = "^B[A-Za-z0-9_-]{85}[AEIMQUYcgkosw048]$")]
    #[member(parse = edge::body::base64url)]
    client_public_key: Vec<u8>,
    #[schema(min_length = 1, max_length = 32)]
    sdk_version: String,
    /// The page the SDK runs on, as the page says (a claim, never evidence of where the
    /// session ran).
    #[schema(max_length = 2048, pattern = "^https?://", format = "uri")]
    page_url: String,
    /// Only on Gate's consent page: the one-time ticket the server rendered into it, which
    /// binds this collect session to that page's Gate session (docs/gate.md#the-consent-page).
    #[schema(
        nullable = false,
        max_length = 512,
        pattern = "^gct1\\.[A-Za-z0-9_-]+$"
    )]
    #[member(check = consent_ticket_form)]
    consent_ticket: Option<String>,
}

fn consent_ticket_form(s: &str) -> Result<(), String> {
    if ConsentTicket::well_formed(s) {
        Ok(())
    } else {
        Err("must be the ticket a consent page was served with".into())
    }
}

#[utoipa::path(
    post,
    operation_id = "open_collect_session",
    path = "/v1/collect/sessions",
    tag = "collect",
    request_body = OpenBody,
    security(("publishable_key" = [])),
    responses(
        (status = 201, description = "The session: its key, its pings, its limits.", body = Single<OpenedSession>),
        BodyErrors,
        SecretKeyErrors,
    )
)]
pub(crate) async fn open(
    State(state): State<IngestState>,
    caller: PublishableKey,
    Valid(body): Valid<OpenBody>,
) -> Result<Reply, ApiError> {
    let OpenBody {
        client_public_key: public_key,
        sdk_version,
        page_url,
        consent_ticket,
    } = body;
    let gate_session_id = match consent_ticket {
        Some(ticket) => Some(spend_consent_ticket(&state, &caller.ctx, &ticket).await?),
        None => None,
    };

    let id = SessionId::generate();
    let (server_public, batch_key, proof_key) = transport::agree(&public_key, &id.to_string())
        .map_err(|e: TransportError| {
            ApiError::invalid_field("client_public_key", e.to_string(), None)
        })?;
    let mut token = [0u8; 32];
    OsRng
        .try_fill_bytes(&mut token)
        .map_err(|e| ApiError::internal("random source", e))?;
    let network_check_token = URL_SAFE_NO_PAD.encode(token);
    let mut nonce = [0u8; 16];
    OsRng
        .try_fill_bytes(&mut nonce)
        .map_err(|e| ApiError::internal("random source", e))?;
    let challenge = URL_SAFE_NO_PAD.encode(nonce);
    let now = time::now();
    let ctx = &caller.ctx;
    let record = CollectSessionRecord {
        id,
        organization_id: ctx.organization.id,
        environment: ctx.environment(),
        key_id: ctx.key.id,
        sealed_batch_key: seal_key(&state, id, &batch_key.0),
        sealed_proof_key: seal_key(&state, id, &proof_key.0),
        page_url,
        sdk_version,
        opened_at: now,
        expires_at: now + Duration::minutes(SESSION_LIFETIME_MINUTES),
        last_seq: 0,
        last_call: 0,
        pings: (0..PINGS_PER_SESSION)
            .map(|_| PingRecord {
                id: PingId::generate(),
                arrived_at: None,
            })
            .collect(),
        network_check_token_hash: Sha256::digest(network_check_token.as_bytes()).into(),
        ws_identity: None,
        results_at: None,
        gate_session_id,
        challenge: challenge.clone(),
    };
    state.auth.store.create_collect_session(&record).await?;
    Ok(Reply::created(OpenedSession {
        object: "collect_session",
        id,
        server_public_key: URL_SAFE_NO_PAD.encode(server_public),
        expires_at: record.expires_at,
        pings: record.pings.iter().map(|p| p.id).collect(),
        max_batch_bytes: MAX_BATCH_BYTES,
        network_check_token,
        challenge,
    }))
}

/// The Gate session a consent page's ticket binds the collect session to: the ticket must be
/// one this server sealed, unexpired, of the caller's environment, presented with a key of the
/// built-in `vigil` organization (no tenant's page has one), and never spent before. Spent
/// here, so one rendered consent page opens one collect session.
async fn spend_consent_ticket(
    state: &IngestState,
    ctx: &AuthContext,
    text: &str,
) -> Result<schemas::ids::GateSessionId, ApiError> {
    let refused = |issue: &str| ApiError::invalid_field("consent_ticket", issue, None);
    if ctx.organization.id != schemas::gate::system_organization() {
        return Err(refused("is taken only from Vigil's own consent pages"));
    }
    let now = time::now();
    let ticket = ConsentTicket::open(&state.auth.secret, text, now)
        .filter(|t| t.environment == ctx.environment())
        .ok_or_else(|| {
            refused("must be the unexpired ticket of a consent page this server served")
        })?;
    if state
        .auth
        .store
        .open_handoff_once(&store::HandoffOpening {
            handoff: ticket.spending_id(),
            at: now,
            expires_at: ticket.expires_at,
        })
        .await?
        .is_some()
    {
        return Err(refused(
            "was used already: each consent page opens one session; reload the page",
        ));
    }
    Ok(ticket.gate_session_id)
}

/// The caller's own, unexpired session: another organization's or environment's is a 404.
pub async fn own_session(
    state: &IngestState,
    ctx: &AuthContext,
    id: SessionId,
) -> Result<CollectSessionRecord, ApiError> {
    let session = state
        .auth
        .store
        .get_collect_session(id)
        .await?
        .ok_or_else(|| ApiError::not_found("collect session"))?;
    check_owned(
        ctx,
        session.organization_id,
        session.environment,
        session.expires_at,
    )?;
    Ok(session)
}

/// A session of another organization or environment is a 404; an expired one a 410.
pub fn check_owned(
    ctx: &AuthContext,
    organization: schemas::ids::OrgId,
    environment: schemas::credential::Environment,
    expires_at: Timestamp,
) -> Result<(), ApiError> {
    if organization != ctx.organization.id || environment != ctx.environment() {
        return Err(ApiError::not_found("collect session"));
    }
    if expires_at <= time::now() {
        return Err(ApiError::new(
            ErrorCode::SessionExpired,
            "this collect session has expired; open a new one",
        ));
    }
    Ok(())
}

/// A ping's answer (`object: collect_ping`).
#[derive(Serialize, utoipa::ToSchema)]
struct Pong {
    #[schema(value_type = String, pattern = "^collect_ping$")]
    object: &'static str,
    id: PingId,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    server_time: Timestamp,
}

/// A ping proves its session (`crate::proof`): the ping ids are the opener's, but a ping's
/// arrival is timing evidence that nobody else may plant.
#[utoipa::path(
    get,
    operation_id = "ping_collect_session",
    path = "/v1/collect/pings/{pingId}",
    tag = "collect",
    params(
        ("pingId" = PingId, Path, description = "One of the opened session's `pings`."),
        ProofHeader,
    ),
    security(("publishable_key" = [])),
    responses(
        (status = 200, description = "The server's time at the ping's arrival.", body = Single<Pong>),
        ProvenCallErrors,
    )
)]
pub async fn ping(
    State(state): State<IngestState>,
    caller: PublishableKey,
    params: PathParams,
    headers: HeaderMap,
) -> Result<Reply, ApiError> {
    let arrived = time::now();
    proof::presented(&headers)?;
    let ping: PingId = FromPath::from_path(&params)?;
    let session = state
        .auth
        .store
        .find_collect_ping(ping)
        .await?
        .ok_or_else(|| ApiError::not_found("ping"))?;
    let session = own_session(&state, &caller.ctx, session).await?;
    proof::require(&state, &session, &headers, proof::Call::Ping(ping)).await?;
    // Only the first arrival is timing evidence; a repeat is answered but not recorded.
    state
        .auth
        .store
        .record_collect_ping(session.id, ping, arrived)
        .await?;
    Ok(Reply::ok(Pong {
        object: "collect_ping",
        id: ping,
        server_time: arrived,
    }))
}
