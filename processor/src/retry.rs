//! The processor's use of the log roles' one retry helper ([`log::retry`]), its failures
//! counted in `vigil_processor_retries_total` and logged as the processor's.

use tokio_util::sync::CancellationToken;

pub use log::retry::{Attempt, Retried, Transience};

/// [`log::retry::retry`], counting failures as the processor's.
pub async fn retry<S: ?Sized, T, E>(
    what: &'static str,
    shutdown: &CancellationToken,
    state: &mut S,
    op: impl for<'s> FnMut(&'s mut S) -> Attempt<'s, T, E>,
) -> Retried<T, E>
where
    E: Transience + std::fmt::Display,
{
    log::retry::retry(what, crate::telemetry::retried, shutdown, state, op).await
}
