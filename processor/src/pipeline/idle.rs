//! Idle finalisation (docs/architecture.md#decisions): a session that goes `idle_after` without a
//! batch has its decision made final. The sweep finds such sessions in the store's idle index and
//! sends each one an `idle` record through the batches log, keyed by its session, so the
//! finalisation is processed in order with the session's batches by whichever processor owns that
//! partition (never beside it): a batch that arrives before the `idle` record keeps the session
//! open. Each processor of a fleet sends the records of the sessions of the partitions it holds, so
//! one record goes per idle session, not one per processor.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use schemas::SessionId;
use schemas::collect::{BATCH_RECORD_SCHEMA, BatchRecord, BatchRequest, ServerRecord};
use schemas::raw::RawJson;
use schemas::time::Timestamp;
use tokio_util::sync::CancellationToken;

use super::Pipeline;

/// How many idle sessions one sweep sends at most; the next sweep takes the rest.
const SWEEP_LIMIT: usize = 1_000;

/// Whether the session, last changed at `updated_at`, is still as idle as when the sweep sent
/// its record with `idle_since` (nothing processed for it since).
pub fn still_idle(idle_since: Timestamp, updated_at: Timestamp) -> bool {
    updated_at <= idle_since
}

/// How often the sweep looks: a tenth of the idle time, between 50 ms and a minute.
fn interval(idle_after: Duration) -> Duration {
    (idle_after / 10).clamp(Duration::from_millis(50), Duration::from_secs(60))
}

/// The partitions of the batches topic this processor holds, as its consumer last said.
#[derive(Clone, Default)]
pub struct Owned(Arc<Mutex<Vec<u32>>>);

impl Owned {
    pub fn set(&self, partitions: &[u32]) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = partitions.to_vec();
    }

    fn get(&self) -> Vec<u32> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Whether the session's records go to one of `owned` of the topic's `partitions` (the
/// partition its key picks, as ingest appends it).
fn is_owned(session: SessionId, owned: &[u32], partitions: u32) -> bool {
    owned.contains(&log::partition_for(
        session.to_string().as_bytes(),
        partitions,
    ))
}

/// Runs until `shutdown` is cancelled.
pub async fn sweep(pipeline: Pipeline, owned: Owned, shutdown: CancellationToken) {
    let Ok(idle_after) = chrono::TimeDelta::from_std(pipeline.idle_after) else {
        tracing::error!("processor: the idle time is too large; sessions are never idle");
        return;
    };
    // Sessions already sent their record, by the `idle_since` sent: not sent again while the
    // processor catches up.
    let mut sent: HashMap<SessionId, Timestamp> = HashMap::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(interval(pipeline.idle_after)) => {}
        }
        // Between a rebalance's revocation and its assignment a processor may hold nothing:
        // the next sweep sends what this one leaves.
        let held = owned.get();
        if held.is_empty() {
            continue;
        }
        let Ok(partitions) = pipeline.log.partitions(&pipeline.batches).await else {
            continue;
        };
        let now = schemas::time::now();
        let idle = match pipeline
            .store
            .list_idle_sessions(now - idle_after, SWEEP_LIMIT)
            .await
        {
            Ok(idle) => idle,
            Err(e) => {
                tracing::warn!(error = %e, "processor: listing idle sessions; retrying");
                continue;
            }
        };
        sent.retain(|id, _| idle.iter().any(|s| s.session_id == *id));
        for session in idle {
            if !is_owned(session.session_id, &held, partitions) {
                continue;
            }
            if sent.get(&session.session_id) == Some(&session.idle_since) {
                continue;
            }
            let record = BatchRecord {
                schema: BATCH_RECORD_SCHEMA,
                organization_id: session.organization_id,
                environment: session.environment,
                session_id: session.session_id,
                seq: 0,
                received_at: now,
                request: BatchRequest::default(),
                kind: None,
                observations: match RawJson::encode(&ServerRecord::Idle {
                    idle_since: session.idle_since,
                }) {
                    Ok(observations) => observations,
                    Err(e) => {
                        tracing::error!(error = %e, "processor: encoding an idle record");
                        continue;
                    }
                },
            };
            let Ok(payload) = serde_json::to_vec(&record) else {
                continue;
            };
            match pipeline
                .log
                .append(
                    &pipeline.batches,
                    session.session_id.to_string().as_bytes(),
                    &payload,
                )
                .await
            {
                Ok(_) => {
                    tracing::debug!(session = %session.session_id, "processor: finalising an idle session");
                    sent.insert(session.session_id, session.idle_since);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "processor: sending an idle record; retrying later");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    #[test]
    fn a_session_changed_after_the_sweep_looked_is_not_idle() {
        let since = schemas::time::now();
        assert!(still_idle(since, since));
        assert!(still_idle(since, since - TimeDelta::seconds(1)));
        assert!(!still_idle(since, since + TimeDelta::milliseconds(1)));
    }

    #[test]
    fn each_session_is_swept_by_the_holder_of_its_partition_only() {
        let sessions: Vec<SessionId> = (0..200).map(|_| SessionId::generate()).collect();
        let (first, second) = ([0, 1, 2, 3], [4, 5, 6, 7]);
        for s in &sessions {
            assert!(
                is_owned(*s, &first, 8) != is_owned(*s, &second, 8),
                "{s} is swept by exactly one of two processors splitting 8 partitions"
            );
            assert!(is_owned(*s, &[0, 1, 2, 3, 4, 5, 6, 7], 8));
        }
        assert!(sessions.iter().any(|s| is_owned(*s, &first, 8)));
        assert!(sessions.iter().any(|s| is_owned(*s, &second, 8)));
    }

    #[test]
    fn the_sweep_looks_ten_times_per_idle_period_within_bounds() {
        assert_eq!(interval(Duration::from_secs(1800)), Duration::from_secs(60));
        assert_eq!(interval(Duration::from_secs(2)), Duration::from_millis(200));
        assert_eq!(
            interval(Duration::from_millis(10)),
            Duration::from_millis(50)
        );
    }
}
