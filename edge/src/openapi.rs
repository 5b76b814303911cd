//! What every route's part of the OpenAPI document shares (docs/api.md#openapi): the error
//! answers each kind of caller can meet, as `IntoResponses` for a handler's
//! `#[utoipa::path(responses(...))]`, and the names of the security schemes.

use schemas::error::ErrorEnvelope;

/// The security scheme of secret keys (`sk_live_…`, `sk_test_…`); a route's requirement names
/// the scope it needs.
pub const SECRET_KEY: &str = "secret_key";
/// The security scheme of publishable keys (`pk_live_…`, `pk_test_…`).
pub const PUBLISHABLE_KEY: &str = "publishable_key";

/// A binary body (an Arrow IPC stream), as the document describes one: a string of bytes.
pub struct Binary;

impl utoipa::PartialSchema for Binary {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, SchemaFormat, Type};
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
            .into()
    }
}

impl utoipa::ToSchema for Binary {}

/// The paging parameters of every list route (docs/api.md#conventions).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Rows per page; 50 when omitted.
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the page before.
    pub cursor: Option<String>,
}

/// What any route called with a secret key may answer besides its own outcomes.
#[derive(utoipa::IntoResponses)]
pub enum SecretKeyErrors {
    /// `auth.*`: no key, or one that is unknown, revoked, expired or of the wrong kind.
    #[response(status = 401)]
    Unauthenticated(#[to_schema] ErrorEnvelope),
    /// The key lacks the route's scope, its environment may not do this, or its organization
    /// is suspended.
    #[response(status = 403)]
    Forbidden(#[to_schema] ErrorEnvelope),
    /// The key's bucket is empty: retry after `Retry-After` seconds.
    #[response(status = 429)]
    RateLimited(#[to_schema] ErrorEnvelope),
    /// An internal error (logged with the request id) or the store unavailable (503).
    #[response(status = "5XX")]
    ServerError(#[to_schema] ErrorEnvelope),
}

/// What a route with a JSON body may answer for a body it cannot take.
#[derive(utoipa::IntoResponses)]
pub enum BodyErrors {
    /// `request.malformed`: the body does not parse as JSON.
    #[response(status = 400)]
    Malformed(#[to_schema] ErrorEnvelope),
    /// `request.too_large`.
    #[response(status = 413)]
    TooLarge(#[to_schema] ErrorEnvelope),
    /// `request.unsupported_media_type`: not `application/json`.
    #[response(status = 415)]
    UnsupportedMediaType(#[to_schema] ErrorEnvelope),
    /// `request.validation_failed`, with `details.fields`.
    #[response(status = 422)]
    ValidationFailed(#[to_schema] ErrorEnvelope),
}
