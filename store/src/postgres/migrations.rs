//! The PostgreSQL schema's versions (`store/sql/`), applied by `vigil migrate`: each file
//! once, in order, in one transaction per run, recorded in `vigil_schema_migrations`. A store
//! refuses a database whose schema is behind this build (or ahead of it) with a message that
//! says what to run.

use deadpool_postgres::GenericClient;

use super::{db_error, row};
use crate::{Result, StoreError};

/// Every migration this build knows, by version.
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "initial", include_str!("../../sql/0001_initial.sql")),
    (
        2,
        "gate service claims",
        include_str!("../../sql/0002_gate_service_claims.sql"),
    ),
    (
        3,
        "session digests",
        include_str!("../../sql/0003_session_digests.sql"),
    ),
    (
        4,
        "fleet writes",
        include_str!("../../sql/0004_fleet_writes.sql"),
    ),
    (
        5,
        "credential listeners",
        include_str!("../../sql/0005_credential_listeners.sql"),
    ),
    (
        6,
        "replay marks",
        include_str!("../../sql/0006_replay_marks.sql"),
    ),
];

/// The version this build needs.
pub fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |(version, _, _)| *version)
}

/// Any number, the same in every process: `vigil migrate` runs hold it for their transaction,
/// so two of them started at once apply each file once.
const MIGRATION_LOCK: i64 = 0x7669_6769_6c5f_6d67;

/// The schema's version as recorded; 0 before the first migration.
async fn current(client: &impl GenericClient) -> Result<i32> {
    let exists = row(
        client,
        "SELECT to_regclass('vigil_schema_migrations') IS NOT NULL",
        &[],
    )
    .await?
    .is_some_and(|r| r.get::<_, bool>(0));
    if !exists {
        return Ok(0);
    }
    let version = row(
        client,
        "SELECT coalesce(max(version), 0) FROM vigil_schema_migrations",
        &[],
    )
    .await?;
    Ok(version.map_or(0, |r| r.get(0)))
}

/// `Ok` if the schema is the one this build needs, else why not.
pub async fn check(client: &impl GenericClient) -> Result<()> {
    let (have, need) = (current(client).await?, latest());
    match have.cmp(&need) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Less => Err(StoreError::NotEnabled(format!(
            "the PostgreSQL schema is at version {have} and this build needs {need}: run \
             `vigil migrate --store <url>` first"
        ))),
        std::cmp::Ordering::Greater => Err(StoreError::NotEnabled(format!(
            "the PostgreSQL schema is at version {have}, newer than this build's {need}: \
             run a newer vigil"
        ))),
    }
}

/// Brings the database at `url` to this build's schema; answers the versions it applied
/// (none when it was current). Idempotent, and safe to run from several processes at once.
pub async fn migrate(url: &str) -> Result<Vec<i32>> {
    let super::tls::Connection { config, tls, .. } = super::tls::connection(url)?;
    let (mut client, connection) = config
        .connect(tls)
        .await
        .map_err(|e| StoreError::Unavailable(format!("PostgreSQL: {}", super::described(&e))))?;
    let driver = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "PostgreSQL connection of the migration");
        }
    });
    let applied = apply(&mut client).await;
    drop(client);
    let _ = driver.await;
    applied
}

async fn apply(client: &mut tokio_postgres::Client) -> Result<Vec<i32>> {
    let tx = client.transaction().await.map_err(db_error)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(db_error)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS vigil_schema_migrations (
             version integer PRIMARY KEY,
             name text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await
    .map_err(db_error)?;
    let have: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM vigil_schema_migrations",
            &[],
        )
        .await
        .map_err(db_error)?
        .get(0);
    if have > latest() {
        return Err(StoreError::NotEnabled(format!(
            "the PostgreSQL schema is at version {have}, newer than this build's {}",
            latest()
        )));
    }
    let mut applied = Vec::new();
    for (version, name, sql) in MIGRATIONS.iter().filter(|(v, _, _)| *v > have) {
        tx.batch_execute(sql).await.map_err(db_error)?;
        tx.execute(
            "INSERT INTO vigil_schema_migrations (version, name) VALUES ($1, $2)",
            &[version, name],
        )
        .await
        .map_err(db_error)?;
        applied.push(*version);
    }
    tx.commit().await.map_err(db_error)?;
    Ok(applied)
}
