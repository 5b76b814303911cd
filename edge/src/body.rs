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

use crate::context;
use crate::error::ApiError;

/// The type of every answer's body; a static value, so answering copies nothing.
pub const JSON: HeaderValue = HeaderValue::from_static("application/json");

/// A JSON object body, checked for Content-Type, size and syntax.
pub struct JsonObject(pub Map);

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
/// `ToSchema` gives the OpenAPI document the same members and constraints. Derive it
/// (`#[derive(RequestBody)]`, from `body-derive`): the reader then comes from the attributes
/// the document is made from, so the two cannot differ.
pub trait RequestBody: Sized {
    /// The body from `f`'s members; `None` only when a problem was recorded on `f`.
    fn read(f: &mut Fields) -> Option<Self>;

    /// The body from a JSON object already read: for a handler that must check something
    /// else first (a credential the body does not carry), so that its refusal comes first.
    fn from_object(body: JsonObject) -> Result<Self, ApiError> {
        read_body(body, Self::read)
    }

    /// The body, then `check` with what the body does not carry (the stored record a PATCH
    /// changes, the operator's flags), its problems reported in the same 422 as the body's.
    fn from_object_then(
        body: JsonObject,
        check: impl FnOnce(&mut Self, &mut Fields),
    ) -> Result<Self, ApiError> {
        read_body(body, |f| {
            let mut value = Self::read(f)?;
            check(&mut value, f);
            Some(value)
        })
    }

    /// The body read straight from its bytes without the tree [`Fields`] reads, for a hot
    /// route whose bodies nearly all have one plain shape; `None` sends the body the usual way,
    /// which reports every problem. It accepts only bodies that [`RequestBody::read`] accepts,
    /// and reads them to the same value.
    fn read_plain(_bytes: &[u8]) -> Option<Self> {
        None
    }
}

/// A request body whose rules depend on more than the body: the operator's flags, the record a
/// PATCH changes. Derived with `#[request_body(context = C)]`, so every problem, those the
/// context finds included, is still reported in one 422.
pub trait RequestBodyIn<C>: Sized {
    /// The body from `f`'s members under `context`; `None` only when a problem was recorded.
    fn read_in(f: &mut Fields, context: &C) -> Option<Self>;

    fn from_object_in(body: JsonObject, context: &C) -> Result<Self, ApiError> {
        read_body(body, |f| Self::read_in(f, context))
    }
}

pub use body_derive::{Member, RequestBody};
/// A JSON object's members, as derived readers take them.
pub type Map = serde_json::Map<String, Value>;
pub use serde_json::Value;

/// A type a body's member is read into: a string, a number, an enum, an id, an array of them
/// or a nested object (`#[derive(Member)]`).
pub trait Member: Sized {
    /// What the member is, as `details.fields[].expected` says when it is missing.
    const EXPECTED: &'static str;

    /// `value` as `Self`; `None` when the problem was recorded on `f` under `name`.
    fn read(f: &mut Fields, name: &str, value: Value) -> Option<Self>;
}

/// A member's bounds as the OpenAPI document states them (`#[schema(min_length, ...)]`), which
/// a derived reader enforces before reading the member's value.
pub struct Constraints {
    /// In characters, as JSON Schema counts them.
    pub min_length: Option<usize>,
    pub max_length: Option<usize>,
    pub pattern: Option<&'static Pattern>,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub min_items: Option<usize>,
    pub max_items: Option<usize>,
}

/// A `pattern` of the document, compiled the first time a body needs it.
pub struct Pattern {
    source: &'static str,
    regex: std::sync::OnceLock<regex::Regex>,
}

impl Pattern {
    pub const fn new(source: &'static str) -> Self {
        Pattern {
            source,
            regex: std::sync::OnceLock::new(),
        }
    }

    fn is_match(&self, s: &str) -> bool {
        self.regex
            .get_or_init(|| {
                // The same text utoipa puts in the document; one Rust's regex cannot read would
                // fail every test that sends the member.
                regex::Regex::new(self.source).expect("a document pattern compiles")
            })
            .is_match(s)
    }
}

impl Constraints {
    fn is_empty(&self) -> bool {
        self.min_length.is_none()
            && self.max_length.is_none()
            && self.pattern.is_none()
            && self.minimum.is_none()
            && self.maximum.is_none()
            && self.min_items.is_none()
            && self.max_items.is_none()
    }

    /// The first bound `value` breaks, as an issue's text; bounds apply to values of their own
    /// JSON type only, as in JSON Schema (a value of the wrong type is the reader's to report).
    fn broken_by(&self, value: &Value) -> Option<String> {
        match value {
            Value::String(s) => {
                let n = s.chars().count();
                let short = self.min_length.is_some_and(|min| n < min);
                let long = self.max_length.is_some_and(|max| n > max);
                if short || long {
                    return match (self.min_length, self.max_length) {
                        (Some(min), Some(max)) => {
                            Some(format!("must be {min} to {max} characters"))
                        }
                        (Some(1), None) => Some("must be at least 1 character".into()),
                        (Some(min), None) => Some(format!("must be at least {min} characters")),
                        (None, Some(max)) => Some(format!("must be at most {max} characters")),
                        (None, None) => None,
                    };
                }
                let pattern = self.pattern?;
                (!pattern.is_match(s)).then(|| format!("must match `{}`", pattern.source))
            }
            Value::Number(n) => {
                let n = n.as_f64()?;
                match (self.minimum, self.maximum) {
                    (Some(min), _) if n < min => Some(format!("must be at least {min}")),
                    (_, Some(max)) if n > max => Some(format!("must be at most {max}")),
                    _ => None,
                }
            }
            Value::Array(items) => match (self.min_items, self.max_items) {
                (Some(min), _) if items.len() < min => Some(format!(
                    "must have at least {min} item{}",
                    if min == 1 { "" } else { "s" }
                )),
                (_, Some(max)) if items.len() > max => {
                    Some(format!("must have at most {max} items"))
                }
                _ => None,
            },
            _ => None,
        }
    }
}

/// A string member checked by `rule`, which returns the issue's text on failure.
pub fn checked(
    f: &mut Fields,
    name: &str,
    value: Value,
    rule: impl FnOnce(&str) -> Result<(), String>,
) -> Option<String> {
    parsed(f, name, value, |s| rule(s).map(|()| s.to_owned()))
}

/// A string member turned into a `T` by `parse`, which returns the issue's text on failure:
/// for members whose check is the conversion itself (decoding base64, say), done once.
pub fn parsed<T>(
    f: &mut Fields,
    name: &str,
    value: Value,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Option<T> {
    let s = String::read(f, name, value)?;
    match parse(&s) {
        Ok(parsed) => Some(parsed),
        Err(issue) => {
            f.issue(name, issue, None, Some(Value::String(s)));
            None
        }
    }
}

/// Bytes sent as base64url without padding, the way the collect protocol sends keys and
/// ciphertexts.
pub fn base64url(s: &str) -> Result<Vec<u8>, String> {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| "must be base64url without padding".into())
}

impl Member for String {
    const EXPECTED: &'static str = "string";

    fn read(f: &mut Fields, name: &str, value: Value) -> Option<Self> {
        match value {
            Value::String(s) => Some(s),
            other => {
                f.issue(name, "must be a string", Some("string"), Some(other));
                None
            }
        }
    }
}

impl Member for bool {
    const EXPECTED: &'static str = "boolean";

    fn read(f: &mut Fields, name: &str, value: Value) -> Option<Self> {
        match value {
            Value::Bool(b) => Some(b),
            other => {
                f.issue(name, "must be a boolean", Some("boolean"), Some(other));
                None
            }
        }
    }
}

impl Member for u64 {
    const EXPECTED: &'static str = "integer";

    /// An integer, whichever way JSON spells it: `3` and `3.0` are one number (JSON Schema's
    /// `integer` takes both, and so do clients that only have doubles).
    fn read(f: &mut Fields, name: &str, value: Value) -> Option<Self> {
        let n = value.as_number().and_then(|n| {
            n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|x| x.fract() == 0.0 && *x >= 0.0 && *x <= 2f64.powi(53))
                    .map(|x| x as u64)
            })
        });
        if n.is_none() {
            f.issue(
                name,
                "must be a non-negative integer",
                Some("integer"),
                Some(value),
            );
        }
        n
    }
}

impl<T: Member> Member for Vec<T> {
    const EXPECTED: &'static str = "array";

    /// Every item read, each problem named by its index (`scopes[2]`).
    fn read(f: &mut Fields, name: &str, value: Value) -> Option<Self> {
        let Value::Array(items) = value else {
            f.issue(
                name,
                format!("must be an array of {}s", T::EXPECTED),
                Some("array"),
                Some(value),
            );
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.into_iter().enumerate() {
            match T::read(f, &format!("{name}[{i}]"), item) {
                Some(t) => out.push(t),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }
}

/// `Member` for enums with `ALL` (their names) and `parse`: a value of another name is an
/// issue listing them, and `details.allowed_values` names them when it is the body's only enum
/// problem.
#[macro_export]
macro_rules! enumerated_members {
    ($($ty:ty => $names:expr),* $(,)?) => {$(
        impl $crate::body::Member for $ty {
            const EXPECTED: &'static str = "string";

            fn read(
                f: &mut $crate::body::Fields,
                name: &str,
                value: $crate::body::Value,
            ) -> Option<Self> {
                let names: &[&str] = &$names;
                f.enumerated_value(name, value, names, <$ty>::parse)
            }
        }
    )*};
}

enumerated_members! {
    schemas::credential::KeyType => schemas::credential::KeyType::ALL,
    schemas::credential::Environment => schemas::credential::Environment::ALL,
    schemas::resources::OrgStatus => schemas::resources::OrgStatus::ALL,
    schemas::events::EventType => schemas::events::EventType::ALL,
    schemas::Scope => schemas::Scope::all_names(),
    store::EndpointStatus => store::EndpointStatus::ALL,
}

/// `Member` for ids (`sid_…`, `gate_…`): a string that parses as one.
macro_rules! id_members {
    ($($ty:ty),* $(,)?) => {$(
        impl Member for $ty {
            const EXPECTED: &'static str = "string";

            fn read(f: &mut Fields, name: &str, value: Value) -> Option<Self> {
                parsed(f, name, value, |s| {
                    s.parse::<$ty>().map_err(|e| format!("is not a valid id: {e}"))
                })
            }
        }
    )*};
}

id_members!(schemas::SessionId, schemas::ids::GateSessionId);

/// Reads `body` through `read`, which records every problem on the [`Fields`] it is given:
/// one 422 for them all, or the value.
fn read_body<T>(
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

/// A nested member's name as issues give it: `branding.logo_url`, `env_vars[0].key`.
fn member_name<'a>(at: &str, key: &'a str) -> std::borrow::Cow<'a, str> {
    if at.is_empty() {
        std::borrow::Cow::Borrowed(key)
    } else {
        std::borrow::Cow::Owned(format!("{at}.{key}"))
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
    map: Map,
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

    /// Every member not yet read, for a derived reader, which then answers for all of them.
    pub fn take_all(&mut self) -> Map {
        std::mem::take(&mut self.map)
    }

    /// The members of a nested object, or the issue of a value that is not one.
    pub fn object(&mut self, name: &str, value: Value) -> Option<Map> {
        match value {
            Value::Object(map) => Some(map),
            other => {
                self.issue(name, "must be an object", Some("object"), Some(other));
                None
            }
        }
    }

    /// A member that must be there (derived readers).
    pub fn required<T>(
        &mut self,
        at: &str,
        map: &mut Map,
        key: &str,
        expected: &str,
        rules: &Constraints,
        read: impl FnOnce(&mut Fields, &str, Value) -> Option<T>,
    ) -> Option<T> {
        let name = member_name(at, key);
        match map.remove(key) {
            Some(value) => self.bounded(&name, value, rules, read),
            None => {
                self.issue(&name, "is required", Some(expected), None);
                None
            }
        }
    }

    /// A member that may be absent: `Some(None)` then. Null counts as absent only where the
    /// document says the member is nullable.
    pub fn optional<T>(
        &mut self,
        at: &str,
        map: &mut Map,
        key: &str,
        nullable: bool,
        rules: &Constraints,
        read: impl FnOnce(&mut Fields, &str, Value) -> Option<T>,
    ) -> Option<Option<T>> {
        match map.remove(key) {
            None => Some(None),
            Some(Value::Null) if nullable => Some(None),
            Some(value) => self
                .bounded(&member_name(at, key), value, rules, read)
                .map(Some),
        }
    }

    /// A member a PATCH may clear with null: `Some(None)` absent, `Some(Some(None))` null.
    pub fn clearable<T>(
        &mut self,
        at: &str,
        map: &mut Map,
        key: &str,
        rules: &Constraints,
        read: impl FnOnce(&mut Fields, &str, Value) -> Option<T>,
    ) -> Option<Option<Option<T>>> {
        match map.remove(key) {
            None => Some(None),
            Some(Value::Null) => Some(Some(None)),
            Some(value) => self
                .bounded(&member_name(at, key), value, rules, read)
                .map(|v| Some(Some(v))),
        }
    }

    /// `value` read, then held to the document's bounds. The reader goes first so that a
    /// member's own rule, whose sentence says more than a bound's, speaks when both fail.
    fn bounded<T>(
        &mut self,
        name: &str,
        value: Value,
        rules: &Constraints,
        read: impl FnOnce(&mut Fields, &str, Value) -> Option<T>,
    ) -> Option<T> {
        if rules.is_empty() {
            return read(self, name, value);
        }
        let raw = value.clone();
        let read = read(self, name, value)?;
        let Some(issue) = rules.broken_by(&raw) else {
            return Some(read);
        };
        let expected = FieldIssue::expected_of(&issue);
        let received = match raw {
            // An array is named by its length, not echoed whole.
            Value::Array(_) => None,
            other => Some(other),
        };
        self.issue(name, issue, expected.as_deref(), received);
        None
    }

    /// Refuses `key` of a nested object (or the body, at `""`) with the reason.
    pub fn forbid_in(&mut self, at: &str, map: &mut Map, key: &str, because: &str) {
        if let Some(v) = map.remove(key) {
            self.issue(&member_name(at, key), because, None, Some(v));
        }
    }

    /// Reports every member left in `map` as not writable.
    pub fn leftovers(&mut self, at: &str, map: &mut Map) {
        for (key, v) in std::mem::take(map) {
            self.issue(
                &member_name(at, &key),
                "is not a writable field",
                None,
                Some(v),
            );
        }
    }

    /// An enum's value: one of `names`, read by `parse`.
    pub fn enumerated_value<T>(
        &mut self,
        name: &str,
        value: Value,
        names: &[&str],
        parse: impl Fn(&str) -> Option<T>,
    ) -> Option<T> {
        let s = String::read(self, name, value)?;
        if let Some(v) = parse(&s) {
            return Some(v);
        }
        let one_of = format!("one of: {}", names.join(", "));
        self.issue(
            name,
            format!("must be {one_of}"),
            Some(&one_of),
            Some(Value::String(s)),
        );
        let allowed: Vec<String> = names.iter().map(|a| a.to_string()).collect();
        if !self.enum_failures.contains(&allowed) {
            self.enum_failures.push(allowed);
        }
        None
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A nested object, read under its member's name.
    #[derive(Debug, utoipa::ToSchema, Member)]
    #[request_body(forbid = ["verified"], because = "is Vigil's to set")]
    struct Colours {
        #[schema(nullable = false, pattern = "^#[0-9a-f]{6}$")]
        primary: Option<String>,
    }

    /// Every shape a derived reader knows.
    #[derive(Debug, utoipa::ToSchema, RequestBody)]
    #[request_body(ignore = ["rate_limit"], forbid = ["slug"], because = "is fixed")]
    struct Body {
        #[schema(min_length = 1, max_length = 8)]
        name: String,
        #[schema(rename = "type")]
        kind: Option<schemas::credential::KeyType>,
        #[schema(minimum = 1)]
        seq: u64,
        #[schema(max_items = 2)]
        tags: Option<Vec<String>>,
        #[member(check = no_x)]
        motto: Option<String>,
        #[schema(value_type = Option<String>)]
        link: Option<Option<String>>,
        colours: Option<Colours>,
    }

    fn no_x(s: &str) -> Result<(), String> {
        if s.contains('x') {
            Err("must not contain x".into())
        } else {
            Ok(())
        }
    }

    fn read(body: serde_json::Value) -> Result<Body, Vec<(String, String)>> {
        let Value::Object(map) = body else {
            unreachable!("the tests send objects")
        };
        Body::from_object(JsonObject(map)).map_err(|e| {
            e.details
                .fields
                .iter()
                .map(|f| (f.name.clone(), f.issue.clone()))
                .collect()
        })
    }

    #[test]
    fn a_derived_reader_reads_each_shape() {
        let body = read(json!({
            "name": "acme", "type": "secret", "seq": 3.0, "link": null,
            "rate_limit": 5, "colours": {"primary": "#00ff00"}
        }))
        .unwrap();
        assert_eq!(body.name, "acme");
        assert_eq!(body.kind, Some(schemas::credential::KeyType::Secret));
        assert_eq!(body.seq, 3);
        assert_eq!((body.tags, body.motto), (None, None));
        assert_eq!(body.link, Some(None), "null clears a clearable member");
        assert_eq!(body.colours.unwrap().primary.as_deref(), Some("#00ff00"));
        let absent = read(json!({"name": "a", "seq": 1})).unwrap();
        assert_eq!(absent.link, None, "absent is not null");
    }

    #[test]
    fn every_problem_of_a_body_is_reported_at_once_with_the_documents_bounds() {
        let issues = read(json!({
            "name": "far too long", "type": "public", "seq": 0,
            "tags": ["a", 2], "motto": "xyz", "slug": "s", "extra": 1,
            "colours": {"primary": "green", "verified": true, "font": "serif"}
        }))
        .unwrap_err();
        let mut issues: Vec<String> = issues.iter().map(|(n, i)| format!("{n}: {i}")).collect();
        issues.sort();
        assert_eq!(
            issues,
            [
                "colours.font: is not a writable field",
                "colours.primary: must match `^#[0-9a-f]{6}$`",
                "colours.verified: is Vigil's to set",
                "extra: is not a writable field",
                "motto: must not contain x",
                "name: must be 1 to 8 characters",
                "seq: must be at least 1",
                "slug: is fixed",
                "tags[1]: must be a string",
                "type: must be one of: publishable, secret",
            ]
        );
        let missing = read(json!({"tags": ["a", "b", "c"]})).unwrap_err();
        assert_eq!(
            missing,
            [
                ("name".to_owned(), "is required".to_owned()),
                ("seq".to_owned(), "is required".to_owned()),
                ("tags".to_owned(), "must have at most 2 items".to_owned()),
            ]
        );
    }
}
