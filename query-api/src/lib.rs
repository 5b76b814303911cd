//! Vigil's reads for the customer backend (secret key): sessions with their latest decision,
//! one session's detail in the interface's order of importance, visitor fingerprints with
//! their recent linked sessions, and the opening of the handoffs pages pass to their backend.
//! One module per resource. (The public Gate registry is served with these reads, from the
//! `gate` crate.)
//!
//! What the processor stores is read through the types it is written with
//! (`schemas::decision::Decision`, `schemas::session_view::SessionView`), never by pointing
//! into its JSON: the two run as separate processes, perhaps of different versions.

pub mod evidence;
pub mod export;
pub mod fingerprints;
pub mod handoffs;
pub mod sessions;

use std::sync::Arc;

use axum::Router;
use edge::Authenticator;

#[derive(Clone)]
pub struct QueryState {
    pub auth: Arc<Authenticator>,
    /// The exports each organization and environment is running (`--export-concurrency`).
    pub exports: Arc<export::Slots>,
}

/// A session's latest decision; `None` before its first, and (logged) when what is stored does
/// not read as a decision, which then shows as none rather than failing the read.
fn latest_decision(session: &store::SessionRecord) -> Option<schemas::decision::Decision> {
    let raw = session.latest_decision.as_ref()?;
    schemas::decision::Decision::from_raw(raw)
        .inspect_err(|e| {
            tracing::warn!(session = %session.id, error = %e, "query: a stored decision does not read as one; shown as none");
        })
        .ok()
}

/// The secret-key reads, with their part of the OpenAPI document.
fn reads() -> utoipa_axum::router::OpenApiRouter<QueryState> {
    utoipa_axum::router::OpenApiRouter::new()
        .merge(sessions::router())
        .merge(fingerprints::router())
        .merge(export::router())
}

pub fn router(state: QueryState) -> Router {
    reads().with_state(state).into()
}

/// The query API's part of the OpenAPI document.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = reads().into_openapi();
    doc.merge(handoffs::router().into_openapi());
    doc
}

/// Opening a handoff, apart: it is a POST, which the server makes idempotent.
pub fn handoff_router(state: QueryState) -> Router {
    handoffs::router().with_state(state).into()
}
