//! Standard Webhooks signatures (docs/architecture.md#webhooks): `webhook-signature` is `v1,` and
//! the base64 of HMAC-SHA256 over `{webhook-id}.{webhook-timestamp}.{body}`, keyed by the bytes of
//! the endpoint's `whsec_` secret (the base64 after the prefix). While a secret rotates, a delivery
//! is signed with both, the signatures separated by a space, so a receiver verifies with
//! whichever secret it has deployed. The official Standard Webhooks libraries verify these
//! unchanged.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The prefix of a signing secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// A signing secret's key bytes: the base64 after `whsec_`; `None` if it is not one.
pub fn secret_key(secret: &str) -> Option<Vec<u8>> {
    STANDARD.decode(secret.strip_prefix(SECRET_PREFIX)?).ok()
}

/// The `webhook-signature` header of a delivery: one `v1,<base64>` per key, space-separated,
/// the newest secret first.
pub fn signature_header(keys: &[&[u8]], id: &str, timestamp: i64, body: &[u8]) -> String {
    keys.iter()
        .map(|key| format!("v1,{}", STANDARD.encode(sign(key, id, timestamp, body))))
        .collect::<Vec<_>>()
        .join(" ")
}

fn sign(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> [u8; 32] {
    // HMAC takes keys of any length.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC accepts any key");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    /// The signature as Python's standard library computes it from the same inputs: an
    /// implementation that shares nothing with this one.
    fn python_signature(secret: &str, id: &str, timestamp: i64, body: &str) -> String {
        let script = r#"
import base64, hashlib, hmac, sys
secret, msg_id, ts, body = sys.argv[1:]
key = base64.b64decode(secret.split("_", 1)[1])
mac = hmac.new(key, f"{msg_id}.{ts}.{body}".encode(), hashlib.sha256).digest()
print("v1," + base64.b64encode(mac).decode())
"#;
        let out = Command::new("python3")
            .args(["-c", script, secret, id, &timestamp.to_string(), body])
            .output()
            .expect("python3 must be installed (scripts/test.sh installs it)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    #[test]
    fn signatures_match_an_independent_implementation() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let (id, timestamp) = ("wevt_0123456789abcdef0123456789abcdef", 1_614_265_330);
        let body = r#"{"type":"webhook.test","data":{"n":2432232314}}"#;
        let key = secret_key(secret).unwrap();
        assert_eq!(
            signature_header(&[&key], id, timestamp, body.as_bytes()),
            python_signature(secret, id, timestamp, body)
        );
    }

    #[test]
    fn a_rotating_endpoint_is_signed_with_both_secrets_newest_first() {
        let (new, old) = (
            secret_key("whsec_AAAAAAAA").unwrap(),
            secret_key("whsec_BBBBBBBB").unwrap(),
        );
        let both = signature_header(&[&new, &old], "wevt_1", 7, b"{}");
        let parts: Vec<&str> = both.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], signature_header(&[&new], "wevt_1", 7, b"{}"));
        assert_eq!(parts[1], signature_header(&[&old], "wevt_1", 7, b"{}"));
        assert_ne!(parts[0], parts[1]);
        // Any change to what is signed changes the signature.
        assert_ne!(parts[0], signature_header(&[&new], "wevt_2", 7, b"{}"));
        assert_ne!(parts[0], signature_header(&[&new], "wevt_1", 8, b"{}"));
        assert_ne!(parts[0], signature_header(&[&new], "wevt_1", 7, b"{ }"));
    }

    #[test]
    fn only_whsec_secrets_give_keys() {
        assert_eq!(secret_key("whsec_AAEC").unwrap(), vec![0, 1, 2]);
        assert!(secret_key("sk_live_AAEC").is_none());
        assert!(secret_key("whsec_not base64!").is_none());
    }
}
