//! The ScyllaDB backend (`scylla://host:9042[,host…]/keyspace`, docs/operations.md#scylladb),
//! the store of a fleet that outgrows one PostgreSQL: the tables of `store/cql/`, each query
//! answered from one partition.
//!
//! What is here: the URL ([`config`]), the session (TLS against the cluster's CA, credentials,
//! the local datacenter first, `LOCAL_QUORUM` reads and writes and `LOCAL_SERIAL` lightweight
//! transactions unless the URL says otherwise), the driver's errors as the port's kinds
//! ([`errors`]), `vigil migrate` ([`migrations`]), and each table group in the file of its
//! name, as on the other backends.
//!
//! Every statement is prepared once per process and cached ([`CachingSession`]). A row changed
//! after its insert carries `rev`: a change reads `(rev, body)`, applies the port's rule to the
//! decoded record, and writes it back with a lightweight transaction conditioned on the `rev`
//! read, retrying from the read when another writer came first ([`ScyllaStore::applied`]
//! decodes only `[applied]` of the answer, which also carries the current row).

mod collect;
pub mod config;
pub mod errors;
mod events;
mod gate;
mod idempotency;
pub mod migrations;
mod organizations;
mod places;
mod retention;
mod sessions;
mod visitors;

use std::sync::Arc;
use std::time::Duration;

use scylla::client::caching_session::CachingSession;
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::deserialize::row::ColumnIterator;
use scylla::deserialize::value::DeserializeValue;
use scylla::policies::load_balancing::DefaultPolicy;
use scylla::response::query_result::QueryResult;
use scylla::response::{PagingState, PagingStateResponse};
use scylla::serialize::row::SerializeRow;
use scylla::statement::unprepared::Statement;
use serde::Serialize;
use serde::de::DeserializeOwned;

use self::config::ScyllaConfig;
use crate::{Result, StoreError};

/// Prepared statements kept per process: more than the backend has, so none is evicted.
const STATEMENT_CACHE: usize = 512;

/// How many times a read-check-write reads again after another writer came first, before the
/// call gives up as `Unavailable` (a retry of the whole call may then succeed).
pub(crate) const CONTENDED_RETRIES: usize = 16;

/// The store in a ScyllaDB keyspace. Connects at its first call, and again after a failed
/// one, so a cluster that is down at start leaves the process running and `ping` failing.
pub struct ScyllaStore {
    config: ScyllaConfig,
    session: tokio::sync::OnceCell<CachingSession>,
}

impl ScyllaStore {
    /// A store for `url`, not connected yet; a bad URL is refused now.
    pub fn new(url: &str) -> Result<Self> {
        Ok(ScyllaStore {
            config: ScyllaConfig::parse(url)?,
            session: tokio::sync::OnceCell::new(),
        })
    }

    /// A store for `url`, connected now if the cluster answers: a keyspace whose schema is not
    /// this build's is refused, as on PostgreSQL. An unreachable cluster leaves the store to
    /// connect at its next call, and `ping` (so `/readyz`) failing until then.
    pub async fn open(url: &str) -> Result<Self> {
        let store = Self::new(url)?;
        match store.session().await {
            Ok(_) => Ok(store),
            Err(
                e @ (StoreError::NotEnabled(_) | StoreError::Invalid(_) | StoreError::Rejected(_)),
            ) => Err(e),
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "the ScyllaDB store is unreachable; serving, and /readyz says so until it answers"
                );
                Ok(store)
            }
        }
    }

    /// The session, connected on first use; its keyspace must be at this build's schema.
    async fn session(&self) -> Result<&CachingSession> {
        self.session
            .get_or_try_init(|| async {
                let session = connect(&self.config, true).await?;
                migrations::check(&session).await?;
                Ok(CachingSession::from(session, STATEMENT_CACHE))
            })
            .await
    }

    /// Runs a statement, prepared once and cached, and answers its whole result.
    async fn execute(&self, cql: &'static str, values: impl SerializeRow) -> Result<QueryResult> {
        self.session()
            .await?
            .execute_unpaged(cql, values)
            .await
            .map_err(errors::execution)
    }

    /// Runs a read at SERIAL consistency, which sees every lightweight transaction applied
    /// before it (a partition's claim), where a plain read might not.
    async fn execute_serial(
        &self,
        cql: &'static str,
        values: impl SerializeRow,
    ) -> Result<QueryResult> {
        let mut statement = scylla::statement::Statement::new(cql);
        statement.set_consistency(scylla::statement::Consistency::Serial);
        self.session()
            .await?
            .execute_unpaged(statement, values)
            .await
            .map_err(errors::execution)
    }

    /// The first `count` rows a query selects, each page decoded by `decode_page`, read a page
    /// at a time with the driver's paging state: a page may come back short on a real node
    /// (tombstones, size limits), so pages are read until `count` or the partition's end. No
    /// `LIMIT ?` is bound, so one prepared statement serves every page size.
    async fn first_rows<T>(
        &self,
        cql: &'static str,
        values: impl SerializeRow,
        count: usize,
        decode_page: impl Fn(QueryResult) -> Result<Vec<T>>,
    ) -> Result<Vec<T>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let session = self.session().await?;
        let mut statement = session
            .add_prepared_statement(&Statement::new(cql))
            .await
            .map_err(errors::prepare)?;
        statement.set_page_size(i32::try_from(count.min(5_000)).unwrap_or(5_000));
        let mut found = Vec::new();
        let mut paging = PagingState::start();
        loop {
            let (result, next) = session
                .get_session()
                .execute_single_page(&statement, &values, paging)
                .await
                .map_err(errors::execution)?;
            found.extend(decode_page(result)?);
            match next {
                PagingStateResponse::HasMorePages { state } if found.len() < count => {
                    paging = state;
                }
                _ => break,
            }
        }
        found.truncate(count);
        Ok(found)
    }

    /// The records (column 0, JSON text) of the first `count` rows a query selects.
    async fn first_bodies<T: DeserializeOwned>(
        &self,
        table: &'static str,
        cql: &'static str,
        values: impl SerializeRow,
        count: usize,
    ) -> Result<Vec<T>> {
        self.first_rows(cql, values, count, |page| Self::bodies(table, page))
            .await
    }

    /// Column 0 (text) of the first `count` rows a query selects: an index's ids.
    async fn first_texts(
        &self,
        table: &'static str,
        cql: &'static str,
        values: impl SerializeRow,
        count: usize,
    ) -> Result<Vec<String>> {
        self.first_rows(cql, values, count, |page| {
            let rows = rows_of(table, page)?;
            let found = rows.rows::<(String,)>().map_err(|e| corrupt(table, &e))?;
            found
                .map(|row| row.map(|(text,)| text).map_err(|e| corrupt(table, &e)))
                .collect()
        })
        .await
    }

    /// Runs a lightweight transaction and answers whether it applied, decoding `[applied]`
    /// alone: ScyllaDB also sends the current row's columns, which are not read.
    async fn applied(&self, cql: &'static str, values: impl SerializeRow) -> Result<bool> {
        applied(self.execute(cql, values).await?)
    }

    /// The records in column 0 (JSON text) of a result's rows.
    fn bodies<T: DeserializeOwned>(table: &'static str, result: QueryResult) -> Result<Vec<T>> {
        let rows = rows_of(table, result)?;
        let found = rows.rows::<(String,)>().map_err(|e| corrupt(table, &e))?;
        found
            .map(|row| {
                let (body,) = row.map_err(|e| corrupt(table, &e))?;
                decode(table, &body)
            })
            .collect()
    }

    /// The record in column 0 of the first row, if any.
    fn body<T: DeserializeOwned>(table: &'static str, result: QueryResult) -> Result<Option<T>> {
        Ok(Self::bodies(table, result)?.into_iter().next())
    }

    /// `(rev, body)` of the first row, if any: what a read-check-write starts from.
    fn revision<T: DeserializeOwned>(
        table: &'static str,
        result: QueryResult,
    ) -> Result<Option<(i64, T)>> {
        let rows = rows_of(table, result)?;
        let first = rows
            .maybe_first_row::<(Option<i64>, String)>()
            .map_err(|e| corrupt(table, &e))?;
        first
            .map(|(rev, body)| Ok((rev.unwrap_or(0), decode(table, &body)?)))
            .transpose()
    }
}

// The group traits are implemented in the module of each group's name.
#[async_trait::async_trait]
impl crate::StoreBackend for ScyllaStore {
    async fn ping(&self) -> Result<()> {
        self.execute(PING, ()).await.map(drop)
    }

    async fn get_setting(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let result = self.execute(SETTINGS_READ, (name,)).await?;
        let rows = rows_of("settings", result)?;
        let value = rows
            .maybe_first_row::<(Option<Vec<u8>>,)>()
            .map_err(|e| corrupt("settings", &e))?;
        Ok(value.and_then(|(v,)| v))
    }

    async fn put_setting_if_absent(&self, name: &str, value: &[u8]) -> Result<bool> {
        self.applied(SETTINGS_PUT, (name, value)).await
    }
}

/// Every statement the backend runs, for the test that prepares each on a CQL node.
pub fn statements() -> impl Iterator<Item = &'static str> {
    [SETTINGS_READ, SETTINGS_PUT, PING]
        .into_iter()
        .chain(organizations::STATEMENTS.iter().copied())
        .chain(idempotency::STATEMENTS.iter().copied())
        .chain(collect::STATEMENTS.iter().copied())
        .chain(sessions::STATEMENTS.iter().copied())
        .chain(events::STATEMENTS.iter().copied())
        .chain(visitors::statements())
        .chain(gate::STATEMENTS.iter().copied())
        .chain(places::STATEMENTS.iter().copied())
}

const PING: &str = "SELECT name FROM settings WHERE name = 'ping'";
const SETTINGS_READ: &str = "SELECT value FROM settings WHERE name = ?";
const SETTINGS_PUT: &str = "INSERT INTO settings (name, value) VALUES (?, ?) IF NOT EXISTS";

fn corrupt(table: &'static str, e: &dyn std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        table,
        detail: e.to_string(),
    }
}

fn rows_of(
    table: &'static str,
    result: QueryResult,
) -> Result<scylla::response::query_result::QueryRowsResult> {
    result.into_rows_result().map_err(|e| corrupt(table, &e))
}

/// A record as its `body` column.
fn encode<T: Serialize>(record: &T) -> String {
    serde_json::to_string(record).expect("a record serialises to JSON")
}

fn decode<T: DeserializeOwned>(table: &'static str, body: &str) -> Result<T> {
    serde_json::from_str(body).map_err(|e| corrupt(table, &e))
}

/// `[applied]`, the first column of a lightweight transaction's answer; the rest of the row
/// (the current values, when not applied) is skipped undecoded.
fn applied(result: QueryResult) -> Result<bool> {
    const LWT: &str = "a lightweight transaction";
    let missing = || StoreError::Rejected(format!("ScyllaDB: {LWT} answered no [applied]"));
    let rows = result.into_rows_result().map_err(|_| missing())?;
    let mut found = rows
        .rows::<ColumnIterator>()
        .map_err(|e| corrupt("[applied]", &e))?;
    let mut columns = found
        .next()
        .ok_or_else(missing)?
        .map_err(|e| corrupt(LWT_TABLE, &e))?;
    let column = columns
        .next()
        .ok_or_else(missing)?
        .map_err(|e| corrupt(LWT_TABLE, &e))?;
    if column.spec.name() != "[applied]" {
        return Err(missing());
    }
    <bool as DeserializeValue>::deserialize(column.spec.typ(), column.slice)
        .map_err(|e| corrupt(LWT_TABLE, &e))
}

/// The table name a malformed `[applied]` is reported under.
const LWT_TABLE: &str = "[applied]";

/// An environment as its column (`live`, `test`).
fn env_text(env: schemas::credential::Environment) -> &'static str {
    env.as_str()
}

fn env_of(table: &'static str, text: &str) -> Result<schemas::credential::Environment> {
    schemas::credential::Environment::parse(text)
        .ok_or_else(|| corrupt(table, &format!("environment `{text}`")))
}

/// How long a node may take to accept a connection, and a request to be answered, before the
/// attempt counts as failed (and `/readyz` says so).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A session to the cluster `config` names; in its keyspace when `in_keyspace`.
pub async fn connect(config: &ScyllaConfig, in_keyspace: bool) -> Result<Session> {
    let mut policy = DefaultPolicy::builder().token_aware(true);
    if let Some(dc) = &config.dc {
        policy = policy
            .prefer_datacenter(dc.clone())
            .permit_dc_failover(false);
    }
    let profile = ExecutionProfile::builder()
        .consistency(config.consistency)
        .serial_consistency(Some(config.serial_consistency))
        .request_timeout(Some(REQUEST_TIMEOUT))
        .load_balancing_policy(policy.build())
        .build();
    let mut builder = SessionBuilder::new()
        .known_nodes(&config.hosts)
        .connection_timeout(CONNECT_TIMEOUT)
        .default_execution_profile_handle(profile.into_handle())
        // Vigil reads no schema metadata: only its own keyspace's tables, by name.
        .fetch_schema_metadata(false);
    if let Some((user, password)) = &config.credentials {
        builder = builder.user(user, &password.0);
    }
    if let Some(ca) = &config.tls {
        builder = builder.tls_context(Some(tls(ca)?));
    }
    if in_keyspace {
        builder = builder.use_keyspace(&config.keyspace, false);
    }
    builder.build().await.map_err(errors::connect)
}

/// A TLS client that trusts the cluster's CA alone and verifies each node's name.
fn tls(ca: &std::path::Path) -> Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let unreadable = |e: &dyn std::fmt::Display| {
        StoreError::Invalid(format!(
            "ScyllaDB TLS: cannot read the CA certificate {}: {e}",
            ca.display()
        ))
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| unreadable(&e))? {
        roots
            .add(cert.map_err(|e| unreadable(&e))?)
            .map_err(|e| unreadable(&e))?;
    }
    if roots.is_empty() {
        return Err(unreadable(&"it holds no certificate"));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Invalid(format!("ScyllaDB TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
