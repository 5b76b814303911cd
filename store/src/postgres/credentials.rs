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
//!
//! A notification reaches the other replicas a little after the change's commit, so the replica
//! that made a change waits before answering until every live listener has heard it
//! ([`CredentialCache::changed_here`]): it sends a barrier notification after its commit, each
//! listener records the barriers it hears in `credential_barriers_heard` once it has dropped its
//! entries, and notifications reach a listener in commit order. A listener that does not answer
//! within [`HEARD_WITHIN`] (its replica is stuck, or its connection half-open) is not waited
//! for longer; its entries still age out within [`FRESH_FOR`], and it stops serving them once
//! its heartbeat fails. docs/architecture.md#fleet-writes lists these bounds.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use deadpool_postgres::{GenericClient, Pool};
use futures::StreamExt;
use schemas::credential::CredentialHash;
use schemas::ids::OrgId;
use tokio_postgres::AsyncMessage;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::db_error;
use crate::{ApiKeyRecord, OrganizationRecord};

/// The channel the triggers of `store/sql/0004_fleet_writes.sql` notify.
pub const CHANNEL: &str = "vigil_credentials";
/// How long an entry is served: a bound on a notification that never arrives although the
/// connection looked alive.
const FRESH_FOR: Duration = Duration::from_secs(5);
/// Entries of each kind: the keys and organizations in use by a busy replica fit many times.
const CAPACITY: usize = 10_000;
/// How long after a dropped connection the listener connects again.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);
/// How often a listener shows it is alive (which also checks its connection), whatever the
/// traffic: a writer waits only for listeners seen within [`LIVE_FOR`].
const HEARTBEAT: Duration = Duration::from_secs(2);
/// How long after its last heartbeat a listener still counts as live.
const LIVE_FOR: &str = "10 seconds";
/// How long a change waits at most for the other replicas' listeners to hear it.
pub(super) const HEARD_WITHIN: Duration = Duration::from_secs(2);
/// The schema of the tables this connection's statements reach: notifications are
/// database-wide, so each carries the schema it is about, and a listener heeds only its own.
const TABLES_SCHEMA: &str = "SELECT n.nspname::text FROM pg_class c \
     JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = 'credential_listeners'::regclass";

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

    /// This replica committed a change to a key or an organization: it counts here at once, and
    /// the call returns once every live listener (this replica's own among them) has heard it,
    /// or after [`HEARD_WITHIN`]. The change is committed either way, so a failure to confirm is
    /// logged, not returned.
    pub(super) async fn changed_here(&self, pool: &Pool) {
        self.changed();
        let barrier = schemas::ids::next_ulid().to_string();
        if let Err(e) = heard_everywhere(pool, &barrier).await {
            tracing::warn!(error = %e, "store: cannot confirm that every replica heard a credential change; their cached entries expire within seconds");
        }
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

/// Sends `barrier` on [`CHANNEL`] and waits until every listener live when it was sent has
/// recorded it, at most [`HEARD_WITHIN`]. Live: it showed itself within [`LIVE_FOR`] and its
/// connection's server process still runs. Listeners are taken before the barrier is sent, so
/// each began listening before it and hears it; one that records itself later began after this
/// change's commit and holds nothing older (`set_listening` empties the cache).
///
/// Each statement takes a connection of its own from the pool rather than one being held
/// through the wait: with a listener stuck the wait lasts [`HEARD_WITHIN`], and the changes
/// waiting at once would otherwise hold the whole pool from every other request. Waiting for a
/// connection counts against the same bound, and the barrier's records are cleared after the
/// answer, so a full pool does not hold the change's answer longer either.
async fn heard_everywhere(pool: &Pool, barrier: &str) -> crate::Result<()> {
    let deadline = tokio::time::Instant::now() + HEARD_WITHIN;
    let connection = || async {
        tokio::time::timeout_at(deadline, super::pooled(pool))
            .await
            .unwrap_or_else(|_| {
                Err(crate::StoreError::Unavailable(format!(
                    "no PostgreSQL connection within {HEARD_WITHIN:?}"
                )))
            })
    };
    let client = connection().await?;
    let listeners: Vec<String> = client
        .query(
            &format!(
                "SELECT listener FROM credential_listeners
                 WHERE seen_at > now() - interval '{LIVE_FOR}'"
            ),
            &[],
        )
        .await
        .map_err(db_error)?
        .iter()
        .map(|row| row.get(0))
        .collect();
    client
        .execute(
            &format!(
                "SELECT pg_notify($1, schema || '/' || $2) FROM ({TABLES_SCHEMA}) AS s(schema)"
            ),
            &[&CHANNEL, &barrier],
        )
        .await
        .map_err(db_error)?;
    drop(client);
    let mut pause = Duration::from_millis(1);
    let missing = loop {
        let missing: i64 = connection()
            .await?
            .query_one(
                &format!(
                    "SELECT count(*) FROM credential_listeners l
                     WHERE l.listener = ANY($1)
                       AND l.seen_at > now() - interval '{LIVE_FOR}'
                       AND EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = l.backend_pid)
                       AND NOT EXISTS (SELECT 1 FROM credential_barriers_heard h
                                       WHERE h.barrier = $2 AND h.listener = l.listener)"
                ),
                &[&listeners, &barrier],
            )
            .await
            .map_err(db_error)?
            .get(0);
        if missing == 0 || tokio::time::Instant::now() >= deadline {
            break missing;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(32));
    };
    if missing > 0 {
        tracing::warn!(
            listeners = missing,
            "store: a credential change was not heard by every replica within {HEARD_WITHIN:?}; their cached entries expire within {FRESH_FOR:?}"
        );
    }
    // Cleared after the answer: the records are the wait's own, and a later change clears
    // any that remain.
    let (pool, barrier) = (pool.clone(), barrier.to_owned());
    tokio::spawn(async move {
        if let Err(e) = forget_barrier(&pool, &barrier).await {
            tracing::debug!(error = %e, "store: clearing a credential barrier's records");
        }
    });
    Ok(())
}

/// Deletes `barrier`'s records, any a late listener left behind, and listeners long gone.
async fn forget_barrier(pool: &Pool, barrier: &str) -> crate::Result<()> {
    let client = super::pooled(pool).await?;
    client
        .execute(
            "DELETE FROM credential_barriers_heard
             WHERE barrier = $1 OR heard_at < now() - interval '1 minute'",
            &[&barrier],
        )
        .await
        .map_err(db_error)?;
    client
        .execute(
            "DELETE FROM credential_listeners WHERE seen_at < now() - interval '1 minute'",
            &[],
        )
        .await
        .map_err(db_error)?;
    Ok(())
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
    // The name this task last listened under, to remove once it listens under a new one.
    let mut previous: Option<String> = None;
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
                        if let AsyncMessage::Notification(n) = message
                            && notified.send(n.payload().to_owned()).is_err()
                        {
                            break;
                        }
                    }
                });
                // A fresh name per connection: a listener that reconnects has heard nothing
                // that was sent while it was away, so it is a new listener (and the old one's
                // row goes, or writers would wait for it while its server process lingers).
                let listener = schemas::ids::next_ulid().to_string();
                let listened = async {
                    client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
                    if let Some(old) = previous.take() {
                        forget_listener(&client, &old).await?;
                    }
                    let schema: String = client.query_one(TABLES_SCHEMA, &[]).await?.get(0);
                    Ok::<_, tokio_postgres::Error>(schema)
                };
                match listened.await {
                    Ok(schema) if show_alive(&client, &listener).await => {
                        previous = Some(listener.clone());
                        if let Some(cache) = cache.upgrade() {
                            cache.set_listening(true);
                            tracing::info!("store: credential cache on (listening for changes)");
                        }
                        let heard = Heard {
                            client: &client,
                            listener: &listener,
                            schema: &schema,
                        };
                        heard.until_lost(&mut notifications, &cache).await;
                        if cache.strong_count() == 0 {
                            // The store is gone: nobody need wait for this listener any more.
                            let _ = forget_listener(&client, &listener).await;
                        }
                    }
                    Ok(_) => {}
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

/// Removes `listener`'s row, so no writer waits for it.
async fn forget_listener(
    client: &tokio_postgres::Client,
    listener: &str,
) -> std::result::Result<u64, tokio_postgres::Error> {
    client
        .execute(
            "DELETE FROM credential_listeners WHERE listener = $1",
            &[&listener],
        )
        .await
}

/// Records (or refreshes) this listener in `credential_listeners`, which is also the proof that
/// the connection is alive; false, with a warning, if it cannot.
async fn show_alive(client: &tokio_postgres::Client, listener: &str) -> bool {
    let shown = tokio::time::timeout(
        Duration::from_secs(2),
        client.execute(
            "INSERT INTO credential_listeners (listener, backend_pid, seen_at)
             VALUES ($1, pg_backend_pid(), now())
             ON CONFLICT (listener) DO UPDATE SET seen_at = now()",
            &[&listener],
        ),
    )
    .await;
    match shown {
        Ok(Ok(_)) => true,
        Ok(Err(e)) => {
            tracing::warn!(error = %super::described(&e), "store: the credential listener cannot record itself; reading keys uncached");
            false
        }
        Err(_) => false,
    }
}

/// One listening connection, in the schema whose tables it serves.
struct Heard<'a> {
    client: &'a tokio_postgres::Client,
    listener: &'a str,
    schema: &'a str,
}

impl Heard<'_> {
    /// Hears changes until the connection or the cache is gone: each notification about this
    /// schema drops every entry, and a barrier is recorded as heard only after that. The
    /// heartbeat runs every [`HEARTBEAT`] however busy the channel is.
    async fn until_lost(
        &self,
        notifications: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
        cache: &Weak<CredentialCache>,
    ) {
        let mut beat = tokio::time::Instant::now() + HEARTBEAT;
        loop {
            let heard = tokio::time::timeout_at(beat, notifications.recv()).await;
            let Some(cache) = cache.upgrade() else { return };
            match heard {
                Ok(Some(payload)) => {
                    // `<schema>` from the triggers, `<schema>/<barrier>` from a writer.
                    let (schema, barrier) = match payload.split_once('/') {
                        Some((schema, barrier)) => (schema, Some(barrier)),
                        None => (payload.as_str(), None),
                    };
                    if schema != self.schema {
                        continue;
                    }
                    cache.changed();
                    if let Some(barrier) = barrier
                        && self.record(barrier).await.is_err()
                    {
                        return;
                    }
                }
                Ok(None) => return,
                // A connection that died without a word (a half-open socket) would hide every
                // change: the heartbeat finds it out.
                Err(_) => {
                    if !show_alive(self.client, self.listener).await {
                        return;
                    }
                    beat = tokio::time::Instant::now() + HEARTBEAT;
                }
            }
        }
    }

    async fn record(&self, barrier: &str) -> std::result::Result<u64, tokio_postgres::Error> {
        self.client
            .execute(
                "INSERT INTO credential_barriers_heard (barrier, listener)
                 VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&barrier, &self.listener],
            )
            .await
    }
}
