//! `GET /sdk/v1/vigil.js`: the browser SDK (`ingest/sdk/vigil.js`), served as a plain script.
//! The path carries the protocol version, so the script may be cached; any page may load it.

use axum::http::header;
use axum::response::{IntoResponse, Response};

pub const SCRIPT: &str = include_str!("../sdk/vigil.js");

pub async fn script() -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                "application/javascript; charset=utf-8",
            ),
            (header::CACHE_CONTROL, "public, max-age=300"),
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
        ],
        SCRIPT,
    )
        .into_response()
}
