//! The ScyllaDB backend where no ScyllaDB runs (docs/testing.md#scylladb): through the real
//! driver against two CQL wire doubles.
//! - `vigil migrate`'s statements against kassandra, an in-memory CQL node ([`double`]): every
//!   file of `store/cql/` parses and executes, each version is recorded once, a second run
//!   applies nothing, and a keyspace that is behind is refused with what to run.
//! - The errors a cluster answers with, forged by the driver project's proxy (`scylla-proxy`),
//!   each mapped to the port's kind: retried (`Unavailable`) or not (`Rejected`).
//!
//! The same migration test, and the whole store conformance suite, run against a real CQL node:
//! the Apache Cassandra node the test command starts (`scripts/engines.sh`), or a ScyllaDB one
//! (`scripts/test-scylla.sh`, where Docker is), named in `VIGIL_TEST_SCYLLA_URL`. Without it they
//! fail; they never pass by skipping.

mod double;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use scylla_proxy::{
    Condition, Node, Proxy, Reaction, RequestFrame, RequestOpcode, RequestReaction, RequestRule,
    ResponseFrame, example_db_errors,
};
use store::StoreError;
use store::scylla::config::ScyllaConfig;
use store::scylla::{connect, errors, migrations};

use self::double::Double;

/// Migrates the keyspace `url` names twice, checks the record, then makes it one version
/// behind and checks the refusal.
async fn migrations_apply_once_and_a_keyspace_behind_is_refused(url: &str) {
    let applied = migrations::migrate(url).await.unwrap();
    assert_eq!(applied, (1..=migrations::latest()).collect::<Vec<_>>());
    assert_eq!(migrations::migrate(url).await.unwrap(), Vec::<i32>::new());

    let config = ScyllaConfig::parse(url).unwrap();
    let session = connect(&config, true).await.unwrap();
    migrations::check(&session).await.unwrap();
    // Every table the files create exists and answers a read.
    for (_, _, cql) in migrations::MIGRATIONS {
        for statement in migrations::statements(cql) {
            let Some(table) = statement
                .strip_prefix("CREATE TABLE IF NOT EXISTS ")
                .and_then(|rest| rest.split_whitespace().next())
            else {
                continue;
            };
            session
                .query_unpaged(format!("SELECT * FROM {table} LIMIT 1"), ())
                .await
                .unwrap_or_else(|e| panic!("{table}: {e}"));
        }
    }

    session
        .query_unpaged(
            "DELETE FROM vigil_schema_migrations WHERE scope = 'vigil' AND version = ?",
            (migrations::latest(),),
        )
        .await
        .unwrap();
    match migrations::check(&session).await {
        Err(StoreError::NotEnabled(why)) => {
            assert!(why.contains("vigil migrate"), "{why}");
        }
        other => panic!("a keyspace behind is refused: {other:?}"),
    }
    // Migrating again brings it back.
    assert_eq!(
        migrations::migrate(url).await.unwrap(),
        [migrations::latest()]
    );
    migrations::check(&session).await.unwrap();
}

#[tokio::test]
async fn migrations_run_through_the_driver_on_a_cql_double() {
    let node = Double::start().await;
    migrations_apply_once_and_a_keyspace_behind_is_refused(&node.url("vigil")).await;
}

/// The run's real CQL node (`VIGIL_TEST_SCYLLA_URL`, `scylla://host:port`).
fn real_node() -> String {
    std::env::var("VIGIL_TEST_SCYLLA_URL").expect(
        "VIGIL_TEST_SCYLLA_URL is not set: run the tests with scripts/test.sh, which starts a CQL node",
    )
}

/// The same on a real node.
#[tokio::test]
async fn migrations_on_a_real_node() {
    let base = real_node();
    let keyspace = format!("vigil_test_{}", std::process::id());
    let url = format!("{}/{keyspace}", base.trim_end_matches('/'));
    migrations_apply_once_and_a_keyspace_behind_is_refused(&url).await;
    let session = connect(&ScyllaConfig::parse(&url).unwrap(), false)
        .await
        .unwrap();
    session
        .query_unpaged(format!("DROP KEYSPACE {keyspace}"), ())
        .await
        .unwrap();
}

/// Every statement the backend runs is prepared through the driver on the migrated double:
/// a table or column it names that the schema lacks, or CQL that does not parse, fails here.
#[tokio::test]
async fn every_statement_of_the_backend_prepares_against_the_schema() {
    let node = Double::start().await;
    let url = node.url("vigil");
    migrations::migrate(&url).await.unwrap();
    let session = connect(&ScyllaConfig::parse(&url).unwrap(), true)
        .await
        .unwrap();
    let (mut prepared, mut beyond_the_double) = (0, Vec::new());
    for cql in store::scylla::statements() {
        // kassandra's parser has no `UPDATE … USING TTL`, which is CQL; those are prepared on
        // a real node only (scripts/test-scylla.sh).
        if cql.starts_with("UPDATE ") && cql.contains(" USING TTL ") {
            beyond_the_double.push(cql);
            continue;
        }
        session
            .prepare(cql)
            .await
            .unwrap_or_else(|e| panic!("{cql}: {e}"));
        prepared += 1;
    }
    assert!(prepared > 20, "{prepared} statements");
    assert!(beyond_the_double.len() <= 3, "{beyond_the_double:?}");
    println!("prepared {prepared}; left to a real node: {beyond_the_double:?}");
    // A statement naming a column the schema lacks is refused, so the loop above can fail.
    assert!(
        session
            .prepare("SELECT nonexistent FROM organizations WHERE id = ?")
            .await
            .is_err()
    );
}

/// The store's reads, through its own session (connected at the first call, the schema
/// checked), on the double: what is absent reads as absent.
#[tokio::test]
async fn the_stores_reads_answer_absent_rows_as_absent() {
    use schemas::credential::Environment;
    use schemas::ids::{KeyId, OrgId};
    use store::prelude::*;
    let node = Double::start().await;
    let url = node.url("vigil");
    migrations::migrate(&url).await.unwrap();
    let store = store::scylla::ScyllaStore::new(&url).unwrap();
    store.ping().await.unwrap();
    assert_eq!(store.get_setting("nothing here").await.unwrap(), None);
    let org = OrgId::generate();
    assert_eq!(store.get_organization(org).await.unwrap(), None);
    assert_eq!(
        store.get_organization_by_slug("nobody").await.unwrap(),
        None
    );
    assert_eq!(
        store
            .get_api_key(org, Environment::Live, KeyId::generate())
            .await
            .unwrap(),
        None
    );
    assert_eq!(store.locate_api_key(KeyId::generate()).await.unwrap(), None);
    assert!(
        store
            .list_api_keys(org, Environment::Test, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_store_url_that_is_wrong_is_refused_before_connecting() {
    match store::open("scylla://localhost:9042/not-a-keyspace").await {
        Err(StoreError::Invalid(why)) => assert!(why.contains("keyspace name"), "{why}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
    match migrations::migrate("scylla://localhost:9042/vigil?password=hunter2").await {
        Err(StoreError::Invalid(why)) => {
            assert!(
                why.contains("together") && !why.contains("hunter2"),
                "{why}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// `store::open` connects at once: a migrated keyspace serves, one never migrated is refused,
/// and an unreachable cluster leaves a store whose `ping` fails until it answers.
#[tokio::test]
async fn the_store_opens_on_a_migrated_keyspace_only() {
    let node = Double::start().await;
    let url = node.url("vigil");
    migrations::migrate(&url).await.unwrap();
    store::open(&url).await.unwrap().ping().await.unwrap();
    assert!(store::open(&node.url("never_migrated")).await.is_err());

    let unreachable = store::open(&format!("scylla://127.0.0.1:{}/vigil", free_port()))
        .await
        .expect("opened, to connect later");
    match unreachable.ping().await {
        Err(StoreError::Unavailable(why)) => assert!(why.contains("ScyllaDB"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_unreachable_cluster_is_unavailable_not_rejected() {
    let port = free_port();
    let url = format!("scylla://127.0.0.1:{port}/vigil");
    match migrations::migrate(&url).await {
        Err(StoreError::Unavailable(why)) => assert!(why.contains("ScyllaDB"), "{why}"),
        other => panic!("{other:?}"),
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A proxy with no node behind it: it answers the driver's handshake, refuses its topology
/// reads (the driver then keeps the address it was given), and answers each query whose text
/// holds one of `errors`' markers with that error.
async fn forging_node(
    errors: Vec<(&'static str, RequestReaction)>,
) -> (SocketAddr, scylla_proxy::RunningProxy) {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut rules = vec![
        RequestRule(
            Condition::RequestOpcode(RequestOpcode::Options),
            RequestReaction::forge_response(Arc::new(|f: RequestFrame| {
                ResponseFrame::forged_supported(f.params, &HashMap::new()).unwrap()
            })),
        ),
        RequestRule(
            Condition::or(
                Condition::RequestOpcode(RequestOpcode::Startup),
                Condition::RequestOpcode(RequestOpcode::Register),
            ),
            RequestReaction::forge_response(Arc::new(|f: RequestFrame| {
                ResponseFrame::forged_ready(f.params)
            })),
        ),
        RequestRule(
            Condition::BodyContainsCaseSensitive(Box::new(*b"system")),
            RequestReaction::forge_with_error(example_db_errors::invalid()),
        ),
    ];
    for (marker, reaction) in errors {
        rules.push(RequestRule(
            Condition::BodyContainsCaseSensitive(marker.as_bytes().into()),
            reaction,
        ));
    }
    let node = Node::builder()
        .proxy_address(addr)
        .request_rules(rules)
        .build_dry_mode();
    let running = Proxy::builder()
        .with_node(node)
        .build()
        .run()
        .await
        .unwrap();
    (addr, running)
}

#[tokio::test]
async fn a_clusters_errors_map_to_retried_or_not() {
    let cases: Vec<(&'static str, RequestReaction, bool)> = vec![
        ("overloaded", RequestReaction::forge().overloaded(), true),
        ("unavailable", RequestReaction::forge().unavailable(), true),
        (
            "read_timeout",
            RequestReaction::forge().read_timeout(),
            true,
        ),
        (
            "write_timeout",
            RequestReaction::forge().write_timeout(),
            true,
        ),
        (
            "bootstrapping",
            RequestReaction::forge().is_bootstrapping(),
            true,
        ),
        (
            "server_error",
            RequestReaction::forge().server_error(),
            true,
        ),
        ("dropped", RequestReaction::drop_connection(), true),
        ("syntax", RequestReaction::forge().syntax_error(), false),
        ("unconfigured", RequestReaction::forge().invalid(), false),
        (
            "unauthorized",
            RequestReaction::forge().unauthorized(),
            false,
        ),
    ];
    let (addr, _running) = forging_node(
        cases
            .iter()
            .map(|(marker, reaction, _)| (*marker, reaction.clone()))
            .collect(),
    )
    .await;
    let config = ScyllaConfig::parse(&format!("scylla://{addr}/vigil")).unwrap();
    let session = connect(&config, false).await.unwrap();
    for (marker, _, retried) in cases {
        let error = session
            .query_unpaged(format!("SELECT k FROM t WHERE k = '{marker}'"), ())
            .await
            .expect_err(marker);
        match (errors::execution(error), retried) {
            (StoreError::Unavailable(why), true) | (StoreError::Rejected(why), false) => {
                assert!(why.starts_with("ScyllaDB: "), "{marker}: {why}");
            }
            (other, _) => panic!("{marker}: {other:?}"),
        }
        if marker == "dropped" {
            // The pool reconnects before the next case.
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }
}

/// The store conformance suite on a real node: every case of every table group, as on the
/// embedded store and PostgreSQL (retention by TTLs: its case is the TTL one). Each case gets a
/// keyspace of its own, migrated by `vigil migrate`'s code and dropped after it, since cases
/// that read whole tables (the due index, the Gate registry) must see their own rows only.
mod conformance {
    use store::Store;

    /// Drops the case's keyspace when the case ends.
    pub struct Keyspace {
        url: String,
        name: String,
    }

    impl Drop for Keyspace {
        fn drop(&mut self) {
            let (url, name) = (self.url.clone(), self.name.clone());
            // A runtime of its own: the case's is shutting down.
            let dropped = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
                runtime.block_on(async {
                    let config = store::scylla::config::ScyllaConfig::parse(&url)?;
                    let session = store::scylla::connect(&config, false).await?;
                    session
                        .query_unpaged(format!("DROP KEYSPACE IF EXISTS {name}"), ())
                        .await
                        .map_err(store::scylla::errors::execution)
                        .map(drop)
                })
            })
            .join();
            if !matches!(dropped, Ok(Ok(()))) {
                eprintln!("the keyspace {} was not dropped", self.name);
            }
        }
    }

    async fn scylla_store() -> (Store, Keyspace) {
        let base = super::real_node();
        let name = format!(
            "vigil_c_{}",
            schemas::ids::OrgId::generate()
                .ulid()
                .to_string()
                .to_ascii_lowercase()
        );
        let url = format!("{}/{name}", base.trim_end_matches('/'));
        store::scylla::migrations::migrate(&url)
            .await
            .expect("the case's keyspace migrates");
        let store = store::open(&url).await.expect("the store opens");
        (store, Keyspace { url, name })
    }

    store::store_conformance_suite!(ttl_retention: scylla_store());
}

/// TLS to the node, as docs/operations.md#scylladb gives it (`tls=true&ca=`): the store opens
/// and answers with the node's CA, and refuses a node whose certificate is of another CA. The
/// node's CA is `VIGIL_TEST_SCYLLA_CA`.
#[tokio::test]
async fn the_store_speaks_tls_to_the_node_and_checks_its_certificate() {
    let ca = std::env::var("VIGIL_TEST_SCYLLA_CA").expect(
        "VIGIL_TEST_SCYLLA_CA is not set: run the tests with scripts/test.sh, which starts a CQL node",
    );
    let keyspace = format!("vigil_tls_{}", std::process::id());
    let url = format!(
        "{}/{keyspace}?tls=true&ca={ca}",
        real_node().trim_end_matches('/')
    );
    migrations::migrate(&url).await.expect("migrates over TLS");
    let store = store::open(&url).await.expect("opens over TLS");
    store.ping().await.expect("answers over TLS");
    drop(store);
    // Another CA: a self-signed certificate the node's is not signed by.
    let dir = tempfile::tempdir().unwrap();
    let other = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let other_ca = dir.path().join("other-ca.pem");
    std::fs::write(&other_ca, other.cert.pem()).unwrap();
    let refused = format!(
        "{}/{keyspace}?tls=true&ca={}",
        real_node().trim_end_matches('/'),
        other_ca.display()
    );
    let refused = match store::open(&refused).await {
        Err(_) => true,
        Ok(store) => store.ping().await.is_err(),
    };
    assert!(
        refused,
        "a node whose certificate is of another CA must be refused"
    );
    let session = connect(&ScyllaConfig::parse(&url).unwrap(), false)
        .await
        .unwrap();
    session
        .query_unpaged(format!("DROP KEYSPACE {keyspace}"), ())
        .await
        .unwrap();
}
