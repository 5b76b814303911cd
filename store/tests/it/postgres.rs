//! The conformance suite against the PostgreSQL backend, on the throwaway cluster the test
//! command starts (`VIGIL_TEST_POSTGRES_URL`). Each case gets a schema of its own, migrated by
//! `vigil migrate`'s code, so cases that list whole tables (idle sessions, due deliveries,
//! purges) see only their own rows.

use store::Store;

/// The database the test command started. Without it the suite fails: a skipped suite would
/// pass for the wrong reason.
fn postgres_url() -> String {
    std::env::var("VIGIL_TEST_POSTGRES_URL").expect(
        "VIGIL_TEST_POSTGRES_URL is not set: run the tests with scripts/test.sh, which starts PostgreSQL",
    )
}

/// The URL of a fresh schema in the test database (its `search_path`).
async fn fresh_schema() -> String {
    let url = postgres_url();
    let schema = format!(
        "conformance_{}",
        schemas::ids::OrgId::generate()
            .ulid()
            .to_string()
            .to_ascii_lowercase()
    );
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test PostgreSQL");
    let driver = tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .expect("create the case's schema");
    drop(client);
    let _ = driver.await;
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-csearch_path%3D{schema}")
}

async fn postgres_store() -> (Store, ()) {
    let url = fresh_schema().await;
    let applied = store::postgres::migrations::migrate(&url)
        .await
        .expect("migrate the case's schema");
    let every: Vec<i32> = store::postgres::migrations::MIGRATIONS
        .iter()
        .map(|(version, _, _)| *version)
        .collect();
    assert_eq!(applied, every, "a new schema takes every migration");
    // Through the URL, as the binary opens it.
    let store = store::open(&url).await.expect("open the PostgreSQL store");
    (store, ())
}

store::store_conformance_suite!(postgres_store());

/// `vigil migrate` run again changes nothing, and run by several processes at once applies
/// each version once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_are_idempotent_and_race_safely() {
    let url = fresh_schema().await;
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { store::postgres::migrations::migrate(&url).await })
        })
        .collect();
    let mut applied = Vec::new();
    for run in runs {
        applied.extend(run.await.unwrap().expect("migrate"));
    }
    applied.sort_unstable();
    let every: Vec<i32> = store::postgres::migrations::MIGRATIONS
        .iter()
        .map(|(version, _, _)| *version)
        .collect();
    assert_eq!(
        applied, every,
        "each migration applied once, by one of the runs"
    );
    assert!(
        store::postgres::migrations::migrate(&url)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A database without the schema is refused at open with what to run; one that cannot be
/// reached is not (the server serves and `/readyz` says why), and its `ping` fails.
#[tokio::test]
async fn an_unmigrated_database_is_refused_and_an_absent_one_is_reported() {
    let url = fresh_schema().await;
    let refused = store::open(&url)
        .await
        .err()
        .expect("an unmigrated schema is refused");
    assert!(
        refused.to_string().contains("vigil migrate"),
        "the error says what to run: {refused}"
    );
    let absent = store::open("postgres://vigil@127.0.0.1:9/vigil")
        .await
        .expect("an unreachable database does not stop the process");
    let down = absent
        .ping()
        .await
        .expect_err("ping fails while it is unreachable");
    assert!(matches!(down, store::StoreError::Unavailable(_)), "{down}");
}

/// Rows written before digests were kept (migration 3) have none: an export reaches them
/// through a digest made from their body, the same as a save would have written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_without_a_digest_is_digested_from_its_body() {
    use schemas::credential::Environment;
    let url = fresh_schema().await;
    store::postgres::migrations::migrate(&url).await.unwrap();
    let store = store::open(&url).await.unwrap();
    let (org, env) = (schemas::ids::OrgId::generate(), Environment::Live);
    let now = schemas::time::now();
    let session = store::SessionRecord {
        id: schemas::SessionId::generate(),
        organization_id: org,
        environment: env,
        visitor_id: None,
        opened_at: now,
        updated_at: now,
        page_url: "https://shop.example/".into(),
        ip: "203.0.113.7".into(),
        user_agent: "Mozilla/5.0".into(),
        processed_through: 1,
        processed_seqs: Vec::new(),
        state: store::RawJson::encode(
            &serde_json::json!({ "context": { "web_bot_auth": "verified" } }),
        )
        .unwrap(),
        latest_decision: None,
        finalized: false,
    };
    store.save_session(&session, None, &[]).await.unwrap();
    let written = store
        .list_session_digests(org, env, None, None, 10)
        .await
        .unwrap();
    assert_eq!(written, vec![session.digest(None)]);
    assert_eq!(written[0].web_bot_auth.as_deref(), Some("verified"));
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    let cleared = client
        .execute("UPDATE sessions SET digest = NULL", &[])
        .await
        .unwrap();
    assert_eq!(cleared, 1);
    drop(client);
    let _ = driver.await;
    let read = store
        .list_session_digests(org, env, None, None, 10)
        .await
        .unwrap();
    assert_eq!(read, written);
}

/// The live listening connections of this test's credential caches (named by
/// `application_name`, so other tests' stores on the cluster are not counted).
async fn listeners(admin: &tokio_postgres::Client, name: &str) -> i64 {
    admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE application_name = $1 \
               AND pid IN (SELECT backend_pid FROM credential_listeners)",
            &[&name],
        )
        .await
        .unwrap()
        .get(0)
}

/// Runs `sql` with one bytea parameter as a replication session, for which no trigger fires: a
/// change no replica is told of.
async fn silently(admin: &tokio_postgres::Client, sql: &str, param: &[u8]) {
    admin
        .batch_execute("SET session_replication_role = replica")
        .await
        .unwrap();
    admin.execute(sql, &[&param]).await.unwrap();
    admin
        .batch_execute("SET session_replication_role = DEFAULT")
        .await
        .unwrap();
}

/// The authentication path's cache (`store/src/postgres/credentials.rs`), with two replicas on
/// one database: a key and an organization read (and cached) through one are seen revoked and
/// suspended through it on the very next read once the other's change has returned; a listener
/// that never answers delays a change by a bounded wait, not for good; and with the listening
/// connections cut, reads bypass the cache, so a change no replica could hear of still counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_credentials_follow_changes_made_through_any_replica() {
    use schemas::credential::Environment;
    use schemas::resources::OrgStatus;
    use std::time::{Duration, Instant};

    let url = fresh_schema().await;
    store::postgres::migrations::migrate(&url).await.unwrap();
    let name = format!("cache_{}", schemas::ids::OrgId::generate().ulid());
    let url = format!("{url}&application_name={name}");
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let writer = store::open(&url).await.unwrap();
    let reader = store::open(&url).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while listeners(&admin, &name).await < 2 {
        assert!(
            Instant::now() < deadline,
            "both replicas listen for changes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let org = store::conformance::organization("cache");
    writer.create_organization(&org).await.unwrap();
    // Many rounds, so a change that only usually reaches the other replica first would show.
    for round in 0..20 {
        let key =
            store::conformance::api_key(org.id, Environment::Live, schemas::ids::KeyId::generate());
        writer.create_api_key(&key).await.unwrap();
        let read = reader.find_api_key_by_hash(&key.key_hash).await.unwrap();
        assert_eq!(read.unwrap().revoked_at, None);
        let read = reader.get_organization(org.id).await.unwrap();
        assert_eq!(read.unwrap().status, OrgStatus::Active);
        // The key changed behind every replica's back (no trigger fires for this session): the
        // reader's next answer is its cached one, so the rounds test the cache, not the table.
        silently(&admin, "UPDATE api_keys SET body = jsonb_set(body::jsonb, '{name}', '\"silent\"')::json WHERE key_hash = $1", &key.key_hash.0[..]).await;
        let read = reader.find_api_key_by_hash(&key.key_hash).await.unwrap();
        assert_eq!(
            read.unwrap().name,
            key.name,
            "round {round}: the reader answers from its cache"
        );
        let revoked = store::ApiKeyRecord {
            revoked_at: Some(schemas::time::now()),
            ..key.clone()
        };
        writer.update_api_key(&revoked).await.unwrap();
        let read = reader.find_api_key_by_hash(&key.key_hash).await.unwrap();
        assert!(
            read.unwrap().revoked_at.is_some(),
            "round {round}: the revocation counts on the other replica's next read"
        );
        let suspended = store::OrganizationRecord {
            status: OrgStatus::Suspended,
            ..org.clone()
        };
        writer.update_organization(&suspended).await.unwrap();
        let read = reader.get_organization(org.id).await.unwrap();
        assert_eq!(
            read.unwrap().status,
            OrgStatus::Suspended,
            "round {round}: the suspension counts on the other replica's next read"
        );
        writer.update_organization(&org).await.unwrap();
    }

    // A listener that is alive but never answers (its replica is stuck): a change waits for it
    // a bounded time, then counts anyway.
    admin
        .execute(
            "INSERT INTO credential_listeners (listener, backend_pid, seen_at) \
             VALUES ('stuck', pg_backend_pid(), now())",
            &[],
        )
        .await
        .unwrap();
    let suspended = store::OrganizationRecord {
        status: OrgStatus::Suspended,
        ..org.clone()
    };
    let began = Instant::now();
    tokio::time::timeout(
        Duration::from_secs(10),
        writer.update_organization(&suspended),
    )
    .await
    .expect("a listener that never answers is not waited for without end")
    .unwrap();
    assert!(
        began.elapsed() >= Duration::from_millis(1500),
        "the change waited for the listener that did not answer ({:?})",
        began.elapsed()
    );
    let read = reader.get_organization(org.id).await.unwrap();
    assert_eq!(read.unwrap().status, OrgStatus::Suspended);
    // Changes waiting on it hold no connection: with more of them waiting at once than the pool
    // has connections, a read through the same store that needs the database is answered
    // meanwhile, not once their waits are over.
    let waiting: Vec<_> = (0..store::postgres::POOL_SIZE + 4)
        .map(|_| {
            let (writer, suspended) = (writer.clone(), suspended.clone());
            tokio::spawn(async move { writer.update_organization(&suspended).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let began = Instant::now();
    let mut never_issued = [0u8; 32];
    never_issued[..16].copy_from_slice(&schemas::ids::next_ulid().to_bytes());
    let unknown = schemas::credential::CredentialHash(never_issued);
    assert!(
        writer
            .find_api_key_by_hash(&unknown)
            .await
            .unwrap()
            .is_none(),
        "an unknown credential reads as none"
    );
    assert!(
        began.elapsed() < Duration::from_millis(1000),
        "a read waited {:?} for changes waiting on a stuck listener",
        began.elapsed()
    );
    for change in waiting {
        change.await.unwrap().unwrap();
    }
    admin
        .execute(
            "DELETE FROM credential_listeners WHERE listener = 'stuck'",
            &[],
        )
        .await
        .unwrap();

    // The listeners cut: a change is notified to nobody, and still counts at the next read.
    let other =
        store::conformance::api_key(org.id, Environment::Live, schemas::ids::KeyId::generate());
    writer.create_api_key(&other).await.unwrap();
    assert!(
        reader
            .find_api_key_by_hash(&other.key_hash)
            .await
            .unwrap()
            .is_some()
    );
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1 \
               AND pid IN (SELECT backend_pid FROM credential_listeners)",
            &[&name],
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Read while nothing can be heard: not kept.
    assert!(
        reader
            .find_api_key_by_hash(&other.key_hash)
            .await
            .unwrap()
            .is_some()
    );
    let gone = store::ApiKeyRecord {
        revoked_at: Some(schemas::time::now()),
        ..other.clone()
    };
    writer.update_api_key(&gone).await.unwrap();
    assert!(
        reader
            .find_api_key_by_hash(&other.key_hash)
            .await
            .unwrap()
            .unwrap()
            .revoked_at
            .is_some(),
        "with the listener cut, the read bypasses the cache"
    );
}

/// Ingest's batch counters are raised in groups: a session whose row no longer decodes is
/// answered as damaged alone, and the sessions advanced in the same group are raised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_collect_session_fails_its_own_advance_only() {
    use schemas::credential::Environment;
    let url = fresh_schema().await;
    store::postgres::migrations::migrate(&url).await.unwrap();
    let store = store::open(&url).await.unwrap();
    let now = schemas::time::now();
    let session = |_| store::CollectSessionRecord {
        id: schemas::SessionId::generate(),
        organization_id: schemas::ids::OrgId::generate(),
        environment: Environment::Live,
        key_id: schemas::ids::KeyId::generate(),
        sealed_batch_key: vec![1, 2, 3],
        sealed_proof_key: vec![4, 5, 6],
        page_url: "https://shop.example/".into(),
        sdk_version: "1.1.1".into(),
        opened_at: now,
        expires_at: now + chrono::TimeDelta::minutes(30),
        last_seq: 0,
        last_call: 0,
        pings: Vec::new(),
        network_check_token_hash: [7; 32],
        ws_identity: None,
        results_at: None,
        gate_session_id: None,
        challenge: String::new(),
    };
    let sessions: Vec<store::CollectSessionRecord> = (0..8).map(session).collect();
    for s in &sessions {
        store.create_collect_session(s).await.unwrap();
    }
    let damaged = sessions[3].id;
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    let changed = client
        .execute(
            "UPDATE collect_sessions SET body = '{\"damaged\": true}' WHERE id = $1",
            &[&damaged.ulid().to_bytes().to_vec()],
        )
        .await
        .unwrap();
    assert_eq!(changed, 1);
    drop(client);
    let _ = driver.await;

    // All at once, so they share groups.
    let answers =
        futures::future::join_all(sessions.iter().map(|s| store.advance_collect_seq(s.id, 1)))
            .await;
    for (s, answer) in sessions.iter().zip(answers) {
        if s.id == damaged {
            assert!(
                matches!(answer, Err(store::StoreError::Corrupt { .. })),
                "the damaged row is reported as damaged: {answer:?}"
            );
        } else {
            assert!(matches!(answer, Ok(true)), "{}: {answer:?}", s.id);
            assert_eq!(
                store
                    .get_collect_session(s.id)
                    .await
                    .unwrap()
                    .unwrap()
                    .last_seq,
                1
            );
        }
    }
}
