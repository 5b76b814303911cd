//! Vigil's storage port: one trait per table group (`port`), implemented by every backend in a
//! file per group (`embedded/`, `postgres/`), a backend chosen by URL (`embedded:<dir>` by
//! default), the rules every backend applies the same way (`rules`), and one conformance suite
//! that every backend must pass unchanged (`conformance`, behind the `testsuite` feature: tests
//! only).

#[cfg(any(test, feature = "testsuite"))]
pub mod conformance;
pub mod embedded;
mod error;
pub mod instrumented;
pub mod model;
mod port;
pub mod postgres;
pub mod rules;
pub mod scylla;

use std::sync::Arc;

pub use error::{Result, StoreError};
pub use model::*;
pub use port::*;
pub use rules::merge_state;

/// The port's traits, for a caller to bring every group's methods into scope at once (a method
/// of a group is called on a [`Store`] only where its trait is in scope).
pub mod prelude {
    pub use crate::port::{
        CollectStore, EventStore, GateStore, IdempotencyStore, OrganizationStore, RetentionStore,
        SessionStore, StoreBackend, VisitorStore,
    };
}

/// Opens the backend a store URL names: `embedded:<dir>` (default), `postgres://...` (or
/// `postgresql://...`), or `scylla://...`.
pub async fn open(url: &str) -> Result<Store> {
    if let Some(dir) = url.strip_prefix("embedded:") {
        let dir = std::path::PathBuf::from(dir);
        let store = tokio::task::spawn_blocking(move || embedded::EmbeddedStore::open(&dir))
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))??;
        Ok(Arc::new(store))
    } else if is_postgres(url) {
        Ok(Arc::new(postgres::PostgresStore::open(url).await?))
    } else if url.starts_with("scylla://") {
        Ok(Arc::new(scylla::ScyllaStore::open(url).await?))
    } else {
        Err(StoreError::NotEnabled(format!(
            "unknown store URL `{}`: expected embedded:<dir>, postgres://user@host:5432/db or \
             scylla://host:9042/keyspace",
            schemas::redact::redact_url(url)
        )))
    }
}

/// Whether a store URL names the PostgreSQL backend.
pub fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}
