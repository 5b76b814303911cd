//! Gate's shared rules (the API's `gate_service`, docs/architecture.md#gate): what a service id may
//! be, which ids are reserved, the built-in system service, the per-organization cap, and the
//! formats of the service's colours and environment-variable names, and the user code a person
//! types on the consent page.

/// The built-in system service: always present and discoverable, in both environments; no
/// organization owns it, and it counts toward no cap.
pub const SYSTEM_SERVICE_ID: &str = "vigil";

/// The organization of the built-in `vigil` service, which owns no tenant data: its publishable
/// keys score the consent page itself, so an approval is granted only to a browser session
/// Vigil judged a person's. Its id is fixed (all zero), so every process of a fleet names the
/// same one; the server creates it on first start.
pub fn system_organization() -> crate::OrgId {
    crate::OrgId::from_parts(0, 0)
}

/// Services one organization may have in each environment, disabled ones included (the system
/// service is not counted). Gate state is separate per environment, so a test key's services
/// never use up the live ones'.
pub const MAX_SERVICES_PER_ORGANIZATION: usize = 5;

/// Ids no organization may claim: Gate's own path words and names that would pass for Vigil.
pub const RESERVED_IDS: &[&str] = &[
    "gate",
    "registry",
    "services",
    "service",
    "webhook",
    "webhooks",
    "vigil",
    "admin",
    "api",
    "system",
    "login",
    "login-sessions",
    "signup",
    "signups",
    "sessions",
    "agent-tokens",
    "consent",
];

/// A Gate workflow credential's prefix (docs/architecture.md: #ids-and-credentials, #gate): each is
/// single-purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// `gtpoll_`: polls one Gate session.
    Poll,
    /// `agt_`: an account's agent token; starts login sessions, and nothing else.
    Agent,
    /// `ack_`: acknowledges one signup's delivery.
    Ack,
    /// `gtc_`: opens one Gate session's consent page (it travels in the consent URL).
    Consent,
}

impl TokenKind {
    pub fn prefix(self) -> &'static str {
        match self {
            TokenKind::Poll => "gtpoll_",
            TokenKind::Agent => "agt_",
            TokenKind::Ack => "ack_",
            TokenKind::Consent => "gtc_",
        }
    }

    /// The kind a presented token claims by its prefix.
    pub fn of(token: &str) -> Option<Self> {
        [
            TokenKind::Poll,
            TokenKind::Agent,
            TokenKind::Ack,
            TokenKind::Consent,
        ]
        .into_iter()
        .find(|k| token.starts_with(k.prefix()))
    }
}

/// Random characters of a workflow token (base62: about 238 bits).
const TOKEN_RANDOM_LEN: usize = 40;

/// Mints a token of `kind` from the OS random source: the prefix, 40 base62 characters and a
/// six-character checksum (so a mistyped token is refused without a store lookup).
pub fn mint(kind: TokenKind) -> String {
    use rand::TryRngCore;
    use rand::distr::{Alphanumeric, SampleString};
    use rand::rngs::OsRng;
    let mut rng = OsRng.unwrap_err();
    let body = format!(
        "{}{}",
        kind.prefix(),
        Alphanumeric.sample_string(&mut rng, TOKEN_RANDOM_LEN)
    );
    let sum = crate::credential::checksum(&body);
    format!("{body}{sum}")
}

/// Whether `token` is a well-formed token of `kind` (its checksum holds).
pub fn well_formed(kind: TokenKind, token: &str) -> bool {
    let Some(rest) = token.strip_prefix(kind.prefix()) else {
        return false;
    };
    if rest.len() != TOKEN_RANDOM_LEN + 6 || !rest.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return false;
    }
    let (body, sum) = token.split_at(token.len() - 6);
    crate::credential::checksum(body).matches(sum)
}

/// How long a signup or login waits for its approval.
pub const SESSION_TTL: std::time::Duration = std::time::Duration::from_secs(15 * 60);
/// Signups one client address may start in any [`SESSION_TTL`]: about as many as may wait for
/// approval at once (a signup needs no key).
pub const SIGNUPS_PER_ADDRESS: u32 = 10;
/// Signups of one service that may be started in any [`SESSION_TTL`], from all addresses.
pub const SIGNUPS_PER_SERVICE: u32 = 500;
/// How long a Gate session is kept once it expired (or, approved, once its delivery stopped
/// being shown): long enough to answer a late poll with its outcome, then dropped.
pub const SESSION_KEPT_AFTER_EXPIRY: std::time::Duration =
    std::time::Duration::from_secs(24 * 3600);
/// The polling interval a Gate session starts with (RFC 8628's default).
pub const POLL_INTERVAL_SECS: u32 = 5;
/// What a poll sooner than the interval adds to it (RFC 8628 `slow_down`).
pub const SLOW_DOWN_SECS: u32 = 5;
/// The most polls one Gate session answers.
pub const MAX_POLLS: u32 = 200;
/// How long an agent token is valid (docs/architecture.md#gate).
pub const AGENT_TOKEN_TTL: std::time::Duration = std::time::Duration::from_secs(90 * 24 * 3600);
/// Login sessions one agent token may start per hour.
pub const LOGINS_PER_HOUR: usize = 10;
/// How long a login code is valid.
pub const LOGIN_CODE_TTL: std::time::Duration = std::time::Duration::from_secs(5 * 60);
/// Digits of a login code.
pub const LOGIN_CODE_DIGITS: usize = 8;
/// Codes that may be presented for one login session within a code's lifetime, right or
/// wrong: its one live code among 10^8 is out of reach, and nobody else's login is charged.
pub const CODE_ATTEMPTS_PER_LOGIN: u32 = 5;
/// Codes presented without their login session, looked up among the caller's live codes, that
/// one organization and environment may present in any code's lifetime (five minutes, the
/// bucket refilling as it goes), right or wrong, whatever service they name: one budget, so
/// naming services cannot multiply it. A guesser's chance is these attempts times the live
/// codes over 10^8: with a hundred people logging in at once, 10^-4 in any five minutes (about
/// 3% a day, spent in full every five minutes; a named session's budget is far smaller). A
/// dashboard that logs in more people than this names the session, which the redirect carries,
/// and is held to [`CODE_ATTEMPTS_PER_LOGIN`] for each login instead.
pub const CODE_LOOKUPS_PER_ENVIRONMENT: u32 = 100;

/// The user code's alphabet (RFC 8628 §6.1): twenty consonants, no vowels (so no word is
/// spelled by chance) and nothing that reads as another character (no `0`/`O`, `1`/`I`/`L`
/// confusion: the letters here are told apart in any font).
pub const USER_CODE_ALPHABET: &[u8; 20] = b"BCDFGHJKLMNPQRSTVWXZ";
/// Characters of a user code: 20^8, about 34.6 bits, far beyond the attempts a session allows.
pub const USER_CODE_CHARS: usize = 8;
/// Codes the consent page takes for one Gate session, right or wrong, counted before the
/// comparison (so parallel guesses cannot pass it): room for a person's typos and every try
/// an uncertain judgement allows, and one live code among 20^8 stays out of a guesser's reach.
/// Past them the session is denied.
pub const USER_CODE_ATTEMPTS: u32 = 10;
/// Judgements of a consent page that Vigil found `uncertain`: the first and two more tries,
/// after which the Gate session is denied.
pub const UNCERTAIN_JUDGEMENTS: u32 = 3;

/// A user code from the OS random source, as the tool shows it: `WDJB-MJHT`.
pub fn mint_user_code() -> String {
    use rand::Rng;
    use rand::TryRngCore;
    use rand::rngs::OsRng;
    let mut rng = OsRng.unwrap_err();
    let mut code = String::with_capacity(USER_CODE_CHARS + 1);
    for i in 0..USER_CODE_CHARS {
        if i == USER_CODE_CHARS / 2 {
            code.push('-');
        }
        code.push(char::from(
            USER_CODE_ALPHABET[rng.random_range(0..USER_CODE_ALPHABET.len())],
        ));
    }
    code
}

/// A user code as a person typed it, in the form it is compared in: case, spaces and dashes do
/// not matter (`wdjb mjht` is `WDJBMJHT`). `None` when it cannot be a user code at all, which
/// then costs no attempt.
pub fn normalize_user_code(typed: &str) -> Option<String> {
    let code: String = typed
        .chars()
        .filter(|c| !(c.is_whitespace() || matches!(c, '-' | '\u{2010}'..='\u{2015}')))
        .map(|c| c.to_ascii_uppercase())
        .collect();
    (code.len() == USER_CODE_CHARS && code.bytes().all(|b| USER_CODE_ALPHABET.contains(&b)))
        .then_some(code)
}

/// The pattern of a service id, as the OpenAPI document gives it wherever one is read.
pub const SERVICE_ID_PATTERN: &str = "^[a-z0-9](?:[a-z0-9_-]{1,30}[a-z0-9])$";

/// A service id: 3 to 32 characters of `[a-z0-9_-]`, starting and ending with a letter or
/// digit ([`SERVICE_ID_PATTERN`]), and not reserved.
pub fn service_id(s: &str) -> Result<(), String> {
    let bytes = s.as_bytes();
    let edge_ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let well_formed = (3..=32).contains(&bytes.len())
        && edge_ok(bytes[0])
        && edge_ok(bytes[bytes.len() - 1])
        && bytes.iter().all(|&b| edge_ok(b) || b == b'_' || b == b'-');
    if !well_formed {
        return Err(
            "must be 3 to 32 characters of a-z, 0-9, `_` and `-`, starting and ending with a \
             letter or digit"
                .into(),
        );
    }
    if RESERVED_IDS.contains(&s) {
        return Err("is reserved".into());
    }
    Ok(())
}

/// A colour: `#RGB`, `#RGBA`, `#RRGGBB` or `#RRGGBBAA`.
pub fn color(s: &str) -> Result<(), String> {
    match s.strip_prefix('#') {
        Some(hex)
            if matches!(hex.len(), 3 | 4 | 6 | 8) && hex.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            Ok(())
        }
        _ => Err("must be a hex colour: #RGB, #RGBA, #RRGGBB or #RRGGBBAA".into()),
    }
}

/// An environment variable's name as shells take it: `^[A-Z_][A-Z0-9_]{0,63}$`.
pub fn env_var_key(s: &str) -> Result<(), String> {
    let bytes = s.as_bytes();
    let ok = (1..=64).contains(&bytes.len())
        && (bytes[0].is_ascii_uppercase() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|&b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err("must be 1 to 64 characters of A-Z, 0-9 and `_`, not starting with a digit".into())
    }
}

/// The variable the agent token is delivered under: the service id in upper case with `-` as
/// `_`, then `_GATE_AGENT_TOKEN` (`acme-cli` gives `ACME_CLI_GATE_AGENT_TOKEN`).
pub fn agent_token_variable(service_id: &str) -> String {
    format!(
        "{}{AGENT_TOKEN_SUFFIX}",
        service_id.to_ascii_uppercase().replace('-', "_")
    )
}

/// How every agent token's variable name ends; no service may declare a variable of its own
/// that does.
pub const AGENT_TOKEN_SUFFIX: &str = "_GATE_AGENT_TOKEN";

/// The form of a service id two services may not share: `-` and `_` alike, since both become
/// `_` in the agent token's variable (`acme-cli` and `acme_cli` would fill one `.env` line).
pub fn service_id_claim(service_id: &str) -> String {
    service_id.replace('_', "-")
}

// A Gate service's branding as reads show it (docs/gate.md). The store keeps its own type; the
// bodies that write it, and the other nested members, are Gate's (`gate/src/services.rs`).

/// A service's branding as reads show it: each member left out when unset.
#[derive(utoipa::ToSchema)]
#[schema(as = GateBranding)]
#[allow(dead_code)] // described; the answer serializes the stored `GateBranding`
pub struct BrandingDoc {
    #[schema(nullable = false)]
    logo_url: Option<String>,
    #[schema(nullable = false)]
    primary_color: Option<String>,
    #[schema(nullable = false)]
    secondary_color: Option<String>,
    #[schema(nullable = false)]
    ascii_art: Option<String>,
    /// Set by Vigil only.
    verified: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_follow_the_slug_rules_and_reserved_ones_are_refused() {
        for ok in ["acme", "acme-cli", "a_1", "abc", &"a".repeat(32)] {
            assert!(service_id(ok).is_ok(), "{ok}");
        }
        for bad in [
            "ab",
            "-acme",
            "acme-",
            "Acme",
            "ac me",
            "acmé",
            &"a".repeat(33),
            "",
            "_ab",
        ] {
            assert!(service_id(bad).is_err(), "{bad}");
        }
        for reserved in ["gate", "vigil", "webhooks", "api", "system"] {
            assert_eq!(service_id(reserved), Err("is reserved".into()));
        }
    }

    #[test]
    fn tokens_carry_their_kind_and_a_checksum() {
        let t = mint(TokenKind::Agent);
        assert!(t.starts_with("agt_") && t.len() == 4 + 46, "{t}");
        assert!(well_formed(TokenKind::Agent, &t));
        assert!(!well_formed(TokenKind::Poll, &t));
        assert_eq!(TokenKind::of(&t), Some(TokenKind::Agent));
        let mut typo = t.clone().into_bytes();
        typo[10] = if typo[10] == b'a' { b'b' } else { b'a' };
        assert!(!well_formed(
            TokenKind::Agent,
            &String::from_utf8(typo).unwrap()
        ));
        assert_ne!(mint(TokenKind::Poll), mint(TokenKind::Poll));
    }

    #[test]
    fn colours_and_variable_names() {
        for ok in ["#fff", "#ffff", "#A0b1C2", "#a0b1c2d3"] {
            assert!(color(ok).is_ok(), "{ok}");
        }
        for bad in ["fff", "#ff", "#fffff", "#ggg", "#a0b1c2d3e", "red"] {
            assert!(color(bad).is_err(), "{bad}");
        }
        assert!(env_var_key("ACME_API_KEY").is_ok());
        assert!(env_var_key("_X").is_ok());
        for bad in ["acme", "1X", "A-B", ""] {
            assert!(env_var_key(bad).is_err(), "{bad}");
        }
        assert_eq!(
            agent_token_variable("acme-cli"),
            "ACME_CLI_GATE_AGENT_TOKEN"
        );
    }

    #[test]
    fn user_codes_are_shown_grouped_and_typed_loosely() {
        let code = mint_user_code();
        assert_eq!(code.len(), USER_CODE_CHARS + 1, "{code}");
        assert_eq!(&code[4..5], "-");
        let plain = normalize_user_code(&code).expect("a minted code reads back");
        assert_eq!(plain, code.replace('-', ""));
        assert_eq!(
            normalize_user_code("wdjb mjht").as_deref(),
            Some("WDJBMJHT")
        );
        assert_eq!(
            normalize_user_code(" WDJB-MJHT ").as_deref(),
            Some("WDJBMJHT")
        );
        // Too short or too long, a vowel or a digit (never in a code): not a code at all.
        for bad in [
            "WDJB-MJH",
            "WDJB-MJHTX",
            "WDJA-MJHT",
            "WDJ0-MJHT",
            "",
            "WDJB\u{202e}MJHT",
        ] {
            assert_eq!(normalize_user_code(bad), None, "{bad}");
        }
        assert_ne!(mint_user_code(), mint_user_code());
    }
}

/// Which flow a Gate session runs.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum GateFlow {
    Signup,
    Login,
}

/// Why a Gate session was denied (the `gate.session.denied` event says the same).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum GateDenialReason {
    /// A person pressed Deny.
    Denied,
    /// Vigil judged the consent page's browser automated: a session gets one judgement.
    Automated,
    /// Vigil could not tell a person through every try the session allows (an `uncertain`
    /// judgement, or none of the person's input on the code field and the Approve button).
    Uncertain,
    /// Every user code attempt the session allows was spent on wrong codes.
    UserCode,
}
