//! The whole service on the PostgreSQL store (`--store postgres://…`) in one process: a session
//! scored through ingest, the log and the processor is read back through the query API, its
//! visitor listed, its events listed, and a key revoked through the admin API is refused on
//! the next request. The store suite checks the backend method by method
//! (`store/tests/it/postgres.rs`); this checks the roles' use of it end to end.

use serde_json::json;
use vigil_tests::collect::score_session;
use vigil_tests::{TestServer, postgres_database};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_scored_read_and_listed_on_postgresql() {
    let url = postgres_database("service").await;
    let s = TestServer::start_with(move |a| a.store.store = Some(url.clone())).await;
    let ready = s.get("/readyz").send().await;
    assert_eq!(ready.status, 200, "{}", ready.body);

    let probes = json!({
        "kind": "probes",
        "automation": {"webdriver": true, "languages": []},
        "rendering": {"webgl_vendor": "Google Inc. (Google)", "webgl_renderer": "ANGLE (Google, SwiftShader driver)"}
    });
    let (session, answer) = score_session(&s, &probes, None, |a| {
        a["decision"]["decision_status"] == "final" && a["visitor_id"].is_string()
    })
    .await;
    assert_eq!(answer["decision"]["verdict"], "bot", "{answer}");
    let sk = &s.creds.keys.secret_test;

    let read = s
        .get(&format!("/v1/sessions/{}", session.id))
        .key(sk)
        .send()
        .await;
    let read = read.ok(200);
    assert_eq!(read["id"], session.id.as_str());
    assert_eq!(read["decision"]["verdict"], "bot");
    let bots = s.get("/v1/sessions?verdict=bot").key(sk).send().await;
    let bots = bots.ok(200).clone();
    assert_eq!(bots.as_array().map(Vec::len), Some(1), "{bots}");
    let visitors = s
        .get("/v1/fingerprints?sort=seen_count")
        .key(sk)
        .send()
        .await;
    let visitors = visitors.ok(200).clone();
    assert_eq!(visitors[0]["id"], answer["visitor_id"], "{visitors}");
    let events = s
        .get(&format!("{}/events", s.org_path()))
        .key(sk)
        .send()
        .await;
    let events = events.ok(200).clone();
    let types: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert!(types.contains(&"session.result.persisted"), "{types:?}");

    // Every port's calls are measured, whatever the backend: the store's, the log's (its
    // consumers' polls and commits too) and the limiter's.
    let metrics = s.get("/metrics").send().await;
    let metrics = metrics.body.as_str().unwrap_or_default().to_owned();
    for sample in [
        "vigil_store_operation_seconds_count{operation=\"find_key_and_organization\"}",
        "vigil_store_operation_seconds_count{operation=\"save_sessions\"}",
        "vigil_store_operation_seconds_count{operation=\"get_session\"}",
        "vigil_log_operation_seconds_count{operation=\"append\"}",
        "vigil_log_operation_seconds_count{operation=\"poll\"}",
        "vigil_log_operation_seconds_count{operation=\"commit\"}",
        "vigil_limiter_check_seconds_count{backend=\"local\"}",
    ] {
        let count: f64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix(sample))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {sample} in /metrics"));
        assert!(count >= 1.0, "{sample} {count}");
    }

    // Revoked through the admin API, refused on the very next request.
    let key = s
        .create_key(
            &s.creds.keys.secret_live,
            json!({"name": "doomed", "type": "secret", "environment": "test"}),
        )
        .await;
    let doomed = key["revealed_key"].as_str().unwrap().to_owned();
    s.get("/v1/sessions").key(&doomed).send().await.ok(200);
    s.delete(&format!(
        "{}/api-keys/{}",
        s.org_path(),
        key["id"].as_str().unwrap()
    ))
    .key(&s.creds.keys.secret_live)
    .send()
    .await
    .ok(200);
    s.get("/v1/sessions")
        .key(&doomed)
        .send()
        .await
        .err(401, "auth.invalid_credentials");
}
