//! The browser SDK (`ingest/sdk/vigil.js`) as pages load it, at two addresses:
//!
//! - `GET /sdk/v1/vigil.js`: the current script, cached for five minutes, so a page that links
//!   it picks up a new release soon after the server has it;
//! - `GET /sdk/v1/{version}/vigil.js`: this build's script under its version, immutable and
//!   cached for a year; any other version is a 404. `ingest/sdk/RELEASES` pins each version's
//!   digest, so a changed script without a new version fails the tests.
//!
//! Both carry a strong `ETag` (a conditional request with it answers 304) and are sent with
//! brotli or gzip when the client accepts it. The three encodings are made once, at first use
//! ([`warm`] runs it at startup), never per request.

use std::io::Write;
use std::sync::LazyLock;

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

pub const SCRIPT: &str = include_str!("../sdk/vigil.js");

/// The `SDK_VERSION` the script declares.
pub fn version() -> &'static str {
    static VERSION: LazyLock<&'static str> = LazyLock::new(|| {
        let start = SCRIPT
            .find("const SDK_VERSION = '")
            .expect("vigil.js declares SDK_VERSION")
            + "const SDK_VERSION = '".len();
        let len = SCRIPT[start..].find('\'').expect("a closing quote");
        &SCRIPT[start..start + len]
    });
    &VERSION
}

/// Hex SHA-256 of the script: what `ingest/sdk/RELEASES` pins for its version.
pub fn digest() -> String {
    hex::encode(Sha256::digest(SCRIPT.as_bytes()))
}

/// The path of the immutable copy.
pub fn versioned_path() -> String {
    format!("/sdk/v1/{}/vigil.js", version())
}

/// One content coding of the script.
struct Encoded {
    coding: Option<&'static str>,
    /// Shared, so a response takes a reference rather than a copy of the script.
    body: Bytes,
    etag: HeaderValue,
}

struct Asset {
    /// Best first: brotli, gzip, identity.
    encodings: [Encoded; 3],
}

static ASSET: LazyLock<Asset> = LazyLock::new(|| {
    let plain = SCRIPT.as_bytes();
    let tag = &digest()[..20];
    let etag = |suffix: &str| HeaderValue::try_from(format!("\"{tag}{suffix}\"")).expect("ascii");
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gzip.write_all(plain).expect("in memory");
    let gzip = gzip.finish().expect("in memory");
    let mut brotli = Vec::new();
    {
        // Quality 11 and a 4 MiB window: the smallest output, paid once.
        let mut writer = brotli::CompressorWriter::new(&mut brotli, 4096, 11, 22);
        writer.write_all(plain).expect("in memory");
    }
    Asset {
        encodings: [
            Encoded {
                coding: Some("br"),
                body: Bytes::from(brotli),
                etag: etag("-br"),
            },
            Encoded {
                coding: Some("gzip"),
                body: Bytes::from(gzip),
                etag: etag("-gzip"),
            },
            Encoded {
                coding: None,
                body: Bytes::from_static(plain),
                etag: etag(""),
            },
        ],
    }
});

/// Compresses the script now, so the first page to load it does not wait for brotli.
pub fn warm() {
    LazyLock::force(&ASSET);
}

/// Bytes of each encoding, identity first: `(identity, gzip, brotli)`.
pub fn sizes() -> (usize, usize, usize) {
    let [br, gzip, plain] = &ASSET.encodings;
    (plain.body.len(), gzip.body.len(), br.body.len())
}

/// Whether `Accept-Encoding` accepts `coding` (a q of 0 refuses it; `*` stands for any).
fn accepts(headers: &HeaderMap, coding: &str) -> bool {
    let mut star = None;
    for value in headers.get_all(header::ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else { continue };
        for item in value.split(',') {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or_default().trim();
            let q = parts
                .find_map(|p| p.trim().strip_prefix("q="))
                .and_then(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            if name.eq_ignore_ascii_case(coding) {
                return q > 0.0;
            }
            if name == "*" {
                star = Some(q > 0.0);
            }
        }
    }
    star.unwrap_or(false)
}

fn respond(headers: &HeaderMap, cache_control: &'static str) -> Response {
    let chosen = ASSET
        .encodings
        .iter()
        .find(|e| e.coding.is_none_or(|c| accepts(headers, c)))
        .expect("identity is always acceptable");
    let mut response = if if_none_match(headers, &chosen.etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        chosen.body.clone().into_response()
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/javascript; charset=utf-8"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(cache_control),
    );
    h.insert(header::ETAG, chosen.etag.clone());
    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    if let Some(coding) = chosen.coding {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static(coding));
    }
    response
}

/// `If-None-Match` names this representation (or is `*`).
fn if_none_match(headers: &HeaderMap, etag: &HeaderValue) -> bool {
    let etag = etag.to_str().unwrap_or_default();
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == etag || t == "*")
}

/// `GET /sdk/v1/vigil.js`.
pub async fn script(headers: HeaderMap) -> Response {
    let mut response = respond(&headers, "public, max-age=300");
    // Where this release lives for good, for pages that pin it.
    if let Ok(link) = HeaderValue::try_from(format!("<{}>; rel=\"canonical\"", versioned_path())) {
        response.headers_mut().insert(header::LINK, link);
    }
    response
}

/// `GET /sdk/v1/{version}/vigil.js`.
pub async fn versioned_script(Path(requested): Path<String>, headers: HeaderMap) -> Response {
    if requested != version() {
        return edge::error::ApiError::new(
            schemas::ErrorCode::NotFound,
            format!(
                "this server has SDK {} (at {}); version {requested:?} is not served",
                version(),
                versioned_path()
            ),
        )
        .into_response();
    }
    respond(&headers, "public, max-age=31536000, immutable")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn every_encoding_decodes_to_the_script() {
        let [br, gzip, plain] = &ASSET.encodings;
        assert_eq!(plain.body, SCRIPT.as_bytes());
        let mut out = String::new();
        flate2::read::GzDecoder::new(&gzip.body[..])
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, SCRIPT);
        let mut out = String::new();
        brotli::Decompressor::new(&br.body[..], 4096)
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, SCRIPT);
        assert!(br.body.len() < gzip.body.len() && gzip.body.len() < plain.body.len() / 3);
    }

    #[test]
    fn accept_encoding_is_read_with_its_weights() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            h
        };
        assert!(accepts(&with("gzip, deflate, br, zstd"), "br"));
        assert!(accepts(&with("gzip;q=0.5"), "gzip"));
        assert!(!accepts(&with("gzip;q=0, br;q=0"), "gzip"));
        assert!(!accepts(&with("gzip;q=0, br;q=0"), "br"));
        assert!(accepts(&with("*"), "br"));
        assert!(!accepts(&with("identity"), "gzip"));
        assert!(!accepts(&HeaderMap::new(), "gzip"));
    }

    /// A change to vigil.js must come with a new `SDK_VERSION` and its line in RELEASES: the
    /// versioned URL is cached for a year, so one version must never name two scripts.
    #[test]
    fn the_script_is_the_release_its_version_names() {
        let releases = include_str!("../sdk/RELEASES");
        let line = format!("{} {}", version(), digest());
        assert!(
            releases.lines().any(|l| l == line),
            "ingest/sdk/RELEASES has no line {line:?}: vigil.js changed, so give it a new SDK_VERSION and add that line"
        );
    }
}
