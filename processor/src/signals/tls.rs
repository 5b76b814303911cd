//! `tls_client_mismatch` (docs/detection.md#transport-identity): the user agent claims a
//! browser whose TLS stack the connection's ClientHello contradicts. Judged by the hello's
//! structure, which a library's stack cannot help showing, not by a list of known hashes that
//! each browser release changes: Chromium and Safari always send GREASE values and Firefox never
//! does; Chromium offers `h2` first, a short cipher list (15 or 16; OpenSSL's defaults offer 30
//! and more) and certificate compression (extension 27); Firefox offers `record_size_limit`
//! (extension 28). What a proxy passed as a bare JA4 is judged on what JA4 shows (the counts and
//! the ALPN); GREASE and the extension list need Vigil's own listener.

use serde_json::json;

use super::Fired;
use crate::observations::ServerContext;
use crate::user_agent::{ClaimedBrowser, Engine, Os};

/// The most ciphers a Chromium offers (15 without GREASE since Chrome 83).
const CHROMIUM_MOST_CIPHERS: usize = 20;
const COMPRESS_CERTIFICATE: &str = "001b";
const RECORD_SIZE_LIMIT: &str = "001c";

/// What a JA4 (and its raw form, when the listener made it) shows of a hello.
struct Shape<'a> {
    ciphers: usize,
    alpn: &'a str,
    /// The extensions offered, from the raw form.
    extensions: Option<Vec<&'a str>>,
}

impl<'a> Shape<'a> {
    fn of(ja4: &'a str, ja4_r: Option<&'a str>) -> Option<Self> {
        let a = ja4.split('_').next()?;
        if a.len() != 10 || !a.is_ascii() {
            return None;
        }
        Some(Shape {
            ciphers: a[4..6].parse().ok()?,
            alpn: &a[8..10],
            extensions: ja4_r
                .and_then(|r| r.split('_').nth(2))
                .map(|list| list.split(',').collect()),
        })
    }

    fn offers(&self, extension: &str) -> Option<bool> {
        self.extensions.as_ref().map(|e| e.contains(&extension))
    }
}

pub(super) fn detect(context: &ServerContext, claimed: &ClaimedBrowser, fired: &mut Fired) {
    let Some(tls) = &context.request.tls else {
        return;
    };
    let Some(shape) = tls
        .ja4
        .as_deref()
        .and_then(|ja4| Shape::of(ja4, tls.ja4_r.as_deref()))
    else {
        return;
    };
    let mut contradictions = Vec::new();
    match claimed.engine {
        // Every Chromium of the last five years: GREASE since 55, h2 since 51, certificate
        // compression since 70.
        Engine::Blink if claimed.major.is_some_and(|m| m >= 70) => {
            if tls.greased == Some(false) {
                contradictions.push("no GREASE, which Chromium always sends");
            }
            if shape.alpn != "h2" {
                contradictions.push("h2 not offered first, as Chromium offers it");
            }
            if shape.ciphers > CHROMIUM_MOST_CIPHERS {
                contradictions.push("more ciphers than Chromium offers");
            }
            if shape.offers(COMPRESS_CERTIFICATE) == Some(false) {
                contradictions.push("no certificate compression, which Chromium always offers");
            }
        }
        Engine::Gecko if claimed.major.is_some_and(|m| m >= 65) => {
            if tls.greased == Some(true) {
                contradictions.push("GREASE, which Firefox never sends");
            }
            if shape.offers(RECORD_SIZE_LIMIT) == Some(false) {
                contradictions.push("no record_size_limit, which Firefox always offers");
            }
        }
        // Safari's stack (Apple's): other WebKit browsers (GNOME Web over GnuTLS) send none.
        Engine::WebKit
            if matches!(claimed.os, Os::MacOs | Os::Ios) && tls.greased == Some(false) =>
        {
            contradictions.push("no GREASE, which Safari always sends");
        }
        _ => {}
    }
    if !contradictions.is_empty() {
        fired.fire(
            "tls_client_mismatch",
            json!({
                "claimed_engine": claimed.engine,
                "ja4": tls.ja4,
                "contradictions": contradictions,
            }),
        );
    }
}
