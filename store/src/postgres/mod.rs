//! The PostgreSQL backend (`postgres://…`, docs/architecture.md#shared-stores): the store a fleet
//! of processes shares. Each table of `store/sql/` keeps its record as JSON beside the columns
//! its keys, constraints and indexes need, so a uniqueness rule is a constraint and an index table
//! is an index.
//!
//! What the embedded backend does for one process and this one must not assume:
//! - no row cache but the authentication path's (`credentials`): keys and organizations, kept
//!   a few seconds and dropped whenever any replica changes one (LISTEN/NOTIFY), bypassed while
//!   that notification cannot be heard; the replica that made a change answers once every other
//!   one has heard it (within the bounds docs/architecture.md#fleet-writes lists), so a
//!   revocation or a rotation made through any replica is seen by the next request on every
//!   other one; every other read reads the row;
//! - no snapshots: a read that spans rows written together is one statement (a join or an
//!   index on the row itself), and a read-check-write is a transaction that locks the row it
//!   read (`SELECT … FOR UPDATE`), so concurrent replicas serialise on the row, not on a mutex;
//! - no writer bookkeeping (session marks, sweep cursors): what a save must know of the stored
//!   rows it reads under the row's lock, and the retention sweep deletes by indexed times.
//!
//! A failure to reach the database is `Unavailable` (a retry may help), and so are serialisation
//! failures and deadlocks, which PostgreSQL resolves by aborting one transaction: the caller's
//! retry runs it again. A unique violation is `Conflict`.

mod collect;
mod credentials;
mod events;
mod gate;
mod idempotency;
pub mod migrations;
mod organizations;
mod retention;
mod seqs;
mod sessions;
pub mod tls;
mod visitors;

use async_trait::async_trait;
use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod};
use schemas::credential::Environment;
use schemas::ids::OrgId;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{Json, ToSql};

use crate::{Result, StoreBackend, StoreError};

/// How many connections one process keeps at most: the processor's saves and the APIs' reads
/// share them, and a database serves a few hundred in all, so a fleet of a dozen processes fits.
pub const POOL_SIZE: usize = 16;

/// The store in a PostgreSQL database (`postgres://user@host:port/db`, any libpq-style URL).
pub struct PostgresStore {
    pool: Pool,
    /// The authentication path's keys and organizations, while changes can be heard.
    credentials: std::sync::Arc<credentials::CredentialCache>,
    /// Ingest's batch counters, raised in groups.
    seqs: std::sync::Arc<seqs::SeqGroups>,
}

impl PostgresStore {
    /// A pool for `url`; connects lazily, so a database that is down at start makes `ping`
    /// (and `/readyz`) fail rather than the process. If the database answers now, its schema
    /// must be the one this build needs (`vigil migrate` makes it so).
    pub async fn open(url: &str) -> Result<Self> {
        let tls::Connection { config, tls, .. } = tls::connection(url)?;
        let credentials = credentials::start(config.clone(), tls.clone());
        let manager = Manager::from_config(
            config,
            tls,
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
        let store = PostgresStore {
            seqs: seqs::SeqGroups::new(pool.clone()),
            pool,
            credentials,
        };
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
        pooled(&self.pool).await
    }

    /// A change to a key or an organization was committed on `client`: it counts here at once,
    /// and on the other replicas once their listeners have heard it. The connection goes back
    /// to the pool first, as the wait holds none.
    async fn credentials_changed(&self, client: deadpool_postgres::Client) {
        drop(client);
        self.credentials.changed_here(&self.pool).await;
    }
}

/// A connection from `pool`; none to be had is a retryable `Unavailable`.
async fn pooled(pool: &Pool) -> Result<deadpool_postgres::Client> {
    pool.get()
        .await
        .map_err(|e| StoreError::Unavailable(format!("PostgreSQL connection: {}", described(&e))))
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

/// An error with its causes, so "db error" carries the server's own message (an unreachable
/// host, a refused handshake, a pg_hba refusal).
fn described(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let next = c.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = c.source();
    }
    text
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
        _ => StoreError::Unavailable(format!("PostgreSQL: {}", described(&e))),
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

// The group traits are implemented in the module of each group's name.
#[async_trait]
impl StoreBackend for PostgresStore {
    async fn ping(&self) -> Result<()> {
        let client = self.client().await?;
        migrations::check(&client).await
    }

    async fn get_setting(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let found = row(
            &self.client().await?,
            "SELECT value FROM settings WHERE name = $1",
            &[&name],
        )
        .await?;
        Ok(found.map(|r| r.get(0)))
    }

    async fn put_setting_if_absent(&self, name: &str, value: &[u8]) -> Result<bool> {
        let written = execute(
            &self.client().await?,
            "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            &[&name, &value],
        )
        .await?;
        Ok(written == 1)
    }
}
