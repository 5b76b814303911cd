//! The one retry helper of the roles that consume the log
//! (docs/architecture.md#conv-consumer-failures): a transient failure (the store or the log did not
//! answer) is retried with exponential backoff until it succeeds or the role shuts down, never
//! skipped; a permanent failure is handed back at once for the caller to deal with (the processor
//! dead-letters it). The processor and the dispatcher route every consumer-loop call that can fail
//! transiently through [`retry`], each counting the failures in its own metrics.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// The first wait after a failure; doubled after each further one.
const FIRST_WAIT: Duration = Duration::from_millis(50);
/// The longest wait between attempts: an outage is noticed within this once it ends.
const LONGEST_WAIT: Duration = Duration::from_secs(5);

/// Whether a failure may go away by itself (retry) or never will (give up on the record).
pub trait Transience {
    fn is_transient(&self) -> bool;
}

impl Transience for crate::LogError {
    fn is_transient(&self) -> bool {
        crate::LogError::is_transient(self)
    }
}

/// Told of each transient failure before the wait: what failed, the error, and how many
/// failures in a row that makes. Each role counts and logs them as its own.
pub type OnFailure = fn(&'static str, &dyn std::fmt::Display, u32);

/// How a retried operation ended.
#[derive(Debug)]
pub enum Retried<T, E> {
    Done(T),
    /// A permanent failure: retrying cannot help.
    Failed(E),
    /// Shutdown came while waiting to retry: the operation's effect is unknown, so nothing
    /// that depends on it may be committed.
    ShuttingDown,
}

/// One attempt of a retried operation: a future borrowing the operation's state.
pub type Attempt<'s, T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 's>>;

/// Runs `op` on `state` until it succeeds or fails permanently, waiting between transient
/// failures (50 ms doubling to 5 s) and telling `on_failure` of each, with `what`. Cancelling
/// `shutdown` ends the wait, not an attempt in progress.
///
/// What an attempt borrows is passed in `state` (a tuple of references, say) rather than
/// captured, so the attempt's future may hold it, mutably too, and stay `Send`.
pub async fn retry<S: ?Sized, T, E>(
    what: &'static str,
    on_failure: OnFailure,
    shutdown: &CancellationToken,
    state: &mut S,
    mut op: impl for<'s> FnMut(&'s mut S) -> Attempt<'s, T, E>,
) -> Retried<T, E>
where
    E: Transience + std::fmt::Display,
{
    let mut wait = FIRST_WAIT;
    let mut failures = 0u32;
    loop {
        match op(state).await {
            Ok(done) => {
                if failures > 0 {
                    tracing::info!(what, failures, "succeeded after retrying");
                }
                return Retried::Done(done);
            }
            Err(e) if e.is_transient() => {
                failures += 1;
                on_failure(what, &e, failures);
                tokio::select! {
                    _ = shutdown.cancelled() => return Retried::ShuttingDown,
                    _ = tokio::time::sleep(wait) => {}
                }
                wait = (wait * 2).min(LONGEST_WAIT);
            }
            Err(e) => return Retried::Failed(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Fails(bool);
    impl Transience for Fails {
        fn is_transient(&self) -> bool {
            self.0
        }
    }
    impl std::fmt::Display for Fails {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "transient: {}", self.0)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_until_success() {
        let mut calls = 0;
        let out = retry(
            "test",
            |_, _, _| {},
            &CancellationToken::new(),
            &mut calls,
            |calls| {
                Box::pin(async move {
                    *calls += 1;
                    if *calls < 4 {
                        Err(Fails(true))
                    } else {
                        Ok(*calls)
                    }
                })
            },
        )
        .await;
        assert!(matches!(out, Retried::Done(4)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_permanent_failure_is_returned_at_once() {
        let mut calls = 0;
        let out: Retried<(), _> = retry(
            "test",
            |_, _, _| {},
            &CancellationToken::new(),
            &mut calls,
            |calls| {
                Box::pin(async move {
                    *calls += 1;
                    Err(Fails(false))
                })
            },
        )
        .await;
        assert!(matches!(out, Retried::Failed(Fails(false))));
        assert_eq!(calls, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_the_wait() {
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let out: Retried<(), _> = retry(
            "test",
            |_, _, _| {},
            &shutdown,
            &mut (),
            |_| Box::pin(async { Err(Fails(true)) }),
        )
        .await;
        assert!(matches!(out, Retried::ShuttingDown));
    }
}
