//! Vigil's storage port: one trait per table group (`port`), implemented by every backend in a
//! file per group (`embedded/`, `postgres/`), a backend chosen by URL (`embedded:<dir>` by
//! default), the rules every backend applies the same way (`rules`), and one conformance suite
//! that every backend must pass unchanged (`conformance`, behind the `testsuite` feature: tests
//! only).

#[cfg(any(test, feature = "testsuite"))]
pub mod conformance;
pub mod embedded;
pub mod instrumented;
pub mod model;
mod port;
pub mod postgres;
pub mod rules;
pub mod scylla;

use std::sync::Arc;

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

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A unique value (slug, id) is already taken.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The backend cannot be reached or refused the operation; a retry may help.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A row could not be decoded: a bug or a damaged store.
    #[error("corrupt row in {table}: {detail}")]
    Corrupt { table: &'static str, detail: String },
    /// The caller's arguments break the method's contract (a bug in the caller, not a race with
    /// another writer); nothing was written.
    #[error("invalid store request: {0}")]
    Invalid(String),
    /// The backend refused the request itself (a syntax or schema error, credentials it does
    /// not accept): the store is not the one this build expects, and a retry cannot help.
    #[error("store rejected the request: {0}")]
    Rejected(String),
    /// The store URL names a backend this build does not have.
    #[error("store backend not enabled: {0}")]
    NotEnabled(String),
    /// A session save was made under a claim of these partitions of `collect.batches.v1` that
    /// another processor has claimed since (`SessionStore::claim_partitions`); nothing was
    /// written. The saver no longer owns them.
    #[error("partitions {partitions:?} of the batches were claimed by another processor")]
    Fenced { partitions: Vec<u32> },
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// One session's save in [`SessionStore::save_sessions`].
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSave {
    pub session: SessionRecord,
    pub decision: Option<DecisionRecord>,
    pub events: Vec<EventRecord>,
    /// The members of the session's state that seldom change (the processor's probes and
    /// kept events), given apart from `session.state` so that a store may write them only when
    /// they changed: the embedded store keeps them in a row of their own, since rewriting them
    /// with every fold was most of what a fold wrote. The state stored and read back is
    /// `session.state` with these merged in ([`merge_state`]). `None`: `session.state` is the
    /// whole state.
    pub settled: Option<RawJson>,
    /// The processor's claim on the partition of `collect.batches.v1` the session's records are
    /// in (docs/architecture.md#fleet-writes): the save is refused if that partition was claimed
    /// again since. `None`: saved unconditionally (tools and tests).
    pub fence: Option<PartitionFence>,
}

/// A processor's claim on one partition of `collect.batches.v1`, as answered by
/// `SessionStore::claim_partitions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionFence {
    pub partition: u32,
    /// Raised by each claim of the partition, so the latest owner's is the highest.
    pub generation: u64,
}

/// The store every role shares.
pub type Store = Arc<dyn StoreBackend>;

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
