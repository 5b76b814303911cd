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
use edge::body::{Fields, JsonObject, QueryParams, Reply};
use edge::transport::ClientInfo;
use edge::{ApiError, AuthContext, PublishableKey};
use schemas::collect::{
    BATCH_RECORD_SCHEMA, BatchRecord, BatchRequest, ConnectionIdentity, ServerRecord,
};
use schemas::raw::RawJson;
use schemas::{ErrorCode, SessionId};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::IngestState;
use crate::proof;
use crate::sessions::own_session;

/// What one connection shows of its client.
fn identity(client: Option<&ClientInfo>, headers: &HeaderMap) -> ConnectionIdentity {
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
        user_agent: text(header::USER_AGENT.as_str()),
        extra: serde_json::Map::new(),
    }
}

/// `GET /v1/collect/ws?session=…&token=…`. Browsers cannot put a key on a WebSocket, so the
/// session's one-time token authenticates it.
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
    let id: SessionId = query
        .get("session")
        .ok_or_else(|| {
            ApiError::invalid_field("session", "is required", None).with_parameter_set("query")
        })?
        .parse()
        .map_err(|e| {
            ApiError::invalid_field("session", format!("is not a valid id: {e}"), None)
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
    let seen = identity(req.extensions().get::<ClientInfo>(), req.headers());
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

#[derive(Serialize)]
struct Checked {
    object: &'static str,
    session_id: SessionId,
    consistent: bool,
}

/// `POST /v1/collect/network-checks`: proven (`crate::proof`), so nobody else can add a
/// comparison to the session's stream.
pub async fn check(
    State(state): State<IngestState>,
    caller: PublishableKey,
    headers: HeaderMap,
    body: JsonObject,
) -> Result<Reply, ApiError> {
    let mut f = Fields::new(body);
    let id = f.checked_string("session_id", true, |s| {
        s.parse::<SessionId>()
            .map(|_| ())
            .map_err(|e| format!("is not a valid id: {e}"))
    });
    f.finish()?;
    let Some(id) = id.and_then(|s| s.parse::<SessionId>().ok()) else {
        return Err(ApiError::internal(
            "network check",
            "validated field missing",
        ));
    };
    let ctx = &caller.ctx;
    let session = own_session(&state, ctx, id).await?;
    proof::require(&state, &session, &headers, proof::Call::NetworkCheck).await?;
    let http = identity(Some(&ctx.client), &headers);
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
            user_agent: String::new(),
            header_names: Vec::new(),
            url: String::new(),
            web_bot_auth: None,
        },
        observations: RawJson::encode(server_record)
            .map_err(|e| ApiError::internal("server record", e))?,
    };
    let payload =
        serde_json::to_vec(&record).map_err(|e| ApiError::internal("server record", e))?;
    state
        .log
        .append(&state.batches, id.to_string().as_bytes(), &payload)
        .await
        .map_err(|e| ApiError::internal("appending a server record", e))?;
    Ok(())
}
