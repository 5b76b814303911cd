//! What a store call can fail with: one error type for every backend and table group, so
//! callers map failures once (docs/architecture.md#store-port).

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
