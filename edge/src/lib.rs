//! HTTP plumbing shared by every Vigil API: request ids, the error envelope, JSON bodies and
//! their validation, credentials as extractors, rate limits, idempotent POSTs, pagination
//! cursors and metrics. A handler that takes `SecretKey<P>` cannot skip a check.

// Derived body readers name `::edge::body`; this lets them do so in this crate's own tests.
extern crate self as edge;

pub mod auth;
pub mod body;
pub mod client_hello;
pub mod context;
pub mod credential_layer;
pub mod error;
pub mod idempotency;
pub mod limiter;
pub mod metrics;
pub mod openapi;
pub mod pagination;
pub mod policy;
pub mod transport;

pub use auth::{AuthContext, Authenticator, PublishableKey, SecretKey};
pub use body::{JsonObject, Reply};
pub use error::ApiError;
