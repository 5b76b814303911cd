//! Secrets out of logs (docs/architecture.md#secrets-in-logs): a backend URL (store, log, limiter)
//! is shown with its user-info's password and every secret-looking query member replaced by `***`,
//! so it can be logged or put in an error message whole. Kafka SASL credentials travel both ways
//! (`kafka://user:pw@…` and `?sasl.password=…`), and so do Redis passwords and cloud tokens.

use std::borrow::Cow;

/// What a redacted secret reads as.
pub const REDACTED: &str = "***";

/// Whether a query member or client property of this name holds a secret: a password, secret,
/// token, key or credential, by any of the usual spellings (`sasl.password`, `ssl.key.pem`,
/// `client_secret`, `accessToken`, `api-key`, `sig`). Errs towards hiding: `ssl.key.location`
/// (a path) is hidden too.
pub fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    // Substrings catch compounds written without separators (`accesstoken`, `apikey`).
    const WITHIN: &[&str] = &[
        "pass",
        "pwd",
        "secret",
        "token",
        "apikey",
        "credential",
        "private",
    ];
    // Whole words only: as substrings they would hide `keyspace`, `signal` or `author`.
    const WORDS: &[&str] = &["pw", "key", "pem", "sig", "signature", "auth", "jaas"];
    WITHIN.iter().any(|w| name.contains(w))
        || name
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|word| WORDS.contains(&word))
}

/// The URL with its password (or a user-info without one, which is often a token) and its
/// secret query members replaced by `***`. A string without a scheme comes back unchanged.
///
/// Not `Url::parse`: host lists (`kafka://a:9092,b:9092`) are no URL to it, and a malformed URL
/// (a password holding an unencoded `/`, `?` or `@`) would be read differently from what the
/// operator meant, half-showing the password. So the rule is the cautious one: everything
/// between the scheme and the last `@` is user-info, and after it every `name=value` member
/// (separated by `?`, `&`, `;` or `#`) whose name looks secret is hidden.
pub fn redact_url(url: &str) -> String {
    let Some(authority) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let (head, body) = url.split_at(authority);
    let mut out = String::from(head);
    let rest = match body.rfind('@') {
        Some(at) => {
            match body[..at].split_once(':') {
                Some((user, _)) if !user.contains(['/', '?', '#', '&', '=']) => {
                    out.push_str(user);
                    out.push(':');
                }
                _ => {}
            }
            out.push_str(REDACTED);
            &body[at..]
        }
        None => body,
    };
    for piece in rest.split_inclusive(['?', '&', ';', '#']) {
        let (member, separator) = match piece.char_indices().last() {
            Some((i, '?' | '&' | ';' | '#')) => piece.split_at(i),
            _ => (piece, ""),
        };
        out.push_str(&redact_member(member));
        out.push_str(separator);
    }
    out
}

/// `sasl.password=x` → `sasl.password=***`; other members as written. The name is compared
/// decoded, so `sasl%2Epassword` is caught too.
fn redact_member(member: &str) -> Cow<'_, str> {
    let Some((raw_name, value)) = member.split_once('=') else {
        return Cow::Borrowed(member);
    };
    let name = url::form_urlencoded::parse(raw_name.as_bytes())
        .next()
        .map(|(name, _)| name)
        .unwrap_or_default();
    if is_secret_name(&name) && !value.is_empty() {
        Cow::Owned(format!("{raw_name}={REDACTED}"))
    } else {
        Cow::Borrowed(member)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_user_info_are_hidden() {
        for (url, shown) in [
            ("redis://:hunter2@cache:6379/0", "redis://:***@cache:6379/0"),
            (
                "redis://app:hunter2@cache:6379",
                "redis://app:***@cache:6379",
            ),
            ("rediss://hunter2@cache", "rediss://***@cache"),
            ("redis://:hunter2@cache", "redis://:***@cache"),
            (
                "kafka://u:hunter2@127.0.0.1:1?linger.ms=5",
                "kafka://u:***@127.0.0.1:1?linger.ms=5",
            ),
            // Host lists are no URL to the url crate; the hand rule still finds the user-info.
            (
                "kafka://u:hunter2@a:9092,b:9092",
                "kafka://u:***@a:9092,b:9092",
            ),
            // A password holding `@`, `/` or `?` unencoded: hidden whole, never half-shown.
            ("redis://:hun@ter/2?x@cache:6379", "redis://:***@cache:6379"),
            // An `@` in a query value hides more than needed, never less.
            (
                "kafka://b:9092?sasl.username=me@corp&sasl.password=hunter2",
                "kafka://b:***@corp&sasl.password=***",
            ),
            (
                "postgres://me:hunter2@db/vigil",
                "postgres://me:***@db/vigil",
            ),
        ] {
            let redacted = redact_url(url);
            assert_eq!(redacted, shown, "{url}");
            assert!(!redacted.contains("hunter2") && !redacted.contains("ter/2"));
        }
    }

    #[test]
    fn secret_query_members_are_hidden_and_the_rest_kept() {
        for (url, shown) in [
            (
                "kafka://a:9092,b:9092?security.protocol=sasl_ssl&sasl.username=u&sasl.password=hunter2",
                "kafka://a:9092,b:9092?security.protocol=sasl_ssl&sasl.username=u&sasl.password=***",
            ),
            (
                "kafka://a:9092?sasl.oauthbearer.client.secret=hunter2&ssl.key.password=hunter2&ssl.key.pem=hunter2",
                "kafka://a:9092?sasl.oauthbearer.client.secret=***&ssl.key.password=***&ssl.key.pem=***",
            ),
            (
                "redis://cache:6379/0?password=hunter2&protocol=resp3",
                "redis://cache:6379/0?password=***&protocol=resp3",
            ),
            (
                "https://h.example/x?token=hunter2&client_secret=hunter2&api_key=hunter2&sig=hunter2",
                "https://h.example/x?token=***&client_secret=***&api_key=***&sig=***",
            ),
            (
                "https://h.example/x?accessToken=hunter2&keyspace=vigil",
                "https://h.example/x?accessToken=***&keyspace=vigil",
            ),
            // Encoded names are compared decoded.
            (
                "kafka://a:9092,b:9092?sasl%2Epassword=hunter2",
                "kafka://a:9092,b:9092?sasl%2Epassword=***",
            ),
            (
                "https://h.example/#access_token=hunter2",
                "https://h.example/#access_token=***",
            ),
        ] {
            let redacted = redact_url(url);
            assert_eq!(redacted, shown, "{url}");
            assert!(!redacted.contains("hunter2"));
        }
    }

    #[test]
    fn urls_without_secrets_are_unchanged() {
        for url in [
            "local",
            "embedded:/var/lib/vigil/store",
            "embedded",
            "kafka://a:9092,b:9092",
            "kafka://a:9092?linger.ms=5&acks=all",
            "redis://cache:6379",
            "scylla://a:9042,b:9042/vigil",
        ] {
            assert_eq!(redact_url(url), url);
        }
    }

    #[test]
    fn secret_names() {
        for name in [
            "password",
            "sasl.password",
            "ssl.keystore.password",
            "client_secret",
            "token",
            "access-token",
            "api_key",
            "apiKey",
            "sig",
            "auth",
            "sasl.jaas.config",
            "passphrase",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in [
            "sasl.username",
            "security.protocol",
            "linger.ms",
            "keyspace",
            "signal",
            "author",
        ] {
            assert!(!is_secret_name(name), "{name}");
        }
    }
}
