//! Request bodies, path and query parameters, and success envelopes. `JsonObject` turns every
//! malformed body into the documented 400, 413 or 415; `Fields` collects every invalid member
//! into one 422 with `details.fields`, so no handler parses or reports input by hand.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use schemas::ErrorCode;
use schemas::error::FieldIssue;
use schemas::resources::{List, Meta, Pagination, Single};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::context;
use crate::error::ApiError;

/// The type of every answer's body; a static value, so answering copies nothing.
pub const JSON: HeaderValue = HeaderValue::from_static("application/json");

/// A JSON object body, checked for Content-Type, size and syntax.
pub struct JsonObject(pub Map<String, Value>);

impl<S: Send + Sync> FromRequest<S> for JsonObject {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        JsonObject::parse(&json_bytes(req, state).await?)
    }
}

/// A JSON body's bytes, checked for Content-Type and size but not yet parsed.
async fn json_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    let is_json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| {
            let mime = mime.trim();
            mime.eq_ignore_ascii_case("application/json")
                || (mime.starts_with("application/") && mime.ends_with("+json"))
        });
    if !is_json {
        return Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "request bodies must be JSON with `Content-Type: application/json`",
        )
        .with_header_name("Content-Type"));
    }
    Bytes::from_request(req, state)
        .await
        .map_err(|e: BytesRejection| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    ErrorCode::TooLarge,
                    "request body is larger than this route accepts",
                )
            } else {
                ApiError::new(ErrorCode::Malformed, "request body could not be read")
            }
        })
}

impl JsonObject {
    /// The object a body's bytes hold, or the envelope's error for what they hold instead.
    fn parse(bytes: &[u8]) -> Result<Self, ApiError> {
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(map)) => Ok(JsonObject(map)),
            // It parses, so it is not malformed: it is the wrong shape, a validation failure
            // like any other (400 is for bodies that do not parse).
            Ok(other) => Err(ApiError {
                message: "request body must be a JSON object".into(),
                ..ApiError::validation(vec![FieldIssue {
                    name: String::new(),
                    issue: "must be a JSON object".into(),
                    expected: Some("object".into()),
                    received: Some(Value::String(json_type(&other).into())),
                }])
            }),
            Err(e) => Err(ApiError::new(
                ErrorCode::Malformed,
                format!("request body is not valid JSON: {e}"),
            )),
        }
    }
}

/// A request body of its own type (docs/api.md#openapi): it reads its members from the object
/// through [`Fields`], so every problem of the body is reported at once in one 422, and its
/// `ToSchema` gives the OpenAPI document the same members and constraints.
pub trait RequestBody: Sized {
    /// The body from `f`'s members; `None` only when a problem was recorded on `f`.
    fn read(f: &mut Fields) -> Option<Self>;

    /// The body from a JSON object already read: for a handler that must check something
    /// else first (a credential the body does not carry), so that its refusal comes first.
    fn from_object(body: JsonObject) -> Result<Self, ApiError> {
        read_body(body, Self::read)
    }

    /// The body read straight from its bytes without the tree [`Fields`] reads, for a hot
    /// route whose bodies nearly all have one plain shape; `None` sends the body the usual way,
    /// which reports every problem. It accepts only bodies that [`RequestBody::read`] accepts,
    /// and reads them to the same value.
    fn read_plain(_bytes: &[u8]) -> Option<Self> {
        None
    }
}

/// Reads `body` through `read`, which records every problem on the [`Fields`] it is given:
/// one 422 for them all, or the value. For bodies whose reading needs more than the body (the
/// key a PATCH changes, the operator's flags); [`RequestBody`] types go through it too.
pub fn read_body<T>(
    body: JsonObject,
    read: impl FnOnce(&mut Fields) -> Option<T>,
) -> Result<T, ApiError> {
    let mut f = Fields::new(body);
    let value = read(&mut f);
    f.finish()?;
    value
        .ok_or_else(|| ApiError::internal("request body", "a body reader gave up without an issue"))
}

/// A request body read into `T`, every constraint of it checked.
pub struct Valid<T>(pub T);

impl<S: Send + Sync, T: RequestBody> FromRequest<S> for Valid<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = json_bytes(req, state).await?;
        if let Some(plain) = T::read_plain(&bytes) {
            return Ok(Valid(plain));
        }
        T::from_object(JsonObject::parse(&bytes)?).map(Valid)
    }
}

/// The JSON type of a value, as `details.fields[].received` names a body of the wrong shape.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Reads members of a JSON object and gathers every problem, reporting them all at once.
pub struct Fields {
    map: Map<String, Value>,
    issues: Vec<FieldIssue>,
    /// The accepted values of each enum member that failed; `details.allowed_values` names
    /// them only when a single enum member failed, so it is never ambiguous.
    enum_failures: Vec<Vec<String>>,
}

impl Fields {
    pub fn new(body: JsonObject) -> Self {
        Fields {
            map: body.0,
            issues: Vec::new(),
            enum_failures: Vec::new(),
        }
    }

    pub fn issue(
        &mut self,
        name: &str,
        issue: impl Into<String>,
        expected: Option<&str>,
        received: Option<Value>,
    ) {
        let received = match received {
            Some(Value::String(s)) => Some(Value::String(echo_safely(&s))),
            other => other,
        };
        self.issues.push(FieldIssue::new(
            name,
            issue,
            expected.map(Into::into),
            received,
        ));
    }

    pub fn has(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    /// Takes a member as it came, for types the other readers do not cover.
    pub fn take(&mut self, name: &str) -> Option<Value> {
        self.map.remove(name)
    }

    /// Removes a member the client may send but that is never written (such as `rate_limit`).
    pub fn ignore(&mut self, name: &str) {
        self.map.remove(name);
    }

    /// Rejects members that can never be written here, with the reason.
    pub fn forbid(&mut self, name: &str, issue: &str) {
        if let Some(v) = self.map.remove(name) {
            self.issue(name, issue, None, Some(v));
        }
    }

    /// A string member; `None` when absent (reported if `required`) or of the wrong type.
    pub fn string(&mut self, name: &str, required: bool) -> Option<String> {
        match self.map.remove(name) {
            Some(Value::String(s)) => Some(s),
            Some(other) => {
                self.issue(name, "must be a string", Some("string"), Some(other));
                None
            }
            None => {
                if required {
                    self.issue(name, "is required", Some("string"), None);
                }
                None
            }
        }
    }

    /// A string member checked by `rule`, which returns the issue text on failure.
    pub fn checked_string(
        &mut self,
        name: &str,
        required: bool,
        rule: impl Fn(&str) -> Result<(), String>,
    ) -> Option<String> {
        self.parsed_string(name, required, |s| rule(s).map(|()| s.to_owned()))
    }

    /// A string member turned into a `T` by `parse`, which returns the issue text on failure:
    /// for members whose check is the conversion itself (decoding base64, say), done once.
    pub fn parsed_string<T>(
        &mut self,
        name: &str,
        required: bool,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Option<T> {
        let s = self.string(name, required)?;
        match parse(&s) {
            Ok(parsed) => Some(parsed),
            Err(issue) => {
                self.issue(name, issue, None, Some(Value::String(s)));
                None
            }
        }
    }

    /// A string member that must be one of `allowed`.
    pub fn enumerated<T>(
        &mut self,
        name: &str,
        required: bool,
        allowed: &[&str],
        parse: impl Fn(&str) -> Option<T>,
    ) -> Option<T> {
        let s = self.string(name, required)?;
        match parse(&s) {
            Some(v) => Some(v),
            None => {
                let one_of = format!("one of: {}", allowed.join(", "));
                self.issue(
                    name,
                    format!("must be {one_of}"),
                    Some(&one_of),
                    Some(Value::String(s)),
                );
                self.enum_failures
                    .push(allowed.iter().map(|a| a.to_string()).collect());
                None
            }
        }
    }

    /// An array of strings, each checked by `item` (which maps it or returns the issue text).
    /// `Some(vec)` only when the member is present and every item is valid.
    pub fn string_array<T>(
        &mut self,
        name: &str,
        max_items: usize,
        item: impl Fn(&str) -> Result<T, String>,
    ) -> Option<Vec<T>> {
        let value = self.map.remove(name)?;
        let Value::Array(items) = value else {
            self.issue(
                name,
                "must be an array of strings",
                Some("array"),
                Some(value),
            );
            return None;
        };
        if items.len() > max_items {
            self.issue(
                name,
                format!("must have at most {max_items} items"),
                Some("array"),
                None,
            );
            return None;
        }
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, v) in items.into_iter().enumerate() {
            let field = format!("{name}[{i}]");
            match v {
                Value::String(s) => match item(&s) {
                    Ok(t) => out.push(t),
                    Err(issue) => {
                        ok = false;
                        self.issue(&field, issue, None, Some(Value::String(s)));
                    }
                },
                other => {
                    ok = false;
                    self.issue(&field, "must be a string", Some("string"), Some(other));
                }
            }
        }
        ok.then_some(out)
    }

    /// Like `enumerated`, for every item of an array.
    pub fn enum_array<T>(
        &mut self,
        name: &str,
        allowed: &[&str],
        parse: impl Fn(&str) -> Option<T>,
    ) -> Option<Vec<T>> {
        let joined = allowed.join(", ");
        let result = self.string_array(name, allowed.len().max(1) * 2, |s| {
            parse(s).ok_or_else(|| format!("must be one of: {joined}"))
        });
        if result.is_none() && self.issues.iter().any(|i| i.name.starts_with(name)) {
            self.enum_failures
                .push(allowed.iter().map(|a| a.to_string()).collect());
        }
        result
    }

    /// Ends reading: any member not taken is unknown; any issue becomes one 422.
    pub fn finish(mut self) -> Result<(), ApiError> {
        let unknown: Vec<(String, Value)> = std::mem::take(&mut self.map).into_iter().collect();
        for (name, v) in unknown {
            self.issue(&name, "is not a writable field", None, Some(v));
        }
        if self.issues.is_empty() {
            Ok(())
        } else {
            let allowed = match self.enum_failures.as_slice() {
                [one] => one.clone(),
                _ => Vec::new(),
            };
            Err(ApiError::validation(self.issues).with_allowed_values(allowed))
        }
    }
}

/// The path's parameters, as axum's `RawPathParams`, but a parameter that is not UTF-8 once
/// percent-decoded is the envelope's 422 rather than axum's plain-text 400.
pub struct PathParams(axum::extract::RawPathParams);

impl PathParams {
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for PathParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::RawPathParams::from_request_parts(parts, state)
            .await
            .map(PathParams)
            .map_err(|e| {
                ApiError::invalid_field("path", e.body_text(), None).with_parameter_set("path")
            })
    }
}

/// A path parameter parsed with `FromStr`; a malformed one is a 422 naming the parameter.
fn path_param<T>(parts_params: &PathParams, name: &str) -> Result<T, ApiError>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    let raw = parts_params
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
        .ok_or_else(|| ApiError::internal("path parameters", format!("missing {name}")))?;
    raw.parse::<T>().map_err(|e| {
        ApiError::invalid_field(
            name,
            format!("is not a valid id: {e}"),
            Some(Value::String(echo_safely(raw))),
        )
        .with_parameter_set("path")
    })
}

/// An id a route's path carries, by the name of its parameter (the interface's:
/// `/v1/sessions/{sessionId}`), so a handler names the type alone: `InPath<SessionId>`.
pub trait PathId: std::str::FromStr<Err: std::fmt::Display> + Send {
    const PARAMETER: &'static str;
}

macro_rules! path_ids {
    ($($id:ty => $parameter:literal),* $(,)?) => {
        $(impl PathId for $id {
            const PARAMETER: &'static str = $parameter;
        })*
    };
}

path_ids! {
    schemas::OrgId => "organizationId",
    schemas::KeyId => "keyId",
    schemas::SessionId => "sessionId",
    schemas::PingId => "pingId",
    schemas::VisitorId => "visitorId",
    schemas::ids::WebhookEndpointId => "endpointId",
    schemas::ids::GateSessionId => "gateSessionId",
    GateServiceId => "serviceId",
}

/// A Gate service's id as a path carries it: any text, since a service of no such id is a 404
/// like any other unknown one.
#[derive(Debug, Clone)]
pub struct GateServiceId(pub String);

impl std::str::FromStr for GateServiceId {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(GateServiceId(s.to_owned()))
    }
}

/// What a path's parameters are read as: one id, or two (`/v1/organizations/{organizationId}/
/// webhooks/endpoints/{endpointId}`), read in the path's order.
pub trait FromPath: Sized + Send {
    fn from_path(params: &PathParams) -> Result<Self, ApiError>;
}

impl<T: PathId> FromPath for T {
    fn from_path(params: &PathParams) -> Result<Self, ApiError> {
        path_param(params, T::PARAMETER)
    }
}

impl<A: PathId, B: PathId> FromPath for (A, B) {
    fn from_path(params: &PathParams) -> Result<Self, ApiError> {
        Ok((
            path_param(params, A::PARAMETER)?,
            path_param(params, B::PARAMETER)?,
        ))
    }
}

/// The path's ids of type `T`, parsed: a malformed one is a 422 naming its parameter.
pub struct InPath<T>(pub T);

impl<S: Send + Sync, T: FromPath> FromRequestParts<S> for InPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let params = PathParams::from_request_parts(parts, state).await?;
        T::from_path(&params).map(InPath)
    }
}

/// Query parameters as raw pairs; handlers read them with `QueryParams` helpers.
pub struct QueryParams(pub Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
            .map(|q| QueryParams(q.0))
            .map_err(|_| {
                ApiError::new(
                    ErrorCode::Malformed,
                    "the query string could not be decoded",
                )
            })
    }
}

impl QueryParams {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Rejects parameters this route does not know.
    pub fn only(&self, known: &[&str]) -> Result<(), ApiError> {
        let unknown: Vec<FieldIssue> = self
            .0
            .iter()
            .filter(|(k, _)| !known.contains(&k.as_str()))
            .map(|(k, v)| {
                FieldIssue::new(
                    k.clone(),
                    "is not a parameter of this route",
                    Some(format!("one of: {}", known.join(", "))),
                    Some(Value::String(v.clone())),
                )
            })
            .collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(ApiError::validation(unknown)
                .with_parameter_set("query")
                .with_allowed_values(known.iter().copied()))
        }
    }

    /// An enumerated parameter: `None` when absent, else its value if it is one of `allowed`,
    /// else a 422 naming it with the allowed values.
    pub fn one_of(&self, name: &str, allowed: &[&str]) -> Result<Option<&str>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) if allowed.contains(&v) => Ok(Some(v)),
            Some(v) => Err(ApiError::invalid_field(
                name,
                format!("must be one of: {}", allowed.join(", ")),
                Some(Value::String(v.into())),
            )
            .with_parameter_set("query")
            .with_allowed_values(allowed.iter().copied())),
        }
    }

    /// `limit`: an integer in `min..=max`, `default` when absent.
    pub fn limit(&self, default: u32, max: u32) -> Result<u32, ApiError> {
        match self.get("limit") {
            None => Ok(default),
            Some(raw) => match raw.parse::<u32>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(ApiError::invalid_field(
                    "limit",
                    format!("must be an integer from 1 to {max}"),
                    Some(Value::String(raw.into())),
                )
                .with_parameter_set("query")),
            },
        }
    }
}

/// A success response: a status and a body wrapped in the `{ data, meta }` envelope.
pub struct Reply {
    status: StatusCode,
    body: Vec<u8>,
    /// The body shows a secret (a new key, a signing secret, a Gate delivery): no cache may
    /// keep it.
    secret: bool,
}

/// An answer's JSON, into a buffer sized for a typical resource: `serde_json::to_vec` starts at
/// 128 bytes and grows twice for one organization or key.
fn envelope<T: Serialize>(value: &T) -> Vec<u8> {
    let mut body = Vec::with_capacity(512);
    match serde_json::to_writer(&mut body, value) {
        Ok(()) => body,
        Err(_) => Vec::new(),
    }
}

impl Reply {
    fn meta() -> Meta {
        Meta {
            request_id: context::request_id(),
        }
    }

    pub fn single<T: Serialize>(status: StatusCode, data: T) -> Reply {
        let body = envelope(&Single {
            data,
            meta: Self::meta(),
        });
        Reply {
            status,
            body,
            secret: false,
        }
    }

    pub fn ok<T: Serialize>(data: T) -> Reply {
        Self::single(StatusCode::OK, data)
    }

    pub fn created<T: Serialize>(data: T) -> Reply {
        Self::single(StatusCode::CREATED, data)
    }

    pub fn list<T: Serialize>(data: Vec<T>, pagination: Pagination) -> Reply {
        let body = envelope(&List {
            data,
            pagination,
            meta: Self::meta(),
        });
        Reply {
            status: StatusCode::OK,
            body,
            secret: false,
        }
    }
}

impl Reply {
    /// This answer shows a secret once: `Cache-Control: no-store`, so no browser, proxy or
    /// client cache keeps a copy.
    pub fn showing_secrets(mut self) -> Self {
        self.secret = true;
        self
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        // Built directly: through axum's tuple, the body would first be labelled
        // `application/octet-stream` and the JSON type parsed from a string on every answer.
        let mut response = Response::new(axum::body::Body::from(self.body));
        *response.status_mut() = self.status;
        response.headers_mut().insert(header::CONTENT_TYPE, JSON);
        if self.secret {
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        }
        response
    }
}

/// What an error may echo of a received value: a credential someone put in the wrong place is
/// cut to its preview, so the answer (and any log or proxy that keeps it) does not carry it.
pub fn echo_safely(raw: &str) -> String {
    let looks_like_credential = ["sk_", "pk_", "agt_", "gtpoll_", "ack_", "whsec_"]
        .iter()
        .any(|p| raw.starts_with(p));
    if looks_like_credential && raw.len() > 12 {
        format!(
            "{}…",
            &raw[..raw.char_indices().nth(12).map_or(raw.len(), |(i, _)| i)]
        )
    } else {
        raw.to_owned()
    }
}
