//! Expiry on ScyllaDB (docs/architecture.md#retention): rows go by their TTLs, set where a
//! row's lifetime is known when it is written (sessions, decisions, visitors, events and their
//! index rows: the tables' 90 days past the last write; collect sessions a day; handoffs an hour;
//! idempotency records at their expiry; Gate sessions a day after their delivery window). The
//! one thing a TTL cannot do is Gate's withdrawal of an unacknowledged signup's account and
//! agent token, which each step does from its index (`gate.rs`).

use async_trait::async_trait;
use schemas::time::Timestamp;

use super::ScyllaStore;
use crate::{Result, RetentionStore};

#[async_trait]
impl RetentionStore for ScyllaStore {
    /// `keep_since` is not used: the tables' TTL is the retention (`--retention` other than
    /// 90 days needs `default_time_to_live` altered to match; docs/operations.md#scylladb).
    async fn purge_expired(
        &self,
        now: Timestamp,
        _keep_since: Timestamp,
        budget: usize,
    ) -> Result<bool> {
        self.withdraw_unacknowledged(now, budget.max(1)).await
    }
}
