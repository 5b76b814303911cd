//! The facts of a collect session that never change once it is opened (whose it is, when it
//! expires, its batch key), kept in memory for the sessions seen lately: a batch would
//! otherwise read and decode the session's row and open its sealed key every time, which was
//! a tenth of the server's work with 4,096 sessions sending at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use edge::{ApiError, AuthContext};
use schemas::SessionId;
use schemas::credential::Environment;
use schemas::ids::OrgId;
use schemas::time::Timestamp;

use crate::IngestState;
use crate::sessions::{check_owned, own_session};
use crate::transport::open_key;

/// How many sessions are kept: about 100 bytes each.
const CAPACITY: usize = 65_536;

/// A collect session as a batch needs it.
pub struct Opened {
    pub organization_id: OrgId,
    pub environment: Environment,
    pub expires_at: Timestamp,
    /// The session's AES-256-GCM batch key, opened.
    pub batch_key: [u8; 32],
    /// The highest batch number this process has seen accepted, so a replay is refused before
    /// it reaches the log. The store's counter (`advance_collect_seq`) stays the authority.
    last_seq: AtomicU64,
}

impl Opened {
    pub fn last_seq(&self) -> u64 {
        self.last_seq.load(Ordering::Relaxed)
    }

    /// Records that batch `seq` was accepted.
    pub fn accepted(&self, seq: u64) {
        self.last_seq.fetch_max(seq, Ordering::Relaxed);
    }
}

pub struct OpenedSessions {
    cache: quick_cache::sync::Cache<SessionId, Arc<Opened>>,
}

impl Default for OpenedSessions {
    fn default() -> Self {
        OpenedSessions {
            cache: quick_cache::sync::Cache::new(CAPACITY),
        }
    }
}

impl OpenedSessions {
    /// The caller's own unexpired session `id`, as [`own_session`] answers it (another
    /// organization's or environment's is a 404, an expired one a 410), from memory when it
    /// was seen lately.
    pub async fn get(
        &self,
        state: &IngestState,
        ctx: &AuthContext,
        id: SessionId,
    ) -> Result<Arc<Opened>, ApiError> {
        if let Some(opened) = self.cache.get(&id) {
            check_owned(
                ctx,
                opened.organization_id,
                opened.environment,
                opened.expires_at,
            )?;
            return Ok(opened);
        }
        let session = own_session(state, ctx, id).await?;
        let opened = Arc::new(Opened {
            organization_id: session.organization_id,
            environment: session.environment,
            expires_at: session.expires_at,
            batch_key: open_key(state, id, &session.sealed_batch_key, "batch")?,
            last_seq: AtomicU64::new(session.last_seq),
        });
        self.cache.insert(id, Arc::clone(&opened));
        Ok(opened)
    }
}
