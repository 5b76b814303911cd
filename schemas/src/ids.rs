//! Prefixed resource ids (D1): a prefix, then a ULID in lowercase Crockford base32, so ids sort
//! by creation time and a stray `key_` can never be mistaken for an `org_`.

use std::fmt;
use std::str::FromStr;

use std::sync::{LazyLock, Mutex};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use ulid::{Generator, Ulid};

/// One monotonic generator for the process: ids made within the same millisecond still sort in
/// the order they were made, so "newest first" lists are exact.
static GENERATOR: LazyLock<Mutex<Generator>> = LazyLock::new(|| Mutex::new(Generator::new()));

/// A fresh ULID, after every ULID this process generated before it.
pub fn next_ulid() -> Ulid {
    let mut generator = GENERATOR.lock().unwrap_or_else(|p| p.into_inner());
    // The random part overflows only after 2^80 ids in one millisecond; fall back to a fresh,
    // unordered ULID rather than fail.
    generator.generate().unwrap_or_else(|_| Ulid::generate())
}

/// The alphabet of the interface's ids: Crockford base32, lowercase.
pub const ID_ALPHABET: &str = "0123456789abcdefghjkmnpqrstvwxyz";

/// Why a string is not an id of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdError {
    WrongPrefix { expected: &'static str },
    WrongLength,
    BadCharacter,
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdError::WrongPrefix { expected } => write!(f, "must start with `{expected}`"),
            IdError::WrongLength => f.write_str("must be the prefix then 26 characters"),
            IdError::BadCharacter => write!(
                f,
                "characters after the prefix must be from `{ID_ALPHABET}`"
            ),
        }
    }
}

/// Checks `s` is `prefix` followed by 26 characters of the id alphabet, and returns the ULID.
pub fn parse_ulid_id(prefix: &'static str, s: &str) -> Result<Ulid, IdError> {
    let rest = s
        .strip_prefix(prefix)
        .ok_or(IdError::WrongPrefix { expected: prefix })?;
    if rest.len() != 26 {
        return Err(IdError::WrongLength);
    }
    if !rest.bytes().all(|b| ID_ALPHABET.as_bytes().contains(&b)) {
        return Err(IdError::BadCharacter);
    }
    // The first character of a ULID encodes only 3 bits; larger values would overflow 128 bits
    // and print back as a different id.
    if rest.as_bytes()[0] > b'7' {
        return Err(IdError::BadCharacter);
    }
    Ulid::from_string(rest).map_err(|_| IdError::BadCharacter)
}

macro_rules! ulid_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Ulid);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// A fresh id, ordered after every id generated before it in this process.
            pub fn generate() -> Self {
                Self(next_ulid())
            }

            pub fn from_ulid(ulid: Ulid) -> Self {
                Self(ulid)
            }

            pub fn ulid(&self) -> Ulid {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str($prefix)?;
                f.write_str(&self.0.to_string().to_ascii_lowercase())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                parse_ulid_id($prefix, s).map(Self)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

ulid_id!(
    /// An organization: the tenant every key, session and service belongs to.
    OrgId, "org_"
);
ulid_id!(
    /// An API key resource id; never the credential itself.
    KeyId, "key_"
);
ulid_id!(
    /// One HTTP request, echoed in `meta.request_id`, `error.request_id` and `X-Request-Id`.
    RequestId, "req_"
);
ulid_id!(
    /// A collect session: one page view scored by the browser SDK.
    SessionId, "sid_"
);
ulid_id!(
    /// One round-trip timing ping of a collect session.
    PingId, "png_"
);
ulid_id!(
    /// A persistent visitor fingerprint linking sessions.
    VisitorId, "vid_"
);
ulid_id!(
    /// One decision of a session (its history is kept; the latest is pointed to).
    DecisionId, "evt_"
);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_made_in_a_row_sort_in_order() {
        let ids: Vec<KeyId> = (0..1000).map(|_| KeyId::generate()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
        let strings: Vec<String> = ids.iter().map(ToString::to_string).collect();
        let mut sorted_strings = strings.clone();
        sorted_strings.sort();
        assert_eq!(strings, sorted_strings, "text order is id order");
    }

    #[test]
    fn display_round_trips() {
        let id = OrgId::generate();
        let s = id.to_string();
        assert!(s.starts_with("org_"));
        assert_eq!(s.len(), 30);
        assert_eq!(s.parse::<OrgId>().unwrap(), id);
    }

    #[test]
    fn rejects_other_prefixes_and_alphabets() {
        let key = KeyId::generate().to_string();
        assert_eq!(
            key.parse::<OrgId>(),
            Err(IdError::WrongPrefix { expected: "org_" })
        );
        assert_eq!("org_".parse::<OrgId>(), Err(IdError::WrongLength));
        // `u`, `i`, `l`, `o` and upper case are outside the interface's alphabet.
        assert_eq!(
            "org_01hzzzzzzzzzzzzzzzzzzzzzzu".parse::<OrgId>(),
            Err(IdError::BadCharacter)
        );
        assert_eq!(
            "org_01HZZZZZZZZZZZZZZZZZZZZZZZ".parse::<OrgId>(),
            Err(IdError::BadCharacter)
        );
    }

    proptest! {
        #[test]
        fn generated_ids_always_parse(n in any::<u128>()) {
            let id = KeyId::from_ulid(Ulid(n));
            prop_assert_eq!(id.to_string().parse::<KeyId>().unwrap(), id);
        }

        #[test]
        fn arbitrary_strings_never_panic(s in "\\PC{0,40}") {
            let _ = s.parse::<OrgId>();
        }

        #[test]
        fn only_the_alphabet_after_the_prefix_parses(s in "org_[0-9a-z]{26}") {
            let ok = s.parse::<OrgId>().is_ok();
            let alphabet_ok = s[4..].bytes().all(|b| ID_ALPHABET.as_bytes().contains(&b)) && s.as_bytes()[4] <= b'7';
            prop_assert_eq!(ok, alphabet_ok);
        }
    }
}
