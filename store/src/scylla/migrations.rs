//! The ScyllaDB schema's versions (`store/cql/`), applied by `vigil migrate`: the keyspace
//! the URL names (created when missing, with `replication_factor` replicas), then each file
//! once, in order, its statements one by one, recorded in `vigil_schema_migrations`. Every
//! statement is idempotent (`IF NOT EXISTS`), so a run cut short, or two runs at once, end in
//! the same schema. A store refuses a keyspace whose schema is behind this build (or ahead of
//! it) with a message that says what to run.

use scylla::client::session::Session;
use scylla::errors::{DbError, ExecutionError, RequestAttemptError};
use scylla::value::CqlTimestamp;

use super::config::ScyllaConfig;
use super::errors;
use crate::{Result, StoreError};

/// Every migration this build knows, by version: the files of `store/cql/`.
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "core", include_str!("../../cql/001_core.cql")),
    (2, "collect", include_str!("../../cql/002_collect.cql")),
    (3, "sessions", include_str!("../../cql/003_sessions.cql")),
    (4, "visitors", include_str!("../../cql/004_visitors.cql")),
    (5, "events", include_str!("../../cql/005_events.cql")),
    (
        6,
        "idle sessions",
        include_str!("../../cql/006_sessions_idle.cql"),
    ),
    (7, "handoffs", include_str!("../../cql/007_handoffs.cql")),
    (
        8,
        "read indexes",
        include_str!("../../cql/008_read_indexes.cql"),
    ),
    (9, "webhooks", include_str!("../../cql/009_webhooks.cql")),
    (10, "gate", include_str!("../../cql/010_gate.cql")),
    (
        11,
        "fleet writes",
        include_str!("../../cql/011_fleet_writes.cql"),
    ),
    (12, "caps", include_str!("../../cql/012_caps.cql")),
    (
        13,
        "replay marks",
        include_str!("../../cql/013_replay_marks.cql"),
    ),
];

/// The version this build needs.
pub fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |(version, _, _)| *version)
}

/// The record of applied versions: one partition (`scope = 'vigil'`), so reading the newest is
/// a single-partition query, newest first.
const LEDGER: &str = "CREATE TABLE IF NOT EXISTS vigil_schema_migrations (
    scope text,
    version int,
    name text,
    applied_at timestamp,
    PRIMARY KEY (scope, version)
) WITH CLUSTERING ORDER BY (version DESC)";

/// The statements of a CQL file: its `--` comments dropped, split at each `;`.
pub fn statements(cql: &str) -> Vec<String> {
    let uncommented: String = cql
        .lines()
        .map(|line| match line.find("--") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n");
    uncommented
        .split(';')
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|s| !s.is_empty())
        .collect()
}

/// The `CREATE KEYSPACE` of `config`'s keyspace.
fn create_keyspace(config: &ScyllaConfig) -> String {
    let replication = match &config.dc {
        // ScyllaDB makes such keyspaces with tablets by default, and tablets refuse the
        // lightweight transactions the store's read-check-writes are.
        Some(dc) => format!(
            "{{'class': 'NetworkTopologyStrategy', '{}': {}}} AND tablets = {{'enabled': false}}",
            dc.replace('\'', "''"),
            config.replication_factor
        ),
        None => format!(
            "{{'class': 'SimpleStrategy', 'replication_factor': {}}}",
            config.replication_factor
        ),
    };
    format!(
        "CREATE KEYSPACE IF NOT EXISTS {} WITH replication = {replication}",
        config.keyspace
    )
}

/// The schema's version as recorded in the session's keyspace; 0 before the first migration.
/// The highest of the ledger's rows (a few dozen at most, one partition), not its first row:
/// that holds on any node, whatever order it keeps.
pub async fn current(session: &Session) -> Result<i32> {
    let found = session
        .query_unpaged(
            "SELECT version FROM vigil_schema_migrations WHERE scope = 'vigil'",
            (),
        )
        .await;
    let result = match found {
        Ok(result) => result,
        // No ledger yet: nothing applied. Only that error: any other (a refused permission)
        // is not a version.
        Err(ExecutionError::LastAttemptError(RequestAttemptError::DbError(
            DbError::Invalid,
            m,
        ))) if m.contains("unconfigured table") => {
            return Ok(0);
        }
        Err(e) => return Err(errors::execution(e)),
    };
    let rows = result
        .into_rows_result()
        .map_err(|e| StoreError::Rejected(format!("ScyllaDB: {e}")))?;
    let corrupt = |e: &dyn std::fmt::Display| StoreError::Corrupt {
        table: "vigil_schema_migrations",
        detail: e.to_string(),
    };
    let mut newest = 0;
    for row in rows.rows::<(i32,)>().map_err(|e| corrupt(&e))? {
        newest = newest.max(row.map_err(|e| corrupt(&e))?.0);
    }
    Ok(newest)
}

/// `Ok` if the schema is the one this build needs, else why not.
pub async fn check(session: &Session) -> Result<()> {
    let (have, need) = (current(session).await?, latest());
    match have.cmp(&need) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Less => Err(StoreError::NotEnabled(format!(
            "the ScyllaDB schema is at version {have} and this build needs {need}: run \
             `vigil migrate --store <url>` first"
        ))),
        std::cmp::Ordering::Greater => Err(StoreError::NotEnabled(format!(
            "the ScyllaDB schema is at version {have}, newer than this build's {need}: run a \
             newer vigil"
        ))),
    }
}

/// Brings the keyspace `url` names to this build's schema, creating it when missing; answers
/// the versions it applied (none when it was current).
pub async fn migrate(url: &str) -> Result<Vec<i32>> {
    let config = ScyllaConfig::parse(url)?;
    // Connected without a keyspace: it may not exist yet.
    let session = super::connect(&config, false).await?;
    run(&session, &create_keyspace(&config)).await?;
    session
        .use_keyspace(&config.keyspace, false)
        .await
        .map_err(|e| errors::execution(e.into()))?;
    run(&session, LEDGER).await?;
    let have = current(&session).await?;
    if have > latest() {
        return Err(StoreError::NotEnabled(format!(
            "the ScyllaDB schema is at version {have}, newer than this build's {}",
            latest()
        )));
    }
    let mut applied = Vec::new();
    for (version, name, cql) in MIGRATIONS.iter().filter(|(v, _, _)| *v > have) {
        for statement in statements(cql) {
            run(&session, &statement).await?;
        }
        session
            .query_unpaged(
                "INSERT INTO vigil_schema_migrations (scope, version, name, applied_at) \
                 VALUES ('vigil', ?, ?, ?) IF NOT EXISTS",
                (
                    *version,
                    *name,
                    CqlTimestamp(schemas::time::now().timestamp_millis()),
                ),
            )
            .await
            .map_err(errors::execution)?;
        applied.push(*version);
    }
    Ok(applied)
}

async fn run(session: &Session, statement: &str) -> Result<()> {
    session
        .query_unpaged(statement, ())
        .await
        .map(drop)
        .map_err(|e| match errors::execution(e) {
            StoreError::Rejected(why) => StoreError::Rejected(format!("{why} (in `{statement}`)")),
            other => other,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_splits_into_statements_without_comments() {
        for (version, name, cql) in MIGRATIONS {
            let statements = statements(cql);
            assert!(!statements.is_empty(), "{version} {name}");
            for s in &statements {
                assert!(!s.contains("--"), "{version}: {s}");
                assert!(
                    s.starts_with("CREATE ") || s.starts_with("ALTER "),
                    "{version}: {s}"
                );
                assert!(
                    s.contains("IF NOT EXISTS") || s.starts_with("ALTER "),
                    "{version}: every statement can run twice: {s}"
                );
            }
        }
        assert_eq!(
            statements("-- a; comment\nCREATE TABLE IF NOT EXISTS t (a int PRIMARY KEY); -- x\n"),
            ["CREATE TABLE IF NOT EXISTS t (a int PRIMARY KEY)"]
        );
    }

    #[test]
    fn the_keyspace_is_made_for_the_datacenter_named() {
        let local = ScyllaConfig::parse("scylla://h/vigil").unwrap();
        assert_eq!(
            create_keyspace(&local),
            "CREATE KEYSPACE IF NOT EXISTS vigil WITH replication = \
             {'class': 'SimpleStrategy', 'replication_factor': 1}"
        );
        let fleet = ScyllaConfig::parse("scylla://h/vigil?dc=eu1&replication_factor=3").unwrap();
        assert_eq!(
            create_keyspace(&fleet),
            "CREATE KEYSPACE IF NOT EXISTS vigil WITH replication = \
             {'class': 'NetworkTopologyStrategy', 'eu1': 3} AND tablets = {'enabled': false}"
        );
    }
}
