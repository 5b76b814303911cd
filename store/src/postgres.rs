//! The PostgreSQL backend (`postgres://…`, D25): the store a fleet of processes shares. Each
//! table of `schemas/sql/` keeps its record as JSON beside the columns its keys, constraints and
//! indexes need, so a uniqueness rule is a constraint and an index table is an index.
//!
//! What the embedded backend does for one process and this one must not assume:
//! - no row cache: every replica reads the row, so a revocation or a rotation made through any
//!   replica is seen by the next request on every other one;
//! - no snapshots: a read that spans rows written together is one statement (a join or an
//!   index on the row itself), and a read-check-write is a transaction that locks the row it
//!   read (`SELECT … FOR UPDATE`), so concurrent replicas serialise on the row, not on a mutex;
//! - no writer bookkeeping (session marks, sweep cursors): what a save must know of the stored
//!   rows it reads under the row's lock, and the retention sweep deletes by indexed times.
//!
//! A failure to reach the database is `Unavailable` (a retry may help), and so are serialisation
//! failures and deadlocks, which PostgreSQL resolves by aborting one transaction: the caller's
//! retry runs it again. A unique violation is `Conflict`.

mod accounts;
mod collect;
mod gate;
pub mod migrations;
mod retention;
mod sessions;
mod visitors;
mod webhooks;

use std::str::FromStr;

use async_trait::async_trait;
use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod};
use schemas::credential::Environment;
use schemas::ids::{EventId, KeyId, OrgId, PingId, SessionId, VisitorId, WebhookEndpointId};
use schemas::time::Timestamp;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{Json, ToSql};
use tokio_postgres::{NoTls, Row};

use crate::{
    AgentLogin, AgentTokenRecord, ApiKeyRecord, CollectSessionRecord, CredentialHash,
    DecisionRecord, EventRecord, GateAccountRecord, GatePoll, GateServiceRecord, GateServiceWrite,
    GateSessionRecord, GateSessionStatus, IdempotencyBegin, IdempotencyRecord, IdempotencyScope,
    IdleSession, OrganizationRecord, Result, SessionRecord, SessionSave, StoreBackend, StoreError,
    VisitorAnchors, VisitorOrder, VisitorRecord, WebhookDeliveryRecord, WebhookEndpointRecord,
};

/// How many connections one process keeps at most: the processor's saves and the APIs' reads
/// share them, and a database serves a few hundred in all, so a fleet of a dozen processes fits.
const POOL_SIZE: usize = 16;

/// The store in a PostgreSQL database (`postgres://user@host:port/db`, any libpq-style URL).
pub struct PostgresStore {
    pool: Pool,
}

impl PostgresStore {
    /// A pool for `url`; connects lazily, so a database that is down at start makes `ping`
    /// (and `/readyz`) fail rather than the process. If the database answers now, its schema
    /// must be the one this build needs (`vigil migrate` makes it so).
    pub async fn open(url: &str) -> Result<Self> {
        let config = tokio_postgres::Config::from_str(url).map_err(|e| {
            StoreError::Invalid(format!(
                "bad PostgreSQL URL `{}`: {e}",
                schemas::redact::redact_url(url)
            ))
        })?;
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .create_timeout(Some(std::time::Duration::from_secs(5)))
            .wait_timeout(Some(std::time::Duration::from_secs(10)))
            .build()
            .map_err(|e| StoreError::Invalid(format!("PostgreSQL pool: {e}")))?;
        let store = PostgresStore { pool };
        match store.pool.get().await {
            Ok(client) => migrations::check(&client).await?,
            Err(e) => tracing::warn!(
                error = %e,
                "the PostgreSQL store is unreachable; serving, and /readyz says so until it answers"
            ),
        }
        Ok(store)
    }

    async fn client(&self) -> Result<deadpool_postgres::Client> {
        self.pool
            .get()
            .await
            .map_err(|e| StoreError::Unavailable(format!("PostgreSQL connection: {e}")))
    }
}

/// An id's ULID as the 16 bytes the tables key by (big-endian, so byte order is time order).
fn ulid_bytes(ulid: ulid::Ulid) -> Vec<u8> {
    ulid.to_bytes().to_vec()
}

fn ulid_of(table: &'static str, bytes: &[u8]) -> Result<ulid::Ulid> {
    let bytes: [u8; 16] = bytes.try_into().map_err(|_| StoreError::Corrupt {
        table,
        detail: format!("an id of {} bytes, not 16", bytes.len()),
    })?;
    Ok(ulid::Ulid::from_bytes(bytes))
}

/// The `environment` column: 0 live, 1 test (as the embedded keys and the CQL schema have it).
fn env_code(env: Environment) -> i16 {
    match env {
        Environment::Live => 0,
        Environment::Test => 1,
    }
}

fn env_of(table: &'static str, code: i16) -> Result<Environment> {
    match code {
        0 => Ok(Environment::Live),
        1 => Ok(Environment::Test),
        other => Err(StoreError::Corrupt {
            table,
            detail: format!("environment code {other}"),
        }),
    }
}

/// A `LIMIT` parameter.
fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A record as its `body` column.
fn json<T: Serialize + std::fmt::Debug>(record: &T) -> Json<&T> {
    Json(record)
}

/// The record in column `idx` of `row`; a body that does not decode is a damaged row.
fn decode<T: DeserializeOwned>(table: &'static str, row: &Row, idx: usize) -> Result<T> {
    row.try_get::<_, Json<T>>(idx)
        .map(|Json(record)| record)
        .map_err(|e| StoreError::Corrupt {
            table,
            detail: e.to_string(),
        })
}

/// A driver error as the port's: unique violations are conflicts; aborted transactions
/// (serialisation failures, deadlocks) and lost connections are worth a retry.
fn db_error(e: tokio_postgres::Error) -> StoreError {
    match e.code() {
        Some(code) if *code == SqlState::UNIQUE_VIOLATION => StoreError::Conflict(
            e.as_db_error()
                .map(|d| {
                    let constraint = d.constraint().unwrap_or("a unique constraint");
                    format!("{} ({constraint})", d.message())
                })
                .unwrap_or_else(|| e.to_string()),
        ),
        _ => StoreError::Unavailable(format!("PostgreSQL: {e}")),
    }
}

fn is_unique_violation(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNIQUE_VIOLATION)
}

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// Runs a statement (prepared once per connection) and answers its rows.
async fn rows(client: &impl GenericClient, sql: &str, params: Params<'_>) -> Result<Vec<Row>> {
    let statement = client.prepare_cached(sql).await.map_err(db_error)?;
    client.query(&statement, params).await.map_err(db_error)
}

/// Runs a statement that answers at most one row.
async fn row(client: &impl GenericClient, sql: &str, params: Params<'_>) -> Result<Option<Row>> {
    let statement = client.prepare_cached(sql).await.map_err(db_error)?;
    client.query_opt(&statement, params).await.map_err(db_error)
}

/// Runs a statement and answers how many rows it changed.
async fn execute(client: &impl GenericClient, sql: &str, params: Params<'_>) -> Result<u64> {
    let statement = client.prepare_cached(sql).await.map_err(db_error)?;
    client.execute(&statement, params).await.map_err(db_error)
}

/// The row of a table keyed by organization, environment and id: `sql` selects its body with
/// those three as `$1`, `$2`, `$3`.
async fn owned_row<T: DeserializeOwned>(
    store: &PostgresStore,
    table: &'static str,
    sql: &str,
    (org, env, id): (OrgId, Environment, ulid::Ulid),
) -> Result<Option<T>> {
    let found = row(
        &store.client().await?,
        sql,
        &[&ulid_bytes(org.ulid()), &env_code(env), &ulid_bytes(id)],
    )
    .await?;
    decode_opt(table, found)
}

/// A page of one organization's and environment's rows, newest first: `sql` selects bodies
/// with the organization, the environment, the id to start after (or null) and the limit as
/// `$1` to `$4`.
async fn owned_page<T: DeserializeOwned>(
    store: &PostgresStore,
    table: &'static str,
    sql: &str,
    (org, env): (OrgId, Environment),
    after: Option<ulid::Ulid>,
    count: usize,
) -> Result<Vec<T>> {
    let found = rows(
        &store.client().await?,
        sql,
        &[
            &ulid_bytes(org.ulid()),
            &env_code(env),
            &after.map(ulid_bytes),
            &limit(count),
        ],
    )
    .await?;
    decode_all(table, &found)
}

/// The records in column 0 of `rows`.
fn decode_all<T: DeserializeOwned>(table: &'static str, rows: &[Row]) -> Result<Vec<T>> {
    rows.iter().map(|r| decode(table, r, 0)).collect()
}

/// The record in column 0 of a row, if any.
fn decode_opt<T: DeserializeOwned>(table: &'static str, row: Option<Row>) -> Result<Option<T>> {
    row.map(|r| decode(table, &r, 0)).transpose()
}

#[async_trait]
impl StoreBackend for PostgresStore {
    async fn ping(&self) -> Result<()> {
        let client = self.client().await?;
        migrations::check(&client).await
    }

    async fn create_organization(&self, org: &OrganizationRecord) -> Result<()> {
        accounts::create_organization(self, org).await
    }
    async fn get_organization(&self, id: OrgId) -> Result<Option<OrganizationRecord>> {
        accounts::get_organization(self, id).await
    }
    async fn get_organization_by_slug(&self, slug: &str) -> Result<Option<OrganizationRecord>> {
        accounts::get_organization_by_slug(self, slug).await
    }
    async fn update_organization(&self, org: &OrganizationRecord) -> Result<()> {
        accounts::update_organization(self, org).await
    }
    async fn create_organization_with_keys(
        &self,
        org: &OrganizationRecord,
        keys: &[ApiKeyRecord],
    ) -> Result<()> {
        accounts::create_organization_with_keys(self, org, keys).await
    }
    async fn create_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        accounts::create_api_key(self, key).await
    }
    async fn get_api_key(
        &self,
        org: OrgId,
        env: Environment,
        id: KeyId,
    ) -> Result<Option<ApiKeyRecord>> {
        accounts::get_api_key(self, org, env, id).await
    }
    async fn locate_api_key(&self, id: KeyId) -> Result<Option<(OrgId, Environment)>> {
        accounts::locate_api_key(self, id).await
    }
    async fn find_api_key_by_hash(&self, hash: &CredentialHash) -> Result<Option<ApiKeyRecord>> {
        accounts::find_api_key_by_hash(self, hash).await
    }
    async fn list_api_keys(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<KeyId>,
        limit: usize,
    ) -> Result<Vec<ApiKeyRecord>> {
        accounts::list_api_keys(self, org, env, after, limit).await
    }
    async fn update_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        accounts::update_api_key(self, key).await
    }
    async fn rotate_api_key(&self, old: &ApiKeyRecord, replacement: &ApiKeyRecord) -> Result<()> {
        accounts::rotate_api_key(self, old, replacement).await
    }
    async fn touch_api_key(
        &self,
        org: OrgId,
        env: Environment,
        id: KeyId,
        at: Timestamp,
    ) -> Result<()> {
        accounts::touch_api_key(self, org, env, id, at).await
    }
    async fn idempotency_begin(
        &self,
        scope: &IdempotencyScope,
        record: &IdempotencyRecord,
    ) -> Result<IdempotencyBegin> {
        accounts::idempotency_begin(self, scope, record).await
    }
    async fn idempotency_complete(
        &self,
        scope: &IdempotencyScope,
        record: &IdempotencyRecord,
    ) -> Result<()> {
        accounts::idempotency_complete(self, scope, record).await
    }
    async fn idempotency_abandon(&self, scope: &IdempotencyScope) -> Result<()> {
        accounts::idempotency_abandon(self, scope).await
    }
    async fn open_handoff_once(
        &self,
        handoff: &[u8; 16],
        at: Timestamp,
        expires_at: Timestamp,
    ) -> Result<Option<Timestamp>> {
        accounts::open_handoff_once(self, handoff, at, expires_at).await
    }

    async fn create_collect_session(&self, session: &CollectSessionRecord) -> Result<()> {
        collect::create_collect_session(self, session).await
    }
    async fn get_collect_session(&self, id: SessionId) -> Result<Option<CollectSessionRecord>> {
        collect::get_collect_session(self, id).await
    }
    async fn find_collect_ping(&self, ping: PingId) -> Result<Option<SessionId>> {
        collect::find_collect_ping(self, ping).await
    }
    async fn advance_collect_seq(&self, id: SessionId, seq: u64) -> Result<bool> {
        collect::advance_collect_seq(self, id, seq).await
    }
    async fn advance_collect_call(&self, id: SessionId, counter: u64) -> Result<bool> {
        collect::advance_collect_call(self, id, counter).await
    }
    async fn record_collect_ping(
        &self,
        id: SessionId,
        ping: PingId,
        at: Timestamp,
    ) -> Result<bool> {
        collect::record_collect_ping(self, id, ping, at).await
    }
    async fn record_collect_ws_identity(
        &self,
        id: SessionId,
        identity: &serde_json::Value,
    ) -> Result<bool> {
        collect::record_collect_ws_identity(self, id, identity).await
    }
    async fn mark_collect_results(
        &self,
        id: SessionId,
        at: Timestamp,
    ) -> Result<Option<CollectSessionRecord>> {
        collect::mark_collect_results(self, id, at).await
    }

    async fn save_sessions(&self, saves: &[SessionSave]) -> Result<()> {
        sessions::save_sessions(self, saves).await
    }
    async fn get_session(
        &self,
        org: OrgId,
        env: Environment,
        id: SessionId,
    ) -> Result<Option<SessionRecord>> {
        sessions::get_session(self, org, env, id).await
    }
    async fn list_sessions(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>> {
        sessions::list_sessions(self, org, env, after, limit).await
    }
    async fn list_sessions_by_verdict(
        &self,
        org: OrgId,
        env: Environment,
        verdict: &str,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>> {
        sessions::list_sessions_by_verdict(self, org, env, verdict, after, limit).await
    }
    async fn list_decisions(
        &self,
        org: OrgId,
        env: Environment,
        session: SessionId,
        limit: usize,
    ) -> Result<Vec<DecisionRecord>> {
        sessions::list_decisions(self, org, env, session, limit).await
    }
    async fn list_idle_sessions(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> Result<Vec<IdleSession>> {
        sessions::list_idle_sessions(self, before, limit).await
    }
    async fn get_event(
        &self,
        org: OrgId,
        env: Environment,
        id: EventId,
    ) -> Result<Option<EventRecord>> {
        sessions::get_event(self, org, env, id).await
    }
    async fn record_events(&self, events: &[EventRecord]) -> Result<()> {
        sessions::record_events(self, events).await
    }
    async fn list_events(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<EventId>,
        limit: usize,
    ) -> Result<Vec<EventRecord>> {
        sessions::list_events(self, org, env, after, limit).await
    }

    async fn create_webhook_endpoint(&self, endpoint: &WebhookEndpointRecord) -> Result<()> {
        webhooks::create_webhook_endpoint(self, endpoint).await
    }
    async fn get_webhook_endpoint(
        &self,
        org: OrgId,
        env: Environment,
        id: WebhookEndpointId,
    ) -> Result<Option<WebhookEndpointRecord>> {
        webhooks::get_webhook_endpoint(self, org, env, id).await
    }
    async fn list_webhook_endpoints(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<WebhookEndpointId>,
        limit: usize,
    ) -> Result<Vec<WebhookEndpointRecord>> {
        webhooks::list_webhook_endpoints(self, org, env, after, limit).await
    }
    async fn update_webhook_endpoint(&self, endpoint: &WebhookEndpointRecord) -> Result<bool> {
        webhooks::update_webhook_endpoint(self, endpoint).await
    }
    async fn disable_webhook_endpoint(
        &self,
        org: OrgId,
        env: Environment,
        id: WebhookEndpointId,
        at: Timestamp,
    ) -> Result<bool> {
        webhooks::disable_webhook_endpoint(self, org, env, id, at).await
    }
    async fn create_webhook_deliveries(
        &self,
        deliveries: &[WebhookDeliveryRecord],
    ) -> Result<Vec<schemas::ids::WebhookDeliveryId>> {
        webhooks::create_webhook_deliveries(self, deliveries).await
    }
    async fn record_webhook_attempts(&self, deliveries: &[WebhookDeliveryRecord]) -> Result<usize> {
        webhooks::record_webhook_attempts(self, deliveries).await
    }
    async fn defer_webhook_deliveries(
        &self,
        deliveries: &[WebhookDeliveryRecord],
    ) -> Result<usize> {
        webhooks::defer_webhook_deliveries(self, deliveries).await
    }
    async fn claim_webhook_deliveries(
        &self,
        deliveries: &[WebhookDeliveryRecord],
        until: Timestamp,
    ) -> Result<Vec<schemas::ids::WebhookDeliveryId>> {
        webhooks::claim_webhook_deliveries(self, deliveries, until).await
    }
    async fn list_event_deliveries(
        &self,
        org: OrgId,
        env: Environment,
        event: EventId,
    ) -> Result<Vec<WebhookDeliveryRecord>> {
        webhooks::list_event_deliveries(self, org, env, event).await
    }
    async fn due_webhook_deliveries(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> Result<Vec<WebhookDeliveryRecord>> {
        webhooks::due_webhook_deliveries(self, before, limit).await
    }

    async fn create_gate_service(
        &self,
        service: &GateServiceRecord,
        cap: usize,
    ) -> Result<GateServiceWrite> {
        gate::create_gate_service(self, service, cap).await
    }
    async fn get_gate_service(&self, id: &str) -> Result<Option<GateServiceRecord>> {
        gate::get_gate_service(self, id).await
    }
    async fn list_gate_services(
        &self,
        org: OrgId,
        env: Environment,
    ) -> Result<Vec<GateServiceRecord>> {
        gate::list_gate_services(self, org, env).await
    }
    async fn update_gate_service(
        &self,
        previous_id: &str,
        service: &GateServiceRecord,
    ) -> Result<GateServiceWrite> {
        gate::update_gate_service(self, previous_id, service).await
    }
    async fn list_gate_registry(
        &self,
        env: Environment,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<GateServiceRecord>> {
        gate::list_gate_registry(self, env, after, limit).await
    }
    async fn create_gate_session(&self, session: &GateSessionRecord) -> Result<()> {
        gate::create_gate_session(self, session).await
    }
    async fn get_gate_session(
        &self,
        id: schemas::ids::GateSessionId,
    ) -> Result<Option<GateSessionRecord>> {
        gate::get_gate_session(self, id).await
    }
    async fn transition_gate_session(
        &self,
        session: &GateSessionRecord,
        expected: GateSessionStatus,
        made: Option<(&GateAccountRecord, &AgentTokenRecord)>,
    ) -> Result<bool> {
        gate::transition_gate_session(self, session, expected, made).await
    }
    async fn count_gate_poll(
        &self,
        id: schemas::ids::GateSessionId,
        token: &CredentialHash,
        now: Timestamp,
        slow_down_secs: u32,
        max_polls: u32,
    ) -> Result<Option<(GateSessionRecord, GatePoll)>> {
        gate::count_gate_poll(self, id, token, now, slow_down_secs, max_polls).await
    }
    async fn get_gate_account(
        &self,
        id: schemas::ids::GateAccountId,
    ) -> Result<Option<GateAccountRecord>> {
        gate::get_gate_account(self, id).await
    }
    async fn get_login_by_code(&self, code: &CredentialHash) -> Result<Option<GateSessionRecord>> {
        gate::get_login_by_code(self, code).await
    }
    async fn get_agent_token(&self, hash: &CredentialHash) -> Result<Option<AgentTokenRecord>> {
        gate::get_agent_token(self, hash).await
    }
    async fn update_agent_token(&self, token: &AgentTokenRecord) -> Result<bool> {
        gate::update_agent_token(self, token).await
    }
    async fn count_agent_login(
        &self,
        hash: &CredentialHash,
        now: Timestamp,
        per_hour: usize,
    ) -> Result<AgentLogin> {
        gate::count_agent_login(self, hash, now, per_hour).await
    }
    async fn revoke_agent_token(
        &self,
        hash: &CredentialHash,
        at: Timestamp,
    ) -> Result<Option<AgentTokenRecord>> {
        gate::revoke_agent_token(self, hash, at).await
    }

    async fn save_visitors(&self, visitors: &[VisitorRecord]) -> Result<()> {
        visitors::save_visitors(self, visitors).await
    }
    async fn get_visitor(
        &self,
        org: OrgId,
        env: Environment,
        id: VisitorId,
    ) -> Result<Option<VisitorRecord>> {
        visitors::get_visitor(self, org, env, id).await
    }
    async fn find_visitor_by_anchors(
        &self,
        org: OrgId,
        env: Environment,
        anchors: &VisitorAnchors,
        limit: usize,
    ) -> Result<Vec<VisitorRecord>> {
        visitors::find_visitor_by_anchors(self, org, env, anchors, limit).await
    }
    async fn list_visitors(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<VisitorId>,
        limit: usize,
    ) -> Result<Vec<VisitorRecord>> {
        visitors::list_visitors(self, org, env, after, limit).await
    }
    async fn list_visitors_by(
        &self,
        org: OrgId,
        env: Environment,
        order: VisitorOrder,
        after: Option<(u64, VisitorId)>,
        limit: usize,
    ) -> Result<Vec<VisitorRecord>> {
        visitors::list_visitors_by(self, org, env, order, after, limit).await
    }

    async fn purge_expired(
        &self,
        now: Timestamp,
        keep_since: Timestamp,
        budget: usize,
    ) -> Result<bool> {
        retention::purge_expired(self, now, keep_since, budget).await
    }

    async fn get_setting(&self, name: &str) -> Result<Option<Vec<u8>>> {
        accounts::get_setting(self, name).await
    }
    async fn put_setting_if_absent(&self, name: &str, value: &[u8]) -> Result<bool> {
        accounts::put_setting_if_absent(self, name, value).await
    }
}
