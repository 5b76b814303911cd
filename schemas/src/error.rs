//! The closed set of error codes (docs/errors.md, docs/architecture.md#errors) and the error
//! envelope's shape. Each code carries its HTTP status and whether a retry can help; nothing else
//! decides them.

use serde::Serialize;

macro_rules! error_codes {
    ($($variant:ident => ($code:literal, $status:literal, $retryable:literal)),* $(,)?) => {
        /// Every error Vigil answers with.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($variant,)*
        }

        impl ErrorCode {
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The dotted code, e.g. `request.validation_failed`.
            pub fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $code,)* }
            }

            pub fn status(self) -> u16 {
                match self { $(ErrorCode::$variant => $status,)* }
            }

            pub fn retryable(self) -> bool {
                match self { $(ErrorCode::$variant => $retryable,)* }
            }
        }
    };
}

error_codes! {
    Malformed => ("request.malformed", 400, false),
    UnsupportedMediaType => ("request.unsupported_media_type", 415, false),
    TooLarge => ("request.too_large", 413, false),
    HeadersTooLarge => ("request.headers_too_large", 431, false),
    ValidationFailed => ("request.validation_failed", 422, false),
    IdempotencyConflict => ("request.idempotency_conflict", 409, false),
    RouteNotFound => ("request.route_not_found", 404, false),
    MethodNotAllowed => ("request.method_not_allowed", 405, false),
    MissingCredentials => ("auth.missing_credentials", 401, false),
    InvalidCredentials => ("auth.invalid_credentials", 401, false),
    KeyExposed => ("auth.key_exposed", 401, false),
    CredentialTypeNotAllowed => ("auth.credential_type_not_allowed", 403, false),
    InsufficientScope => ("auth.insufficient_scope", 403, false),
    ScopeRemoved => ("auth.scope_removed", 403, false),
    OriginNotAllowed => ("auth.origin_not_allowed", 403, false),
    EnvironmentNotAllowed => ("auth.environment_not_allowed", 403, false),
    TlsRequired => ("auth.tls_required", 403, false),
    OrganizationSuspended => ("organization.suspended", 403, false),
    NotFound => ("resource.not_found", 404, false),
    SessionExpired => ("collect.session_expired", 410, false),
    BatchReplayed => ("collect.batch_replayed", 409, false),
    BatchInvalid => ("collect.batch_invalid", 422, false),
    SessionProofInvalid => ("collect.session_proof_invalid", 401, false),
    Conflict => ("resource.conflict", 409, false),
    NotAcceptable => ("request.not_acceptable", 406, false),
    HandoffAlreadyOpened => ("handoff.already_opened", 409, false),
    GateServiceLimitReached => ("gate.service_limit_reached", 409, false),
    WebhookEndpointLimitReached => ("webhook.endpoint_limit_reached", 409, false),
    ApiKeyLimitReached => ("organization.api_key_limit_reached", 409, false),
    GateSlowDown => ("gate.slow_down", 429, true),
    RateLimited => ("rate.limited", 429, true),
    ServiceUnavailable => ("service.unavailable", 503, true),
    Internal => ("internal.error", 500, true),
}

/// The document's schema of `error.code`: the closed set itself, so a generated client knows
/// every code.
impl utoipa::PartialSchema for ErrorCode {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::Type;
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(
                "The closed set of error codes; each is explained at `docs_url` (docs/errors.md).",
            ))
            .enum_values(Some(ErrorCode::ALL.iter().map(|c| c.as_str())))
            .into()
    }
}

impl utoipa::ToSchema for ErrorCode {}

impl ErrorCode {
    /// The error reference's summary table (docs/errors.md, between its `error-codes` markers),
    /// from the closed set, so the reference cannot drift from it.
    pub fn markdown_table() -> String {
        let mut table = String::from("| code | HTTP | retryable |\n| --- | --- | --- |\n");
        for code in ErrorCode::ALL {
            let retry = if code.retryable() { "yes" } else { "no" };
            table.push_str(&format!(
                "| [`{0}`](#{0}) | {1} | {retry} |\n",
                code.as_str(),
                code.status()
            ));
        }
        table
    }

    /// The anchor of the code's section in the error reference (`docs/errors.md`, served at
    /// `/docs/errors`): the code itself, which is also the section's heading.
    pub fn docs_anchor(self) -> &'static str {
        self.as_str()
    }
}

/// One invalid request field. All four members are always there (docs/errors.md): `expected`
/// and `received` are null where nothing applies (a member that is missing was not received; an
/// unknown member expects nothing).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct FieldIssue {
    pub name: String,
    pub issue: String,
    #[schema(required = true)]
    pub expected: Option<String>,
    /// What came, as it came (a long string is cut); null when nothing came.
    #[schema(value_type = serde_json::Value, required = true)]
    pub received: Option<serde_json::Value>,
}

impl FieldIssue {
    /// An issue; without an `expected` of its own, what the issue's text asks for stands in
    /// (`must be base64url without padding` expects `base64url without padding`), so that
    /// `details.fields[].expected` is there wherever the rule says what it wants.
    pub fn new(
        name: impl Into<String>,
        issue: impl Into<String>,
        expected: Option<String>,
        received: Option<serde_json::Value>,
    ) -> Self {
        let issue = issue.into();
        let expected = expected.or_else(|| Self::expected_of(&issue));
        FieldIssue {
            name: name.into(),
            issue,
            expected,
            received,
        }
    }

    /// What an issue's text says is wanted: the rest of its last `must …`, unless that is a
    /// prohibition (`must not …` says what is not wanted).
    pub fn expected_of(issue: &str) -> Option<String> {
        let rule = &issue[issue.rfind("must ")? + "must ".len()..];
        let wanted = if let Some(rest) = rule.strip_prefix("be ") {
            rest.to_owned()
        } else if let Some(rest) = rule.strip_prefix("start with ") {
            format!("starting with {rest}")
        } else if let Some(rest) = rule.strip_prefix("match ") {
            format!("matching {rest}")
        } else if let Some(rest) = rule.strip_prefix("have ") {
            rest.to_owned()
        } else {
            return None;
        };
        Some(wanted.trim_end_matches('.').to_owned())
    }
}

/// The optional `details` members of an error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ErrorDetails {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldIssue>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_values: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameter_set: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_action: Option<String>,
    /// When a handoff that opens once was first opened (`handoff.already_opened`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_opened_at: Option<String>,
}

/// `error` in `{ "error": ... }`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// One of the closed set of codes (`ErrorCode`, docs/errors.md).
    #[schema(value_type = ErrorCode)]
    pub code: &'static str,
    pub message: String,
    pub status: u16,
    pub retryable: bool,
    pub request_id: String,
    pub docs_url: String,
    pub details: ErrorDetails,
}

/// Every error answer: `{ "error": ... }`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ErrorEnvelope {
    pub error: ErrorBody,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issue_says_what_it_expects() {
        let expected = |issue| FieldIssue::expected_of(issue);
        assert_eq!(
            expected("must be base64url without padding").as_deref(),
            Some("base64url without padding")
        );
        assert_eq!(
            expected("is not a valid id: must start with `sid_`").as_deref(),
            Some("starting with `sid_`")
        );
        assert_eq!(
            expected("must match ^[a-z]+$").as_deref(),
            Some("matching ^[a-z]+$")
        );
        assert_eq!(
            expected("must have at most 20 items").as_deref(),
            Some("at most 20 items")
        );
        assert_eq!(expected("must not contain control characters"), None);
        assert_eq!(expected("is required"), None);
        let given = FieldIssue::new(
            "x",
            "must be 1 to 32 characters",
            Some("string".into()),
            None,
        );
        assert_eq!(
            given.expected.as_deref(),
            Some("string"),
            "an expected given is kept"
        );
    }

    #[test]
    fn codes_are_dotted_and_statuses_are_errors() {
        for code in ErrorCode::ALL {
            assert!(code.as_str().contains('.'), "{code:?}");
            assert!((400..600).contains(&code.status()));
            assert_eq!(
                code.retryable(),
                code.status() == 429 || code.status() >= 500
            );
        }
    }
}
