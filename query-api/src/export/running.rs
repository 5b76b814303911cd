//! What bounds a running export besides its window: how many one tenant (an organization in one
//! environment) may run at once, and the key it runs for staying valid while it streams.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use edge::{ApiError, AuthContext};
use schemas::ErrorCode;
use schemas::OrgId;
use schemas::credential::Environment;
use store::{CredentialHash, Store};

/// How often, at most, a streaming export reads its key again (before a page, once this long
/// has passed since the last read): a key revoked (or past its rotation's grace) stops its
/// exports within this, a page and what the sockets hold, well inside two seconds. Short, since
/// a client reading fast takes many megabytes in a second; a page is about a megabyte, so an
/// export pays at most one read of its key per page (from the row cache, on the embedded and
/// PostgreSQL stores).
pub const KEY_CHECK_INTERVAL: Duration = Duration::from_millis(25);

/// The tenant whose exports are counted together: keys are free to mint, so a cap per key
/// would be a cap on nothing.
type Tenant = (OrgId, Environment);

/// The exports each tenant is running, bounded by the operator's `--export-concurrency`.
pub struct Slots {
    limit: usize,
    running: Mutex<HashMap<Tenant, usize>>,
}

impl Slots {
    pub fn new(limit: usize) -> Arc<Slots> {
        Arc::new(Slots {
            limit: limit.max(1),
            running: Mutex::default(),
        })
    }

    /// A slot for `tenant` while the returned guard lives, or the 429 beyond the cap.
    pub(super) fn take(self: &Arc<Self>, tenant: Tenant) -> Result<Slot, ApiError> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let count = running.entry(tenant).or_default();
        if *count >= self.limit {
            let mut e = ApiError::new(
                ErrorCode::RateLimited,
                format!(
                    "this organization runs {} exports in this environment already, whichever keys started them; wait for one to finish",
                    self.limit
                ),
            )
            .with_next_action("retry");
            e.retry_after = Some(5);
            return Err(e);
        }
        *count += 1;
        Ok(Slot {
            slots: Arc::clone(self),
            tenant,
        })
    }
}

/// One running export: freed when its body is done or dropped.
pub(super) struct Slot {
    slots: Arc<Slots>,
    tenant: Tenant,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut running = self
            .slots
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = running.get_mut(&self.tenant) {
            *count -= 1;
            if *count == 0 {
                running.remove(&self.tenant);
            }
        }
    }
}

/// The key an export streams for, read again every [`KEY_CHECK_INTERVAL`] while it streams:
/// authentication checked it once, at the request, and an export may run for minutes.
pub(super) struct KeyWatch {
    store: Store,
    hash: CredentialHash,
    checked: Instant,
}

impl KeyWatch {
    pub(super) fn new(store: Store, caller: &AuthContext) -> KeyWatch {
        KeyWatch {
            store,
            hash: caller.credential_hash,
            checked: Instant::now(),
        }
    }

    /// Whether the export may go on: its key still exists and is usable (not revoked, not past
    /// its rotation's grace). Read from the store at most once per interval; a store that
    /// fails to answer lets the export go on, as a failed read of rows would end it anyway.
    pub(super) async fn still_valid(&mut self) -> bool {
        if self.checked.elapsed() < KEY_CHECK_INTERVAL {
            return true;
        }
        self.checked = Instant::now();
        match self.store.find_api_key_by_hash(&self.hash).await {
            Ok(Some(key)) => edge::auth::key_is_usable(&key, schemas::time::now()).is_ok(),
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(error = %e, "export: its key could not be read again; it goes on");
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_runs_at_most_its_exports_at_once_whichever_keys_ask() {
        let slots = Slots::new(2);
        let (org, other) = (OrgId::generate(), OrgId::generate());
        let first = slots
            .take((org, Environment::Live))
            .expect("a first export");
        let _second = slots
            .take((org, Environment::Live))
            .expect("a second export");
        let refused = slots
            .take((org, Environment::Live))
            .err()
            .expect("a third is refused");
        assert_eq!(refused.code, ErrorCode::RateLimited);
        assert_eq!(refused.retry_after, Some(5));
        let _test = slots
            .take((org, Environment::Test))
            .expect("the other environment has its own");
        let _elsewhere = slots
            .take((other, Environment::Live))
            .expect("another organization has its own");
        drop(first);
        slots
            .take((org, Environment::Live))
            .expect("a finished export frees its slot");
    }
}
