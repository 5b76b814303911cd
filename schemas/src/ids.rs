//! Prefixed resource ids (docs/architecture.md#ids-and-credentials): a prefix, then a ULID in
//! lowercase Crockford base32, so ids sort by the millisecond they were made and a stray `key_` can
//! never be mistaken for an `org_`. The webhook family (`wevt_`, `we_`, `wdlv_`) is spelled with 32
//! lowercase hex digits, as the interface fixes; those are ULIDs too, written in hex, so they sort
//! the same way.

use std::fmt;
use std::str::FromStr;

use rand::RngCore;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use ulid::Ulid;

/// Reads a string into a `T` by parsing it where it lies: the text is never copied (serde's
/// `Cow<str>` is always an owned copy), and ids are read from every log record and stored row.
struct ParsedStr<T>(std::marker::PhantomData<T>);

impl<T: FromStr<Err: fmt::Display>> serde::de::Visitor<'_> for ParsedStr<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(E::custom)
    }

    /// Formats that hand strings over as bytes, as `Cow<str>` took them.
    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<T, E> {
        match std::str::from_utf8(v) {
            Ok(s) => self.visit_str(s),
            Err(_) => Err(E::invalid_value(serde::de::Unexpected::Bytes(v), &self)),
        }
    }
}

/// A fresh ULID: the current millisecond, then 80 bits from the thread's CSPRNG (`rand`'s
/// ChaCha12, seeded and reseeded from the OS random source), as unguessable as the OS source
/// itself without a system call per id: every request mints one for its request id.
/// There is deliberately no monotonic increment within a millisecond
/// (docs/architecture.md#ids-and-credentials): ids made together would differ by one, so any
/// response's id (a request id included) would predict its neighbours. Ids still sort by their
/// millisecond; within one, lists break ties by id, which is as good an order as any for things
/// made at the same instant.
pub fn next_ulid() -> Ulid {
    let mut random = [0u8; 16];
    rand::rng().fill_bytes(&mut random[6..]);
    // The millisecond from the clock itself: building a calendar time first, only to read its
    // milliseconds back, was about 1% of the API benchmark's samples.
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64);
    Ulid::from_parts(millis, u128::from_be_bytes(random))
}

/// The alphabet of the interface's ids: Crockford base32, lowercase.
pub const ID_ALPHABET: &str = "0123456789abcdefghjkmnpqrstvwxyz";

/// Why a string is not an id of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdError {
    WrongPrefix {
        expected: &'static str,
    },
    WrongLength,
    BadCharacter,
    /// The first character is above `7`: a 26-character ULID holds 130 bits, of which only 128
    /// are the id.
    Overflow,
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
            IdError::Overflow => f.write_str("the first character after the prefix must be 0 to 7"),
        }
    }
}

/// Checks `s` is `prefix` followed by 26 characters of the id alphabet, and returns the ULID.
/// Which bytes are in [`ID_ALPHABET`], looked up rather than searched: ids are parsed on every
/// request and every exported row, and searching the alphabet for each character was a
/// seventh of an export's time.
const IN_ALPHABET: [bool; 256] = {
    let mut table = [false; 256];
    let alphabet = ID_ALPHABET.as_bytes();
    let mut i = 0;
    while i < alphabet.len() {
        table[alphabet[i] as usize] = true;
        i += 1;
    }
    table
};

pub fn parse_ulid_id(prefix: &'static str, s: &str) -> Result<Ulid, IdError> {
    let rest = s
        .strip_prefix(prefix)
        .ok_or(IdError::WrongPrefix { expected: prefix })?;
    if rest.len() != 26 {
        return Err(IdError::WrongLength);
    }
    if !rest.bytes().all(|b| IN_ALPHABET[usize::from(b)]) {
        return Err(IdError::BadCharacter);
    }
    // The first character of a ULID encodes only 3 bits; larger values would overflow 128 bits
    // and print back as a different id.
    if rest.as_bytes()[0] > b'7' {
        return Err(IdError::Overflow);
    }
    Ulid::from_string(rest).map_err(|_| IdError::BadCharacter)
}

/// What every id minted from a ULID can do, for code that walks ids of any kind (an export's
/// pager reads sessions, visitors and events alike, newest first).
pub trait UlidId: Copy + Ord + FromStr + Send + Sync + 'static {
    /// The prefix its spelling starts with (`sid_`).
    const PREFIX: &'static str;
    fn from_ulid(ulid: Ulid) -> Self;
    fn ulid(&self) -> Ulid;
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $spell:ident, $parse:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Ulid);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// A fresh id: this millisecond, then 80 fresh random bits (see [`next_ulid`]).
            pub fn generate() -> Self {
                Self(next_ulid())
            }

            pub fn from_ulid(ulid: Ulid) -> Self {
                Self(ulid)
            }

            /// The id made at `timestamp_ms` with the 80 random bits taken from `random`: a
            /// caller that must mint the same id again for the same thing (a redelivered
            /// record) derives `random` from that thing.
            pub fn from_parts(timestamp_ms: u64, random: u128) -> Self {
                Self(Ulid::from_parts(timestamp_ms, random))
            }

            pub fn ulid(&self) -> Ulid {
                self.0
            }
        }

        impl UlidId for $name {
            const PREFIX: &'static str = $prefix;

            fn from_ulid(ulid: Ulid) -> Self {
                Self(ulid)
            }

            fn ulid(&self) -> Ulid {
                self.0
            }
        }

        /// In the OpenAPI document: a string of the id's form.
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .pattern(Some(id_pattern($prefix, stringify!($spell))))
                    .examples([$name::from_parts(1_700_000_000_000, 0x2a).to_string()])
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {}

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str($prefix)?;
                $spell(self.0, f)
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
                $parse($prefix, s).map(Self)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_str(ParsedStr::<Self>(std::marker::PhantomData))
            }
        }
    };
}

id_type!(
    /// An organization: the tenant every key, session and service belongs to.
    OrgId, "org_", spell_base32, parse_ulid_id
);
id_type!(
    /// An API key resource id; never the credential itself.
    KeyId, "key_", spell_base32, parse_ulid_id
);
id_type!(
    /// One HTTP request, echoed in `meta.request_id`, `error.request_id` and `X-Request-Id`.
    RequestId, "req_", spell_base32, parse_ulid_id
);
id_type!(
    /// A collect session: one page view scored by the browser SDK.
    SessionId, "sid_", spell_base32, parse_ulid_id
);
id_type!(
    /// One round-trip timing ping of a collect session.
    PingId, "png_", spell_base32, parse_ulid_id
);
id_type!(
    /// A persistent visitor fingerprint linking sessions.
    VisitorId, "vid_", spell_base32, parse_ulid_id
);
id_type!(
    /// One decision of a session (its history is kept; the latest is pointed to).
    DecisionId, "evt_", spell_base32, parse_ulid_id
);

/// The pattern of the ids with `prefix` spelled by `spell` (the name of one of the two spellers
/// below): what the OpenAPI document gives for each id. A base32 id's first character is at
/// most `7` ([`IdError::Overflow`]).
fn id_pattern(prefix: &str, spell: &str) -> String {
    match spell {
        "spell_hex" => format!("^{prefix}[0-9a-f]{{32}}$"),
        _ => format!("^{prefix}[0-7][0-9a-hjkmnp-tv-z]{{25}}$"),
    }
}

/// The interface's base32 spelling of a ULID: Crockford, lowercase, written into `buf` (on the
/// stack: every response spells its request id, most spell a resource id too).
pub fn base32_spelling(ulid: Ulid, buf: &mut [u8; ulid::ULID_LEN]) -> &str {
    let spelled = ulid.array_to_str(buf);
    spelled.make_ascii_lowercase();
    spelled
}

fn spell_base32(ulid: Ulid, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    f.write_str(base32_spelling(ulid, &mut [0u8; ulid::ULID_LEN]))
}

/// The webhook family's spelling of a ULID: 32 lowercase hex digits.
fn spell_hex(ulid: Ulid, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    write!(f, "{:032x}", ulid.0)
}

/// Checks `s` is `prefix` followed by 32 lowercase hex digits, and returns the ULID they spell.
pub fn parse_hex_id(prefix: &'static str, s: &str) -> Result<Ulid, IdError> {
    let rest = s
        .strip_prefix(prefix)
        .ok_or(IdError::WrongPrefix { expected: prefix })?;
    if rest.len() != 32 {
        return Err(IdError::WrongLength);
    }
    if !rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(IdError::BadCharacter);
    }
    u128::from_str_radix(rest, 16)
        .map(Ulid)
        .map_err(|_| IdError::BadCharacter)
}

id_type!(
    /// A Gate session: one signup or login waiting for, or past, a person's approval
    /// (docs/architecture.md#gate).
    GateSessionId, "gate_", spell_base32, parse_ulid_id
);
id_type!(
    /// An account a Gate signup made at a service, which its agent token acts for
    /// (docs/architecture.md#gate).
    GateAccountId, "gacct_", spell_base32, parse_ulid_id
);
id_type!(
    /// One event recorded for an organization (docs/architecture.md#events), delivered to its
    /// webhooks.
    EventId, "wevt_", spell_hex, parse_hex_id
);
id_type!(
    /// A webhook endpoint of an organization (docs/architecture.md#webhooks).
    WebhookEndpointId, "we_", spell_hex, parse_hex_id
);
id_type!(
    /// The delivery of one event to one webhook endpoint, with its attempts
    /// (docs/architecture.md#webhooks).
    WebhookDeliveryId, "wdlv_", spell_hex, parse_hex_id
);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_made_in_a_row_share_no_random_part() {
        // 2,000 ids, most made within the same millisecond: every random part is fresh, and
        // no two are neighbours, which a monotonic increment would make them.
        let ids: Vec<KeyId> = (0..2000).map(|_| KeyId::generate()).collect();
        let random = |id: &KeyId| id.ulid().random();
        let parts: std::collections::HashSet<u128> = ids.iter().map(random).collect();
        assert_eq!(parts.len(), ids.len());
        for pair in ids.windows(2) {
            assert!(random(&pair[0]).abs_diff(random(&pair[1])) > 1, "{pair:?}");
            assert!(pair[0].ulid().timestamp_ms() <= pair[1].ulid().timestamp_ms());
        }
        let strings: Vec<String> = ids.iter().map(ToString::to_string).collect();
        let mut by_text = ids.clone();
        by_text.sort_by_key(ToString::to_string);
        let mut by_id = ids.clone();
        by_id.sort();
        assert_eq!(by_text, by_id, "text order is id order");
        assert!(strings.iter().all(|s| s.len() == 30));
    }

    #[test]
    fn an_id_carries_the_millisecond_it_was_made_in() {
        let before = crate::time::now().timestamp_millis() as u64;
        let id = OrgId::generate();
        let after = crate::time::now().timestamp_millis() as u64;
        assert!((before..=after).contains(&id.ulid().timestamp_ms()));
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

    #[test]
    fn hex_ids_are_32_lowercase_hex_digits() {
        let ids: Vec<EventId> = (0..100).map(|_| EventId::generate()).collect();
        let strings: Vec<String> = ids.iter().map(ToString::to_string).collect();
        for s in &strings {
            assert_eq!(s.len(), "wevt_".len() + 32, "{s}");
            assert_eq!(s.parse::<EventId>().unwrap().to_string(), *s);
        }
        let mut sorted = strings.clone();
        sorted.sort();
        let mut by_id = ids.clone();
        by_id.sort();
        let by_id: Vec<String> = by_id.iter().map(ToString::to_string).collect();
        assert_eq!(by_id, sorted, "text order is id order");
        assert_eq!(
            "wevt_0123456789ABCDEF0123456789abcdef".parse::<EventId>(),
            Err(IdError::BadCharacter),
            "upper case is not the interface's spelling"
        );
        assert_eq!("wevt_00ff".parse::<EventId>(), Err(IdError::WrongLength));
        assert_eq!(
            "wevt_+123456789abcdef0123456789abcdef".parse::<EventId>(),
            Err(IdError::BadCharacter)
        );
    }

    proptest! {
        #[test]
        fn hex_ids_round_trip(n in any::<u128>()) {
            let id = EventId::from_ulid(Ulid(n));
            prop_assert_eq!(id.to_string().parse::<EventId>().unwrap(), id);
        }

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
