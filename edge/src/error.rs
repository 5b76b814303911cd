//! `ApiError`: the one error type every handler, extractor and layer answers with, rendered in
//! the interface's envelope by one `IntoResponse`. Internal failures are logged with their
//! context and answered as a bare 500 (or 503 when a backend is down).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use schemas::ErrorCode;
use schemas::error::{ErrorBody, ErrorDetails, FieldIssue};
use store::StoreError;

use crate::context;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// Boxed: most errors carry no details, and a small `ApiError` keeps every `Result` small.
    pub details: Box<ErrorDetails>,
    /// Seconds for `Retry-After`, on 429 and 503.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            details: Box::default(),
            retry_after: None,
        }
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("{what} not found"))
    }

    /// The retryable 503 of a record the log cannot take now (it is down, or its topics are
    /// not prepared yet).
    pub fn log_unavailable() -> Self {
        Self::retry_shortly("the log is unavailable; retry shortly")
    }

    /// The retryable 503 of a record the log refused because as many wait for it already
    /// (its producer's queue is full): load shed, not an outage.
    pub fn log_busy() -> Self {
        Self::retry_shortly("the log is taking no more records at the moment; retry shortly")
    }

    fn retry_shortly(message: &'static str) -> Self {
        let mut err = Self::new(ErrorCode::ServiceUnavailable, message);
        err.retry_after = Some(1);
        err
    }

    pub fn validation(fields: Vec<FieldIssue>) -> Self {
        let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
        let message = format!("invalid request: {}", names.join(", "));
        let mut e = Self::new(ErrorCode::ValidationFailed, message);
        e.details.fields = fields;
        e
    }

    /// One invalid field, with what was expected and what came.
    pub fn invalid_field(
        name: &str,
        issue: impl Into<String>,
        received: Option<serde_json::Value>,
    ) -> Self {
        Self::validation(vec![FieldIssue::new(name, issue, None, received)])
    }

    pub fn internal(context: &str, err: impl std::fmt::Display) -> Self {
        tracing::error!(request_id = %context::request_id(), error = %err, "{context}");
        Self::new(ErrorCode::Internal, "internal error")
    }

    pub fn with_allowed_values<I, S>(mut self, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.details.allowed_values = values.into_iter().map(Into::into).collect();
        self
    }

    pub fn with_header_name(mut self, name: &str) -> Self {
        self.details.header_name = Some(name.into());
        self
    }

    pub fn with_next_action(mut self, action: &str) -> Self {
        self.details.next_action = Some(action.into());
        self
    }

    pub fn with_parameter_set(mut self, set: &str) -> Self {
        self.details.parameter_set = Some(set.into());
        self
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            code: self.code.as_str(),
            message: self.message.clone(),
            status: self.code.status(),
            retryable: self.code.retryable(),
            request_id: context::request_id().to_string(),
            docs_url: format!(
                "{}/docs/errors#{}",
                context::public_url(),
                self.code.docs_anchor()
            ),
            details: (*self.details).clone(),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&schemas::error::ErrorEnvelope { error: self.body() })
            .unwrap_or_default();
        let mut response = Response::new(axum::body::Body::from(body));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(what) => ApiError::new(ErrorCode::Conflict, what),
            StoreError::Unavailable(detail) => {
                tracing::error!(request_id = %context::request_id(), %detail, "store unavailable");
                let mut e = ApiError::new(
                    ErrorCode::ServiceUnavailable,
                    "a backend is unavailable; retry shortly",
                );
                e.retry_after = Some(1);
                e
            }
            other => ApiError::internal("store failure", other),
        }
    }
}
