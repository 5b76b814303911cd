//! The collect transport's cryptography (docs/architecture.md#collect-transport). The SDK sends an
//! ephemeral ECDH P-256 public key; the server answers with its own; both derive one AES-256-GCM
//! key with HKDF-SHA256 (salt: the session id), which WebCrypto has natively, so the SDK needs no
//! crypto library. A batch's nonce is its sequence number and its additional data names the session
//! and the sequence, so a batch cannot be replayed under another number or moved to another
//! session. The same agreement derives the session's call-proof key (`crate::proof`); both keys are
//! kept sealed under the server secret at rest, bound to their session.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use hkdf::Hkdf;
use p256::PublicKey;
use p256::ecdh::EphemeralSecret;
use p256::elliptic_curve::Generate;
use p256::elliptic_curve::sec1::ToSec1Point;
use sha2::Sha256;

use edge::ApiError;
use schemas::SessionId;

use crate::IngestState;

/// HKDF's `info`: names the protocol and its version, so a key derived for anything else never
/// equals a batch key.
pub const HKDF_INFO: &[u8] = b"vigil/collect/v1";

/// A session's batch key. Kept only sealed under the server secret at rest.
#[derive(Clone, PartialEq, Eq)]
pub struct BatchKey(pub [u8; 32]);

impl std::fmt::Debug for BatchKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BatchKey(..)")
    }
}

/// HKDF's `info` for the proof key: another label than the batch key's, so the two keys are
/// independent although derived from one shared secret.
pub const PROOF_HKDF_INFO: &[u8] = b"vigil/collect/v1/proof";

/// A session's call-proof key (`crate::proof`). Kept only sealed under the server secret at rest.
#[derive(Clone, PartialEq, Eq)]
pub struct ProofKey(pub [u8; 32]);

impl std::fmt::Debug for ProofKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProofKey(..)")
    }
}

/// The proof key: HKDF-SHA256 of the ECDH shared secret, salted with the session id.
pub fn derive_proof_key(shared_secret: &[u8], session_id: &str) -> ProofKey {
    ProofKey(hkdf(shared_secret, session_id, PROOF_HKDF_INFO))
}

/// Seals one of a session's keys under the server secret, bound to the session: the store
/// never holds a session key in the clear, and a sealed key copied to another session does not
/// open there.
pub fn seal_key(state: &IngestState, id: SessionId, key: &[u8; 32]) -> Vec<u8> {
    state.auth.secret.seal(key, id.to_string().as_bytes())
}

/// Opens a key `seal_key` sealed (`what` names it in the log). One that does not open is an
/// internal error: the store or the server secret changed under the session.
pub fn open_key(
    state: &IngestState,
    id: SessionId,
    sealed: &[u8],
    what: &str,
) -> Result<[u8; 32], ApiError> {
    state
        .auth
        .secret
        .open(sealed, id.to_string().as_bytes())
        .and_then(|k| <[u8; 32]>::try_from(k).ok())
        .ok_or_else(|| {
            ApiError::internal(
                "collect session key",
                format!("the session's {what} key does not open"),
            )
        })
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    #[error("the client public key is not an uncompressed P-256 point")]
    BadPublicKey,
    #[error("the batch does not open under this session's key, number and session")]
    BatchRejected,
}

/// The server's half of the key agreement: its public key (SEC1 uncompressed, 65 bytes), and the
/// batch key and the call-proof key (`crate::proof`) of session `session_id`.
pub fn agree(
    client_public_key: &[u8],
    session_id: &str,
) -> Result<(Vec<u8>, BatchKey, ProofKey), TransportError> {
    let client =
        PublicKey::from_sec1_bytes(client_public_key).map_err(|_| TransportError::BadPublicKey)?;
    let secret = EphemeralSecret::generate();
    let server_public = secret.public_key().to_sec1_point(false).as_bytes().to_vec();
    let shared = secret.diffie_hellman(&client);
    let shared = shared.raw_secret_bytes();
    Ok((
        server_public,
        derive(shared, session_id),
        derive_proof_key(shared, session_id),
    ))
}

/// The batch key: HKDF-SHA256 of the shared secret, salted with the session id.
pub fn derive(shared_secret: &[u8], session_id: &str) -> BatchKey {
    BatchKey(hkdf(shared_secret, session_id, HKDF_INFO))
}

/// 32 bytes of HKDF-SHA256 of the shared secret, salted with the session id; `info` says what
/// for, so each purpose gets its own key.
pub(crate) fn hkdf(shared_secret: &[u8], session_id: &str, info: &[u8]) -> [u8; 32] {
    let hk = Hkdf::<Sha256>::new(Some(session_id.as_bytes()), shared_secret);
    let mut key = [0u8; 32];
    hk.expand(info, &mut key)
        .expect("32 bytes is a valid HKDF-SHA256 length");
    key
}

/// The nonce of batch `seq`: four zero bytes, then the number big-endian. Numbers never repeat
/// within a session, so no nonce repeats under a key.
pub fn nonce(seq: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&seq.to_be_bytes());
    n
}

/// The additional data of batch `seq` of `session_id`.
pub fn aad(session_id: &str, seq: u64) -> Vec<u8> {
    format!("{session_id}.{seq}").into_bytes()
}

/// Opens a batch; any change to its bytes, number or session fails.
pub fn open_batch(
    key: &BatchKey,
    session_id: &str,
    seq: u64,
    ciphertext: &[u8],
) -> Result<Vec<u8>, TransportError> {
    let cipher = Aes256Gcm::new((&key.0).into());
    cipher
        .decrypt(
            &Nonce::from(nonce(seq)),
            Payload {
                msg: ciphertext,
                aad: &aad(session_id, seq),
            },
        )
        .map_err(|_| TransportError::BatchRejected)
}

/// Seals a batch as the SDK does (tests and tools).
pub fn seal_batch(key: &BatchKey, session_id: &str, seq: u64, plaintext: &[u8]) -> Vec<u8> {
    let cipher = Aes256Gcm::new((&key.0).into());
    cipher
        .encrypt(
            &Nonce::from(nonce(seq)),
            Payload {
                msg: plaintext,
                aad: &aad(session_id, seq),
            },
        )
        .expect("AES-GCM encryption of an in-memory buffer does not fail")
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdh::EphemeralSecret;

    #[test]
    fn both_sides_derive_the_same_key_and_batches_are_bound_to_number_and_session() {
        let client = EphemeralSecret::generate();
        let client_public = client.public_key().to_sec1_point(false).as_bytes().to_vec();
        let (server_public, server_key, server_proof_key) = agree(&client_public, "sid_a").unwrap();
        let server_point = PublicKey::from_sec1_bytes(&server_public).unwrap();
        let shared = client.diffie_hellman(&server_point);
        let client_key = derive(shared.raw_secret_bytes(), "sid_a");
        assert_eq!(client_key, server_key);
        let client_proof_key = derive_proof_key(shared.raw_secret_bytes(), "sid_a");
        assert_eq!(client_proof_key, server_proof_key);
        assert_ne!(client_proof_key.0, client_key.0, "one key per purpose");

        let sealed = seal_batch(&client_key, "sid_a", 1, b"{\"kind\":\"probes\"}");
        assert_eq!(
            open_batch(&server_key, "sid_a", 1, &sealed).unwrap(),
            b"{\"kind\":\"probes\"}"
        );
        assert_eq!(
            open_batch(&server_key, "sid_a", 2, &sealed),
            Err(TransportError::BatchRejected)
        );
        assert_eq!(
            open_batch(&server_key, "sid_b", 1, &sealed),
            Err(TransportError::BatchRejected)
        );
        let mut tampered = sealed.clone();
        tampered[0] ^= 1;
        assert_eq!(
            open_batch(&server_key, "sid_a", 1, &tampered),
            Err(TransportError::BatchRejected)
        );
        assert_eq!(
            agree(b"not a point", "sid_a"),
            Err(TransportError::BadPublicKey)
        );
    }
}
