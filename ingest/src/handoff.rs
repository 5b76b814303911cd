//! The sealed handoff (D9, `schemas/collect.md` section 5): `POST .../results` mints it for the
//! page, which passes it to the site's backend; `POST /v1/handoffs/open` (secret key) opens it.
//! It is sealed with XChaCha20-Poly1305 under a server key named by its id, bound to the
//! organization, environment and session, and expires after ten minutes, so the browser can
//! neither read nor forge nor reuse it elsewhere. It opens once: the first open returns the
//! decision, a retry of that open with its `Idempotency-Key` replays the answer (D18), and any
//! other later open is a 409, so one person's handoff cannot be shared across a bot farm.

use axum::extract::State;
use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use chrono::Duration;
use edge::body::PathParams;
use edge::body::{Fields, JsonObject, Reply, path_param};
use edge::policy::OpenHandoff;
use edge::secrets::ServerSecret;
use edge::{ApiError, PublishableKey, SecretKey};
use rand::TryRngCore;
use rand::rngs::OsRng;
use schemas::collect::ServerRecord;
use schemas::credential::Environment;
use schemas::time::{self, Timestamp};
use schemas::{ErrorCode, OrgId, SessionId};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::IngestState;
use crate::proof;
use crate::sessions::own_session;

/// How long a handoff can be opened.
pub const HANDOFF_LIFETIME_MINUTES: i64 = 10;
const VERSION: &str = "vh1";

/// What a handoff carries, sealed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoffClaims {
    pub organization_id: OrgId,
    pub environment: Environment,
    pub session_id: SessionId,
    pub expires_at: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandoffError {
    #[error("is not a Vigil handoff")]
    Malformed,
    #[error("was sealed with a key this server no longer has, or was altered")]
    Unopenable,
    #[error("has expired; handoffs last ten minutes")]
    Expired,
}

fn aad(key_id: &str) -> String {
    format!("{VERSION}.{key_id}")
}

pub fn seal(secret: &ServerSecret, claims: &HandoffClaims) -> String {
    let (key_id, key) = secret.current_handoff_key();
    let mut nonce = [0u8; 24];
    OsRng.try_fill_bytes(&mut nonce).expect("OS random source");
    let plain = serde_json::to_vec(claims).expect("claims serialize");
    let sealed = XChaCha20Poly1305::new(key.into())
        .encrypt(
            &XNonce::from(nonce),
            Payload {
                msg: &plain,
                aad: aad(key_id).as_bytes(),
            },
        )
        .expect("XChaCha20-Poly1305 encryption of an in-memory buffer does not fail");
    let mut body = nonce.to_vec();
    body.extend_from_slice(&sealed);
    format!("{VERSION}.{key_id}.{}", URL_SAFE_NO_PAD.encode(body))
}

pub fn open(
    secret: &ServerSecret,
    handoff: &str,
    now: Timestamp,
) -> Result<HandoffClaims, HandoffError> {
    let mut parts = handoff.splitn(3, '.');
    let (Some(VERSION), Some(key_id), Some(body)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(HandoffError::Malformed);
    };
    let body = URL_SAFE_NO_PAD
        .decode(body)
        .map_err(|_| HandoffError::Malformed)?;
    if body.len() < 24 {
        return Err(HandoffError::Malformed);
    }
    let key = secret.handoff_key(key_id).ok_or(HandoffError::Unopenable)?;
    let (nonce, sealed) = body.split_at(24);
    let nonce = XNonce::try_from(nonce).map_err(|_| HandoffError::Malformed)?;
    let plain = XChaCha20Poly1305::new(key.into())
        .decrypt(
            &nonce,
            Payload {
                msg: sealed,
                aad: aad(key_id).as_bytes(),
            },
        )
        .map_err(|_| HandoffError::Unopenable)?;
    let claims: HandoffClaims =
        serde_json::from_slice(&plain).map_err(|_| HandoffError::Unopenable)?;
    if claims.expires_at <= now {
        return Err(HandoffError::Expired);
    }
    Ok(claims)
}

#[derive(Serialize)]
struct Minted {
    object: &'static str,
    session_id: SessionId,
    handoff: String,
    #[serde(serialize_with = "time::ser")]
    expires_at: Timestamp,
    /// The signed visitor token (D11) once the processor has linked the session to a visitor,
    /// for the SDK to keep in first-party storage; `null` before.
    visitor_token: Option<String>,
}

/// `POST /v1/collect/sessions/{sessionId}/results`: proven (`crate::proof`), since the handoff
/// and the visitor token it returns are the visitor's, and the first call finalises the session.
pub async fn mint(
    State(state): State<IngestState>,
    caller: PublishableKey,
    params: PathParams,
    headers: HeaderMap,
) -> Result<Reply, ApiError> {
    let id: SessionId = path_param(&params, "sessionId")?;
    let session = own_session(&state, &caller.ctx, id).await?;
    proof::require(&state, &session, &headers, proof::Call::Results(id)).await?;
    let now = time::now();
    // The first call makes the decision final (D10): recorded on the session, and told to the
    // processor through the session's stream in the log; later calls mint fresh handoffs.
    state.auth.store.mark_collect_results(id, now).await?;
    crate::network::append_server_record(&state, &caller.ctx, id, &ServerRecord::Results).await?;
    let claims = HandoffClaims {
        organization_id: session.organization_id,
        environment: session.environment,
        session_id: id,
        expires_at: now + Duration::minutes(HANDOFF_LIFETIME_MINUTES),
    };
    let visitor_token = state
        .auth
        .store
        .get_session(session.organization_id, session.environment, id)
        .await?
        .and_then(|s| s.visitor_id)
        .map(|v| {
            state
                .auth
                .secret
                .visitor_token(session.organization_id, session.environment, v)
        });
    Ok(Reply::ok(Minted {
        object: "handoff",
        session_id: id,
        handoff: seal(&state.auth.secret, &claims),
        expires_at: claims.expires_at,
        visitor_token,
    }))
}

/// The key of a handoff's opening: its text, hashed. The AEAD tag makes the text unique to one
/// minting and unforgeable, so nobody can make two texts of one handoff or block another's.
fn handoff_id(handoff: &str) -> [u8; 16] {
    let digest = Sha256::digest(handoff.as_bytes());
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    id
}

#[derive(Serialize)]
struct Opened {
    object: &'static str,
    session_id: SessionId,
    /// The visitor and the latest decision, once the processor has scored the session.
    visitor_id: Option<String>,
    decision: Option<schemas::raw::RawJson>,
}

/// `POST /v1/handoffs/open`: a handoff of another organization or environment is a 404, as its
/// session would be.
pub async fn open_for_backend(
    State(state): State<IngestState>,
    caller: SecretKey<OpenHandoff>,
    body: JsonObject,
) -> Result<Reply, ApiError> {
    let mut f = Fields::new(body);
    let handoff = f.string("handoff", true);
    f.finish()?;
    let Some(handoff) = handoff else {
        return Err(ApiError::internal("handoff", "validated field missing"));
    };
    let now = time::now();
    let claims = open(&state.auth.secret, &handoff, now)
        .map_err(|e| ApiError::invalid_field("handoff", e.to_string(), None))?;
    if claims.organization_id != caller.organization.id
        || claims.environment != caller.environment()
    {
        return Err(ApiError::not_found("handoff"));
    }
    // Read first, claim last: once the opening is claimed nothing may fail, or the one open
    // would be spent on an answer the caller never got.
    let scored = state
        .auth
        .store
        .get_session(
            claims.organization_id,
            claims.environment,
            claims.session_id,
        )
        .await?;
    if let Some(first) = state
        .auth
        .store
        .open_handoff_once(&handoff_id(&handoff), now, claims.expires_at)
        .await?
    {
        let mut e = ApiError::new(
            ErrorCode::HandoffAlreadyOpened,
            "this handoff was opened before; a handoff opens once (retry the first open with its Idempotency-Key to get its answer again)",
        );
        e.details.first_opened_at = Some(time::format(&first));
        return Err(e);
    }
    Ok(Reply::ok(Opened {
        object: "handoff",
        session_id: claims.session_id,
        visitor_id: scored
            .as_ref()
            .and_then(|s| s.visitor_id)
            .map(|v| v.to_string()),
        decision: scored.and_then(|s| s.latest_decision),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handoffs_open_only_unaltered_unexpired_and_with_a_known_key() {
        let secret = ServerSecret::from_bytes([9; 32]);
        let now = time::now();
        let claims = HandoffClaims {
            organization_id: OrgId::generate(),
            environment: Environment::Test,
            session_id: SessionId::generate(),
            expires_at: now + Duration::minutes(10),
        };
        let token = seal(&secret, &claims);
        assert!(token.starts_with("vh1.k1."));
        assert_eq!(open(&secret, &token, now), Ok(claims.clone()));
        assert_eq!(
            open(&secret, &token, now + Duration::minutes(11)),
            Err(HandoffError::Expired)
        );
        assert_eq!(
            open(&ServerSecret::from_bytes([8; 32]), &token, now),
            Err(HandoffError::Unopenable)
        );
        let mut altered = token.clone().into_bytes();
        let last = altered.len() - 3;
        altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
        assert!(open(&secret, std::str::from_utf8(&altered).unwrap(), now).is_err());
        assert_eq!(
            open(
                &secret,
                &format!("vh1.k9.{}", URL_SAFE_NO_PAD.encode([0u8; 40])),
                now
            ),
            Err(HandoffError::Unopenable)
        );
        assert_eq!(open(&secret, "nonsense", now), Err(HandoffError::Malformed));
    }
}
