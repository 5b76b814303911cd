//! The retention sweeps (docs/architecture.md#retention): one drops sessions, decisions, events and
//! visitors not written or seen within `--retention`, and idempotency records, handoff openings and
//! collect sessions past their own expiry; the other drops the embedded log's records older than
//! `--log-retention`, short of what a consumer group still running has yet to read. Both go a small
//! step at a time so no write waits long behind them.

use std::future::Future;
use std::time::Duration;

use store::Store;
use tokio_util::sync::CancellationToken;

/// Rows of each kind one store step touches at most: a step holds the store's writer for a few
/// milliseconds, and one batch stays small.
pub const STEP_BUDGET: usize = 256;
/// Records one log step drops at most: a tombstone each, a few milliseconds of writing. A
/// record is one batch of one session, so a pass keeps well ahead of the rate they arrive at.
pub const LOG_STEP_BUDGET: usize = 2048;
/// The pause between two steps of one pass, so writes queued behind the writer get in.
const BETWEEN_STEPS: Duration = Duration::from_millis(5);

/// How often a pass starts: a tenth of the retention, so a row outlives it by at most that
/// much, between 100 ms (tests use retentions of seconds) and a minute.
fn interval(retention: Duration) -> Duration {
    (retention / 10).clamp(Duration::from_millis(100), Duration::from_secs(60))
}

/// Runs store passes until `shutdown`. A failed step is logged and retried at the next pass:
/// the rows stay until then, which costs disk, never data that should be kept.
pub async fn sweep(store: Store, retention: Duration, shutdown: CancellationToken) {
    let Ok(retention_delta) = chrono::TimeDelta::from_std(retention) else {
        tracing::error!(
            ?retention,
            "retention sweep: --retention is too large; nothing expires"
        );
        return;
    };
    passes("store", retention, &shutdown, || async {
        let now = schemas::time::now();
        store
            .purge_expired(now, now - retention_delta, STEP_BUDGET)
            .await
            .map_err(|e| e.to_string())
    })
    .await;
}

/// Runs log passes until `shutdown`. For the embedded log: on Kafka a step does nothing (the
/// brokers keep each topic as its own `retention.ms` says), so the server does not run it.
pub async fn sweep_log(log: log::Log, retention: Duration, shutdown: CancellationToken) {
    passes("log", retention, &shutdown, || async {
        log.expire(retention, LOG_STEP_BUDGET)
            .await
            .map_err(|e| e.to_string())
    })
    .await;
}

/// Every `interval(retention)`, runs `step` until it answers that nothing more expired (or
/// fails), counting each step under `of`.
async fn passes<F, Fut>(
    of: &'static str,
    retention: Duration,
    shutdown: &CancellationToken,
    mut step: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, String>>,
{
    loop {
        loop {
            match step().await {
                Ok(more) => {
                    edge::metrics::retention_step(of, more);
                    if !more {
                        break;
                    }
                }
                Err(e) => {
                    edge::metrics::retention_step_failed(of, &e);
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
