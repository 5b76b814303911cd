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

/// The OpenAPI document's patterns of the rules below. They are literals in the handlers'
/// `#[schema(pattern = ...)]`, which takes no constants, and `tests/it/openapi.rs` compares
/// those with these. The text patterns are exactly their rule (the tests check both ways); the
/// URI patterns admit every URI their rule accepts in its usual spelling and leave the finer
/// points (a host that parses, a port in range) to the rule, so that no client refuses what
/// the server would take.
///
/// Text on one line ([`shown_text`] without `multiline`): no control or bidirectional
/// formatting characters.
pub const SHOWN_LINE_PATTERN: &str =
    "^[^\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$";
/// Text of several lines ([`shown_text`] with `multiline`): line breaks and tabs allowed.
pub const SHOWN_TEXT_PATTERN: &str = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$";
/// Text of several lines with something besides white space in it.
pub const SHOWN_NONBLANK_PATTERN: &str = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069\\s][^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$";
/// An [`origin`] as the document gives it: a scheme, an authority without credentials, and at
/// most a `/`.
pub const ORIGIN_PATTERN: &str = "^https?://[^/?#@\\s]+/?$";
/// An [`http_uri`] as the document gives it.
pub const HTTP_URI_PATTERN: &str = "^https?://[^/?#\\s]+(?:[/?#]\\S*)?$";
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

/// A stored display name (an organization's, an API key's, a webhook endpoint's, a Gate
/// service's and its SDKs' labels and variables): 1 to [`NAME_MAX_CHARS`] characters of
/// [`shown_text`] on one line. Other parties read some of them (every organization reads the
/// Gate registry), so the rule that keeps text reading as it is holds for every one; its
/// pattern is [`SHOWN_LINE_PATTERN`].
pub fn name(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.chars().count() > NAME_MAX_CHARS {
        return Err(format!("must be at most {NAME_MAX_CHARS} characters"));
    }
    shown_text(s, false)
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
        for shown_otherwise in [
            "pay\u{202e}gpj.exe",
            "a\u{2066}b",
            "x\u{200f}",
            "\u{61c}",
            "line\nbreak",
            "\u{85}",
            "nul\0",
        ] {
            assert!(name(shown_otherwise).is_err(), "{shown_otherwise:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The text patterns are exactly their rule: what each generates, the rule accepts.
        #[test]
        fn what_the_text_patterns_generate_the_rules_accept(
            line in proptest::string::string_regex(SHOWN_LINE_PATTERN.trim_matches(['^', '$'])).unwrap(),
            text in proptest::string::string_regex(SHOWN_TEXT_PATTERN.trim_matches(['^', '$'])).unwrap(),
            nonblank in proptest::string::string_regex(SHOWN_NONBLANK_PATTERN.trim_matches(['^', '$'])).unwrap(),
        ) {
            prop_assert!(shown_text(&line, false).is_ok(), "{line:?}");
            prop_assert!(shown_text(&text, true).is_ok(), "{text:?}");
            prop_assert!(shown_text(&nonblank, true).is_ok() && !nonblank.trim().is_empty(), "{nonblank:?}");
        }

        /// ... and what each rule accepts, its pattern matches.
        #[test]
        fn what_the_text_rules_accept_the_patterns_match(s in "\\PC{0,20}[\\n\\t\\u{202e}\\u{7f}]?\\PC{0,5}") {
            let matches = |pattern: &str| regex::Regex::new(pattern).unwrap().is_match(&s);
            prop_assert_eq!(shown_text(&s, false).is_ok(), matches(SHOWN_LINE_PATTERN), "{:?}", s);
            prop_assert_eq!(shown_text(&s, true).is_ok(), matches(SHOWN_TEXT_PATTERN), "{:?}", s);
            prop_assert_eq!(
                shown_text(&s, true).is_ok() && !s.trim().is_empty(),
                matches(SHOWN_NONBLANK_PATTERN),
                "{:?}", s
            );
        }

        /// Every origin and URI the rules accept in its usual spelling, the patterns match.
        #[test]
        fn what_the_uri_rules_accept_the_patterns_match(
            host in "[a-z][a-z0-9-]{0,10}(\\.[a-z]{2,5}){0,2}|[0-9]{1,3}(\\.[0-9]{1,3}){3}|\\[::1\\]|[A-Z][a-zA-Z]{0,8}\\.Example",
            port in proptest::option::of(1u16..),
            rest in "(/[a-zA-Z0-9@%+~._-]{0,8}){0,3}(\\?[a-z]{1,4}=[a-zA-Z0-9@%+]{0,6})?(#[a-z]{0,5})?",
        ) {
            let origin_text = match port {
                Some(port) => format!("https://{host}:{port}"),
                None => format!("http://{host}"),
            };
            let uri = format!("{origin_text}{rest}");
            let matches = |pattern: &str, s: &str| regex::Regex::new(pattern).unwrap().is_match(s);
            if origin(&origin_text).is_ok() {
                prop_assert!(matches(ORIGIN_PATTERN, &origin_text), "{:?}", origin_text);
            }
            if http_uri(&uri).is_ok() {
                prop_assert!(matches(HTTP_URI_PATTERN, &uri), "{:?}", uri);
            }
        }
    }

    #[test]
    fn common_origins_and_uris_match_their_patterns() {
        let matches = |pattern: &str, s: &str| regex::Regex::new(pattern).unwrap().is_match(s);
        for o in [
            "http://localhost:3000",
            "http://localhost:3000/",
            "http://127.0.0.1:8080",
            "http://[::1]:8080",
            "https://Shop.Example",
            "https://a.example:443",
        ] {
            assert!(origin(o).is_ok() && matches(ORIGIN_PATTERN, o), "{o}");
        }
        for u in [
            "https://www.npmjs.com/package/@acme/cli",
            "https://a.example/terms?lang=en",
            "https://a.example/docs#install",
            "http://127.0.0.1:9/hook",
        ] {
            assert!(http_uri(u).is_ok() && matches(HTTP_URI_PATTERN, u), "{u}");
        }
    }

    proptest! {
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
