//! The retention sweep (D23): drops sessions, decisions, events and visitors not written or
//! seen within `--retention`, and idempotency records, handoff openings and collect sessions past
//! their own expiry, a small step at a time so no write waits long behind it.

use std::time::Duration;

use store::Store;
use tokio_util::sync::CancellationToken;

/// Rows of each kind one step touches at most: a step holds the store's writer for a few
/// milliseconds, and one batch stays small.
pub const STEP_BUDGET: usize = 256;
/// The pause between two steps of one pass, so writes queued behind the writer get in.
const BETWEEN_STEPS: Duration = Duration::from_millis(5);

/// How often a pass starts: a tenth of the retention, so a row outlives it by at most that
/// much, between 100 ms (tests use retentions of seconds) and a minute.
fn interval(retention: Duration) -> Duration {
    (retention / 10).clamp(Duration::from_millis(100), Duration::from_secs(60))
}

/// Runs passes until `shutdown`. A failed step is logged and retried at the next pass: the
/// rows stay until then, which costs disk, never data that should be kept.
pub async fn sweep(store: Store, retention: Duration, shutdown: CancellationToken) {
    let Ok(retention_delta) = chrono::TimeDelta::from_std(retention) else {
        tracing::error!(
            ?retention,
            "retention sweep: --retention is too large; nothing expires"
        );
        return;
    };
    loop {
        loop {
            let now = schemas::time::now();
            let keep_since = now - retention_delta;
            match store.purge_expired(now, keep_since, STEP_BUDGET).await {
                Ok(more) => {
                    edge::metrics::retention_step(more);
                    if !more {
                        break;
                    }
                }
                Err(e) => {
                    edge::metrics::retention_step_failed(&e.to_string());
                    break;
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(BETWEEN_STEPS) => {}
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(interval(retention)) => {}
        }
    }
}
