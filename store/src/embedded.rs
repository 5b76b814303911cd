//! The embedded backend: one fjall keyspace per CQL table in `schemas/cql/`, keys laid out as
//! partition key then clustering key, and every acknowledged write fsynced before it returns.
//!
//! Layout (see `schemas/cql/README.md`): fixed-width binary key parts, so a partition is a
//! contiguous prefix and clustering order is byte order; values are the JSON of the record types
//! (lookup tables hold small JSON rows named like their CQL columns; settings hold the raw blob).
//!
//! Concurrency: the store is owned by one process (fjall also locks the directory), so a single
//! `std::sync::Mutex` serialising read-check-write gives what ScyllaDB's lightweight transactions
//! (`IF NOT EXISTS` / `IF EXISTS`) give the distributed backend. Every write takes it, not only
//! the conditional ones: `touch_api_key` and `update_api_key` are read-modify-writes, and
//! without it a write racing them could be undone (a touch rolled back, a revocation or a
//! rotation lost). fjall serialises commits on its journal anyway, so the mutex costs no write
//! parallelism. Reads never take it. A plain keyspace read sees the newest version of a key,
//! which includes a batch's rows while that batch is still being applied; so every read of a
//! table written together with another goes through a database snapshot, which sees only
//! whole, published batches (a session row never without its decision, an anchor index row
//! never without its visitor).
//!
//! Expiry (D23): where ScyllaDB has TTLs, every save of a session, event or visitor also writes
//! a row of `expiry_queue`, keyed by the time of that write, so `purge_expired` finds expired
//! rows by reading the queue's oldest keys, a bounded step at a time, never a whole table.
//!
//! The authentication hot path's reads (`find_api_key_by_hash`, `get_organization`) are served
//! from an exact cache of decoded rows (`row_cache`), which every write of those tables
//! invalidates around its commit. It is exact only because this process is the directory's
//! sole writer; see `row_cache` for why, and for the protocol that keeps a racing reader from
//! caching a row the write replaced.

mod row_cache;

use crate::{
    AgentLogin, AgentTokenRecord, GateAccountRecord, GatePoll, GateServiceRecord, GateServiceWrite,
    GateSessionRecord, GateSessionStatus,
};
use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use fjall::{
    Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch, PersistMode, Readable, Snapshot,
};
use schemas::credential::Environment;
use schemas::disk::DiskReserve;
use schemas::ids::{EventId, KeyId, OrgId, PingId, SessionId, VisitorId, WebhookEndpointId};
use schemas::time::Timestamp;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use self::row_cache::{Changes, Lookup, RowCache};
use crate::{
    ApiKeyRecord, CollectSessionRecord, CredentialHash, DecisionRecord, DecisionTurn, EventRecord,
    IdempotencyBegin, IdempotencyRecord, IdempotencyScope, IdleSession, OrganizationRecord, Result,
    SessionRecord, SessionSave, StoreBackend, StoreError, VisitorAnchors, VisitorOrder,
    VisitorRecord, WebhookDeliveryRecord, WebhookEndpointRecord,
};

const ORGANIZATIONS: &str = "organizations";
const ORGANIZATIONS_BY_SLUG: &str = "organizations_by_slug";
const API_KEYS: &str = "api_keys";
const API_KEYS_BY_HASH: &str = "api_keys_by_hash";
const API_KEY_IDS: &str = "api_key_ids";
const IDEMPOTENCY_RECORDS: &str = "idempotency_records";
const HANDOFF_OPENINGS: &str = "handoff_openings";
const SETTINGS: &str = "settings";
const COLLECT_SESSIONS: &str = "collect_sessions";
const COLLECT_PINGS: &str = "collect_pings";
const SESSIONS: &str = "sessions";
const SESSION_DECISIONS: &str = "session_decisions";
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

/// How long a collect session (and its pings' lookup rows) is kept after its id was minted:
/// ScyllaDB's `default_time_to_live` of `collect_sessions` and `collect_pings`. Sessions expire
/// after 30 minutes; the log, not the store, keeps what they collected.
const COLLECT_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// The store in a local directory (`embedded:<dir>`).
pub struct EmbeddedStore {
    // Behind an `Arc` so writes can move a handle into `spawn_blocking`.
    inner: Arc<Inner>,
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
    settings: Keyspace,
    collect_sessions: Keyspace,
    collect_pings: Keyspace,
    sessions: Keyspace,
    session_decisions: Keyspace,
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
    /// Serialises every write (see the module doc); guards only bookkeeping, not data.
    writer: Mutex<WriterState>,
    /// Decoded `api_keys` rows by credential hash and `organizations` rows by id. Every write
    /// of those two tables commits through [`Inner::commit`], which keeps it exact.
    cache: RowCache,
}

struct WriterState {
    /// The stored place of the sessions saved lately (see [`SessionMark`]).
    session_marks: SessionMarks,
    /// Where `purge_expired`'s walk of `idempotency_records` resumes (that table has no time
    /// order, so it is walked a bounded step at a time); `None`: from the start.
    idempotency_cursor: Option<Vec<u8>>,
    /// The same for `handoff_openings`.
    handoff_cursor: Option<Vec<u8>>,
    /// Where the indexing of rows written before the read and expiry indexes existed stands.
    backfill: Backfill,
}

impl Default for WriterState {
    fn default() -> Self {
        WriterState {
            session_marks: SessionMarks::new(SESSION_MARKS),
            idempotency_cursor: None,
            handoff_cursor: None,
            backfill: Backfill::default(),
        }
    }
}

/// How many sessions' marks the writer keeps: a few megabytes, and more than the sessions a
/// busy processor saves between two visits of the same session.
const SESSION_MARKS: usize = 65_536;

type SessionMarks = quick_cache::unsync::Cache<SessionId, SessionMark>;

/// A session's newest `session_decisions` row: its key and its turn.
type NewestDecision = ([u8; 32], DecisionTurn);

/// What replacing a session's rows must know of the rows stored before: where its index rows
/// are and which of its decisions the new one may prune. Read from the store the first time,
/// then kept by the writer for the sessions it saved lately: every fold of a session saves it
/// again, and reading its row (some 13 KB, for three small columns) and scanning its decisions
/// each time took a tenth of the processor's store writes. Exact because the writer is the
/// store's only writer and updates a mark only once its batch is committed; a purged session
/// loses its mark.
#[derive(Clone)]
struct SessionMark {
    updated_at: Timestamp,
    finalized: bool,
    verdict: Option<String>,
    /// The newest `session_decisions` row, and the turn of the one before.
    newest: Option<NewestDecision>,
    before: Option<DecisionTurn>,
}

/// The one-time indexing of rows stored before `sessions_by_verdict`, the visitor order tables
/// and `expiry_queue` existed (without it they would be missing from lists and never expire):
/// `purge_expired` walks `sessions`, then `visitors`, then `events`, a bounded step at a time,
/// and records in `settings` when it is done, so later starts skip it. Indexing a row twice
/// writes the same keys again, so a restart mid-walk just starts over.
#[derive(Default)]
struct Backfill {
    /// `None` until the setting has been checked.
    done: Option<bool>,
    /// 0: sessions, 1: visitors, 2: events.
    table: u8,
    cursor: Option<Vec<u8>>,
}

/// The `settings` row that says the backfill is done.
const BACKFILLED: &str = "store/indexes-backfilled/v1";

/// A stored `sessions` row's identity and index columns, for the backfill.
#[derive(Deserialize)]
struct SessionIdentity {
    id: SessionId,
    organization_id: OrgId,
    environment: Environment,
    #[serde(flatten)]
    place: SessionPlace,
}

/// The columns of a stored `sessions` row that say where it sits in `sessions_idle`,
/// `sessions_by_verdict` and `expiry_queue` (decoding only these skips the rest of the row
/// without building it).
#[derive(Deserialize)]
struct SessionPlace {
    updated_at: Timestamp,
    #[serde(default)]
    finalized: bool,
    #[serde(default)]
    latest_decision: Option<DecisionTurn>,
}

impl SessionPlace {
    fn verdict(&self) -> Option<&str> {
        self.latest_decision.as_ref()?.verdict.as_deref()
    }
}

/// The column of a stored `session_decisions` row that says whether it is a turning point.
#[derive(Deserialize)]
struct DecisionPlace {
    decision: Option<DecisionTurn>,
}

/// The column of a stored `events` row that says when it expires.
#[derive(Deserialize)]
struct EventPlace {
    created_at: Timestamp,
}

/// What an `expiry_queue` row names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expiring {
    Session = 0,
    Visitor = 1,
    Event = 2,
    /// A Gate session: dropped a retention after it started (its tokens are long useless).
    GateSession = 3,
}

/// `sessions_idle`: where an unfinalised session is (its id and time are in the key).
#[derive(Serialize, Deserialize)]
struct IdleRow {
    organization_id: OrgId,
    environment: Environment,
}

/// `handoff_openings`: when a handoff was first opened, kept until it expires.
#[derive(Serialize, Deserialize)]
struct HandoffOpening {
    first_opened_at: Timestamp,
    expires_at: Timestamp,
}

/// `organizations_by_slug`: the claim of one slug.
#[derive(Serialize, Deserialize)]
struct SlugRow {
    organization_id: OrgId,
}

/// `api_keys_by_hash`: where the key holding a credential hash lives.
#[derive(Serialize, Deserialize)]
struct KeyHashRow {
    organization_id: OrgId,
    environment: Environment,
    id: KeyId,
}

/// `api_key_ids`: where a key id lives.
#[derive(Serialize, Deserialize)]
struct KeyIdRow {
    organization_id: OrgId,
    environment: Environment,
}

/// `collect_pings`: the session a ping belongs to.
#[derive(Serialize, Deserialize)]
struct PingRow {
    session_id: SessionId,
}

/// `visitors_by_anchor`: the visitor indexed under one anchor digest.
#[derive(Serialize, Deserialize)]
struct AnchorRow {
    visitor_id: VisitorId,
}

/// Key encodings: partition key bytes, then clustering key bytes, each fixed-width except a
/// final variable-length text part, so no separator is needed and prefixes never collide.
mod key {
    use schemas::credential::Environment;
    use schemas::ids::{
        DecisionId, EventId, KeyId, OrgId, PingId, SessionId, VisitorId, WebhookEndpointId,
    };
    use schemas::time::Timestamp;

    use crate::{AnchorDigest, CredentialHash, IdempotencyScope};

    pub fn organization(id: OrgId) -> [u8; 16] {
        id.ulid().to_bytes()
    }

    pub fn slug(slug: &str) -> &[u8] {
        slug.as_bytes()
    }

    pub fn environment_byte(env: Environment) -> u8 {
        environment(env)
    }

    fn environment(env: Environment) -> u8 {
        match env {
            Environment::Live => 0,
            Environment::Test => 1,
        }
    }

    /// `gate_services_by_owner`: the owner's partition, then the service id.
    pub fn gate_service_of_owner(org: OrgId, env: Environment, id: &str) -> Vec<u8> {
        [&api_key_partition(org, env)[..], id.as_bytes()].concat()
    }

    /// `gate_registry`: the environment, then the service id.
    pub fn gate_registry(env: Environment, id: &str) -> Vec<u8> {
        [&[environment(env)][..], id.as_bytes()].concat()
    }

    /// The `api_keys` partition `(organization_id, environment)`: 16 + 1 bytes.
    pub fn api_key_partition(org: OrgId, env: Environment) -> [u8; 17] {
        let mut k = [0; 17];
        k[..16].copy_from_slice(&org.ulid().to_bytes());
        k[16] = environment(env);
        k
    }

    /// Partition, then the id's ULID inverted (`u128::MAX - id`) big-endian: clustering `id DESC`,
    /// so a forward scan of the partition yields the newest key first.
    pub fn api_key(org: OrgId, env: Environment, id: KeyId) -> [u8; 33] {
        let mut k = [0; 33];
        k[..17].copy_from_slice(&api_key_partition(org, env));
        k[17..].copy_from_slice(&(!id.ulid().0).to_be_bytes());
        k
    }

    pub fn api_key_hash(hash: &CredentialHash) -> [u8; 32] {
        hash.0
    }

    pub fn api_key_id(id: KeyId) -> [u8; 16] {
        id.ulid().to_bytes()
    }

    /// Partition `(credential_hash, idempotency_key)`: the 32-byte hash, then the key's UTF-8.
    pub fn idempotency(scope: &IdempotencyScope) -> Vec<u8> {
        let mut k = Vec::with_capacity(32 + scope.key.len());
        k.extend_from_slice(&scope.credential.0);
        k.extend_from_slice(scope.key.as_bytes());
        k
    }

    pub fn setting(name: &str) -> &[u8] {
        name.as_bytes()
    }

    /// The session id's ULID, whose first 48 bits are the millisecond it was minted: the
    /// table is in minting order, which the retention sweep relies on.
    pub fn collect_session(id: SessionId) -> [u8; 16] {
        id.ulid().to_bytes()
    }

    /// The first `collect_sessions` key of a session minted at `ms` (ms since the epoch) or
    /// later; every key below it belongs to a session minted earlier.
    pub fn collect_sessions_minted_from(ms: u64) -> [u8; 16] {
        // A ULID's timestamp is its top 48 bits; the 80 random bits below are zero here.
        (u128::from(ms) << 80).to_be_bytes()
    }

    pub fn collect_ping(id: PingId) -> [u8; 16] {
        id.ulid().to_bytes()
    }

    /// The `sessions` partition `(organization_id, environment)`: 16 + 1 bytes, as `api_keys`.
    pub fn session_partition(org: OrgId, env: Environment) -> [u8; 17] {
        api_key_partition(org, env)
    }

    /// The organization, environment and id a `sessions` key holds.
    pub fn parse_session(k: &[u8]) -> Option<(OrgId, Environment, SessionId)> {
        let k: &[u8; 33] = k.try_into().ok()?;
        let org = u128::from_be_bytes(k[..16].try_into().ok()?);
        let env = match k[16] {
            0 => Environment::Live,
            1 => Environment::Test,
            _ => return None,
        };
        let id = trailing_id(k)?;
        Some((
            OrgId::from_ulid(org.into()),
            env,
            SessionId::from_ulid(id.into()),
        ))
    }

    /// Partition, then the id's ULID inverted: clustering `id DESC`, newest session first.
    pub fn session(org: OrgId, env: Environment, id: SessionId) -> [u8; 33] {
        let mut k = [0; 33];
        k[..17].copy_from_slice(&session_partition(org, env));
        k[17..].copy_from_slice(&(!id.ulid().0).to_be_bytes());
        k
    }

    /// How many partitions `sessions_idle` spreads over.
    pub const IDLE_BUCKETS: u8 = 16;

    /// The `sessions_idle` partition of a session: the low bits of its id's random part.
    pub fn idle_bucket_of(session: SessionId) -> u8 {
        (session.ulid().0 % u128::from(IDLE_BUCKETS)) as u8
    }

    pub fn idle_bucket(bucket: u8) -> [u8; 1] {
        [bucket]
    }

    /// Partition, then `idle_since` in milliseconds (big-endian, so oldest first), then the
    /// session's ULID.
    pub fn idle(session: SessionId, idle_since: Timestamp) -> [u8; 25] {
        let mut k = [0; 25];
        k[0] = idle_bucket_of(session);
        k[1..9].copy_from_slice(&millis(idle_since).to_be_bytes());
        k[9..].copy_from_slice(&session.ulid().to_bytes());
        k
    }

    /// The first key of `bucket` at or after `before`: the end of a scan for older rows.
    pub fn idle_before(bucket: u8, before: Timestamp) -> [u8; 9] {
        let mut k = [0; 9];
        k[0] = bucket;
        k[1..9].copy_from_slice(&millis(before).to_be_bytes());
        k
    }

    pub fn parse_idle(k: &[u8]) -> Option<(SessionId, Timestamp)> {
        let k: &[u8; 25] = k.try_into().ok()?;
        let ms = u64::from_be_bytes(k[1..9].try_into().ok()?);
        let at = Timestamp::from_timestamp_millis(i64::try_from(ms).ok()?)?;
        let id = u128::from_be_bytes(k[9..].try_into().ok()?);
        Some((SessionId::from_ulid(id.into()), at))
    }

    /// Milliseconds since the epoch; times before it (never written) clamp to 0.
    fn millis(t: Timestamp) -> u64 {
        u64::try_from(t.timestamp_millis()).unwrap_or(0)
    }

    /// The `events` partition `(organization_id, environment)`: 16 + 1 bytes, as `sessions`.
    pub fn event_partition(org: OrgId, env: Environment) -> [u8; 17] {
        api_key_partition(org, env)
    }

    /// Partition, then the id's ULID inverted: clustering `id DESC`, newest event first.
    pub fn event(org: OrgId, env: Environment, id: EventId) -> [u8; 33] {
        let mut k = [0; 33];
        k[..17].copy_from_slice(&event_partition(org, env));
        k[17..].copy_from_slice(&(!id.ulid().0).to_be_bytes());
        k
    }

    /// The `webhook_endpoints` partition `(organization_id, environment)`, as `api_keys`.
    pub fn webhook_endpoint_partition(org: OrgId, env: Environment) -> [u8; 17] {
        api_key_partition(org, env)
    }

    /// Partition, then the id's ULID inverted: clustering `id DESC`, newest endpoint first.
    pub fn webhook_endpoint(org: OrgId, env: Environment, id: WebhookEndpointId) -> [u8; 33] {
        let mut k = [0; 33];
        k[..17].copy_from_slice(&webhook_endpoint_partition(org, env));
        k[17..].copy_from_slice(&(!id.ulid().0).to_be_bytes());
        k
    }

    /// The `webhook_deliveries` partition `(organization_id, environment, event_id)`: the
    /// event's key (its id inverted, as in `events`).
    pub fn delivery_partition(org: OrgId, env: Environment, event: EventId) -> [u8; 33] {
        self::event(org, env, event)
    }

    /// Partition, then the endpoint's ULID.
    pub fn delivery(
        org: OrgId,
        env: Environment,
        event: EventId,
        endpoint: WebhookEndpointId,
    ) -> [u8; 49] {
        let mut k = [0; 49];
        k[..33].copy_from_slice(&delivery_partition(org, env, event));
        k[33..].copy_from_slice(&endpoint.ulid().to_bytes());
        k
    }

    /// `webhook_deliveries_due`: when the attempt is due in milliseconds (8, big-endian, so
    /// earliest first), then the delivery's key.
    pub fn delivery_due(at: Timestamp, delivery: &[u8; 49]) -> [u8; 57] {
        let mut k = [0; 57];
        k[..8].copy_from_slice(&millis(at).to_be_bytes());
        k[8..].copy_from_slice(delivery);
        k
    }

    /// The delivery key at the end of a due-index key.
    pub fn delivery_of_due(k: &[u8]) -> Option<&[u8]> {
        k.get(8..).filter(|d| d.len() == 49)
    }

    /// The due-index keys of attempts due before `at`.
    pub fn delivery_due_before(at: Timestamp) -> [u8; 8] {
        millis(at).to_be_bytes()
    }

    /// The `visitors` partition `(organization_id, environment)`: 16 + 1 bytes, as `sessions`.
    pub fn visitor_partition(org: OrgId, env: Environment) -> [u8; 17] {
        api_key_partition(org, env)
    }

    /// Partition, then the id's ULID inverted: clustering `id DESC`, newest visitor first.
    pub fn visitor(org: OrgId, env: Environment, id: VisitorId) -> [u8; 33] {
        let mut k = [0; 33];
        k[..17].copy_from_slice(&visitor_partition(org, env));
        k[17..].copy_from_slice(&(!id.ulid().0).to_be_bytes());
        k
    }

    /// The `visitors_by_anchor` partition `(organization_id, environment, anchor_digest)`:
    /// 16 + 1 + 32 bytes.
    pub fn anchor_partition(org: OrgId, env: Environment, digest: &AnchorDigest) -> [u8; 49] {
        let mut k = [0; 49];
        k[..17].copy_from_slice(&api_key_partition(org, env));
        k[17..].copy_from_slice(&digest.0);
        k
    }

    /// Partition, then the visitor id's ULID inverted: newest visitor first.
    pub fn anchor(org: OrgId, env: Environment, digest: &AnchorDigest, id: VisitorId) -> [u8; 65] {
        let mut k = [0; 65];
        k[..49].copy_from_slice(&anchor_partition(org, env, digest));
        k[49..].copy_from_slice(&(!id.ulid().0).to_be_bytes());
        k
    }

    /// The `sessions_by_verdict` partition `(organization_id, environment, verdict)`: 16 + 1,
    /// then the verdict's length (1) and UTF-8, so no verdict's partition is a prefix of
    /// another's. `None` for a verdict too long to index (the enumeration's are short).
    pub fn verdict_partition(org: OrgId, env: Environment, verdict: &str) -> Option<Vec<u8>> {
        let len = u8::try_from(verdict.len()).ok()?;
        let mut k = Vec::with_capacity(18 + verdict.len() + 16);
        k.extend_from_slice(&api_key_partition(org, env));
        k.push(len);
        k.extend_from_slice(verdict.as_bytes());
        Some(k)
    }

    /// Partition, then the session id's ULID inverted: newest session first.
    pub fn session_by_verdict(
        org: OrgId,
        env: Environment,
        verdict: &str,
        id: SessionId,
    ) -> Option<Vec<u8>> {
        let mut k = verdict_partition(org, env, verdict)?;
        k.extend_from_slice(&(!id.ulid().0).to_be_bytes());
        Some(k)
    }

    /// The partition `(organization_id, environment)` of the `visitors_by_*` order tables.
    pub fn visitor_order_partition(org: OrgId, env: Environment) -> [u8; 17] {
        api_key_partition(org, env)
    }

    /// Partition, then the sort value inverted, then the visitor id's ULID inverted: clustering
    /// `(value DESC, visitor_id DESC)`.
    pub fn visitor_by(org: OrgId, env: Environment, value: u64, id: VisitorId) -> [u8; 41] {
        let mut k = [0; 41];
        k[..17].copy_from_slice(&visitor_order_partition(org, env));
        k[17..25].copy_from_slice(&(!value).to_be_bytes());
        k[25..].copy_from_slice(&(!id.ulid().0).to_be_bytes());
        k
    }

    /// The id whose ULID, inverted, ends key `k` (every `id DESC` clustering ends so).
    pub fn trailing_id(k: &[u8]) -> Option<u128> {
        let tail: [u8; 16] = k.get(k.len().checked_sub(16)?..)?.try_into().ok()?;
        Some(!u128::from_be_bytes(tail))
    }

    /// `expiry_queue`: the time the row was last written in milliseconds (8, big-endian, so
    /// oldest first), what it is (1), and the row's key in its own table.
    pub fn expiry(at: Timestamp, kind: u8, target: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(9 + target.len());
        k.extend_from_slice(&millis(at).to_be_bytes());
        k.push(kind);
        k.extend_from_slice(target);
        k
    }

    /// The first `expiry_queue` key at or after `at`: the end of a scan for older rows.
    pub fn expiry_before(at: Timestamp) -> [u8; 8] {
        millis(at).to_be_bytes()
    }

    pub fn parse_expiry(k: &[u8]) -> Option<(u8, &[u8])> {
        Some((*k.get(8)?, k.get(9..)?))
    }

    /// The `session_decisions` partition `session_id`: the session's ULID (16).
    pub fn decision_partition(session: SessionId) -> [u8; 16] {
        session.ulid().to_bytes()
    }

    /// Partition, then the decision id's ULID inverted: clustering `id DESC`, newest first.
    pub fn decision(session: SessionId, id: DecisionId) -> [u8; 32] {
        let mut k = [0; 32];
        k[..16].copy_from_slice(&decision_partition(session));
        k[16..].copy_from_slice(&(!id.ulid().0).to_be_bytes());
        k
    }
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
/// The rows of a Gate service: its own, its owner's index row, and its registry row when it
/// is published (any stale registry row is removed by the caller).
fn write_gate_service(
    db: &Inner,
    batch: &mut OwnedWriteBatch,
    service: &GateServiceRecord,
) -> Result<()> {
    batch.insert(
        &db.gate_services,
        service.id.as_bytes(),
        encode(GATE_SERVICES, service)?,
    );
    batch.insert(
        &db.gate_services_by_owner,
        key::gate_service_of_owner(service.organization_id, service.environment, &service.id),
        [],
    );
    if service.is_published() {
        batch.insert(
            &db.gate_registry,
            key::gate_registry(service.environment, &service.id),
            [],
        );
    }
    Ok(())
}

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
            .open()
            .map_err(unavailable)?;
        let keyspace = |name: &str| {
            db.keyspace(name, || {
                KeyspaceCreateOptions::default().max_memtable_size(schemas::disk::MEMTABLE_BYTES)
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
            settings: keyspace(SETTINGS)?,
            collect_sessions: keyspace(COLLECT_SESSIONS)?,
            collect_pings: keyspace(COLLECT_PINGS)?,
            sessions: keyspace(SESSIONS)?,
            session_decisions: keyspace(SESSION_DECISIONS)?,
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
            writer: Mutex::new(WriterState::default()),
            cache: RowCache::default(),
            space: DiskReserve::new(dir),
            db,
        };
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// Writes every table's memtable out to its disk tables and waits, so the directory's size
    /// is what the rows take at rest (the README's sizing figures are measured after this).
    /// Blocking.
    pub fn flush_tables(&self) -> Result<()> {
        let db = &self.inner;
        for table in [
            &db.organizations,
            &db.organizations_by_slug,
            &db.api_keys,
            &db.api_keys_by_hash,
            &db.api_key_ids,
            &db.idempotency_records,
            &db.handoff_openings,
            &db.settings,
            &db.collect_sessions,
            &db.collect_pings,
            &db.sessions,
            &db.session_decisions,
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
    /// Raises one of a collect session's counters (`counter` picks it) to `to` if `to` is above
    /// it; whether it did. A missing session: `false`, nothing written.
    async fn raise_collect_counter(
        &self,
        id: SessionId,
        durability: Durability,
        to: u64,
        counter: fn(&mut CollectSessionRecord) -> &mut u64,
    ) -> Result<bool> {
        self.write(move |db, _| {
            let changed = db.change_collect_session(id, durability, |s| {
                let current = counter(s);
                let above = to > *current;
                if above {
                    *current = to;
                }
                above
            })?;
            Ok(changed.is_some_and(|(written, _)| written))
        })
        .await
    }

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

/// Whether a write is fsynced before it returns.
#[derive(Clone, Copy)]
enum Durability {
    Synced,
    Buffered,
}

impl Inner {
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

    fn get_api_key(&self, org: OrgId, env: Environment, id: KeyId) -> Result<Option<ApiKeyRecord>> {
        decode_row(API_KEYS, self.api_keys.get(key::api_key(org, env, id)))
    }

    /// Adds a new organization's row and its slug claim to `batch`, after checking (under the
    /// writer mutex) that neither its slug nor its id is taken.
    fn insert_new_organization(
        &self,
        batch: &mut OwnedWriteBatch,
        org: &OrganizationRecord,
    ) -> Result<()> {
        if self.contains(&self.organizations_by_slug, key::slug(&org.slug))? {
            return Err(StoreError::Conflict(format!(
                "organization slug `{}` is taken",
                org.slug
            )));
        }
        if self.contains(&self.organizations, &key::organization(org.id))? {
            return Err(StoreError::Conflict(format!(
                "organization {} exists",
                org.id
            )));
        }
        batch.insert(
            &self.organizations,
            key::organization(org.id),
            encode(ORGANIZATIONS, org)?,
        );
        batch.insert(
            &self.organizations_by_slug,
            key::slug(&org.slug),
            encode(
                ORGANIZATIONS_BY_SLUG,
                &SlugRow {
                    organization_id: org.id,
                },
            )?,
        );
        Ok(())
    }

    /// Adds a new key's row and both lookup rows to `batch`, after checking (under the writer
    /// mutex) that neither its id nor its hash is taken.
    fn insert_new_api_key(&self, batch: &mut OwnedWriteBatch, key: &ApiKeyRecord) -> Result<()> {
        if self.contains(&self.api_key_ids, &key::api_key_id(key.id))? {
            return Err(StoreError::Conflict(format!(
                "api key id {} exists",
                key.id
            )));
        }
        if self.contains(&self.api_keys_by_hash, &key::api_key_hash(&key.key_hash))? {
            return Err(StoreError::Conflict(
                "api key credential hash exists".into(),
            ));
        }
        let hash_row = KeyHashRow {
            organization_id: key.organization_id,
            environment: key.environment,
            id: key.id,
        };
        let id_row = KeyIdRow {
            organization_id: key.organization_id,
            environment: key.environment,
        };
        batch.insert(
            &self.api_keys,
            key::api_key(key.organization_id, key.environment, key.id),
            encode(API_KEYS, key)?,
        );
        batch.insert(
            &self.api_keys_by_hash,
            key::api_key_hash(&key.key_hash),
            encode(API_KEYS_BY_HASH, &hash_row)?,
        );
        batch.insert(
            &self.api_key_ids,
            key::api_key_id(key.id),
            encode(API_KEY_IDS, &id_row)?,
        );
        Ok(())
    }

    /// One bounded step of a walk over a table with no time order (`idempotency_records`,
    /// `handoff_openings`): reads at most `budget` rows after `cursor`, adds the removal of those
    /// `expired` says are past their expiry to `batch`, and moves the cursor. Whether the walk
    /// has rows left (it starts over from the beginning once it has none).
    fn sweep_step(
        &self,
        batch: &mut OwnedWriteBatch,
        keyspace: &Keyspace,
        cursor: &mut Option<Vec<u8>>,
        budget: usize,
        expired: impl Fn(&[u8]) -> Result<bool>,
    ) -> Result<bool> {
        let start = cursor.take().map_or(Bound::Unbounded, Bound::Excluded);
        let mut read = 0;
        let mut last = None;
        for guard in keyspace
            .range::<Vec<u8>, _>((start, Bound::Unbounded))
            .take(budget)
        {
            let (k, v) = guard.into_inner().map_err(unavailable)?;
            read += 1;
            if expired(&v)? {
                batch.remove(keyspace, k.clone());
            }
            last = Some(k.to_vec());
        }
        if read < budget {
            return Ok(false);
        }
        *cursor = last;
        Ok(true)
    }

    /// Removes `expiry_queue` rows older than `keep_since`, at most `budget`, each with the row
    /// it names when that row was not written again since (a newer write has its own queue row).
    fn purge_retained(
        &self,
        batch: &mut OwnedWriteBatch,
        marks: &mut SessionMarks,
        keep_since: Timestamp,
        budget: usize,
    ) -> Result<bool> {
        let end = key::expiry_before(keep_since).to_vec();
        let mut read = 0;
        for guard in self.expiry_queue.range(..end).take(budget) {
            let k = guard.key().map_err(unavailable)?;
            read += 1;
            batch.remove(&self.expiry_queue, k.clone());
            let Some((kind, target)) = key::parse_expiry(&k) else {
                continue;
            };
            if kind == Expiring::Session as u8 {
                self.purge_session(batch, marks, target, keep_since)?;
            } else if kind == Expiring::Visitor as u8 {
                self.purge_visitor(batch, target, keep_since)?;
            } else if kind == Expiring::GateSession as u8 {
                let row: Option<GateSessionRecord> =
                    decode_row(GATE_SESSIONS, self.gate_sessions.get(target))?;
                if let Some(session) = row {
                    if let Some(code) = session.login_code {
                        batch.remove(&self.gate_login_codes, code.0);
                    }
                    batch.remove(&self.gate_sessions, target.to_vec());
                }
            } else if kind == Expiring::Event as u8 {
                let row: Option<EventPlace> = decode_row(EVENTS, self.events.get(target))?;
                if row.is_some_and(|e| e.created_at < keep_since) {
                    batch.remove(&self.events, target.to_vec());
                    self.purge_deliveries(batch, target)?;
                }
            }
        }
        Ok(read == budget)
    }

    /// Drops the session at `k` if it was not updated since `keep_since`, with its decisions
    /// (a handful, since the history is pruned) and its index rows.
    fn purge_session(
        &self,
        batch: &mut OwnedWriteBatch,
        marks: &mut SessionMarks,
        k: &[u8],
        keep_since: Timestamp,
    ) -> Result<()> {
        let Some(place) = decode_row::<SessionPlace>(SESSIONS, self.sessions.get(k))? else {
            return Ok(());
        };
        if place.updated_at >= keep_since {
            return Ok(());
        }
        let (org, env, id) = key::parse_session(k).ok_or_else(|| StoreError::Corrupt {
            table: EXPIRY_QUEUE,
            detail: "a queued session key of the wrong length".into(),
        })?;
        marks.remove(&id);
        if !place.finalized {
            batch.remove(&self.sessions_idle, key::idle(id, place.updated_at));
        }
        if let Some(vk) = place
            .verdict()
            .and_then(|v| key::session_by_verdict(org, env, v, id))
        {
            batch.remove(&self.sessions_by_verdict, vk);
        }
        let partition = key::decision_partition(id);
        for guard in self.session_decisions.prefix(partition) {
            batch.remove(&self.session_decisions, guard.key().map_err(unavailable)?);
        }
        batch.remove(&self.sessions, k.to_vec());
        Ok(())
    }

    /// Drops the deliveries of the event at `event_key` (their partition is the event's key),
    /// with their due-index rows: they go with their event (D23). An event has one per
    /// endpoint it went to, a handful.
    fn purge_deliveries(&self, batch: &mut OwnedWriteBatch, event_key: &[u8]) -> Result<()> {
        for guard in self.webhook_deliveries.prefix(event_key) {
            let (k, v) = guard.into_inner().map_err(unavailable)?;
            let delivery: WebhookDeliveryRecord = decode(WEBHOOK_DELIVERIES, &v)?;
            if let (Some(at), Ok(dk)) = (delivery.next_attempt_at, <[u8; 49]>::try_from(k.as_ref()))
            {
                batch.remove(&self.webhook_deliveries_due, key::delivery_due(at, &dk));
            }
            batch.remove(&self.webhook_deliveries, k);
        }
        Ok(())
    }

    /// Drops the visitor at `k` if it was not seen since `keep_since`, with its anchor and order
    /// index rows.
    fn purge_visitor(
        &self,
        batch: &mut OwnedWriteBatch,
        k: &[u8],
        keep_since: Timestamp,
    ) -> Result<()> {
        let Some(v) = decode_row::<VisitorRecord>(VISITORS, self.visitors.get(k))? else {
            return Ok(());
        };
        if v.last_seen_at >= keep_since {
            return Ok(());
        }
        let (org, env, id) = (v.organization_id, v.environment, v.id);
        for digest in v.anchors.digests() {
            batch.remove(&self.visitors_by_anchor, key::anchor(org, env, &digest, id));
        }
        for order in VisitorOrder::ALL {
            batch.remove(
                self.visitor_order(order),
                key::visitor_by(org, env, order.value(&v), id),
            );
        }
        batch.remove(&self.visitors, k.to_vec());
        Ok(())
    }

    fn visitor_order(&self, order: VisitorOrder) -> &Keyspace {
        match order {
            VisitorOrder::LastSeen => &self.visitors_by_last_seen,
            VisitorOrder::SeenCount => &self.visitors_by_seen_count,
            VisitorOrder::FirstSeen => &self.visitors_by_first_seen,
        }
    }

    /// Adds to `batch` the pruning of `session`'s decision history that appending `decision`
    /// calls for (D23): the stored latest goes unless it is a turning point, that is unless
    /// its phase or verdict differs from the decision kept before it (or none was).
    /// The session's two newest decision rows as [`SessionMark`] holds them, read from the store.
    fn newest_decisions(
        &self,
        session: SessionId,
    ) -> Result<(Option<NewestDecision>, Option<DecisionTurn>)> {
        let partition = key::decision_partition(session);
        let mut newest = None;
        let mut before = None;
        for guard in self.session_decisions.prefix(partition).take(2) {
            let (k, v) = guard.into_inner().map_err(unavailable)?;
            let turn = decode::<DecisionPlace>(SESSION_DECISIONS, &v)?
                .decision
                .unwrap_or_default();
            match newest {
                None => {
                    let k: [u8; 32] = k.as_ref().try_into().map_err(|_| StoreError::Corrupt {
                        table: SESSION_DECISIONS,
                        detail: "a decision key of the wrong length".into(),
                    })?;
                    newest = Some((k, turn));
                }
                Some(_) => before = Some(turn),
            }
        }
        Ok((newest, before))
    }

    /// Adds one session's save to `batch` (see `save_sessions`). Callers hold the writer mutex,
    /// so the stored row read here (which says where its idle-index row is) is current.
    /// Adds one visitor's save to `batch`: the visitor row, an index row per digest of its
    /// anchors, the removal of the index rows of digests the stored row had and this one has
    /// not, and its rows in the order tables and the expiry queue moved to its new values.
    /// Callers hold the writer mutex, so the stored row read here is the one replaced.
    fn add_visitor_save(&self, batch: &mut OwnedWriteBatch, visitor: &VisitorRecord) -> Result<()> {
        let (org, env, id) = (visitor.organization_id, visitor.environment, visitor.id);
        let k = key::visitor(org, env, id);
        let stored: Option<VisitorRecord> = decode_row(VISITORS, self.visitors.get(k))?;
        let digests = visitor.anchors.digests();
        if let Some(stored) = &stored {
            for old in stored.anchors.digests() {
                if !digests.contains(&old) {
                    batch.remove(&self.visitors_by_anchor, key::anchor(org, env, &old, id));
                }
            }
        }
        if let Some(stored) = &stored {
            for order in VisitorOrder::ALL {
                let (old, new) = (order.value(stored), order.value(visitor));
                if old != new {
                    batch.remove(
                        self.visitor_order(order),
                        key::visitor_by(org, env, old, id),
                    );
                }
            }
            if stored.last_seen_at != visitor.last_seen_at {
                batch.remove(
                    &self.expiry_queue,
                    key::expiry(stored.last_seen_at, Expiring::Visitor as u8, &k),
                );
            }
        }
        for order in VisitorOrder::ALL {
            batch.insert(
                self.visitor_order(order),
                key::visitor_by(org, env, order.value(visitor), id),
                [],
            );
        }
        batch.insert(
            &self.expiry_queue,
            key::expiry(visitor.last_seen_at, Expiring::Visitor as u8, &k),
            [],
        );
        let row = encode(VISITORS_BY_ANCHOR, &AnchorRow { visitor_id: id })?;
        for digest in &digests {
            batch.insert(
                &self.visitors_by_anchor,
                key::anchor(org, env, digest, id),
                row.clone(),
            );
        }
        batch.insert(&self.visitors, k, encode(VISITORS, visitor)?);
        Ok(())
    }

    ///
    /// Returns the session's mark as the batch leaves it, for the caller to keep once the batch
    /// is committed; `None` when it is not known (a late decision landed below the newest).
    fn add_session_save(
        &self,
        batch: &mut OwnedWriteBatch,
        save: &SessionSave,
        marks: &SessionMarks,
    ) -> Result<Option<SessionMark>> {
        let session = &save.session;
        let (org, env, id) = (session.organization_id, session.environment, session.id);
        let k = key::session(org, env, id);
        let stored = match marks.get(&id) {
            Some(mark) => Some(mark.clone()),
            None => match decode_row::<SessionPlace>(SESSIONS, self.sessions.get(k))? {
                Some(place) => {
                    let (newest, before) = self.newest_decisions(id)?;
                    Some(SessionMark {
                        updated_at: place.updated_at,
                        finalized: place.finalized,
                        verdict: place.verdict().map(str::to_owned),
                        newest,
                        before,
                    })
                }
                None => None,
            },
        };
        if let Some(stored) = &stored {
            if !stored.finalized {
                batch.remove(&self.sessions_idle, key::idle(id, stored.updated_at));
            }
            if stored.updated_at != session.updated_at {
                batch.remove(
                    &self.expiry_queue,
                    key::expiry(stored.updated_at, Expiring::Session as u8, &k),
                );
            }
        }
        let verdict = session.verdict();
        let stored_verdict = stored.as_ref().and_then(|s| s.verdict.as_deref());
        if stored_verdict != verdict.as_deref()
            && let Some(old) = stored_verdict.and_then(|v| key::session_by_verdict(org, env, v, id))
        {
            batch.remove(&self.sessions_by_verdict, old);
        }
        if let Some(new) = verdict
            .as_deref()
            .and_then(|v| key::session_by_verdict(org, env, v, id))
        {
            batch.insert(&self.sessions_by_verdict, new, []);
        }
        batch.insert(
            &self.expiry_queue,
            key::expiry(session.updated_at, Expiring::Session as u8, &k),
            [],
        );
        if !session.finalized {
            let row = IdleRow {
                organization_id: org,
                environment: env,
            };
            batch.insert(
                &self.sessions_idle,
                key::idle(id, session.updated_at),
                encode(SESSIONS_IDLE, &row)?,
            );
        }
        batch.insert(&self.sessions, k, encode(SESSIONS, session)?);
        let (mut newest, mut before) = match stored {
            Some(s) => (s.newest, s.before),
            None => (None, None),
        };
        let mut known = true;
        if let Some(d) = &save.decision {
            let dk = key::decision(d.session_id, d.id);
            let turn = DecisionTurn::of(&d.decision);
            // Only a newer decision replaces the newest; a redelivered or late one prunes
            // nothing, and lands somewhere below (the mark is then read again next time).
            let is_newer = newest.as_ref().is_none_or(|(latest_key, _)| {
                key::trailing_id(latest_key).is_some_and(|latest| d.id.ulid().0 > latest)
            });
            batch.insert(&self.session_decisions, dk, encode(SESSION_DECISIONS, d)?);
            if is_newer {
                // The newest row is kept only if it was a turning point: unlike the one before.
                match (newest.take(), &before) {
                    (Some((latest_key, latest)), Some(prior)) if latest == *prior => {
                        batch.remove(&self.session_decisions, latest_key);
                    }
                    (Some((_, latest)), _) => before = Some(latest),
                    (None, _) => {}
                }
                newest = Some((dk, turn));
            } else {
                known = false;
            }
        }
        self.add_events(batch, &save.events)?;
        Ok(known.then_some(SessionMark {
            updated_at: session.updated_at,
            finalized: session.finalized,
            verdict,
            newest,
            before,
        }))
    }

    /// Adds events (insert or replace by id) and their expiry queue rows to `batch`.
    fn add_events(&self, batch: &mut OwnedWriteBatch, events: &[EventRecord]) -> Result<()> {
        for e in events {
            let ek = key::event(e.organization_id, e.environment, e.id);
            // Saved again with another time, the event keeps a stale queue row too; the purge
            // checks the row's own time before dropping it.
            batch.insert(
                &self.expiry_queue,
                key::expiry(e.created_at, Expiring::Event as u8, &ek),
                [],
            );
            batch.insert(&self.events, ek, encode(EVENTS, e)?);
        }
        Ok(())
    }

    fn get_collect_session(&self, id: SessionId) -> Result<Option<CollectSessionRecord>> {
        decode_row(
            COLLECT_SESSIONS,
            self.collect_sessions.get(key::collect_session(id)),
        )
    }

    /// The conditional update of one session: reads the row, lets `change` modify it (returning
    /// whether it did), and writes it back in one synced batch only if it changed. Callers hold
    /// the writer mutex, so the check and the write are one step. `None` if the session does
    /// not exist (nothing is written: no upsert); otherwise whether this call wrote, and the
    /// row as now stored.
    fn change_collect_session(
        &self,
        id: SessionId,
        durability: Durability,
        change: impl FnOnce(&mut CollectSessionRecord) -> bool,
    ) -> Result<Option<(bool, CollectSessionRecord)>> {
        let Some(mut session) = self.get_collect_session(id)? else {
            return Ok(None);
        };
        if !change(&mut session) {
            return Ok(Some((false, session)));
        }
        let mut batch = match durability {
            Durability::Synced => self.batch(),
            // Written to the OS and fsynced with the next synced batch (or fjall's journal
            // flush): see `advance_collect_seq` for why that is enough there.
            Durability::Buffered => self.db.batch(),
        };
        batch.insert(
            &self.collect_sessions,
            key::collect_session(id),
            encode(COLLECT_SESSIONS, &session)?,
        );
        batch.commit().map_err(unavailable)?;
        Ok(Some((true, session)))
    }

    /// Deletes the sessions minted more than `COLLECT_RETENTION` before `now`, with their
    /// pings' lookup rows: what ScyllaDB's TTL does, judged by the id's time (the moment of the
    /// insert, give or take the request). Session ids are ULIDs, so those rows are a key prefix
    /// and nothing younger is read; at most `budget` of them, and whether more may remain.
    fn purge_expired_collect_sessions(
        &self,
        batch: &mut OwnedWriteBatch,
        now: Timestamp,
        budget: usize,
    ) -> Result<bool> {
        let retention = chrono::TimeDelta::from_std(COLLECT_RETENTION).unwrap_or_default();
        let Ok(cutoff) = u64::try_from((now - retention).timestamp_millis()) else {
            return Ok(false);
        };
        let end = key::collect_sessions_minted_from(cutoff);
        let mut read = 0;
        for guard in self.collect_sessions.range(..end).take(budget) {
            read += 1;
            let (k, v) = guard.into_inner().map_err(unavailable)?;
            match decode::<CollectSessionRecord>(COLLECT_SESSIONS, &v) {
                Ok(session) => {
                    for ping in &session.pings {
                        batch.remove(&self.collect_pings, key::collect_ping(ping.id));
                    }
                }
                // Past retention either way: a damaged row must not block the sweep (and with
                // it every session open); its ping rows, if any, cannot be found from it.
                Err(e) => tracing::warn!(error = %e, "dropping an undecodable collect session"),
            }
            batch.remove(&self.collect_sessions, k);
        }
        Ok(read == budget)
    }

    /// One step of the backfill (see [`Backfill`]); whether it did one (false once done).
    fn backfill_step(
        &self,
        batch: &mut OwnedWriteBatch,
        backfill: &mut Backfill,
        budget: usize,
    ) -> Result<bool> {
        let done = match backfill.done {
            Some(done) => done,
            None => self.contains(&self.settings, key::setting(BACKFILLED))?,
        };
        backfill.done = Some(done);
        if done {
            return Ok(false);
        }
        let table = match backfill.table {
            0 => &self.sessions,
            1 => &self.visitors,
            _ => &self.events,
        };
        let start = backfill
            .cursor
            .take()
            .map_or(Bound::Unbounded, Bound::Excluded);
        let mut read = 0;
        for guard in table
            .range::<Vec<u8>, _>((start, Bound::Unbounded))
            .take(budget)
        {
            let (k, v) = guard.into_inner().map_err(unavailable)?;
            read += 1;
            match backfill.table {
                0 => {
                    let s: SessionIdentity = decode(SESSIONS, &v)?;
                    let queued = key::expiry(s.place.updated_at, Expiring::Session as u8, &k);
                    batch.insert(&self.expiry_queue, queued, []);
                    if let Some(vk) = s.place.verdict().and_then(|verdict| {
                        key::session_by_verdict(s.organization_id, s.environment, verdict, s.id)
                    }) {
                        batch.insert(&self.sessions_by_verdict, vk, []);
                    }
                }
                1 => {
                    let v: VisitorRecord = decode(VISITORS, &v)?;
                    let (org, env) = (v.organization_id, v.environment);
                    for order in VisitorOrder::ALL {
                        let ok = key::visitor_by(org, env, order.value(&v), v.id);
                        batch.insert(self.visitor_order(order), ok, []);
                    }
                    let queued = key::expiry(v.last_seen_at, Expiring::Visitor as u8, &k);
                    batch.insert(&self.expiry_queue, queued, []);
                }
                _ => {
                    let e: EventPlace = decode(EVENTS, &v)?;
                    let queued = key::expiry(e.created_at, Expiring::Event as u8, &k);
                    batch.insert(&self.expiry_queue, queued, []);
                }
            }
            backfill.cursor = Some(k.to_vec());
        }
        if read < budget {
            backfill.cursor = None;
            backfill.table += 1;
            if backfill.table > 2 {
                batch.insert(&self.settings, key::setting(BACKFILLED), b"done".to_vec());
                backfill.done = Some(true);
            }
        }
        Ok(true)
    }

    /// `purge_expired` under the writer lock: every kind's step in one batch. Not synced: a
    /// delete lost in a crash is found again by the next step (its queue row is lost with it).
    fn purge_step(
        &self,
        state: &mut WriterState,
        now: Timestamp,
        keep_since: Timestamp,
        budget: usize,
    ) -> Result<bool> {
        let mut batch = self.db.batch();
        // Alone in its batch: a purge in the same batch could drop a row the backfill indexes.
        if self.backfill_step(&mut batch, &mut state.backfill, budget)? {
            batch.commit().map_err(unavailable)?;
            return Ok(true);
        }
        let mut more =
            self.purge_retained(&mut batch, &mut state.session_marks, keep_since, budget)?;
        more |= self.purge_expired_collect_sessions(&mut batch, now, budget)?;
        more |= self.sweep_step(
            &mut batch,
            &self.idempotency_records,
            &mut state.idempotency_cursor,
            budget,
            |v| Ok(decode::<IdempotencyRecord>(IDEMPOTENCY_RECORDS, v)?.expires_at <= now),
        )?;
        more |= self.sweep_step(
            &mut batch,
            &self.handoff_openings,
            &mut state.handoff_cursor,
            budget,
            |v| Ok(decode::<HandoffOpening>(HANDOFF_OPENINGS, v)?.expires_at <= now),
        )?;
        batch.commit().map_err(unavailable)?;
        Ok(more)
    }
}

/// `Conflict` if two of a new session's pings share an id (as if one had been created first);
/// checked before anything is read, since the stored-row checks cannot see the batch's rows.
fn check_collect_pings(session: &CollectSessionRecord) -> Result<()> {
    let mut ids = std::collections::HashSet::with_capacity(session.pings.len());
    for ping in &session.pings {
        if !ids.insert(ping.id) {
            return Err(StoreError::Conflict(format!(
                "ping {} is given twice in collect session {}",
                ping.id, session.id
            )));
        }
    }
    Ok(())
}

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

    async fn create_organization(&self, org: &OrganizationRecord) -> Result<()> {
        let org = org.clone();
        self.write(move |db, _| {
            let mut batch = db.batch();
            db.insert_new_organization(&mut batch, &org)?;
            db.commit(
                batch,
                Changes {
                    organizations: &[org.id],
                    ..Changes::default()
                },
            )
        })
        .await
    }

    async fn get_organization(&self, id: OrgId) -> Result<Option<OrganizationRecord>> {
        let db = &self.inner;
        let ticket = match db.cache.organization(id) {
            Lookup::Hit(org) => return Ok(Some(org)),
            Lookup::Miss(ticket) => ticket,
        };
        let org: Option<OrganizationRecord> =
            decode_row(ORGANIZATIONS, db.organizations.get(key::organization(id)))?;
        if let Some(org) = &org {
            db.cache.fill_organization(ticket, id, org);
        }
        Ok(org)
    }

    async fn get_organization_by_slug(&self, slug: &str) -> Result<Option<OrganizationRecord>> {
        let db = &self.inner;
        // Both reads from one snapshot, so they agree with each other.
        let snapshot = db.db.snapshot();
        let Some(claim) = decode_row::<SlugRow>(
            ORGANIZATIONS_BY_SLUG,
            snapshot.get(&db.organizations_by_slug, key::slug(slug)),
        )?
        else {
            return Ok(None);
        };
        match decode_row(
            ORGANIZATIONS,
            snapshot.get(&db.organizations, key::organization(claim.organization_id)),
        )? {
            Some(org) => Ok(Some(org)),
            // The claim and the row are written in one batch, so a dangling claim is damage.
            None => Err(StoreError::Corrupt {
                table: ORGANIZATIONS_BY_SLUG,
                detail: format!(
                    "slug `{slug}` names missing organization {}",
                    claim.organization_id
                ),
            }),
        }
    }

    /// Replaces name, status and updated_at of an existing row. A missing row is left missing
    /// (no upsert): creating happens only through `create_organization` (or
    /// `create_organization_with_keys`), which claims the slug.
    async fn update_organization(&self, org: &OrganizationRecord) -> Result<()> {
        let org = org.clone();
        self.write(move |db, _| {
            let k = key::organization(org.id);
            let Some(mut stored) =
                decode_row::<OrganizationRecord>(ORGANIZATIONS, db.organizations.get(k))?
            else {
                return Ok(());
            };
            stored.name = org.name;
            stored.status = org.status;
            stored.updated_at = org.updated_at;
            let mut batch = db.batch();
            batch.insert(&db.organizations, k, encode(ORGANIZATIONS, &stored)?);
            db.commit(
                batch,
                Changes {
                    organizations: &[stored.id],
                    ..Changes::default()
                },
            )
        })
        .await
    }

    /// One batch: the organization, its slug claim, and every key with its two lookup rows,
    /// each checked free under the writer mutex (as `create_organization` and `create_api_key`
    /// check them) before anything is added. The first conflict drops the unwritten batch, so a
    /// failed call leaves no row and no claim.
    async fn create_organization_with_keys(
        &self,
        org: &OrganizationRecord,
        keys: &[ApiKeyRecord],
    ) -> Result<()> {
        // Before the lock: a stray key or a key given twice needs no read.
        crate::check_organization_keys(org, keys)?;
        let org = org.clone();
        let keys = keys.to_vec();
        self.write(move |db, _| {
            let mut batch = db.batch();
            db.insert_new_organization(&mut batch, &org)?;
            for key in &keys {
                db.insert_new_api_key(&mut batch, key)?;
            }
            let hashes: Vec<CredentialHash> = keys.iter().map(|k| k.key_hash).collect();
            db.commit(
                batch,
                Changes {
                    organizations: &[org.id],
                    api_keys: &hashes,
                },
            )
        })
        .await
    }

    async fn create_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        let key = key.clone();
        self.write(move |db, _| {
            let mut batch = db.batch();
            db.insert_new_api_key(&mut batch, &key)?;
            db.commit(
                batch,
                Changes {
                    api_keys: &[key.key_hash],
                    ..Changes::default()
                },
            )
        })
        .await
    }

    async fn get_api_key(
        &self,
        org: OrgId,
        env: Environment,
        id: KeyId,
    ) -> Result<Option<ApiKeyRecord>> {
        self.inner.get_api_key(org, env, id)
    }

    async fn locate_api_key(&self, id: KeyId) -> Result<Option<(OrgId, Environment)>> {
        let db = &self.inner;
        let row: Option<KeyIdRow> =
            decode_row(API_KEY_IDS, db.api_key_ids.get(key::api_key_id(id)))?;
        Ok(row.map(|r| (r.organization_id, r.environment)))
    }

    async fn find_api_key_by_hash(&self, hash: &CredentialHash) -> Result<Option<ApiKeyRecord>> {
        let db = &self.inner;
        let ticket = match db.cache.api_key(hash) {
            Lookup::Hit(record) => return Ok(Some(record)),
            Lookup::Miss(ticket) => ticket,
        };
        let snapshot = db.db.snapshot();
        let Some(at) = decode_row::<KeyHashRow>(
            API_KEYS_BY_HASH,
            snapshot.get(&db.api_keys_by_hash, key::api_key_hash(hash)),
        )?
        else {
            return Ok(None);
        };
        match decode_row(
            API_KEYS,
            snapshot.get(
                &db.api_keys,
                key::api_key(at.organization_id, at.environment, at.id),
            ),
        )? {
            Some(record) => {
                db.cache.fill_api_key(ticket, hash, &record);
                Ok(Some(record))
            }
            None => Err(StoreError::Corrupt {
                table: API_KEYS_BY_HASH,
                detail: format!("credential hash names missing api key {}", at.id),
            }),
        }
    }

    async fn list_api_keys(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<KeyId>,
        limit: usize,
    ) -> Result<Vec<ApiKeyRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let partition = key::api_key_partition(org, env);
        // The partition's keys all begin with `partition`; its upper bound is the prefix with its
        // last byte (the environment tag, 0 or 1) incremented, which cannot overflow.
        let mut end = partition;
        end[16] += 1;
        let start = match after {
            // Keys sort newest first, so "older than `after`" is "after its key".
            Some(after) => Bound::Excluded(key::api_key(org, env, after).to_vec()),
            None => Bound::Included(partition.to_vec()),
        };
        let mut keys = Vec::with_capacity(limit.min(1024));
        for guard in self
            .inner
            .api_keys
            .range((start, Bound::Excluded(end.to_vec())))
            .take(limit)
        {
            let value = guard.value().map_err(unavailable)?;
            keys.push(decode(API_KEYS, &value)?);
        }
        Ok(keys)
    }

    /// Replaces an existing key row; the row's identity (organization, environment, id) and its
    /// credential hash are kept as stored, so the lookup rows can never dangle. A missing row is
    /// left missing (no upsert). The rotation columns are kept as stored (only `rotate_api_key`
    /// writes them), a stored revocation is kept and `last_used_at` only moves forward (see the
    /// trait); the writer mutex makes the read and the write one step.
    async fn update_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        let mut key = key.clone();
        self.write(move |db, _| {
            let Some(stored) = db.get_api_key(key.organization_id, key.environment, key.id)? else {
                return Ok(());
            };
            key.key_hash = stored.key_hash;
            key.rotated_at = stored.rotated_at;
            key.grace_expires_at = stored.grace_expires_at;
            key.replaced_by = stored.replaced_by;
            if stored.revoked_at.is_some() {
                key.revoked_at = stored.revoked_at;
            }
            key.last_used_at = key.last_used_at.max(stored.last_used_at);
            let mut batch = db.batch();
            batch.insert(
                &db.api_keys,
                key::api_key(key.organization_id, key.environment, key.id),
                encode(API_KEYS, &key)?,
            );
            db.commit(
                batch,
                Changes {
                    api_keys: &[key.key_hash],
                    ..Changes::default()
                },
            )
        })
        .await
    }

    /// One batch: the rotated old row, the replacement row and its two lookup rows. `Conflict`
    /// if the old key does not exist (a replacement for nothing would be a key nobody rotated),
    /// is revoked or was already rotated (checked on the stored row, under the writer mutex, so
    /// a racing revocation or rotation is seen), or if the replacement's id or hash is taken.
    async fn rotate_api_key(&self, old: &ApiKeyRecord, replacement: &ApiKeyRecord) -> Result<()> {
        let mut old = old.clone();
        let replacement = replacement.clone();
        self.write(move |db, _| {
            let Some(stored) = db.get_api_key(old.organization_id, old.environment, old.id)? else {
                return Err(StoreError::Conflict(format!(
                    "api key {} does not exist",
                    old.id
                )));
            };
            if stored.revoked_at.is_some() {
                return Err(StoreError::Conflict(format!(
                    "api key {} is revoked",
                    old.id
                )));
            }
            if let Some(by) = stored.replaced_by {
                return Err(StoreError::Conflict(format!(
                    "api key {} was already rotated (replaced by {by})",
                    old.id
                )));
            }
            old.key_hash = stored.key_hash;
            old.last_used_at = old.last_used_at.max(stored.last_used_at);
            let mut batch = db.batch();
            batch.insert(
                &db.api_keys,
                key::api_key(old.organization_id, old.environment, old.id),
                encode(API_KEYS, &old)?,
            );
            db.insert_new_api_key(&mut batch, &replacement)?;
            db.commit(
                batch,
                Changes {
                    api_keys: &[old.key_hash, replacement.key_hash],
                    ..Changes::default()
                },
            )
        })
        .await
    }

    /// Read-modify-write of `last_used_at` under the writer mutex, which every other write of
    /// the row also holds: nothing written in between is overwritten. A missing key stays missing.
    async fn touch_api_key(
        &self,
        org: OrgId,
        env: Environment,
        id: KeyId,
        at: Timestamp,
    ) -> Result<()> {
        self.write(move |db, _| {
            let Some(mut stored) = db.get_api_key(org, env, id)? else {
                return Ok(());
            };
            stored.last_used_at = Some(at);
            let mut batch = db.batch();
            batch.insert(
                &db.api_keys,
                key::api_key(org, env, id),
                encode(API_KEYS, &stored)?,
            );
            db.commit(
                batch,
                Changes {
                    api_keys: &[stored.key_hash],
                    ..Changes::default()
                },
            )
        })
        .await
    }

    async fn idempotency_begin(
        &self,
        scope: &IdempotencyScope,
        record: &IdempotencyRecord,
    ) -> Result<IdempotencyBegin> {
        let k = key::idempotency(scope);
        let record = record.clone();
        self.write(move |db, _| {
            let now = chrono::Utc::now();
            let existing: Option<IdempotencyRecord> =
                decode_row(IDEMPOTENCY_RECORDS, db.idempotency_records.get(&k))?;
            // An expired record counts as absent (ScyllaDB's TTL would have removed it).
            if let Some(existing) = existing.filter(|r| r.expires_at > now) {
                return Ok(IdempotencyBegin::Existing(existing));
            }
            let mut batch = db.batch();
            batch.insert(
                &db.idempotency_records,
                k,
                encode(IDEMPOTENCY_RECORDS, &record)?,
            );
            batch.commit().map_err(unavailable)?;
            Ok(IdempotencyBegin::Started)
        })
        .await
    }

    async fn idempotency_complete(
        &self,
        scope: &IdempotencyScope,
        record: &IdempotencyRecord,
    ) -> Result<()> {
        let k = key::idempotency(scope);
        let record = record.clone();
        self.write(move |db, _| {
            let mut batch = db.batch();
            batch.insert(
                &db.idempotency_records,
                k,
                encode(IDEMPOTENCY_RECORDS, &record)?,
            );
            batch.commit().map_err(unavailable)
        })
        .await
    }

    async fn idempotency_abandon(&self, scope: &IdempotencyScope) -> Result<()> {
        let k = key::idempotency(scope);
        // Synced like any write: a lost release would block the client's retries until expiry.
        self.write(move |db, _| {
            let mut batch = db.batch();
            batch.remove(&db.idempotency_records, k);
            batch.commit().map_err(unavailable)
        })
        .await
    }

    /// One batch: the session row and a `collect_pings` row per ping, each id checked free under
    /// the writer mutex first; the first conflict drops the unwritten batch, so a failed call
    /// writes and claims nothing.
    async fn create_collect_session(&self, session: &CollectSessionRecord) -> Result<()> {
        check_collect_pings(session)?;
        let session = session.clone();
        self.write(move |db, _| {
            let k = key::collect_session(session.id);
            if db.contains(&db.collect_sessions, &k)? {
                return Err(StoreError::Conflict(format!(
                    "collect session {} exists",
                    session.id
                )));
            }
            let mut batch = db.batch();
            batch.insert(&db.collect_sessions, k, encode(COLLECT_SESSIONS, &session)?);
            let row = encode(
                COLLECT_PINGS,
                &PingRow {
                    session_id: session.id,
                },
            )?;
            for ping in &session.pings {
                let k = key::collect_ping(ping.id);
                if db.contains(&db.collect_pings, &k)? {
                    return Err(StoreError::Conflict(format!("ping {} exists", ping.id)));
                }
                batch.insert(&db.collect_pings, k, row.clone());
            }
            batch.commit().map_err(unavailable)
        })
        .await
    }

    async fn get_collect_session(&self, id: SessionId) -> Result<Option<CollectSessionRecord>> {
        self.inner.get_collect_session(id)
    }

    async fn find_collect_ping(&self, ping: PingId) -> Result<Option<SessionId>> {
        let row: Option<PingRow> = decode_row(
            COLLECT_PINGS,
            self.inner
                .db
                .snapshot()
                .get(&self.inner.collect_pings, key::collect_ping(ping)),
        )?;
        Ok(row.map(|r| r.session_id))
    }

    /// The only buffered write of this store: ingest calls it for every batch, and an fsync each
    /// capped ingest at about a thousand batches a second. Losing an advance in a crash only
    /// lets a replayed batch through once more, and the processor drops batches it has seen by
    /// number, so durability here would buy nothing.
    async fn advance_collect_seq(&self, id: SessionId, seq: u64) -> Result<bool> {
        self.raise_collect_counter(id, Durability::Buffered, seq, |s| &mut s.last_seq)
            .await
    }

    /// Synced, unlike `advance_collect_seq`: nothing downstream drops a replayed call, so a
    /// counter lost in a crash would let a seen proof through again.
    async fn advance_collect_call(&self, id: SessionId, counter: u64) -> Result<bool> {
        self.raise_collect_counter(id, Durability::Synced, counter, |s| &mut s.last_call)
            .await
    }

    async fn record_collect_ping(
        &self,
        id: SessionId,
        ping: PingId,
        at: Timestamp,
    ) -> Result<bool> {
        self.write(move |db, _| {
            let changed = db.change_collect_session(id, Durability::Synced, |s| {
                match s.pings.iter_mut().find(|p| p.id == ping) {
                    Some(p) if p.arrived_at.is_none() => {
                        p.arrived_at = Some(at);
                        true
                    }
                    // Already arrived, or not one of this session's pings.
                    _ => false,
                }
            })?;
            Ok(changed.is_some_and(|(written, _)| written))
        })
        .await
    }

    async fn record_collect_ws_identity(
        &self,
        id: SessionId,
        identity: &serde_json::Value,
    ) -> Result<bool> {
        let identity = identity.clone();
        self.write(move |db, _| {
            let changed = db.change_collect_session(id, Durability::Synced, |s| {
                if s.ws_identity.is_some() {
                    return false;
                }
                s.ws_identity = Some(identity);
                true
            })?;
            Ok(changed.is_some_and(|(written, _)| written))
        })
        .await
    }

    async fn mark_collect_results(
        &self,
        id: SessionId,
        at: Timestamp,
    ) -> Result<Option<CollectSessionRecord>> {
        self.write(move |db, _| {
            let changed = db.change_collect_session(id, Durability::Synced, |s| {
                if s.results_at.is_some() {
                    return false;
                }
                s.results_at = Some(at);
                true
            })?;
            Ok(changed.map(|(_, session)| session))
        })
        .await
    }

    /// One batch under the writer mutex for the whole list (one fsync however many sessions):
    /// per session its row (replacing any stored one), the decision's row when given, the
    /// events' rows and its move in the idle index, so a reader sees all of it or none.
    async fn save_sessions(&self, saves: &[SessionSave]) -> Result<()> {
        crate::check_session_saves(saves)?;
        let saves = saves.to_vec();
        self.write(move |db, state| {
            let mut batch = db.batch();
            let mut marks = Vec::with_capacity(saves.len());
            for save in &saves {
                let mark = db.add_session_save(&mut batch, save, &state.session_marks)?;
                marks.push((save.session.id, mark));
            }
            // Marks change only with what is stored: a batch that fails leaves them unknown.
            let committed = batch.commit().map_err(unavailable);
            for (id, mark) in marks {
                match (mark, &committed) {
                    (Some(mark), Ok(())) => state.session_marks.insert(id, mark),
                    _ => {
                        state.session_marks.remove(&id);
                    }
                }
            }
            committed
        })
        .await
    }

    async fn get_session(
        &self,
        org: OrgId,
        env: Environment,
        id: SessionId,
    ) -> Result<Option<SessionRecord>> {
        decode_row(
            SESSIONS,
            self.inner
                .db
                .snapshot()
                .get(&self.inner.sessions, key::session(org, env, id)),
        )
    }

    async fn list_sessions(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let partition = key::session_partition(org, env);
        let start = match after {
            // Keys sort newest first, so "older than `after`" is "after its key".
            Some(after) => Bound::Excluded(key::session(org, env, after).to_vec()),
            None => Bound::Included(partition.to_vec()),
        };
        scan(
            SESSIONS,
            &self.inner.db.snapshot(),
            &self.inner.sessions,
            start,
            prefix_end(&partition),
            limit,
        )
    }

    /// The verdict index's rows and the session rows they name, from one snapshot.
    async fn list_sessions_by_verdict(
        &self,
        org: OrgId,
        env: Environment,
        verdict: &str,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>> {
        let Some(partition) = key::verdict_partition(org, env, verdict) else {
            return Ok(Vec::new());
        };
        let start = match after.and_then(|a| key::session_by_verdict(org, env, verdict, a)) {
            Some(after) => Bound::Excluded(after),
            None => Bound::Included(partition.clone()),
        };
        read_indexed(
            &self.inner.db.snapshot(),
            (&self.inner.sessions_by_verdict, SESSIONS_BY_VERDICT),
            (start, prefix_end(&partition)),
            limit,
            (&self.inner.sessions, SESSIONS),
            |id| key::session(org, env, SessionId::from_ulid(id.into())),
        )
    }

    async fn list_decisions(
        &self,
        session: SessionId,
        limit: usize,
    ) -> Result<Vec<DecisionRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let partition = key::decision_partition(session);
        scan(
            SESSION_DECISIONS,
            &self.inner.db.snapshot(),
            &self.inner.session_decisions,
            Bound::Included(partition.to_vec()),
            prefix_end(&partition),
            limit,
        )
    }

    async fn list_idle_sessions(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> Result<Vec<IdleSession>> {
        let snapshot = self.inner.db.snapshot();
        let mut idle = Vec::new();
        for bucket in 0..key::IDLE_BUCKETS {
            if idle.len() >= limit {
                break;
            }
            let start = key::idle_bucket(bucket).to_vec();
            let end = key::idle_before(bucket, before).to_vec();
            for guard in snapshot
                .range(&self.inner.sessions_idle, start..end)
                .take(limit - idle.len())
            {
                let (k, v) = guard.into_inner().map_err(unavailable)?;
                let row: IdleRow = decode(SESSIONS_IDLE, &v)?;
                let (session_id, idle_since) =
                    key::parse_idle(&k).ok_or_else(|| StoreError::Corrupt {
                        table: SESSIONS_IDLE,
                        detail: "a key of the wrong length".into(),
                    })?;
                idle.push(IdleSession {
                    organization_id: row.organization_id,
                    environment: row.environment,
                    session_id,
                    idle_since,
                });
            }
        }
        Ok(idle)
    }

    async fn get_event(
        &self,
        org: OrgId,
        env: Environment,
        id: EventId,
    ) -> Result<Option<EventRecord>> {
        decode_row(
            EVENTS,
            self.inner
                .db
                .snapshot()
                .get(&self.inner.events, key::event(org, env, id)),
        )
    }

    async fn list_events(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<EventId>,
        limit: usize,
    ) -> Result<Vec<EventRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let partition = key::event_partition(org, env);
        let start = match after {
            Some(after) => Bound::Excluded(key::event(org, env, after).to_vec()),
            None => Bound::Included(partition.to_vec()),
        };
        scan(
            EVENTS,
            &self.inner.db.snapshot(),
            &self.inner.events,
            start,
            prefix_end(&partition),
            limit,
        )
    }

    async fn record_events(&self, events: &[EventRecord]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let events = events.to_vec();
        self.write(move |db, _| {
            let mut batch = db.batch();
            db.add_events(&mut batch, &events)?;
            batch.commit().map_err(unavailable)
        })
        .await
    }

    async fn create_webhook_deliveries(
        &self,
        deliveries: &[WebhookDeliveryRecord],
    ) -> Result<Vec<schemas::ids::WebhookDeliveryId>> {
        if deliveries.is_empty() {
            return Ok(Vec::new());
        }
        let deliveries = deliveries.to_vec();
        self.write(move |db, _| {
            let mut batch = db.batch();
            let mut keys = std::collections::HashSet::new();
            let mut created = Vec::new();
            for d in &deliveries {
                let k = key::delivery(d.organization_id, d.environment, d.event_id, d.endpoint_id);
                if db.contains(&db.webhook_deliveries, &k)? || !keys.insert(k) {
                    continue;
                }
                created.push(d.id);
                batch.insert(&db.webhook_deliveries, k, encode(WEBHOOK_DELIVERIES, d)?);
                if let Some(at) = d.next_attempt_at {
                    batch.insert(&db.webhook_deliveries_due, key::delivery_due(at, &k), []);
                }
            }
            if !created.is_empty() {
                batch.commit().map_err(unavailable)?;
            }
            Ok(created)
        })
        .await
    }

    async fn record_webhook_attempts(&self, deliveries: &[WebhookDeliveryRecord]) -> Result<usize> {
        if deliveries.is_empty() {
            return Ok(0);
        }
        let deliveries = deliveries.to_vec();
        self.write(move |db, _| {
            let mut batch = db.batch();
            // Rows this call writes: a second outcome of one delivery in the same call started
            // from the same stored row as the first, so it is a race the first one won.
            let mut written = std::collections::HashSet::new();
            for d in &deliveries {
                let k = key::delivery(d.organization_id, d.environment, d.event_id, d.endpoint_id);
                let Some(stored) = decode_row::<WebhookDeliveryRecord>(
                    WEBHOOK_DELIVERIES,
                    db.webhook_deliveries.get(k),
                )?
                else {
                    continue;
                };
                if written.contains(&k)
                    || stored.id != d.id
                    || stored.attempts.checked_add(1) != Some(d.attempts)
                {
                    continue;
                }
                if let Some(at) = stored.next_attempt_at {
                    batch.remove(&db.webhook_deliveries_due, key::delivery_due(at, &k));
                }
                if let Some(at) = d.next_attempt_at {
                    batch.insert(&db.webhook_deliveries_due, key::delivery_due(at, &k), []);
                }
                batch.insert(&db.webhook_deliveries, k, encode(WEBHOOK_DELIVERIES, d)?);
                written.insert(k);
            }
            if written.is_empty() {
                return Ok(0);
            }
            batch.commit().map_err(unavailable)?;
            Ok(written.len())
        })
        .await
    }

    async fn defer_webhook_deliveries(
        &self,
        deliveries: &[WebhookDeliveryRecord],
    ) -> Result<usize> {
        if deliveries.is_empty() {
            return Ok(0);
        }
        let deliveries = deliveries.to_vec();
        self.write(move |db, _| {
            let mut batch = db.batch();
            let mut deferred = std::collections::HashSet::new();
            for d in &deliveries {
                let k = key::delivery(d.organization_id, d.environment, d.event_id, d.endpoint_id);
                let Some(mut stored) = decode_row::<WebhookDeliveryRecord>(
                    WEBHOOK_DELIVERIES,
                    db.webhook_deliveries.get(k),
                )?
                else {
                    continue;
                };
                let (Some(due), Some(until)) = (stored.next_attempt_at, d.next_attempt_at) else {
                    continue;
                };
                if deferred.contains(&k) || stored.id != d.id || stored.attempts != d.attempts {
                    continue;
                }
                batch.remove(&db.webhook_deliveries_due, key::delivery_due(due, &k));
                batch.insert(&db.webhook_deliveries_due, key::delivery_due(until, &k), []);
                stored.next_attempt_at = Some(until);
                batch.insert(
                    &db.webhook_deliveries,
                    k,
                    encode(WEBHOOK_DELIVERIES, &stored)?,
                );
                deferred.insert(k);
            }
            if !deferred.is_empty() {
                batch.commit().map_err(unavailable)?;
            }
            Ok(deferred.len())
        })
        .await
    }

    async fn list_event_deliveries(
        &self,
        org: OrgId,
        env: Environment,
        event: EventId,
    ) -> Result<Vec<WebhookDeliveryRecord>> {
        let partition = key::delivery_partition(org, env, event);
        scan(
            WEBHOOK_DELIVERIES,
            &self.inner.db.snapshot(),
            &self.inner.webhook_deliveries,
            Bound::Included(partition.to_vec()),
            prefix_end(&partition),
            usize::MAX,
        )
    }

    async fn due_webhook_deliveries(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> Result<Vec<WebhookDeliveryRecord>> {
        let db = &self.inner;
        let snapshot = db.db.snapshot();
        let end = key::delivery_due_before(before).to_vec();
        let mut due = Vec::new();
        for guard in snapshot
            .range(&db.webhook_deliveries_due, ..end)
            .take(limit)
        {
            let k = guard.key().map_err(unavailable)?;
            let delivery = key::delivery_of_due(&k).ok_or_else(|| StoreError::Corrupt {
                table: WEBHOOK_DELIVERIES_DUE,
                detail: "a due key of the wrong length".into(),
            })?;
            // Written in one batch with the index, so a missing row is damage.
            let row = decode_row(
                WEBHOOK_DELIVERIES,
                snapshot.get(&db.webhook_deliveries, delivery),
            )?
            .ok_or_else(|| StoreError::Corrupt {
                table: WEBHOOK_DELIVERIES_DUE,
                detail: "a due row names no delivery".into(),
            })?;
            due.push(row);
        }
        Ok(due)
    }

    async fn create_gate_service(
        &self,
        service: &GateServiceRecord,
        cap: usize,
    ) -> Result<GateServiceWrite> {
        let service = service.clone();
        self.write(move |db, _| {
            if db.contains(&db.gate_services, service.id.as_bytes())? {
                return Ok(GateServiceWrite::IdTaken);
            }
            // Both environments' services count toward the organization's cap.
            let org = service.organization_id.ulid().to_bytes();
            let owned = db
                .db
                .snapshot()
                .prefix(&db.gate_services_by_owner, org)
                .take(cap)
                .count();
            if owned >= cap {
                return Ok(GateServiceWrite::CapReached);
            }
            let mut batch = db.batch();
            write_gate_service(db, &mut batch, &service)?;
            batch.commit().map_err(unavailable)?;
            Ok(GateServiceWrite::Written)
        })
        .await
    }

    async fn get_gate_service(&self, id: &str) -> Result<Option<GateServiceRecord>> {
        decode_row(GATE_SERVICES, self.inner.gate_services.get(id.as_bytes()))
    }

    async fn list_gate_services(
        &self,
        org: OrgId,
        env: Environment,
    ) -> Result<Vec<GateServiceRecord>> {
        let snapshot = self.inner.db.snapshot();
        let partition = key::api_key_partition(org, env);
        let mut services = Vec::new();
        for guard in snapshot.prefix(&self.inner.gate_services_by_owner, partition) {
            let k = guard.key().map_err(unavailable)?;
            let service = decode_row::<GateServiceRecord>(
                GATE_SERVICES,
                snapshot.get(&self.inner.gate_services, &k[partition.len()..]),
            )?
            .ok_or_else(|| StoreError::Corrupt {
                table: GATE_SERVICES_BY_OWNER,
                detail: "an owner row names no service".into(),
            })?;
            services.push(service);
        }
        Ok(services)
    }

    async fn update_gate_service(
        &self,
        previous_id: &str,
        service: &GateServiceRecord,
    ) -> Result<GateServiceWrite> {
        let (previous_id, service) = (previous_id.to_owned(), service.clone());
        self.write(move |db, _| {
            let Some(stored) = decode_row::<GateServiceRecord>(
                GATE_SERVICES,
                db.gate_services.get(previous_id.as_bytes()),
            )?
            else {
                return Ok(GateServiceWrite::Missing);
            };
            if (stored.organization_id, stored.environment)
                != (service.organization_id, service.environment)
            {
                return Ok(GateServiceWrite::Missing);
            }
            let mut batch = db.batch();
            if service.id != previous_id {
                if db.contains(&db.gate_services, service.id.as_bytes())? {
                    return Ok(GateServiceWrite::IdTaken);
                }
                batch.remove(&db.gate_services, previous_id.as_bytes());
                batch.remove(
                    &db.gate_services_by_owner,
                    key::gate_service_of_owner(
                        stored.organization_id,
                        stored.environment,
                        &previous_id,
                    ),
                );
            }
            batch.remove(
                &db.gate_registry,
                key::gate_registry(stored.environment, &previous_id),
            );
            write_gate_service(db, &mut batch, &service)?;
            batch.commit().map_err(unavailable)?;
            Ok(GateServiceWrite::Written)
        })
        .await
    }

    async fn list_gate_registry(
        &self,
        env: Environment,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<GateServiceRecord>> {
        let snapshot = self.inner.db.snapshot();
        let partition = [key::environment_byte(env)];
        let start = match after {
            Some(after) => Bound::Excluded(key::gate_registry(env, after)),
            None => Bound::Included(partition.to_vec()),
        };
        let mut services = Vec::new();
        for guard in snapshot
            .range(&self.inner.gate_registry, (start, prefix_end(&partition)))
            .take(limit)
        {
            let k = guard.key().map_err(unavailable)?;
            let service = decode_row::<GateServiceRecord>(
                GATE_SERVICES,
                snapshot.get(&self.inner.gate_services, &k[1..]),
            )?
            .ok_or_else(|| StoreError::Corrupt {
                table: GATE_REGISTRY,
                detail: "a registry row names no service".into(),
            })?;
            services.push(service);
        }
        Ok(services)
    }

    async fn create_gate_session(&self, session: &GateSessionRecord) -> Result<()> {
        let session = session.clone();
        self.write(move |db, _| {
            let k = session.id.ulid().to_bytes();
            if db.contains(&db.gate_sessions, &k)? {
                return Err(StoreError::Conflict(format!(
                    "gate session {} exists",
                    session.id
                )));
            }
            let mut batch = db.batch();
            batch.insert(&db.gate_sessions, k, encode(GATE_SESSIONS, &session)?);
            batch.insert(
                &db.expiry_queue,
                key::expiry(session.created_at, Expiring::GateSession as u8, &k),
                [],
            );
            batch.commit().map_err(unavailable)
        })
        .await
    }

    async fn get_gate_session(
        &self,
        id: schemas::ids::GateSessionId,
    ) -> Result<Option<GateSessionRecord>> {
        decode_row(
            GATE_SESSIONS,
            self.inner.gate_sessions.get(id.ulid().to_bytes()),
        )
    }

    async fn transition_gate_session(
        &self,
        session: &GateSessionRecord,
        expected: GateSessionStatus,
        made: Option<(&GateAccountRecord, &AgentTokenRecord)>,
    ) -> Result<bool> {
        let session = session.clone();
        let made = made.map(|(a, t)| (a.clone(), t.clone()));
        self.write(move |db, _| {
            let k = session.id.ulid().to_bytes();
            let Some(stored) =
                decode_row::<GateSessionRecord>(GATE_SESSIONS, db.gate_sessions.get(k))?
            else {
                return Ok(false);
            };
            if stored.status != expected {
                return Ok(false);
            }
            if let Some(code) = session.login_code
                && let Some(holder) = db.gate_login_codes.get(code.0).map_err(unavailable)?
                && *holder != k[..]
            {
                return Ok(false);
            }
            let mut batch = db.batch();
            batch.insert(&db.gate_sessions, k, encode(GATE_SESSIONS, &session)?);
            if let Some(old) = stored.login_code.filter(|c| session.login_code != Some(*c)) {
                batch.remove(&db.gate_login_codes, old.0);
            }
            if let Some(code) = session.login_code {
                batch.insert(&db.gate_login_codes, code.0, k);
            }
            if let Some((account, token)) = &made {
                batch.insert(
                    &db.gate_accounts,
                    account.id.ulid().to_bytes(),
                    encode(GATE_ACCOUNTS, account)?,
                );
                batch.insert(&db.agent_tokens, token.hash.0, encode(AGENT_TOKENS, token)?);
            }
            batch.commit().map_err(unavailable)?;
            Ok(true)
        })
        .await
    }

    async fn count_gate_poll(
        &self,
        id: schemas::ids::GateSessionId,
        token: &CredentialHash,
        now: Timestamp,
        slow_down_secs: u32,
        max_polls: u32,
    ) -> Result<Option<(GateSessionRecord, GatePoll)>> {
        let token = *token;
        self.write(move |db, _| {
            let k = id.ulid().to_bytes();
            let Some(mut session) =
                decode_row::<GateSessionRecord>(GATE_SESSIONS, db.gate_sessions.get(k))?
            else {
                return Ok(None);
            };
            if session.poll_token != Some(token) {
                return Ok(None);
            }
            if session.polls >= max_polls {
                return Ok(Some((session, GatePoll::Exhausted)));
            }
            let too_soon = session.last_poll_at.is_some_and(|last| {
                now < last + chrono::TimeDelta::seconds(i64::from(session.interval_secs))
            });
            session.polls += 1;
            session.last_poll_at = Some(now);
            if too_soon {
                session.interval_secs += slow_down_secs;
            }
            let mut batch = db.batch();
            batch.insert(&db.gate_sessions, k, encode(GATE_SESSIONS, &session)?);
            batch.commit().map_err(unavailable)?;
            let verdict = if too_soon {
                GatePoll::TooSoon
            } else {
                GatePoll::Counted
            };
            Ok(Some((session, verdict)))
        })
        .await
    }

    async fn get_gate_account(
        &self,
        id: schemas::ids::GateAccountId,
    ) -> Result<Option<GateAccountRecord>> {
        decode_row(
            GATE_ACCOUNTS,
            self.inner.gate_accounts.get(id.ulid().to_bytes()),
        )
    }

    async fn get_agent_token(&self, hash: &CredentialHash) -> Result<Option<AgentTokenRecord>> {
        decode_row(AGENT_TOKENS, self.inner.agent_tokens.get(hash.0))
    }

    async fn count_agent_login(
        &self,
        hash: &CredentialHash,
        now: Timestamp,
        per_hour: usize,
    ) -> Result<AgentLogin> {
        let hash = *hash;
        self.write(move |db, _| {
            let Some(mut token) =
                decode_row::<AgentTokenRecord>(AGENT_TOKENS, db.agent_tokens.get(hash.0))?
            else {
                return Ok(AgentLogin::Unusable);
            };
            if token.revoked_at.is_some() || token.expires_at <= now {
                return Ok(AgentLogin::Unusable);
            }
            let hour_ago = now - chrono::TimeDelta::hours(1);
            token.recent_logins.retain(|t| *t > hour_ago);
            if token.recent_logins.len() >= per_hour {
                return Ok(AgentLogin::CapReached(token.recent_logins[0]));
            }
            token.recent_logins.push(now);
            let mut batch = db.batch();
            batch.insert(&db.agent_tokens, hash.0, encode(AGENT_TOKENS, &token)?);
            batch.commit().map_err(unavailable)?;
            Ok(AgentLogin::Counted(token))
        })
        .await
    }

    async fn revoke_agent_token(
        &self,
        hash: &CredentialHash,
        at: Timestamp,
    ) -> Result<Option<AgentTokenRecord>> {
        let hash = *hash;
        self.write(move |db, _| {
            let Some(mut token) =
                decode_row::<AgentTokenRecord>(AGENT_TOKENS, db.agent_tokens.get(hash.0))?
            else {
                return Ok(None);
            };
            if token.revoked_at.is_none() {
                token.revoked_at = Some(at);
                let mut batch = db.batch();
                batch.insert(&db.agent_tokens, hash.0, encode(AGENT_TOKENS, &token)?);
                batch.commit().map_err(unavailable)?;
            }
            Ok(Some(token))
        })
        .await
    }

    async fn get_login_by_code(&self, code: &CredentialHash) -> Result<Option<GateSessionRecord>> {
        let snapshot = self.inner.db.snapshot();
        let Some(id) = snapshot
            .get(&self.inner.gate_login_codes, code.0)
            .map_err(unavailable)?
        else {
            return Ok(None);
        };
        decode_row(GATE_SESSIONS, snapshot.get(&self.inner.gate_sessions, &id))
    }

    async fn update_agent_token(&self, token: &AgentTokenRecord) -> Result<bool> {
        let token = token.clone();
        self.write(move |db, _| {
            if !db.contains(&db.agent_tokens, &token.hash.0)? {
                return Ok(false);
            }
            let mut batch = db.batch();
            batch.insert(
                &db.agent_tokens,
                token.hash.0,
                encode(AGENT_TOKENS, &token)?,
            );
            batch.commit().map_err(unavailable)?;
            Ok(true)
        })
        .await
    }

    async fn create_webhook_endpoint(&self, endpoint: &WebhookEndpointRecord) -> Result<()> {
        let endpoint = endpoint.clone();
        self.write(move |db, _| {
            let k =
                key::webhook_endpoint(endpoint.organization_id, endpoint.environment, endpoint.id);
            if db.contains(&db.webhook_endpoints, &k)? {
                return Err(StoreError::Conflict(format!(
                    "webhook endpoint {} exists",
                    endpoint.id
                )));
            }
            let mut batch = db.batch();
            batch.insert(
                &db.webhook_endpoints,
                k,
                encode(WEBHOOK_ENDPOINTS, &endpoint)?,
            );
            batch.commit().map_err(unavailable)
        })
        .await
    }

    async fn get_webhook_endpoint(
        &self,
        org: OrgId,
        env: Environment,
        id: WebhookEndpointId,
    ) -> Result<Option<WebhookEndpointRecord>> {
        decode_row(
            WEBHOOK_ENDPOINTS,
            self.inner
                .webhook_endpoints
                .get(key::webhook_endpoint(org, env, id)),
        )
    }

    async fn list_webhook_endpoints(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<WebhookEndpointId>,
        limit: usize,
    ) -> Result<Vec<WebhookEndpointRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let partition = key::webhook_endpoint_partition(org, env);
        let start = match after {
            Some(after) => Bound::Excluded(key::webhook_endpoint(org, env, after).to_vec()),
            None => Bound::Included(partition.to_vec()),
        };
        scan(
            WEBHOOK_ENDPOINTS,
            &self.inner.db.snapshot(),
            &self.inner.webhook_endpoints,
            start,
            prefix_end(&partition),
            limit,
        )
    }

    async fn disable_webhook_endpoint(
        &self,
        org: OrgId,
        env: Environment,
        id: WebhookEndpointId,
        at: Timestamp,
    ) -> Result<bool> {
        self.write(move |db, _| {
            let k = key::webhook_endpoint(org, env, id);
            let Some(mut endpoint) = decode_row::<WebhookEndpointRecord>(
                WEBHOOK_ENDPOINTS,
                db.webhook_endpoints.get(k),
            )?
            else {
                return Ok(false);
            };
            if endpoint.status == crate::EndpointStatus::Disabled {
                return Ok(false);
            }
            endpoint.status = crate::EndpointStatus::Disabled;
            endpoint.updated_at = at;
            let mut batch = db.batch();
            batch.insert(
                &db.webhook_endpoints,
                k,
                encode(WEBHOOK_ENDPOINTS, &endpoint)?,
            );
            batch.commit().map_err(unavailable)?;
            Ok(true)
        })
        .await
    }

    async fn update_webhook_endpoint(&self, endpoint: &WebhookEndpointRecord) -> Result<bool> {
        let endpoint = endpoint.clone();
        self.write(move |db, _| {
            let k =
                key::webhook_endpoint(endpoint.organization_id, endpoint.environment, endpoint.id);
            if !db.contains(&db.webhook_endpoints, &k)? {
                return Ok(false);
            }
            let mut batch = db.batch();
            batch.insert(
                &db.webhook_endpoints,
                k,
                encode(WEBHOOK_ENDPOINTS, &endpoint)?,
            );
            batch.commit().map_err(unavailable)?;
            Ok(true)
        })
        .await
    }

    /// One batch under the writer mutex: the visitor row, an index row per digest of its
    /// anchors, and the removal of the index rows of digests the stored row had and this one
    /// has not (read under the same lock, so no concurrent save can slip in between).
    async fn save_visitors(&self, visitors: &[VisitorRecord]) -> Result<()> {
        crate::check_visitor_saves(visitors)?;
        if visitors.is_empty() {
            return Ok(());
        }
        let visitors = visitors.to_vec();
        self.write(move |db, _| {
            let mut batch = db.batch();
            for visitor in &visitors {
                db.add_visitor_save(&mut batch, visitor)?;
            }
            batch.commit().map_err(unavailable)
        })
        .await
    }

    async fn get_visitor(
        &self,
        org: OrgId,
        env: Environment,
        id: VisitorId,
    ) -> Result<Option<VisitorRecord>> {
        decode_row(
            VISITORS,
            self.inner
                .db
                .snapshot()
                .get(&self.inner.visitors, key::visitor(org, env, id)),
        )
    }

    async fn find_visitor_by_anchors(
        &self,
        org: OrgId,
        env: Environment,
        anchors: &VisitorAnchors,
        limit: usize,
    ) -> Result<Vec<VisitorRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // The index rows and the visitor rows they name from one snapshot: a visitor saved
        // between the two reads cannot leave an index row pointing at a missing or older row.
        let snapshot = self.inner.db.snapshot();
        let mut ids: Vec<VisitorId> = Vec::new();
        for digest in anchors.digests() {
            let partition = key::anchor_partition(org, env, &digest);
            let rows: Vec<AnchorRow> = scan(
                VISITORS_BY_ANCHOR,
                &snapshot,
                &self.inner.visitors_by_anchor,
                Bound::Included(partition.to_vec()),
                prefix_end(&partition),
                limit,
            )?;
            ids.extend(rows.into_iter().map(|r| r.visitor_id));
        }
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids.dedup();
        let mut found = Vec::with_capacity(ids.len().min(limit));
        for id in ids.into_iter().take(limit) {
            if let Some(v) = decode_row(
                VISITORS,
                snapshot.get(&self.inner.visitors, key::visitor(org, env, id)),
            )? {
                found.push(v);
            }
        }
        Ok(found)
    }

    async fn list_visitors(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<VisitorId>,
        limit: usize,
    ) -> Result<Vec<VisitorRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let partition = key::visitor_partition(org, env);
        let start = match after {
            Some(after) => Bound::Excluded(key::visitor(org, env, after).to_vec()),
            None => Bound::Included(partition.to_vec()),
        };
        scan(
            VISITORS,
            &self.inner.db.snapshot(),
            &self.inner.visitors,
            start,
            prefix_end(&partition),
            limit,
        )
    }

    /// The order's index rows and the visitor rows they name, from one snapshot (they are
    /// written in one batch, so the snapshot has both or neither).
    async fn list_visitors_by(
        &self,
        org: OrgId,
        env: Environment,
        order: VisitorOrder,
        after: Option<(u64, VisitorId)>,
        limit: usize,
    ) -> Result<Vec<VisitorRecord>> {
        let partition = key::visitor_order_partition(org, env);
        let start = match after {
            Some((value, id)) => Bound::Excluded(key::visitor_by(org, env, value, id).to_vec()),
            None => Bound::Included(partition.to_vec()),
        };
        read_indexed(
            &self.inner.db.snapshot(),
            (
                self.inner.visitor_order(order),
                match order {
                    VisitorOrder::LastSeen => VISITORS_BY_LAST_SEEN,
                    VisitorOrder::SeenCount => VISITORS_BY_SEEN_COUNT,
                    VisitorOrder::FirstSeen => VISITORS_BY_FIRST_SEEN,
                },
            ),
            (start, prefix_end(&partition)),
            limit,
            (&self.inner.visitors, VISITORS),
            |id| key::visitor(org, env, VisitorId::from_ulid(id.into())),
        )
    }

    async fn purge_expired(
        &self,
        now: Timestamp,
        keep_since: Timestamp,
        budget: usize,
    ) -> Result<bool> {
        let budget = budget.max(1);
        self.write(move |db, state| db.purge_step(state, now, keep_since, budget))
            .await
    }

    async fn open_handoff_once(
        &self,
        handoff: &[u8; 16],
        at: Timestamp,
        expires_at: Timestamp,
    ) -> Result<Option<Timestamp>> {
        let k = *handoff;
        self.write(move |db, _| {
            let stored: Option<HandoffOpening> =
                decode_row(HANDOFF_OPENINGS, db.handoff_openings.get(k))?;
            if let Some(first) = stored {
                return Ok(Some(first.first_opened_at));
            }
            let row = HandoffOpening {
                first_opened_at: at,
                expires_at,
            };
            let mut batch = db.batch();
            batch.insert(&db.handoff_openings, k, encode(HANDOFF_OPENINGS, &row)?);
            batch.commit().map_err(unavailable)?;
            Ok(None)
        })
        .await
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

#[cfg(test)]
mod tests {
    use schemas::ids::DecisionId;

    use super::*;

    #[test]
    fn a_session_key_parses_back() {
        let (org, id) = (OrgId::generate(), SessionId::generate());
        for env in [Environment::Live, Environment::Test] {
            assert_eq!(
                key::parse_session(&key::session(org, env, id)),
                Some((org, env, id))
            );
        }
        assert_eq!(key::parse_session(&[0; 32]), None);
    }

    #[test]
    fn newer_keys_sort_first_within_a_partition() {
        let org = OrgId::generate();
        // Sorted: ids from one millisecond are not generated in order.
        let (older, newer) = {
            let (x, y) = (KeyId::generate(), KeyId::generate());
            (x.min(y), x.max(y))
        };
        let (a, b) = (
            key::api_key(org, Environment::Live, newer),
            key::api_key(org, Environment::Live, older),
        );
        assert!(a < b, "the newer key must come first in byte order");
        let partition = key::api_key_partition(org, Environment::Live);
        assert!(a.starts_with(&partition) && b.starts_with(&partition));
        assert!(!key::api_key(org, Environment::Test, newer).starts_with(&partition));
    }

    #[test]
    fn newer_sessions_and_decisions_sort_first_within_a_partition() {
        let org = OrgId::generate();
        let (older, newer) = {
            let (x, y) = (SessionId::generate(), SessionId::generate());
            (x.min(y), x.max(y))
        };
        let (a, b) = (
            key::session(org, Environment::Test, newer),
            key::session(org, Environment::Test, older),
        );
        assert!(a < b, "the newer session must come first in byte order");
        let partition = key::session_partition(org, Environment::Test);
        assert!(a.starts_with(&partition) && b.starts_with(&partition));
        let Bound::Excluded(end) = prefix_end(&partition) else {
            panic!("the partition has an end");
        };
        assert!(b.as_slice() < end.as_slice());

        let (d_old, d_new) = {
            let (x, y) = (DecisionId::generate(), DecisionId::generate());
            (x.min(y), x.max(y))
        };
        assert!(key::decision(newer, d_new) < key::decision(newer, d_old));
        assert_eq!(prefix_end(&[1, 0xff, 0xff]), Bound::Excluded(vec![2]));
        assert_eq!(prefix_end(&[0xff]), Bound::Unbounded);
    }

    /// A collect session written before call proofs existed still reads: without a proof key
    /// (so it can prove no call) and with no counter spent.
    #[test]
    fn a_collect_session_row_from_before_call_proofs_decodes() {
        let token_hash = [0u8; 32];
        let row = serde_json::json!({
            "id": SessionId::generate(), "organization_id": OrgId::generate(),
            "environment": "live", "key_id": KeyId::generate(), "sealed_batch_key": [1, 2],
            "page_url": "https://shop.example/", "sdk_version": "1.0.0",
            "opened_at": "2025-01-01T00:00:00Z", "expires_at": "2025-01-01T00:30:00Z",
            "last_seq": 4, "pings": [], "network_check_token_hash": token_hash,
            "ws_identity": null, "results_at": null
        });
        let session: CollectSessionRecord =
            decode(COLLECT_SESSIONS, &serde_json::to_vec(&row).unwrap()).unwrap();
        assert_eq!(
            (
                session.sealed_proof_key.len(),
                session.last_call,
                session.last_seq
            ),
            (0, 0, 4)
        );
    }

    /// The sweep drops sessions (and their pings' lookup rows) a day after their id was
    /// minted, and nothing younger.
    #[tokio::test]
    async fn collect_sessions_are_swept_after_their_retention() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let session = |org| {
            let now = schemas::time::now();
            CollectSessionRecord {
                id: SessionId::generate(),
                organization_id: org,
                environment: Environment::Live,
                key_id: KeyId::generate(),
                sealed_batch_key: vec![1; 60],
                sealed_proof_key: vec![3; 60],
                page_url: "https://shop.example/".into(),
                sdk_version: "1.0.0".into(),
                opened_at: now,
                expires_at: now + chrono::TimeDelta::minutes(30),
                last_seq: 0,
                last_call: 0,
                pings: (0..3)
                    .map(|_| crate::PingRecord {
                        id: PingId::generate(),
                        arrived_at: None,
                    })
                    .collect(),
                network_check_token_hash: [2; 32],
                ws_identity: None,
                results_at: None,
            }
        };
        let old = session(OrgId::generate());
        store.create_collect_session(&old).await.unwrap();
        let young = session(OrgId::generate());
        store.create_collect_session(&young).await.unwrap();
        let minted = |s: &CollectSessionRecord| {
            chrono::DateTime::from_timestamp_millis(s.id.ulid().timestamp_ms() as i64).unwrap()
        };
        let retention = chrono::TimeDelta::from_std(COLLECT_RETENTION).unwrap();

        // Just inside the old session's retention: both stay.
        let now = minted(&old) + retention;
        while store
            .purge_expired(now, chrono::DateTime::UNIX_EPOCH, 1000)
            .await
            .unwrap()
        {}
        assert_eq!(
            store.get_collect_session(old.id).await.unwrap(),
            Some(old.clone())
        );

        // Just past it (and before the young one's, if minted a millisecond later): the old one
        // goes with its pings.
        let now = minted(&old) + retention + chrono::TimeDelta::milliseconds(1);
        while store
            .purge_expired(now, chrono::DateTime::UNIX_EPOCH, 1000)
            .await
            .unwrap()
        {}
        assert_eq!(store.get_collect_session(old.id).await.unwrap(), None);
        for ping in &old.pings {
            assert_eq!(store.find_collect_ping(ping.id).await.unwrap(), None);
        }
        if minted(&young) > minted(&old) {
            assert_eq!(
                store.get_collect_session(young.id).await.unwrap(),
                Some(young.clone())
            );
        }

        // A day after the young one: the table is empty.
        let now = minted(&young) + retention + chrono::TimeDelta::milliseconds(1);
        while store
            .purge_expired(now, chrono::DateTime::UNIX_EPOCH, 1000)
            .await
            .unwrap()
        {}
        assert_eq!(store.get_collect_session(young.id).await.unwrap(), None);
        assert_eq!(store.inner.collect_sessions.iter().count(), 0);
        assert_eq!(store.inner.collect_pings.iter().count(), 0);
    }

    /// Idempotency records and handoff openings have no time order: the purge walks them a
    /// bounded step at a time, drops the expired ones, keeps the rest, and ends its walk.
    #[tokio::test]
    async fn expired_idempotency_records_and_handoff_openings_are_walked_and_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let now = schemas::time::now();
        let (past, future) = (
            now - chrono::TimeDelta::minutes(1),
            now + chrono::TimeDelta::hours(1),
        );
        for i in 0..10u8 {
            let scope = IdempotencyScope {
                credential: CredentialHash([i; 32]),
                key: format!("k{i}"),
            };
            let record = IdempotencyRecord {
                request_fingerprint: [i; 32],
                expires_at: if i % 2 == 0 { past } else { future },
                response: None,
            };
            store.idempotency_begin(&scope, &record).await.unwrap();
            let expires = if i % 2 == 0 { past } else { future };
            store
                .open_handoff_once(&[i; 16], now, expires)
                .await
                .unwrap();
        }
        let epoch = chrono::DateTime::UNIX_EPOCH;
        let mut steps = 0;
        while store.purge_expired(now, epoch, 3).await.unwrap() {
            steps += 1;
            assert!(steps < 100, "the walk ends");
        }
        assert!(steps >= 3, "10 rows in steps of 3 ({steps} steps)");
        assert_eq!(store.inner.idempotency_records.iter().count(), 5);
        assert_eq!(store.inner.handoff_openings.iter().count(), 5);
        // A dropped opening is gone; a live one still answers with its first opening.
        assert_eq!(
            store
                .open_handoff_once(&[0; 16], now, future)
                .await
                .unwrap(),
            None
        );
        assert_eq!(
            store
                .open_handoff_once(&[1; 16], now, future)
                .await
                .unwrap(),
            Some(now)
        );
    }

    /// A store written before the read and expiry indexes existed: the first purge steps index
    /// its rows, so they are listed in every order and expire like new ones.
    #[tokio::test]
    async fn rows_stored_before_the_indexes_are_indexed_by_the_first_purge_steps() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let (org, env) = (OrgId::generate(), Environment::Live);
        let now = schemas::time::now();
        let session = SessionRecord {
            id: SessionId::generate(),
            organization_id: org,
            environment: env,
            visitor_id: None,
            opened_at: now,
            updated_at: now,
            page_url: String::new(),
            ip: String::new(),
            user_agent: String::new(),
            processed_through: 0,
            processed_seqs: Vec::new(),
            state: crate::RawJson::null(),
            latest_decision: Some(
                crate::RawJson::encode(&serde_json::json!({"verdict": "bot"})).unwrap(),
            ),
            finalized: true,
        };
        store.save_session(&session, None, &[]).await.unwrap();
        let visitor = VisitorRecord {
            id: VisitorId::generate(),
            organization_id: org,
            environment: env,
            first_seen_at: now,
            last_seen_at: now,
            seen_count: 3,
            expires_at: now,
            latest_request: Default::default(),
            storage: Default::default(),
            anchors: Default::default(),
            components: Vec::new(),
            traits: Default::default(),
            recent_sessions: Vec::new(),
        };
        store.save_visitor(&visitor).await.unwrap();
        // Forget the indexes, as a store from before them has none.
        let db = &store.inner;
        for table in [
            &db.sessions_by_verdict,
            &db.visitors_by_last_seen,
            &db.visitors_by_seen_count,
            &db.visitors_by_first_seen,
            &db.expiry_queue,
        ] {
            let keys: Vec<_> = table.iter().map(|g| g.key().unwrap()).collect();
            for k in keys {
                table.remove(k).unwrap();
            }
        }
        assert!(
            store
                .list_visitors_by(org, env, VisitorOrder::SeenCount, None, 10)
                .await
                .unwrap()
                .is_empty()
        );

        let epoch = chrono::DateTime::UNIX_EPOCH;
        while store.purge_expired(now, epoch, 1).await.unwrap() {}
        assert_eq!(
            store
                .list_sessions_by_verdict(org, env, "bot", None, 10)
                .await
                .unwrap(),
            vec![session.clone()]
        );
        for order in VisitorOrder::ALL {
            assert_eq!(
                store
                    .list_visitors_by(org, env, order, None, 10)
                    .await
                    .unwrap(),
                vec![visitor.clone()]
            );
        }
        assert!(db.settings.contains_key(key::setting(BACKFILLED)).unwrap());
        // And they expire.
        let later = now + chrono::TimeDelta::seconds(1);
        while store.purge_expired(later, later, 100).await.unwrap() {}
        assert_eq!(store.get_session(org, env, session.id).await.unwrap(), None);
        assert_eq!(store.get_visitor(org, env, visitor.id).await.unwrap(), None);
    }

    /// The race the cache's generation check exists for, step by step through the real write
    /// path: a reader misses and reads the old row, a revocation commits and returns, then the
    /// reader offers the old row. It must not be cached.
    #[tokio::test]
    async fn a_row_read_before_a_write_is_not_cached_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let now = schemas::time::now();
        let org = OrganizationRecord {
            id: OrgId::generate(),
            name: "Raced".into(),
            slug: "raced".into(),
            status: schemas::resources::OrgStatus::Active,
            created_at: now,
            updated_at: now,
        };
        store.create_organization(&org).await.unwrap();
        let key = ApiKeyRecord {
            id: KeyId::generate(),
            organization_id: org.id,
            key_type: schemas::credential::KeyType::Secret,
            environment: Environment::Live,
            name: "raced".into(),
            key_hash: CredentialHash([7; 32]),
            key_preview: "sk_live_Ab12".into(),
            display_key: "sk_live_Ab12...wxyz".into(),
            publishable_token: None,
            allowed_origins: Vec::new(),
            scopes: Vec::new(),
            rate_limit_override: None,
            created_at: now,
            rotated_at: None,
            revoked_at: None,
            grace_expires_at: None,
            last_used_at: None,
            replaced_by: None,
        };
        store.create_api_key(&key).await.unwrap();

        let Lookup::Miss(key_ticket) = store.inner.cache.api_key(&key.key_hash) else {
            panic!("nothing was read yet");
        };
        let Lookup::Miss(org_ticket) = store.inner.cache.organization(org.id) else {
            panic!("nothing was read yet");
        };
        let old_key = store
            .inner
            .get_api_key(key.organization_id, key.environment, key.id);
        let old_key = old_key.unwrap().unwrap();
        let old_org: OrganizationRecord = decode_row(
            ORGANIZATIONS,
            store.inner.organizations.get(key::organization(org.id)),
        )
        .unwrap()
        .unwrap();

        let revoked = ApiKeyRecord {
            revoked_at: Some(schemas::time::now()),
            ..key.clone()
        };
        store.update_api_key(&revoked).await.unwrap();
        let suspended = OrganizationRecord {
            status: schemas::resources::OrgStatus::Suspended,
            ..org.clone()
        };
        store.update_organization(&suspended).await.unwrap();

        store
            .inner
            .cache
            .fill_api_key(key_ticket, &key.key_hash, &old_key);
        store
            .inner
            .cache
            .fill_organization(org_ticket, org.id, &old_org);
        assert_eq!(
            store.find_api_key_by_hash(&key.key_hash).await.unwrap(),
            Some(revoked.clone())
        );
        assert_eq!(
            store.get_organization(org.id).await.unwrap(),
            Some(suspended.clone())
        );
        // And now from the cache.
        assert!(matches!(store.inner.cache.api_key(&key.key_hash), Lookup::Hit(k) if k == revoked));
        assert!(matches!(store.inner.cache.organization(org.id), Lookup::Hit(o) if o == suspended));
    }
}
