//! Gate's shared rules (interface "gate_service", D14): what a service id may be, which ids are
//! reserved, the built-in system service, the per-organization cap, and the formats of the
//! service's colours and environment-variable names.

/// The built-in system service: always present and discoverable, in both environments; no
/// organization owns it, and it counts toward no cap.
pub const SYSTEM_SERVICE_ID: &str = "vigil";

/// Services one organization may have, disabled ones included (the system service is not
/// counted). The interface names the cap per organization, so both environments share it.
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

/// The shortest `webhook_secret` a service may set.
pub const MIN_WEBHOOK_SECRET_CHARS: usize = 32;

/// A service id: 3 to 32 characters of `[a-z0-9_-]`, starting and ending with a letter or
/// digit (`^[a-z0-9](?:[a-z0-9_-]{1,30}[a-z0-9])$`), and not reserved.
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
        "{}_GATE_AGENT_TOKEN",
        service_id.to_ascii_uppercase().replace('-', "_")
    )
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
}
