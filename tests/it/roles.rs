//! `--roles` (docs/architecture.md#conv-roles): a process runs only the roles it names. Its routes
//! are those roles' (others are the envelope's 404), a process with no HTTP role answers only the
//! probes and metrics, and `/readyz` and the startup log name the roles that run.

use serde_json::Value;
use vigil_tests::served::Served;
use vigil_tests::{TestServer, json};

async fn with_roles(roles: &[&str]) -> TestServer {
    let roles: Vec<String> = roles.iter().map(|r| (*r).to_owned()).collect();
    TestServer::start_with(move |a| a.roles = roles.clone()).await
}

async fn ready_roles(s: &TestServer) -> Value {
    let r = s.get("/readyz").send().await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["roles"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_process_serves_reads_only() {
    let s = with_roles(&["query"]).await;
    assert_eq!(ready_roles(&s).await, json!(["query"]));
    s.get("/v1/sessions")
        .key(&s.creds.keys.secret_test)
        .send()
        .await
        .ok(200);
    s.get("/v1/gate/registry")
        .key(&s.creds.keys.publishable_test)
        .send()
        .await
        .ok(200);
    // Handoffs open here: a malformed one is refused by the handler, not the router.
    s.post("/v1/handoffs/open")
        .key(&s.creds.keys.secret_test)
        .json(json!({"handoff": "vh1.nothing"}))
        .send()
        .await
        .err(422, "request.validation_failed");
    for (method, path) in [
        (reqwest::Method::POST, "/v1/collect/sessions".to_owned()),
        (reqwest::Method::GET, s.org_path()),
        (reqwest::Method::GET, "/v1/gate/services".to_owned()),
        (reqwest::Method::GET, "/sdk/v1/vigil.js".to_owned()),
    ] {
        let r = s
            .call(method, &path)
            .key(&s.creds.keys.secret_test)
            .send()
            .await;
        r.err(404, "request.route_not_found");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_and_admin_together_and_no_reads() {
    let s = with_roles(&["ingest", "admin"]).await;
    assert_eq!(ready_roles(&s).await, json!(["ingest", "admin"]));
    s.get(&s.org_path())
        .key(&s.creds.keys.secret_live)
        .send()
        .await
        .ok(200);
    let sdk = s.get("/sdk/v1/vigil.js").send().await;
    assert_eq!(sdk.status, 200);
    for path in ["/v1/sessions", "/v1/handoffs/open"] {
        let method = if path.ends_with("open") {
            reqwest::Method::POST
        } else {
            reqwest::Method::GET
        };
        s.call(method, path)
            .key(&s.creds.keys.secret_test)
            .send()
            .await
            .err(404, "request.route_not_found");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_without_an_http_role_answers_only_probes_and_metrics() {
    let s = with_roles(&["processor", "dispatcher"]).await;
    assert_eq!(ready_roles(&s).await, json!(["processor", "dispatcher"]));
    assert_eq!(s.get("/healthz").send().await.status, 200);
    assert_eq!(s.get("/metrics").send().await.status, 200);
    for path in [s.org_path(), "/v1/sessions".into(), "/docs/errors".into()] {
        let r = s.get(&path).key(&s.creds.keys.secret_live).send().await;
        assert_eq!(r.status, 404, "{path}: {}", r.body);
    }
}

#[test]
fn the_startup_log_names_the_roles_and_unknown_roles_are_refused() {
    let mut s = Served::start(&["--roles", "query,admin"]);
    let line = s.wait_for("vigil is serving");
    assert!(line.contains("roles=query,admin "), "{line}");
    s.kill();
    let out = std::process::Command::new(vigil_tests::vigil_binary())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--roles",
            "ingest,bogus",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("unknown role `bogus`"), "{said}");
}

/// The embedded log belongs to one process: a second process pointed at it (a second
/// processor, say) is refused at start and told that a shared log is Kafka.
#[test]
fn a_second_process_cannot_join_the_embedded_log() {
    let log = tempfile::tempdir().unwrap();
    let bus = format!("embedded:{}", log.path().display());
    let mut first = Served::start(&["--roles", "processor", "--log", &bus]);
    first.wait_for("vigil is serving");
    let other = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(vigil_tests::vigil_binary())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--roles",
            "processor",
            "--log",
            &bus,
        ])
        .arg("--data-dir")
        .arg(other.path())
        .output()
        .unwrap();
    first.kill();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("is open in another process"), "{said}");
    assert!(said.contains("kafka://"), "{said}");
}

/// `/readyz` checks what a process's roles use: a query process reads only the store, so a
/// broker that is down does not take it out of its load balancer, while an ingest process on
/// the same broker is not ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_checks_only_what_the_roles_use() {
    // Nothing listens on the discard port: the broker is down.
    let bus = "kafka://127.0.0.1:9";
    let client = vigil_tests::http_client();
    let query = Served::start(&["--roles", "query", "--log", bus]);
    let r = client
        .get(format!("{}/readyz", query.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["log"], "not used", "{body}");
    assert_eq!(body["store"], "ok", "{body}");
    let ingest = Served::start(&["--roles", "ingest", "--log", bus]);
    let r = client
        .get(format!("{}/readyz", ingest.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.unwrap();
    assert_ne!(body["log"], "ok", "{body}");
}
