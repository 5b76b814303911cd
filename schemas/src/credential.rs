//! The credential token format (docs/architecture.md#ids-and-credentials): `pk_live_`, `pk_test_`,
//! `sk_live_`, `sk_test_`, then 32 base62 characters from the OS random source (190 bits), then a
//! 6-character base62 CRC32 of everything before it. The checksum lets secret scanners recognise a
//! leaked key offline and lets the server reject typos without touching the store.

use std::fmt;

use rand::Rng;
use rand::TryRngCore;
use rand::distr::Alphanumeric;
use rand::rngs::OsRng;
use serde::{Deserialize, Serialize};

/// A keyed hash of a credential (HMAC-SHA256 with the server pepper): the only form in which
/// secret credentials are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CredentialHash(pub [u8; 32]);

const RANDOM_LEN: usize = 32;
const CHECKSUM_LEN: usize = 6;
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Which endpoint groups a key reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeyType {
    Publishable,
    Secret,
}

impl KeyType {
    pub const ALL: [&'static str; 2] = ["publishable", "secret"];

    pub fn as_str(self) -> &'static str {
        match self {
            KeyType::Publishable => "publishable",
            KeyType::Secret => "secret",
        }
    }

    fn token_prefix(self) -> &'static str {
        match self {
            KeyType::Publishable => "pk",
            KeyType::Secret => "sk",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "publishable" => Some(KeyType::Publishable),
            "secret" => Some(KeyType::Secret),
            _ => None,
        }
    }
}

/// Live and test keys reach the same endpoints but isolated data
/// (docs/architecture.md#environments).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Environment {
    Live,
    Test,
}

impl Environment {
    pub const ALL: [&'static str; 2] = ["live", "test"];

    pub fn as_str(self) -> &'static str {
        match self {
            Environment::Live => "live",
            Environment::Test => "test",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "live" => Some(Environment::Live),
            "test" => Some(Environment::Test),
            _ => None,
        }
    }
}

impl fmt::Display for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A well-formed credential string: its checksum holds, so it is worth a store lookup.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    token: String,
    key_type: KeyType,
    environment: Environment,
}

/// Never print a credential by accident: `{:?}` shows only its preview.
impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Credential({})", self.preview())
    }
}

impl Credential {
    /// Mints a fresh credential from the OS random source.
    pub fn generate(key_type: KeyType, environment: Environment) -> Self {
        let mut rng = OsRng.unwrap_err();
        let random: String = (0..RANDOM_LEN)
            .map(|_| char::from(rng.sample(Alphanumeric)))
            .collect();
        let body = format!(
            "{}_{}_{}",
            key_type.token_prefix(),
            environment.as_str(),
            random
        );
        let token = format!("{body}{}", checksum(&body));
        Credential {
            token,
            key_type,
            environment,
        }
    }

    /// Parses a presented token; `None` when its shape or checksum is wrong.
    pub fn parse(token: &str) -> Option<Self> {
        let (key_type, rest) = if let Some(rest) = token.strip_prefix("pk_") {
            (KeyType::Publishable, rest)
        } else if let Some(rest) = token.strip_prefix("sk_") {
            (KeyType::Secret, rest)
        } else {
            return None;
        };
        let (environment, rest) = if let Some(rest) = rest.strip_prefix("live_") {
            (Environment::Live, rest)
        } else if let Some(rest) = rest.strip_prefix("test_") {
            (Environment::Test, rest)
        } else {
            return None;
        };
        if rest.len() != RANDOM_LEN + CHECKSUM_LEN
            || !rest.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            return None;
        }
        let (body, sum) = token.split_at(token.len() - CHECKSUM_LEN);
        if !checksum(body).matches(sum) {
            return None;
        }
        Some(Credential {
            token: token.to_owned(),
            key_type,
            environment,
        })
    }

    pub fn key_type(&self) -> KeyType {
        self.key_type
    }

    pub fn environment(&self) -> Environment {
        self.environment
    }

    /// The full token; handle with care.
    pub fn expose(&self) -> &str {
        &self.token
    }

    fn prefix_len(&self) -> usize {
        // `pk_live_`, `sk_test_`, ...: always eight characters.
        8
    }

    /// `sk_live_AbCd`: the prefix and the first four random characters (24 bits), enough to
    /// tell keys apart in a list and far too little to use.
    pub fn preview(&self) -> String {
        self.token[..self.prefix_len() + 4].to_owned()
    }

    /// `sk_live_••••••••wxYz`: the prefix, a mask and the last four characters.
    pub fn display(&self) -> String {
        format!(
            "{}{}{}",
            &self.token[..self.prefix_len()],
            "•".repeat(8),
            &self.token[self.token.len() - 4..]
        )
    }
}

/// CRC32 of `body`, written as six base62 digits (ASCII), on the stack: every request checks one.
pub(crate) fn checksum(body: &str) -> Checksum {
    let mut n = crc32fast::hash(body.as_bytes()) as u64;
    let mut out = [b'0'; CHECKSUM_LEN];
    for slot in out.iter_mut().rev() {
        *slot = BASE62[(n % 62) as usize];
        n /= 62;
    }
    Checksum(out)
}

/// A token's checksum: six base62 digits.
pub(crate) struct Checksum([u8; CHECKSUM_LEN]);

impl Checksum {
    pub(crate) fn matches(&self, written: &str) -> bool {
        self.0 == written.as_bytes()
    }
}

impl fmt::Display for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Base62 digits are ASCII.
        f.write_str(std::str::from_utf8(&self.0).map_err(|_| fmt::Error)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn generated_tokens_parse_back() {
        for kt in [KeyType::Publishable, KeyType::Secret] {
            for env in [Environment::Live, Environment::Test] {
                let c = Credential::generate(kt, env);
                let parsed = Credential::parse(c.expose()).expect("parses");
                assert_eq!(parsed.key_type(), kt);
                assert_eq!(parsed.environment(), env);
                assert_eq!(c.expose().len(), 8 + 32 + 6);
            }
        }
    }

    #[test]
    fn a_single_changed_character_fails_the_checksum() {
        let c = Credential::generate(KeyType::Secret, Environment::Live);
        let mut bytes = c.expose().as_bytes().to_vec();
        bytes[12] = if bytes[12] == b'a' { b'b' } else { b'a' };
        assert!(Credential::parse(std::str::from_utf8(&bytes).unwrap()).is_none());
    }

    #[test]
    fn previews_reveal_little() {
        let c = Credential::generate(KeyType::Secret, Environment::Test);
        assert!(c.preview().starts_with("sk_test_"));
        assert_eq!(c.preview().len(), 12);
        assert!(!c.display().contains(&c.expose()[8..30]));
        assert!(!format!("{c:?}").contains(c.expose()));
    }

    proptest! {
        #[test]
        fn random_strings_are_not_credentials(s in "(pk|sk)_(live|test)_[A-Za-z0-9]{38}") {
            // A random 38-character tail passes the checksum with probability ~2^-32.
            prop_assert!(Credential::parse(&s).is_none());
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,60}") {
            let _ = Credential::parse(&s);
        }
    }
}
