//! The driver's errors as the port's kinds: what a retry may cure (a timeout, too few replicas
//! alive, an overloaded or starting node, a broken connection) is `Unavailable`; what it cannot
//! (a syntax or schema error, refused credentials: the cluster is not what this build expects)
//! is `Rejected`, named with the server's message so an operator sees what to fix.

use scylla::errors::{
    ConnectionPoolError, DbError, ExecutionError, NewSessionError, PrepareError,
    RequestAttemptError,
};

use crate::StoreError;

/// Whether the server's answer is one a later attempt may not get.
fn db_error_is_transient(error: &DbError) -> bool {
    matches!(
        error,
        DbError::Unavailable { .. }
            | DbError::Overloaded
            | DbError::IsBootstrapping
            | DbError::ReadTimeout { .. }
            | DbError::WriteTimeout { .. }
            | DbError::ReadFailure { .. }
            | DbError::WriteFailure { .. }
            | DbError::TruncateError
            | DbError::ServerError
            | DbError::RateLimitReached { .. }
            | DbError::Unprepared { .. }
    )
}

fn attempt(error: &RequestAttemptError) -> bool {
    match error {
        RequestAttemptError::DbError(db, _) => db_error_is_transient(db),
        RequestAttemptError::BrokenConnectionError(_)
        | RequestAttemptError::UnableToAllocStreamId
        | RequestAttemptError::RepreparedIdChanged { .. } => true,
        _ => false,
    }
}

fn prepare_is_transient(error: &PrepareError) -> bool {
    match error {
        PrepareError::ConnectionPoolError(_) => true,
        PrepareError::AllAttemptsFailed { first_attempt } => attempt(first_attempt),
        _ => false,
    }
}

/// A failed request's kind.
pub fn execution(error: ExecutionError) -> StoreError {
    let transient = match &error {
        ExecutionError::LastAttemptError(e) => attempt(e),
        ExecutionError::PrepareError(e) => prepare_is_transient(e),
        ExecutionError::ConnectionPoolError(_)
        | ExecutionError::RequestTimeout(_)
        | ExecutionError::EmptyPlan
        | ExecutionError::SchemaAgreementError(_)
        | ExecutionError::MetadataError(_) => true,
        _ => false,
    };
    classify(transient, error.to_string())
}

/// A failed preparation's kind.
pub fn prepare(error: PrepareError) -> StoreError {
    classify(prepare_is_transient(&error), error.to_string())
}

/// A failed connection's kind: no host reachable (the first metadata read fails) is worth
/// retrying; a bad configuration (a keyspace that does not exist, an illegal option) is not.
pub fn connect(error: NewSessionError) -> StoreError {
    let transient = matches!(
        &error,
        NewSessionError::FailedToResolveAnyHostname(_) | NewSessionError::MetadataError(_)
    );
    classify(transient, error.to_string())
}

/// A pool with no connection (every node down) is worth retrying.
pub fn pool(error: ConnectionPoolError) -> StoreError {
    StoreError::Unavailable(format!("ScyllaDB: {error}"))
}

fn classify(transient: bool, message: String) -> StoreError {
    if transient {
        StoreError::Unavailable(format!("ScyllaDB: {message}"))
    } else {
        StoreError::Rejected(format!("ScyllaDB: {message}"))
    }
}
