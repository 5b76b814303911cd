//! The network check (`schemas/collect.md` section 4, docs/architecture.md#collect-transport): the
//! SDK opens a WebSocket with its session's one-time token, and the server records what that
//! connection shows of the client; then `POST /v1/collect/network-checks` compares it with the HTTP
//! request's identity and appends the comparison to the session's stream in the log for the
//! processor. A proxy or a bot farm that relays HTTP but not WebSockets (or the other way) shows
//! two identities.

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::response::Response;
use edge::body::{QueryParams, Reply, RequestBody, Valid};
use edge::openapi::BodyErrors;
use edge::transport::ClientInfo;
use edge::{ApiError, AuthContext, PublishableKey};
use schemas::collect::{
    BATCH_RECORD_SCHEMA, BatchRecord, BatchRequest, ConnectionIdentity, ServerRecord,
};
use schemas::error::ErrorEnvelope;
use schemas::raw::RawJson;
use schemas::resources::Single;
use schemas::{ErrorCode, SessionId};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::proof::{self, ProofHeader};
use crate::sessions::own_session;
use crate::{IngestState, ProvenCallErrors};

/// What one connection shows of its client.
fn identity(client: Option<ClientInfo>, headers: &HeaderMap) -> ConnectionIdentity {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    ConnectionIdentity {
        accept_language: text(header::ACCEPT_LANGUAGE.as_str()),
        forwarded_for: text("x-forwarded-for"),
        header_names: headers.keys().map(|k| k.as_str().to_owned()).collect(),
        ip: client.map(|c| c.ip.to_string()).unwrap_or_default(),
        // Cut as a batch's is (schemas/collect.md §6), so the two compare alike.
        user_agent: schemas::collect::kept_user_agent(&text(header::USER_AGENT.as_str()))
            .0
            .to_owned(),
        extra: serde_json::Map::new(),
    }
}

/// The WebSocket's query: browsers cannot put a key on a WebSocket, so the session's one-time
/// token authenticates it.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read from `QueryParams`, which also refuses unknown parameters
struct WebSocketQuery {
    /// The opened session.
    session: SessionId,
    /// The session's `network_check_token`.
    token: String,
}

/// `GET /v1/collect/ws?session=…&token=…`. Browsers cannot put a key on a WebSocket, so the
/// session's one-time token authenticates it.
#[utoipa::path(
    get,
    operation_id = "open_collect_websocket",
    path = "/v1/collect/ws",
    tag = "collect",
    params(WebSocketQuery),
    security(()),
    responses(
        (status = 101, description = "Switching protocols: the server sends one `hello` text \
            message (`{type: hello, session_id}`) and closes."),
        (status = 400, description = "`request.malformed`: not a WebSocket upgrade.", body = ErrorEnvelope),
        (status = 401, description = "The route takes no key (the session's token stands in), \
            and one was sent anyway: `auth.invalid_credentials` for an `Authorization` header \
            that is no valid Vigil key, `auth.key_exposed` for a secret key (revoked on the \
            spot). Send none.", body = ErrorEnvelope),
        (status = 404, description = "`resource.not_found`: no such session, an expired one, or \
            not its token.", body = ErrorEnvelope),
        (status = 422, description = "`request.validation_failed`: `session` missing or not an \
            id, or an unknown query parameter.", body = ErrorEnvelope),
        (status = 429, description = "`rate.limited`: the client address's limit.", body = ErrorEnvelope),
    )
)]
pub async fn websocket(
    State(state): State<IngestState>,
    query: QueryParams,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    req: Request,
) -> Result<Response, ApiError> {
    // Answered in the envelope like every refusal, not as axum's plain-text 400.
    let ws = ws.map_err(|e| {
        ApiError::new(
            ErrorCode::Malformed,
            format!("this route takes a WebSocket upgrade: {}", e.body_text()),
        )
        .with_header_name("Upgrade")
    })?;
    query.only(&["session", "token"])?;
    let raw = query.get("session").ok_or_else(|| {
        ApiError::invalid_field("session", "is required", None).with_parameter_set("query")
    })?;
    let id: SessionId = raw.parse().map_err(|e| {
        ApiError::invalid_field(
            "session",
            format!("is not a valid id: {e}"),
            Some(raw.into()),
        )
        .with_parameter_set("query")
    })?;
    let token = query.get("token").unwrap_or("");
    let session = state
        .auth
        .store
        .get_collect_session(id)
        .await?
        .ok_or_else(|| ApiError::not_found("collect session"))?;
    let token_hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    // The token is given only to the session's opener (a browser cannot put a header on a
    // WebSocket, so it stands in for the proof of `crate::proof`); compared as hashes, in
    // constant time like every secret.
    let token_ok: bool = token_hash.ct_eq(&session.network_check_token_hash).into();
    if !token_ok || session.expires_at <= schemas::time::now() {
        return Err(ApiError::not_found("collect session"));
    }
    let seen = identity(edge::auth::client_of(req.extensions()), req.headers());
    let seen = serde_json::to_value(&seen).map_err(|e| ApiError::internal("ws identity", e))?;
    state
        .auth
        .store
        .record_collect_ws_identity(id, &seen)
        .await?;
    Ok(ws.on_upgrade(move |socket| greet(socket, id)))
}

async fn greet(mut socket: WebSocket, id: SessionId) {
    let hello = json!({"type": "hello", "session_id": id}).to_string();
    let _ = socket.send(Message::Text(hello.into())).await;
    let _ = socket.send(Message::Close(None)).await;
}

/// A network check's outcome (`object: network_check`).
#[derive(Serialize, utoipa::ToSchema)]
struct Checked {
    #[schema(value_type = String, pattern = "^network_check$")]
    object: &'static str,
    session_id: SessionId,
    /// Whether the WebSocket and this request show the same client.
    consistent: bool,
}

/// The body of a network check.
#[derive(utoipa::ToSchema, RequestBody)]
pub(crate) struct CheckBody {
    /// The session whose WebSocket this request is compared with.
    session_id: SessionId,
}

/// `POST /v1/collect/network-checks`: proven (`crate::proof`), so nobody else can add a
/// comparison to the session's stream.
#[utoipa::path(
    post,
    operation_id = "check_collect_network",
    path = "/v1/collect/network-checks",
    tag = "collect",
    params(ProofHeader),
    request_body = CheckBody,
    security(("publishable_key" = [])),
    responses(
        (status = 200, description = "The comparison, also appended to the session's stream.", body = Single<Checked>),
        ProvenCallErrors,
        BodyErrors,
    )
)]
pub(crate) async fn check(
    State(state): State<IngestState>,
    caller: PublishableKey,
    headers: HeaderMap,
    Valid(CheckBody { session_id: id }): Valid<CheckBody>,
) -> Result<Reply, ApiError> {
    proof::presented(&headers)?;
    let ctx = &caller.ctx;
    let session = own_session(&state, ctx, id).await?;
    proof::require(&state, &session, &headers, proof::Call::NetworkCheck).await?;
    let http = identity(Some(ctx.client), &headers);
    // Stored by the WebSocket route above, as a `ConnectionIdentity`.
    let websocket = session
        .ws_identity
        .as_ref()
        .and_then(|ws| ConnectionIdentity::deserialize(ws).ok());
    let consistent = websocket.as_ref().is_some_and(|ws| ws.same_client(&http));
    append_server_record(
        &state,
        ctx,
        id,
        &ServerRecord::NetworkCheck {
            http: Box::new(http),
            websocket: websocket.map(Box::new),
            consistent,
        },
    )
    .await?;
    Ok(Reply::ok(Checked {
        object: "network_check",
        session_id: id,
        consistent,
    }))
}

/// Appends a server-made record to a session's stream in the log. They carry number 0 (the
/// SDK's batches start at 1) and effects the processor may apply more than once.
pub async fn append_server_record(
    state: &IngestState,
    ctx: &AuthContext,
    id: SessionId,
    server_record: &ServerRecord,
) -> Result<(), ApiError> {
    let record = BatchRecord {
        schema: BATCH_RECORD_SCHEMA,
        organization_id: ctx.organization.id,
        environment: ctx.environment(),
        session_id: id,
        seq: 0,
        received_at: schemas::time::now(),
        request: BatchRequest {
            ip: ctx.client.ip.to_string(),
            ..BatchRequest::default()
        },
        kind: None,
        observations: RawJson::encode(server_record)
            .map_err(|e| ApiError::internal("server record", e))?,
    };
    let payload =
        serde_json::to_vec(&record).map_err(|e| ApiError::internal("server record", e))?;
    state
        .log
        .try_append(&state.batches, id.to_string().as_bytes(), &payload)
        .await
        .map_err(|e| crate::append_failed("appending a server record", e))?;
    Ok(())
}
