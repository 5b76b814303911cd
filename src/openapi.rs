//! The OpenAPI 3.1 document of the REST surface (docs/api.md#openapi), served at
//! `GET /v1/openapi.json` without a key and committed as `docs/openapi.json`. It is generated:
//! each described route's `#[utoipa::path]` sits on its handler, its bodies are the handler's
//! own types, and the routers that serve the routes are the ones that list them
//! (`utoipa_axum::OpenApiRouter`), so the document cannot name a route that is not served.
//! This module adds what no handler owns: the title, the security schemes and the shared
//! components.

use std::sync::LazyLock;

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ComponentsBuilder, InfoBuilder, OpenApi, OpenApiBuilder};

/// The document, built once.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    document().to_pretty_json().unwrap_or_else(|e| {
        format!("{{\"error\": \"the OpenAPI document does not serialize: {e}\"}}")
    })
});

/// The whole document: every role's routes, whichever roles this process serves.
pub fn document() -> OpenApi {
    let mut doc = OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("Vigil")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "Fraud signals and agent access: the REST surface of docs/api.md. Errors \
                     share one envelope; each code is described at /docs/errors.",
                ))
                .build(),
        )
        .components(Some(
            ComponentsBuilder::new()
                .security_scheme(
                    edge::openapi::SECRET_KEY,
                    bearer("A secret key (`sk_live_…`, `sk_test_…`), for backends only."),
                )
                .security_scheme(
                    edge::openapi::PUBLISHABLE_KEY,
                    bearer("A publishable key (`pk_live_…`, `pk_test_…`), for pages."),
                )
                .security_scheme(
                    "agent_token",
                    bearer("A Gate agent token (`agt_…`), which a signup delivered to a tool."),
                )
                .security_scheme(
                    "gate_poll_token",
                    bearer("A signup's poll token (`gtpoll_…`), for its own session only."),
                )
                .build(),
        ))
        .build();
    doc.merge(admin_api::openapi());
    doc.merge(query_api::openapi());
    doc.merge(ingest::openapi());
    doc
}

fn bearer(description: &str) -> SecurityScheme {
    SecurityScheme::Http(
        HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(description))
            .build(),
    )
}

/// `GET /v1/openapi.json`.
pub async fn serve() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
        .into_response()
}
