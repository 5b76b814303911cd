//! The authentication path's cache on PostgreSQL (docs/architecture.md#fleet-writes): the API
//! keys and organizations every request reads, kept a few seconds, and only while this process
//! listens on `vigil_credentials`, which the database notifies (triggers of migration 4) whenever
//! a key or an organization changes through any replica: every entry is dropped on each
//! notification. If the listening connection drops, the cache is bypassed until it is back, so a
//! revocation, rotation, scope change or suspension made anywhere counts on the next request
//! everywhere.
//!
//! A read that raced a change is never served: each entry carries the epoch its read began in,
//! and is served only while that epoch is current (every change raises it), so an entry put
//! back just after a change was heard is stale from the start.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures::StreamExt;
use schemas::credential::CredentialHash;
use schemas::ids::OrgId;
use tokio_postgres::AsyncMessage;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::{ApiKeyRecord, OrganizationRecord};

/// The channel the triggers of `schemas/sql/0004_fleet_writes.sql` notify.
pub const CHANNEL: &str = "vigil_credentials";
/// How long an entry is served: a bound on a notification that never arrives although the
/// connection looked alive.
const FRESH_FOR: Duration = Duration::from_secs(5);
/// Entries of each kind: the keys and organizations in use by a busy replica fit many times.
const CAPACITY: usize = 10_000;
/// How long after a dropped connection the listener connects again.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

pub(super) struct CredentialCache {
    keys: quick_cache::sync::Cache<CredentialHash, Entry<ApiKeyRecord>>,
    organizations: quick_cache::sync::Cache<OrgId, Entry<OrganizationRecord>>,
    /// Whether the listening connection is up: while not, nothing is served or kept.
    listening: AtomicBool,
    /// Raised by every change seen; a read keeps its answer only under the epoch it began in.
    epoch: AtomicU64,
}

/// A cached record: when it was read, and in which epoch its read began.
#[derive(Clone)]
struct Entry<T> {
    record: T,
    at: Instant,
    epoch: u64,
}

impl CredentialCache {
    fn new() -> Self {
        CredentialCache {
            keys: quick_cache::sync::Cache::new(CAPACITY),
            organizations: quick_cache::sync::Cache::new(CAPACITY),
            listening: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
        }
    }

    /// The epoch a read begins in, to hand back to `keep_*`.
    pub(super) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    pub(super) fn key(&self, hash: &CredentialHash) -> Option<ApiKeyRecord> {
        self.fresh(self.keys.get(hash))
    }

    pub(super) fn organization(&self, id: OrgId) -> Option<OrganizationRecord> {
        self.fresh(self.organizations.get(&id))
    }

    fn fresh<T>(&self, entry: Option<Entry<T>>) -> Option<T> {
        let entry = entry?;
        (self.listening.load(Ordering::SeqCst)
            && entry.epoch == self.epoch()
            && entry.at.elapsed() < FRESH_FOR)
            .then_some(entry.record)
    }

    pub(super) fn keep_key(&self, hash: CredentialHash, key: &ApiKeyRecord, read_in: u64) {
        if self.keeps(read_in) {
            self.keys.insert(hash, self.entry(key, read_in));
        }
    }

    pub(super) fn keep_organization(&self, org: &OrganizationRecord, read_in: u64) {
        if self.keeps(read_in) {
            self.organizations.insert(org.id, self.entry(org, read_in));
        }
    }

    fn entry<T: Clone>(&self, record: &T, epoch: u64) -> Entry<T> {
        Entry {
            record: record.clone(),
            at: Instant::now(),
            epoch,
        }
    }

    /// A key's entry goes (its last use changed here, which nothing notifies).
    pub(super) fn forget_key(&self, hash: &CredentialHash) {
        self.keys.remove(hash);
    }

    fn keeps(&self, read_in: u64) -> bool {
        self.listening.load(Ordering::SeqCst) && self.epoch() == read_in
    }

    /// Something changed (here or at another replica): every entry goes, and reads in flight
    /// keep nothing.
    pub(super) fn changed(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.keys.clear();
        self.organizations.clear();
    }

    fn set_listening(&self, on: bool) {
        // Cleared either way: what was kept while changes could not be heard is not trusted.
        self.listening.store(on, Ordering::SeqCst);
        self.changed();
    }
}

/// A cache fed by a connection that listens on [`CHANNEL`], reconnecting while the store is in
/// use; the task ends once the cache is dropped.
pub(super) fn start(
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
) -> Arc<CredentialCache> {
    let cache = Arc::new(CredentialCache::new());
    tokio::spawn(listen(config, tls, Arc::downgrade(&cache)));
    cache
}

async fn listen(
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    cache: Weak<CredentialCache>,
) {
    while cache.strong_count() > 0 {
        match config.connect(tls.clone()).await {
            Ok((client, mut connection)) => {
                let (notified, mut notifications) = tokio::sync::mpsc::unbounded_channel();
                // The connection's messages (notifications among them) arrive only while it is
                // polled; it ends, and the channel with it, when the connection drops.
                let driver = tokio::spawn(async move {
                    let mut messages =
                        futures::stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(Ok(message)) = messages.next().await {
                        if matches!(message, AsyncMessage::Notification(_))
                            && notified.send(()).is_err()
                        {
                            break;
                        }
                    }
                });
                match client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
                    Ok(()) => {
                        if let Some(cache) = cache.upgrade() {
                            cache.set_listening(true);
                            tracing::info!("store: credential cache on (listening for changes)");
                        }
                        loop {
                            let heard =
                                tokio::time::timeout(Duration::from_secs(5), notifications.recv())
                                    .await;
                            let Some(cache) = cache.upgrade() else { break };
                            match heard {
                                Ok(Some(())) => cache.changed(),
                                Ok(None) => break,
                                // Quiet: is the connection still alive? One that died without
                                // a word (a half-open socket) would hide every change.
                                Err(_) => {
                                    let alive = tokio::time::timeout(
                                        Duration::from_secs(2),
                                        client.simple_query("SELECT 1"),
                                    )
                                    .await;
                                    if !matches!(alive, Ok(Ok(_))) {
                                        break;
                                    }
                                }
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %super::described(&e), "store: cannot listen for credential changes; reading keys uncached")
                    }
                }
                driver.abort();
            }
            Err(e) => {
                tracing::debug!(error = %super::described(&e), "store: the credential listener cannot connect")
            }
        }
        if let Some(cache) = cache.upgrade()
            && cache.listening.load(Ordering::SeqCst)
        {
            cache.set_listening(false);
            tracing::warn!(
                "store: credential listener lost; reading keys uncached until it is back"
            );
        }
        tokio::time::sleep(RECONNECT_AFTER).await;
    }
}
