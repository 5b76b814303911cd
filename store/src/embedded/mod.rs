//! The embedded backend: one fjall keyspace per CQL table in `store/cql/`, keys laid out as
//! partition key then clustering key, and every acknowledged write fsynced before it returns.
//!
//! Layout (see `store/cql/README.md`): fixed-width binary key parts, so a partition is a
//! contiguous prefix and clustering order is byte order; values are the JSON of the record types
//! (lookup tables hold small JSON rows named like their CQL columns; settings hold the raw blob).
//!
//! Concurrency: the store is owned by one process (fjall also locks the directory), so a single
//! `std::sync::Mutex` serialising read-check-write gives what ScyllaDB's lightweight transactions
//! (`IF NOT EXISTS` / `IF EXISTS`) give the distributed backend. Every write takes it, not only
//! the conditional ones: `touch_api_key` and `update_api_key` are read-modify-writes, and
//! without it a write racing them could be undone (a touch rolled back, a revocation or a
//! rotation lost). fjall serialises commits on its journal anyway, so the mutex costs little
//! write parallelism. The one exception is ingest's batch counter, raised for every accepted
//! batch: in memory, and written behind to a table of its own (`seqs`, `COLLECT_SEQS`). It and
//! the `collect_sessions` rows have a lock of their own (`collect_rows`), which every writer of
//! them holds. Reads take neither (a read of a counter locks the map of those raised
//! in memory for a moment). A plain keyspace read sees the newest version of a key,
//! which includes a batch's rows while that batch is still being applied; so every read of a
//! table written together with another goes through a database snapshot, which sees only
//! whole, published batches (a session row never without its decision, an anchor index row
//! never without its visitor).
//!
//! Expiry (docs/architecture.md#retention): where ScyllaDB has TTLs, every save of a session, event
//! or visitor also writes a row of `expiry_queue`, keyed by the time of that write, so
//! `purge_expired` finds expired rows by reading the queue's oldest keys, a bounded step at a time,
//! never a whole table.
//!
//! The authentication hot path's reads (`find_key_and_organization`, and the
//! `find_api_key_by_hash` and `get_organization` it is made of) are served from an exact cache of
//! decoded rows (`row_cache`), which every write of those tables
//! invalidates around its commit. It is exact only because this process is the directory's
//! sole writer; see `row_cache` for why, and for the protocol that keeps a racing reader from
//! caching a row the write replaced.
//!
//! Code layout: this file holds the store and its tables, opening, the writer, the shared read
//! and row-encoding helpers, and the `StoreBackend` impl, each of whose methods hands over to
//! the inherent method of the same name in the module of its table family, the families of
//! `store/cql/`: `organizations` (organizations and API keys), `idempotency` (idempotency
//! records, handoff openings, settings), `collect` (collect sessions and pings), `sessions`
//! (sessions, decisions, the idle and verdict indexes), `events` (events, webhook endpoints and
//! deliveries), `visitors` (visitors, their anchor and order indexes), `gate` (Gate services,
//! sessions, accounts and agent tokens) and `expiry` (`purge_expired`: the expiry queue, the
//! walks of untimed tables, the index backfill). `key` has every table's key encoding.

mod collect;
mod events;
mod gate;
mod idempotency;
mod key;
mod memtables;
mod nonces;
mod organizations;
mod retention;
mod row_cache;
mod seqs;
mod sessions;
mod visitors;
mod writer;

use std::collections::HashMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use fjall::{
    Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch, PersistMode, Readable, Snapshot,
};
use schemas::disk::DiskReserve;
use schemas::ids::SessionId;
use serde::Serialize;
use serde::de::DeserializeOwned;

use self::row_cache::{Changes, RowCache};
use self::writer::WriterState;
use crate::{Result, StoreBackend, StoreError};

const ORGANIZATIONS: &str = "organizations";
const ORGANIZATIONS_BY_SLUG: &str = "organizations_by_slug";
const API_KEYS: &str = "api_keys";
const API_KEYS_BY_HASH: &str = "api_keys_by_hash";
const API_KEY_IDS: &str = "api_key_ids";
const IDEMPOTENCY_RECORDS: &str = "idempotency_records";
const HANDOFF_OPENINGS: &str = "handoff_openings";
const REPLAY_MARKS: &str = "replay_marks";
const SETTINGS: &str = "settings";
const COLLECT_SESSIONS: &str = "collect_sessions";
const COLLECT_PINGS: &str = "collect_pings";
/// Embedded only: each collect session's batch counter (`last_seq`, a big-endian `u64`), keyed
/// as its `collect_sessions` row, where PostgreSQL and ScyllaDB update the column in place:
/// ingest raises it for every batch, and rewriting the whole row (a kilobyte of JSON) each time
/// cost the journal, the memtable and compaction about 15 µs a batch.
const COLLECT_SEQS: &str = "collect_seqs";
const SESSIONS: &str = "sessions";
const SESSION_DECISIONS: &str = "session_decisions";
/// Embedded only: the settled part of each session's state (`SessionSave::settled`), keyed as
/// its `sessions` row.
const SESSION_SETTLED: &str = "session_settled";
/// Embedded only: each session's digest for the sessions export (`SessionRecord::digest`),
/// keyed as its `sessions` row, where PostgreSQL and ScyllaDB keep a column: the row is one
/// document here, so reading the digest alone needs a table of its own.
const SESSION_DIGESTS: &str = "session_digests";
const SESSIONS_IDLE: &str = "sessions_idle";
const EVENTS: &str = "events";
const WEBHOOK_ENDPOINTS: &str = "webhook_endpoints";
const WEBHOOK_DELIVERIES: &str = "webhook_deliveries";
/// Embedded only: the pending deliveries by when their next attempt is due (where ScyllaDB
/// would use a bucketed table of its own).
const WEBHOOK_DELIVERIES_DUE: &str = "webhook_deliveries_due";
const VISITORS: &str = "visitors";
const VISITORS_BY_ANCHOR: &str = "visitors_by_anchor";
const SESSIONS_BY_VERDICT: &str = "sessions_by_verdict";
const VISITORS_BY_LAST_SEEN: &str = "visitors_by_last_seen";
const VISITORS_BY_SEEN_COUNT: &str = "visitors_by_seen_count";
const VISITORS_BY_FIRST_SEEN: &str = "visitors_by_first_seen";
/// Embedded only: where ScyllaDB expires rows by TTL, this time-ordered index of the rows
/// retention bounds lets `purge_expired` find the expired ones without reading the tables.
const EXPIRY_QUEUE: &str = "expiry_queue";
const GATE_SERVICES: &str = "gate_services";
const GATE_SERVICES_BY_OWNER: &str = "gate_services_by_owner";
const GATE_REGISTRY: &str = "gate_registry";
const GATE_SESSIONS: &str = "gate_sessions";
const GATE_ACCOUNTS: &str = "gate_accounts";
const AGENT_TOKENS: &str = "agent_tokens";
const GATE_LOGIN_CODES: &str = "gate_login_codes";
/// Embedded only: each service's id with `-` and `_` alike, naming the service that claims it
/// (PostgreSQL has an index on the same expression).
const GATE_SERVICE_CLAIMS: &str = "gate_service_claims";

/// The store in a local directory (`embedded:<dir>`).
pub struct EmbeddedStore {
    /// Writes ingest's batch counters behind (see `seqs`). First, so it is dropped first: its
    /// last pass writes what is pending while the store is still open.
    seqs: seqs::SeqWriter,
    /// Frees flushed memtables outside fjall's locks (see `memtables`). Before `inner`, so its
    /// references to the tables go first.
    _memtables: memtables::MemtableReaper,
    // Behind an `Arc` so writes can move a handle into `spawn_blocking`.
    inner: Arc<Inner>,
    /// The nonces `spend_nonce` spent, in memory (see `nonces`).
    nonces: nonces::SeenNonces,
}

struct Inner {
    db: Database,
    /// Writes are refused while the disk is nearly full, before fjall sees them (see
    /// `schemas::disk` for why).
    space: DiskReserve,
    organizations: Keyspace,
    organizations_by_slug: Keyspace,
    api_keys: Keyspace,
    api_keys_by_hash: Keyspace,
    api_key_ids: Keyspace,
    idempotency_records: Keyspace,
    handoff_openings: Keyspace,
    replay_marks: Keyspace,
    settings: Keyspace,
    collect_sessions: Keyspace,
    collect_pings: Keyspace,
    collect_seqs: Keyspace,
    sessions: Keyspace,
    session_decisions: Keyspace,
    session_settled: Keyspace,
    session_digests: Keyspace,
    sessions_idle: Keyspace,
    events: Keyspace,
    webhook_endpoints: Keyspace,
    webhook_deliveries: Keyspace,
    webhook_deliveries_due: Keyspace,
    visitors: Keyspace,
    visitors_by_anchor: Keyspace,
    sessions_by_verdict: Keyspace,
    visitors_by_last_seen: Keyspace,
    visitors_by_seen_count: Keyspace,
    visitors_by_first_seen: Keyspace,
    expiry_queue: Keyspace,
    gate_services: Keyspace,
    gate_services_by_owner: Keyspace,
    gate_registry: Keyspace,
    gate_sessions: Keyspace,
    gate_accounts: Keyspace,
    agent_tokens: Keyspace,
    gate_login_codes: Keyspace,
    gate_service_claims: Keyspace,
    /// Serialises every write (see the module doc); guards only bookkeeping, not data.
    writer: Mutex<WriterState>,
    /// Serialises the writes of `collect_sessions` rows and their counters, which ingest's
    /// batch counters (`seqs`) write without the writer mutex: that mutex is held through a
    /// processor's whole save (its encoding and its fsync). Every writer of those rows holds
    /// this lock from its read to its commit; the others take it inside the writer mutex,
    /// never the other way round.
    collect_rows: Mutex<()>,
    /// Ingest's batch counters raised in memory and not yet written to `collect_seqs`, which
    /// every read of a counter takes first (see `seqs`).
    pending_seqs: Mutex<HashMap<SessionId, u64>>,
    /// Passes of the counters' writing thread that dropped written counters from memory (see
    /// `seqs`).
    seqs_written: AtomicU64,
    /// Decoded `api_keys` rows by credential hash and `organizations` rows by id. Every write
    /// of those two tables commits through [`Inner::commit`], which keeps it exact.
    cache: RowCache,
}

/// The keys of `keyspace` in `[start, end)`, at most `limit` rows, decoded.
fn scan<T: DeserializeOwned>(
    table: &'static str,
    snapshot: &Snapshot,
    keyspace: &Keyspace,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    limit: usize,
) -> Result<Vec<T>> {
    let mut rows = Vec::with_capacity(limit.min(1024));
    for guard in snapshot.range(keyspace, (start, end)).take(limit) {
        let value = guard.value().map_err(unavailable)?;
        rows.push(decode(table, &value)?);
    }
    Ok(rows)
}

/// The rows an index names: its keys in `range` (each ending in the row's id, inverted, as
/// every `id DESC` clustering does), at most `limit`, each row read by `row_key(id)` from the
/// same snapshot. The index and its rows are written in one batch, so a row missing from the
/// snapshot is damage.
fn read_indexed<T: DeserializeOwned>(
    snapshot: &Snapshot,
    (index, index_table): (&Keyspace, &'static str),
    range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
    limit: usize,
    (rows, row_table): (&Keyspace, &'static str),
    row_key: impl Fn(u128) -> [u8; 33],
) -> Result<Vec<T>> {
    let mut found = Vec::with_capacity(limit.min(1024));
    for guard in snapshot.range(index, range).take(limit) {
        let k = guard.key().map_err(unavailable)?;
        let corrupt = |detail: String| StoreError::Corrupt {
            table: index_table,
            detail,
        };
        let id = key::trailing_id(&k).ok_or_else(|| corrupt("a key of the wrong length".into()))?;
        match decode_row(row_table, snapshot.get(rows, row_key(id)))? {
            Some(row) => found.push(row),
            None => {
                return Err(corrupt(format!(
                    "an index row names a missing {row_table} row"
                )));
            }
        }
    }
    Ok(found)
}

/// The exclusive upper bound of every key beginning with `prefix`: the shortest key above them
/// all (the prefix with trailing `0xff` bytes dropped and its last byte incremented), or none
/// when the prefix is all `0xff`.
fn prefix_end(prefix: &[u8]) -> Bound<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Bound::Excluded(end);
        }
    }
    Bound::Unbounded
}

fn unavailable(e: fjall::Error) -> StoreError {
    StoreError::Unavailable(format!("embedded store: {e}"))
}

fn encode<T: Serialize>(table: &'static str, row: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(row).map_err(|e| StoreError::Corrupt {
        table,
        detail: format!("encoding: {e}"),
    })
}

fn decode<T: DeserializeOwned>(table: &'static str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
        table,
        detail: e.to_string(),
    })
}

/// Decodes the answer of a point read (from a keyspace or a snapshot).
fn decode_row<T: DeserializeOwned>(
    table: &'static str,
    read: fjall::Result<Option<fjall::Slice>>,
) -> Result<Option<T>> {
    match read.map_err(unavailable)? {
        Some(bytes) => decode(table, &bytes).map(Some),
        None => Ok(None),
    }
}

impl EmbeddedStore {
    /// Opens (or creates) the store in `dir`. Blocking: the caller runs it off the runtime.
    pub fn open(dir: &Path) -> Result<Self> {
        let db = Database::builder(dir)
            .max_journaling_size(schemas::disk::JOURNAL_BYTES)
            .worker_threads(schemas::disk::WORKER_THREADS)
            // Uncompressed: see `schemas::disk::JOURNAL_BYTES`.
            .journal_compression(fjall::CompressionType::None)
            .open()
            .map_err(unavailable)?;
        let keyspace = |name: &str| {
            // The tables every fold rewrites: see `schemas::disk::HOT_MEMTABLE_BYTES`.
            let memtable = if name == SESSIONS || name == SESSION_DECISIONS {
                schemas::disk::HOT_MEMTABLE_BYTES
            } else {
                schemas::disk::MEMTABLE_BYTES
            };
            db.keyspace(name, || {
                KeyspaceCreateOptions::default().max_memtable_size(memtable)
            })
            .map_err(unavailable)
        };
        let inner = Inner {
            organizations: keyspace(ORGANIZATIONS)?,
            organizations_by_slug: keyspace(ORGANIZATIONS_BY_SLUG)?,
            api_keys: keyspace(API_KEYS)?,
            api_keys_by_hash: keyspace(API_KEYS_BY_HASH)?,
            api_key_ids: keyspace(API_KEY_IDS)?,
            idempotency_records: keyspace(IDEMPOTENCY_RECORDS)?,
            handoff_openings: keyspace(HANDOFF_OPENINGS)?,
            replay_marks: keyspace(REPLAY_MARKS)?,
            settings: keyspace(SETTINGS)?,
            collect_sessions: keyspace(COLLECT_SESSIONS)?,
            collect_pings: keyspace(COLLECT_PINGS)?,
            collect_seqs: keyspace(COLLECT_SEQS)?,
            sessions: keyspace(SESSIONS)?,
            session_decisions: keyspace(SESSION_DECISIONS)?,
            session_settled: keyspace(SESSION_SETTLED)?,
            session_digests: keyspace(SESSION_DIGESTS)?,
            sessions_idle: keyspace(SESSIONS_IDLE)?,
            events: keyspace(EVENTS)?,
            webhook_endpoints: keyspace(WEBHOOK_ENDPOINTS)?,
            webhook_deliveries: keyspace(WEBHOOK_DELIVERIES)?,
            webhook_deliveries_due: keyspace(WEBHOOK_DELIVERIES_DUE)?,
            visitors: keyspace(VISITORS)?,
            visitors_by_anchor: keyspace(VISITORS_BY_ANCHOR)?,
            sessions_by_verdict: keyspace(SESSIONS_BY_VERDICT)?,
            visitors_by_last_seen: keyspace(VISITORS_BY_LAST_SEEN)?,
            visitors_by_seen_count: keyspace(VISITORS_BY_SEEN_COUNT)?,
            visitors_by_first_seen: keyspace(VISITORS_BY_FIRST_SEEN)?,
            expiry_queue: keyspace(EXPIRY_QUEUE)?,
            gate_services: keyspace(GATE_SERVICES)?,
            gate_services_by_owner: keyspace(GATE_SERVICES_BY_OWNER)?,
            gate_registry: keyspace(GATE_REGISTRY)?,
            gate_sessions: keyspace(GATE_SESSIONS)?,
            gate_accounts: keyspace(GATE_ACCOUNTS)?,
            agent_tokens: keyspace(AGENT_TOKENS)?,
            gate_login_codes: keyspace(GATE_LOGIN_CODES)?,
            gate_service_claims: keyspace(GATE_SERVICE_CLAIMS)?,
            writer: Mutex::new(WriterState::default()),
            collect_rows: Mutex::new(()),
            pending_seqs: Mutex::new(HashMap::new()),
            seqs_written: AtomicU64::new(0),
            cache: RowCache::default(),
            space: DiskReserve::new(dir),
            db,
        };
        inner.claim_gate_services()?;
        inner.skip_backfill_when_empty()?;
        inner.digest_sessions()?;
        let inner = Arc::new(inner);
        let seqs = seqs::SeqWriter::start(Arc::downgrade(&inner))
            .map_err(|e| StoreError::Unavailable(format!("starting the counter thread: {e}")))?;
        let memtables = memtables::MemtableReaper::start(inner.tables()?)
            .map_err(|e| StoreError::Unavailable(format!("starting the memtable thread: {e}")))?;
        Ok(Self {
            inner,
            seqs,
            _memtables: memtables,
            nonces: nonces::SeenNonces::default(),
        })
    }

    /// Writes every table's memtable out to its disk tables and waits, so the directory's size
    /// is what the rows take at rest (the sizing figures of docs/operations.md are measured after this).
    /// Blocking.
    pub fn flush_tables(&self) -> Result<()> {
        let db = &self.inner;
        db.write_pending_seqs()?;
        for table in [
            &db.organizations,
            &db.organizations_by_slug,
            &db.api_keys,
            &db.api_keys_by_hash,
            &db.api_key_ids,
            &db.idempotency_records,
            &db.handoff_openings,
            &db.replay_marks,
            &db.settings,
            &db.collect_sessions,
            &db.collect_pings,
            &db.collect_seqs,
            &db.sessions,
            &db.session_decisions,
            &db.session_settled,
            &db.session_digests,
            &db.sessions_idle,
            &db.events,
            &db.visitors,
            &db.visitors_by_anchor,
            &db.sessions_by_verdict,
            &db.visitors_by_last_seen,
            &db.visitors_by_seen_count,
            &db.visitors_by_first_seen,
            &db.expiry_queue,
        ] {
            table.rotate_memtable_and_wait().map_err(unavailable)?;
        }
        db.db.persist(PersistMode::SyncAll).map_err(unavailable)
    }

    /// Runs `op` on a blocking thread holding the writer mutex, so neither the lock wait nor the
    /// fsync inside it stalls the async runtime.
    async fn write<T: Send + 'static>(
        &self,
        op: impl FnOnce(&Inner, &mut WriterState) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            // A panic while holding the lock cannot have left data half-written (writes are
            // atomic batches), and the guarded state is only bookkeeping, so poison is ignored.
            let mut state = inner.writer.lock().unwrap_or_else(PoisonError::into_inner);
            inner.space.check().map_err(StoreError::Unavailable)?;
            op(&inner, &mut state)
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("embedded store writer: {e}")))?
    }
}

impl Inner {
    /// Every table, for the memtable thread (see `memtables`): each keyspace the database has,
    /// so a table added later is in it without being listed here.
    fn tables(&self) -> Result<Vec<Keyspace>> {
        self.db
            .list_keyspace_names()
            .iter()
            .map(|name| {
                // Opens the table already open: the options only apply to a new one.
                self.db
                    .keyspace(name, KeyspaceCreateOptions::default)
                    .map_err(unavailable)
            })
            .collect()
    }

    /// A batch that is synced to disk before `commit` returns, and applied to the memtables
    /// only after that: a reader never sees a write that a crash could lose. `fdatasync` (not
    /// `fsync`): the journal's data and its length are flushed, only its timestamps are not,
    /// and nothing reads those.
    fn batch(&self) -> OwnedWriteBatch {
        self.db.batch().durability(Some(PersistMode::SyncData))
    }

    /// Commits `batch`, naming in `changes` every cached row (`organizations`, `api_keys`) it
    /// writes: their cache entries are dropped before the commit, and no reader's fill is kept
    /// until the commit has returned (see `row_cache`). A write of any other table may commit
    /// its batch directly.
    fn commit(&self, batch: OwnedWriteBatch, changes: Changes<'_>) -> Result<()> {
        let in_flight = self.cache.write(changes);
        let committed = batch.commit().map_err(unavailable);
        drop(in_flight);
        committed
    }

    fn contains(&self, keyspace: &Keyspace, key: &[u8]) -> Result<bool> {
        keyspace.contains_key(key).map_err(unavailable)
    }
}

// The group traits are implemented in the module of each group's name.
#[async_trait]
impl StoreBackend for EmbeddedStore {
    async fn ping(&self) -> Result<()> {
        // A database whose fsync once failed is poisoned and refuses writes; `persist` reports
        // that, where a read would not.
        // A nearly full disk is reported too: writes are refused until space returns.
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            inner.db.persist(PersistMode::Buffer).map_err(unavailable)?;
            inner.space.check().map_err(StoreError::Unavailable)
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("embedded store ping: {e}")))?
    }

    async fn get_setting(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let value = self
            .inner
            .settings
            .get(key::setting(name))
            .map_err(unavailable)?;
        Ok(value.map(|v| v.to_vec()))
    }

    async fn put_setting_if_absent(&self, name: &str, value: &[u8]) -> Result<bool> {
        let name = name.to_owned();
        let value = value.to_vec();
        self.write(move |db, _| {
            if db.contains(&db.settings, key::setting(&name))? {
                return Ok(false);
            }
            let mut batch = db.batch();
            batch.insert(&db.settings, key::setting(&name), value);
            batch.commit().map_err(unavailable)?;
            Ok(true)
        })
        .await
    }
}
