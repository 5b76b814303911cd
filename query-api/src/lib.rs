//! Vigil's reads for the customer backend (secret key): sessions with their latest decision,
//! one session's detail in the interface's order of importance, and visitor fingerprints with
//! their recent linked sessions. One module per resource.

pub mod fingerprints;
pub mod gate_registry;
pub mod sessions;

use std::sync::Arc;

use axum::Router;
use edge::Authenticator;

#[derive(Clone)]
pub struct QueryState {
    pub auth: Arc<Authenticator>,
}

pub fn router(state: QueryState) -> Router {
    Router::new()
        .merge(sessions::router())
        .merge(fingerprints::router())
        .with_state(state)
}

/// The Gate registry's routes, apart: pages call them with a publishable key, so the server
/// wraps them in CORS, which the secret-key reads never get.
pub fn registry_router(state: QueryState) -> Router {
    gate_registry::router().with_state(state)
}
