//! Field rules of the interface that are shared by request validation and the store: slugs,
//! names and origins. Each returns the issue text that goes into `details.fields[].issue`.

use url::Url;

/// `^[a-z0-9]+(?:-[a-z0-9]+)*$`, the interface's organization slug pattern.
pub const SLUG_PATTERN: &str = "^[a-z0-9]+(?:-[a-z0-9]+)*$";
/// Not in the interface; a bound so a slug stays usable in URLs and logs.
pub const SLUG_MAX_LEN: usize = 100;
/// Not in the interface; a bound on names so one request cannot store megabytes of text.
pub const NAME_MAX_CHARS: usize = 200;
/// Not in the interface; a bound on `allowed_origins`.
pub const ORIGINS_MAX: usize = 100;

/// The OpenAPI document's patterns of the rules below, each a subset of what its rule accepts
/// (the tests generate strings from each and check them). They are literals in the handlers'
/// `#[schema(pattern = ...)]`, which takes no constants, and `tests/it/openapi.rs` compares
/// those with these.
///
/// Text on one line ([`shown_text`] without `multiline`): no control or bidirectional
/// formatting characters.
pub const SHOWN_LINE_PATTERN: &str =
    "^[^\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$";
/// Text of several lines ([`shown_text`] with `multiline`): line breaks and tabs allowed.
pub const SHOWN_TEXT_PATTERN: &str = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$";
/// Text of several lines with something besides white space in it.
pub const SHOWN_NONBLANK_PATTERN: &str = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069\\s][^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$";
/// An [`origin`] as the document gives it: a host name whose last label starts with a letter
/// (so that it is never read as an IPv4 address) and an optional port.
pub const ORIGIN_PATTERN: &str = "^https?://(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\\.)*[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?(?::(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?$";
/// An [`http_uri`] as the document gives it: an origin and a plain path.
pub const HTTP_URI_PATTERN: &str = "^https?://(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\\.)*[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?(?::(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?(?:/[A-Za-z0-9._~/-]*)?$";
/// The longest URI [`http_uri`] takes.
pub const HTTP_URI_MAX_BYTES: usize = 2048;

/// An absolute `http` or `https` URI with a host, of at most [`HTTP_URI_MAX_BYTES`].
pub fn http_uri(s: &str) -> Result<(), String> {
    if s.len() > HTTP_URI_MAX_BYTES {
        return Err(format!("must be at most {HTTP_URI_MAX_BYTES} bytes"));
    }
    let url = Url::parse(s).map_err(|e| format!("must be an absolute URI ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err("must be an http or https URI with a host".into());
    }
    Ok(())
}

pub fn slug(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > SLUG_MAX_LEN {
        return Err(format!("must be at most {SLUG_MAX_LEN} characters"));
    }
    let well_formed = s.split('-').all(|part| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    });
    if well_formed {
        Ok(())
    } else {
        Err(format!("must match {SLUG_PATTERN}"))
    }
}

/// Text a person is shown (a name, a description): no control characters (line breaks and tabs
/// only where `multiline`) and no bidirectional formatting characters, which make text read
/// otherwise than it is (U+202E turns the rest of its line around, so `exe.txt` can show as
/// `txt.exe`).
pub fn shown_text(s: &str, multiline: bool) -> Result<(), String> {
    let bidi = |c: char| matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    match s
        .chars()
        .find(|&c| bidi(c) || (c.is_control() && !(multiline && matches!(c, '\n' | '\r' | '\t'))))
    {
        Some(c) => Err(format!(
            "must not contain control or bidirectional formatting characters (found U+{:04X})",
            u32::from(c)
        )),
        None => Ok(()),
    }
}

pub fn name(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.chars().count() > NAME_MAX_CHARS {
        return Err(format!("must be at most {NAME_MAX_CHARS} characters"));
    }
    Ok(())
}

/// An allowed origin: an absolute `http` or `https` URI with a host and nothing after it but
/// an optional `/`. Returns the origin in the form browsers send in the `Origin` header.
pub fn origin(s: &str) -> Result<String, String> {
    let url = Url::parse(s).map_err(|e| format!("must be an absolute URI ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("scheme must be http or https".into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("must have a host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry credentials".into());
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(
            "must be an origin: scheme, host and optional port, with no path, query or fragment"
                .into(),
        );
    }
    Ok(url.origin().ascii_serialization())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn slugs() {
        for ok in ["a", "acme", "acme-corp", "a1-b2-c3", "123"] {
            assert!(slug(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "a-", "a--b", "Acme", "a_b", "a b", "é"] {
            assert!(slug(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn origins_normalise_to_the_header_form() {
        assert_eq!(
            origin("https://Shop.Example").unwrap(),
            "https://shop.example"
        );
        assert_eq!(
            origin("http://localhost:3000/").unwrap(),
            "http://localhost:3000"
        );
        assert_eq!(
            origin("https://a.example:443").unwrap(),
            "https://a.example"
        );
        for bad in [
            "shop.example",
            "ftp://a.example",
            "https://a.example/path",
            "https://u:p@a.example",
            "https://a.example/?q",
            "*",
        ] {
            assert!(origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names() {
        assert!(name("x").is_ok());
        assert!(name("").is_err());
        assert!(
            name(" ").is_ok(),
            "the interface asks for length 1, nothing more"
        );
        assert!(name(&"n".repeat(201)).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn what_the_documented_patterns_generate_the_rules_accept(
            line in proptest::string::string_regex(SHOWN_LINE_PATTERN.trim_matches(['^', '$'])).unwrap(),
            text in proptest::string::string_regex(SHOWN_TEXT_PATTERN.trim_matches(['^', '$'])).unwrap(),
            nonblank in proptest::string::string_regex(SHOWN_NONBLANK_PATTERN.trim_matches(['^', '$'])).unwrap(),
            origin_text in proptest::string::string_regex(ORIGIN_PATTERN.trim_matches(['^', '$'])).unwrap(),
            uri in proptest::string::string_regex(HTTP_URI_PATTERN.trim_matches(['^', '$'])).unwrap(),
        ) {
            prop_assert!(shown_text(&line, false).is_ok(), "{line:?}");
            prop_assert!(shown_text(&text, true).is_ok(), "{text:?}");
            prop_assert!(shown_text(&nonblank, true).is_ok() && !nonblank.trim().is_empty(), "{nonblank:?}");
            prop_assert!(origin(&origin_text).is_ok(), "{origin_text:?}");
            prop_assert!(uri.len() > HTTP_URI_MAX_BYTES || http_uri(&uri).is_ok(), "{uri:?}");
        }

        #[test]
        fn slug_matches_its_pattern(s in "[a-z0-9-]{1,30}") {
            let by_hand = !s.starts_with('-') && !s.ends_with('-') && !s.contains("--");
            prop_assert_eq!(slug(&s).is_ok(), by_hand);
        }

        #[test]
        fn slug_rejects_anything_outside_the_alphabet(s in "[a-z]{0,5}[^a-z0-9-][a-z]{0,5}") {
            prop_assert!(slug(&s).is_err());
        }

        #[test]
        fn generated_origins_are_accepted(host in "[a-z][a-z0-9]{0,10}(\\.[a-z]{2,5}){1,2}", port in proptest::option::of(1u16..65535), tls in any::<bool>()) {
            let scheme = if tls { "https" } else { "http" };
            let s = match port { Some(p) => format!("{scheme}://{host}:{p}"), None => format!("{scheme}://{host}") };
            let normal = origin(&s).unwrap();
            prop_assert!(normal.starts_with(scheme));
            // Normalising twice changes nothing.
            prop_assert_eq!(origin(&normal).unwrap(), normal);
        }

        #[test]
        fn origin_never_panics(s in "\\PC{0,60}") {
            let _ = origin(&s);
        }
    }
}
