//! The sealed handoff (`schemas/collect.md` section 5): what `results` gives the page to pass
//! to the site's backend, sealed with XChaCha20-Poly1305 under a server key named by its id
//! and bound to the organization, environment and session, so the browser can neither read
//! nor forge it. Ingest seals it; the query API opens it. Opening tries the key the handoff
//! names, so the sealing keys can rotate while handoffs are in flight.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::TryRngCore;
use rand::rngs::OsRng;
use schemas::credential::Environment;
use schemas::time::Timestamp;
use schemas::{OrgId, SessionId};
use serde::{Deserialize, Serialize};

use crate::ServerSecret;

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

/// The key under which a handoff's one opening is recorded: its text, hashed. The AEAD tag
/// makes the text unique to one minting and unforgeable, so nobody can make two texts of one
/// handoff or block another's.
pub fn opening_id(handoff: &str) -> [u8; 16] {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(handoff.as_bytes());
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    id
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

#[cfg(test)]
mod tests {
    use chrono::Duration;
    use schemas::time;

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
