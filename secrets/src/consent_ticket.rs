//! The consent page's ticket (docs/gate.md#the-consent-page): the server renders one into each
//! consent page, and the page's SDK opens its collect session with it, so the session is bound
//! to that Gate session from its first request. An approval then needs the handoff of a collect
//! session opened with a ticket of its own Gate session: a session opened on any other page, for
//! any other purpose, never counts, whatever `page_url` it claims.
//!
//! A ticket is sealed under the server secret (the browser can neither read nor forge it),
//! expires with its Gate session, and carries a random nonce that ingest spends once, so one
//! rendered page opens one collect session.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::TryRngCore;
use rand::rngs::OsRng;
use schemas::credential::Environment;
use schemas::ids::GateSessionId;
use schemas::time::Timestamp;
use serde::{Deserialize, Serialize};

use crate::ServerSecret;

const VERSION: &str = "gct1";
const CONTEXT: &[u8] = b"gate-consent-ticket";

/// What a ticket carries, sealed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsentTicket {
    pub gate_session_id: GateSessionId,
    pub environment: Environment,
    /// Spent once, when a collect session is opened with the ticket.
    pub nonce: [u8; 16],
    pub expires_at: Timestamp,
}

impl ConsentTicket {
    /// A fresh ticket for `gate_session_id`, valid until `expires_at`.
    pub fn new(
        gate_session_id: GateSessionId,
        environment: Environment,
        expires_at: Timestamp,
    ) -> Self {
        let mut nonce = [0u8; 16];
        OsRng.try_fill_bytes(&mut nonce).expect("OS random source");
        ConsentTicket {
            gate_session_id,
            environment,
            nonce,
            expires_at,
        }
    }

    /// The key under which the ticket's one use is recorded.
    pub fn spending_id(&self) -> [u8; 16] {
        use sha2::{Digest, Sha256};
        let digest = Sha256::new()
            .chain_update(VERSION.as_bytes())
            .chain_update(self.nonce)
            .finalize();
        let mut id = [0u8; 16];
        id.copy_from_slice(&digest[..16]);
        id
    }

    /// The ticket as the page carries it: `gct1.<sealed, base64url>`.
    pub fn seal(&self, secret: &ServerSecret) -> String {
        let plain = serde_json::to_vec(self).expect("a ticket serializes");
        format!(
            "{VERSION}.{}",
            URL_SAFE_NO_PAD.encode(secret.seal(&plain, CONTEXT))
        )
    }

    /// The ticket `text` carries, if this server sealed it and it has not expired at `now`.
    pub fn open(secret: &ServerSecret, text: &str, now: Timestamp) -> Option<Self> {
        let body = text.strip_prefix(VERSION)?.strip_prefix('.')?;
        let sealed = URL_SAFE_NO_PAD.decode(body).ok()?;
        let plain = secret.open(&sealed, CONTEXT)?;
        let ticket: ConsentTicket = serde_json::from_slice(&plain).ok()?;
        (ticket.expires_at > now).then_some(ticket)
    }

    /// Whether `text` has the form of a ticket (checked before any store is read).
    pub fn well_formed(text: &str) -> bool {
        text.len() <= 512
            && text
                .strip_prefix(VERSION)
                .and_then(|t| t.strip_prefix('.'))
                .is_some_and(|b| {
                    !b.is_empty()
                        && b.bytes()
                            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
                })
    }
}

#[cfg(test)]
mod tests {
    use chrono::Duration;
    use schemas::time;

    use super::*;

    #[test]
    fn tickets_open_only_unaltered_unexpired_and_under_this_secret() {
        let secret = ServerSecret::from_bytes([3; 32]);
        let now = time::now();
        let ticket = ConsentTicket::new(
            GateSessionId::generate(),
            Environment::Test,
            now + Duration::minutes(15),
        );
        let text = ticket.seal(&secret);
        assert!(ConsentTicket::well_formed(&text), "{text}");
        assert_eq!(
            ConsentTicket::open(&secret, &text, now),
            Some(ticket.clone())
        );
        // Expired.
        assert_eq!(
            ConsentTicket::open(&secret, &text, now + Duration::minutes(16)),
            None
        );
        // Another server's secret.
        assert_eq!(
            ConsentTicket::open(&ServerSecret::from_bytes([4; 32]), &text, now),
            None
        );
        // Altered.
        let mut altered = text.clone().into_bytes();
        let last = altered.len() - 3;
        altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(altered).unwrap();
        assert_eq!(ConsentTicket::open(&secret, &altered, now), None);
        // Two tickets of one session are spent apart.
        let other =
            ConsentTicket::new(ticket.gate_session_id, Environment::Test, ticket.expires_at);
        assert_ne!(other.spending_id(), ticket.spending_id());
        assert!(!ConsentTicket::well_formed("gct1."));
        assert!(!ConsentTicket::well_formed("vh1.k1.AAAA"));
    }
}
