//! Session proofs (`schemas/collect.md` section 1.1, docs/architecture.md#collect-transport): the
//! calls that act on a collect session without carrying a batch (pings, network checks, results)
//! prove that the caller holds the session's ECDH secret, so a publishable key and a session or
//! ping id are not enough to mint a visitor's handoff or finalise their session. The proof is an
//! HMAC-SHA256, under a key both sides derive with HKDF from the shared secret, of the call's
//! method and path, the session id and a counter; the server spends each counter once, so a proof
//! seen once cannot be replayed, and it names its call, so it cannot be moved to another.

use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use schemas::{ErrorCode, PingId, SessionId};
use sha2::Sha256;
use store::CollectSessionRecord;

use crate::IngestState;
use crate::transport::{ProofKey, open_key};
use edge::ApiError;

/// The request header that carries a proof: `<counter>.<b64u of the 32-byte HMAC>`.
pub const HEADER: &str = "vigil-session-proof";
/// The header's name as the documentation and errors spell it.
const HEADER_DISPLAY: &str = "Vigil-Session-Proof";
type HmacSha256 = Hmac<Sha256>;

/// The proof header, as the OpenAPI document lists it on each proven route.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // read by `require`, from the headers themselves
pub struct ProofHeader {
    /// `<counter>.<HMAC>`: a counter spent once, and the HMAC of the call (schemas/collect.md,
    /// section 1.1), base64url without padding.
    #[param(
        rename = "Vigil-Session-Proof",
        pattern = "^[1-9][0-9]{0,19}\\.[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$"
    )]
    vigil_session_proof: String,
}

/// A call that must be proven, which names its method and path (the route's path with its id,
/// without the endpoint's own prefix or any query: what a proxy in front may rewrite is not
/// part of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Ping(PingId),
    NetworkCheck,
    Results(SessionId),
}

impl Call {
    pub fn method(self) -> &'static str {
        match self {
            Call::Ping(_) => "GET",
            Call::NetworkCheck | Call::Results(_) => "POST",
        }
    }

    pub fn path(self) -> String {
        match self {
            Call::Ping(ping) => format!("/v1/collect/pings/{ping}"),
            Call::NetworkCheck => "/v1/collect/network-checks".to_owned(),
            Call::Results(session) => format!("/v1/collect/sessions/{session}/results"),
        }
    }
}

/// What is MACed: UTF-8 of `"<METHOD> <path>\n<session id>\n<counter>"`, the counter in decimal.
pub fn message(method: &str, path: &str, session_id: &str, counter: u64) -> Vec<u8> {
    format!("{method} {path}\n{session_id}\n{counter}").into_bytes()
}

fn mac(key: &ProofKey, method: &str, path: &str, session_id: &str, counter: u64) -> HmacSha256 {
    let mut mac =
        <HmacSha256 as KeyInit>::new_from_slice(&key.0).expect("HMAC takes any key length");
    mac.update(&message(method, path, session_id, counter));
    mac
}

/// The header value proving `method path` on `session_id` with `counter`, as the SDK makes it
/// (tests and tools).
pub fn sign(key: &ProofKey, method: &str, path: &str, session_id: &str, counter: u64) -> String {
    let tag = mac(key, method, path, session_id, counter)
        .finalize()
        .into_bytes();
    format!("{counter}.{}", URL_SAFE_NO_PAD.encode(tag))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error(
        "this call acts on a collect session: send the Vigil-Session-Proof header that proves the session's key (schemas/collect.md, section 1.1)"
    )]
    Missing,
    #[error("the Vigil-Session-Proof header is not `<counter>.<base64url HMAC>`")]
    Malformed,
    #[error("the session proof does not verify for this call and session")]
    Mismatch,
    #[error(
        "this session proof's counter was already used; every call takes a counter above the last"
    )]
    Replayed,
}

/// Checks a header value against `method path` on `session_id`; the counter it spends.
/// The MAC is compared in constant time.
pub fn verify(
    key: &ProofKey,
    value: &str,
    method: &str,
    path: &str,
    session_id: &str,
) -> Result<u64, ProofError> {
    let (counter, tag) = parse(value)?;
    mac(key, method, path, session_id, counter)
        .verify_slice(&tag)
        .map_err(|_| ProofError::Mismatch)?;
    Ok(counter)
}

/// A header value's counter and MAC, when it has the proof's form: `<counter>.<b64u>`.
fn parse(value: &str) -> Result<(u64, Vec<u8>), ProofError> {
    let (counter, tag) = value.split_once('.').ok_or(ProofError::Malformed)?;
    // Decimal digits only, no sign and no leading zero: one spelling per counter.
    let canonical = !counter.is_empty()
        && counter.len() <= 20
        && counter.bytes().all(|b| b.is_ascii_digit())
        && !counter.starts_with('0');
    let counter: u64 = counter
        .parse()
        .ok()
        .filter(|_| canonical)
        .ok_or(ProofError::Malformed)?;
    let tag = URL_SAFE_NO_PAD
        .decode(tag)
        .map_err(|_| ProofError::Malformed)?;
    Ok((counter, tag))
}

fn refused(e: ProofError) -> ApiError {
    ApiError::new(ErrorCode::SessionProofInvalid, e.to_string()).with_header_name(HEADER_DISPLAY)
}

/// Refuses a call whose proof header is missing or not of the proof's form, before its session
/// is looked up: a call that cannot be proven is refused as such (401), whether or not its
/// session exists.
pub fn presented(headers: &HeaderMap) -> Result<(), ApiError> {
    let value = headers
        .get(HEADER)
        .ok_or_else(|| refused(ProofError::Missing))?;
    let value = value.to_str().map_err(|_| refused(ProofError::Malformed))?;
    parse(value).map(|_| ()).map_err(refused)
}

/// Refuses `call` on `session` unless the request proves it, then spends the proof's counter.
/// Nothing is written for a refused call: the counter is spent only once the MAC verified, and
/// a counter not above the last is refused without a write.
pub async fn require(
    state: &IngestState,
    session: &CollectSessionRecord,
    headers: &HeaderMap,
    call: Call,
) -> Result<(), ApiError> {
    let value = headers
        .get(HEADER)
        .ok_or_else(|| refused(ProofError::Missing))?;
    let value = value.to_str().map_err(|_| refused(ProofError::Malformed))?;
    let id = session.id.to_string();
    // A session opened before calls were proven has no proof key and can prove nothing.
    if session.sealed_proof_key.is_empty() {
        return Err(refused(ProofError::Mismatch));
    }
    let key = ProofKey(open_key(
        state,
        session.id,
        &session.sealed_proof_key,
        "proof",
    )?);
    let counter = verify(&key, value, call.method(), &call.path(), &id).map_err(refused)?;
    if !state
        .auth
        .store
        .advance_collect_call(session.id, counter)
        .await?
    {
        return Err(refused(ProofError::Replayed));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{PROOF_HKDF_INFO, derive_proof_key};

    const SID: &str = "sid_01j9z3k7w8x2v4q6r5t0m1n3p7";
    const PATH: &str = "/v1/collect/sessions/sid_01j9z3k7w8x2v4q6r5t0m1n3p7/results";

    #[test]
    fn a_proof_verifies_only_for_its_call_session_and_counter() {
        let key = derive_proof_key(&[7; 32], SID);
        let proof = sign(&key, "POST", PATH, SID, 3);
        assert!(proof.starts_with("3."));
        assert_eq!(verify(&key, &proof, "POST", PATH, SID), Ok(3));

        let other_key = derive_proof_key(&[7; 32], "sid_01jaaaaaaaaaaaaaaaaaaaaaaa");
        assert_eq!(
            verify(&other_key, &proof, "POST", PATH, SID),
            Err(ProofError::Mismatch),
            "another session's key"
        );
        assert_eq!(
            verify(&key, &proof, "POST", PATH, "sid_01jaaaaaaaaaaaaaaaaaaaaaaa"),
            Err(ProofError::Mismatch),
            "another session id"
        );
        assert_eq!(
            verify(&key, &proof, "POST", "/v1/collect/network-checks", SID),
            Err(ProofError::Mismatch),
            "another call"
        );
        assert_eq!(
            verify(&key, &proof, "GET", PATH, SID),
            Err(ProofError::Mismatch),
            "another method"
        );
        let (_, tag) = proof.split_once('.').unwrap();
        assert_eq!(
            verify(&key, &format!("4.{tag}"), "POST", PATH, SID),
            Err(ProofError::Mismatch),
            "another counter"
        );
        let mut tampered = URL_SAFE_NO_PAD.decode(tag).unwrap();
        tampered[31] ^= 1;
        let tampered = format!("3.{}", URL_SAFE_NO_PAD.encode(tampered));
        assert_eq!(
            verify(&key, &tampered, "POST", PATH, SID),
            Err(ProofError::Mismatch)
        );
        assert_eq!(
            verify(&key, &format!("3.{}", &tag[..20]), "POST", PATH, SID),
            Err(ProofError::Mismatch),
            "a truncated MAC"
        );
        for bad in [
            "",
            "3",
            ".x",
            "03.",
            "-3.",
            "+3.",
            "x.",
            "3.!!",
            "99999999999999999999999.a",
        ] {
            let bad = if bad.ends_with('.') {
                format!("{bad}{tag}")
            } else {
                bad.to_owned()
            };
            assert_eq!(
                verify(&key, &bad, "POST", PATH, SID),
                Err(ProofError::Malformed),
                "{bad}"
            );
        }
    }

    /// The SDK's crypto is checked against vectors computed with pyca/cryptography
    /// (`sdk/test/vectors.py`); checking the server against the same file ties all three.
    #[test]
    fn keys_and_proofs_match_the_sdks_independent_vectors() {
        let vectors: serde_json::Value =
            serde_json::from_str(include_str!("../sdk/test/vectors.json")).unwrap();
        assert_eq!(
            vectors["proof_hkdf_info"].as_str().unwrap().as_bytes(),
            PROOF_HKDF_INFO
        );
        for session in vectors["sessions"].as_array().unwrap() {
            let sid = session["session_id"].as_str().unwrap();
            let shared = hex::decode(session["shared_secret_hex"].as_str().unwrap()).unwrap();
            let key = derive_proof_key(&shared, sid);
            assert_eq!(hex::encode(key.0), session["proof_key_hex"]);
            assert_eq!(
                hex::encode(crate::transport::derive(&shared, sid).0),
                session["aes_key_hex"]
            );
            for p in session["proofs"].as_array().unwrap() {
                let (method, path) = (p["method"].as_str().unwrap(), p["path"].as_str().unwrap());
                let counter = p["counter"].as_u64().unwrap();
                assert_eq!(
                    message(method, path, sid, counter),
                    p["message"].as_str().unwrap().as_bytes()
                );
                assert_eq!(sign(&key, method, path, sid, counter), p["proof"]);
                assert_eq!(
                    verify(&key, p["proof"].as_str().unwrap(), method, path, sid),
                    Ok(counter)
                );
            }
        }
    }

    #[test]
    fn calls_name_their_route() {
        let ping: PingId = "png_01j9z3k7w8x2v4q6r5t0m1n3p7".parse().unwrap();
        let session: SessionId = SID.parse().unwrap();
        assert_eq!(
            (Call::Ping(ping).method(), Call::Ping(ping).path()),
            (
                "GET",
                "/v1/collect/pings/png_01j9z3k7w8x2v4q6r5t0m1n3p7".to_owned()
            )
        );
        assert_eq!(Call::Results(session).path(), PATH);
        assert_eq!(Call::NetworkCheck.method(), "POST");
    }
}
