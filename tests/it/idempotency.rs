//! Idempotent POSTs (docs/architecture.md#idempotency): a retried key creation or rotation returns
//! the same key instead of minting a second one; the same Idempotency-Key with another body is a
//! 409.

use vigil_tests::{TestServer, json};

#[tokio::test]
async fn a_retried_key_creation_returns_the_same_key() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let path = format!("{}/api-keys", s.org_path());
    let body = json!({"name": "once", "type": "secret", "environment": "live"});
    let first = s
        .post(&path)
        .key(sk)
        .header("idempotency-key", "create-once-1")
        .json(body.clone())
        .send()
        .await;
    let second = s
        .post(&path)
        .key(sk)
        .header("idempotency-key", "create-once-1")
        .json(body.clone())
        .send()
        .await;
    let (a, b) = (first.ok(201), second.ok(201));
    assert_eq!(a["id"], b["id"]);
    assert_eq!(
        a["revealed_key"], b["revealed_key"],
        "the secret the client never saw is returned again"
    );
    assert_eq!(
        first.header("idempotent-replayed").as_deref(),
        Some("false")
    );
    assert_eq!(
        second.header("idempotent-replayed").as_deref(),
        Some("true")
    );
    assert!(second.header("x-ratelimit-remaining").is_some());

    let listed = s.get(&path).key(sk).send().await;
    let named_once = listed
        .ok(200)
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["name"] == "once")
        .count();
    assert_eq!(named_once, 1, "one key was minted");

    let other = s
        .post(&path)
        .key(sk)
        .header("idempotency-key", "create-once-1")
        .json(json!({"name": "different", "type": "secret", "environment": "live"}))
        .send()
        .await;
    other.err(409, "request.idempotency_conflict");
    // Another credential has its own key space: the same Idempotency-Key acts afresh.
    let test_body = json!({"name": "once", "type": "secret", "environment": "test"});
    let r = s
        .post(&path)
        .key(&s.creds.keys.secret_test)
        .header("idempotency-key", "create-once-1")
        .json(test_body)
        .send()
        .await;
    let other_credential = r.ok(201);
    assert_ne!(other_credential["id"], a["id"]);
    assert_eq!(other_credential["environment"], "test");
    // Without the header, every POST acts.
    let c = s.post(&path).key(sk).json(body.clone()).send().await;
    let d = s.post(&path).key(sk).json(body).send().await;
    assert_ne!(c.ok(201)["id"], d.ok(201)["id"]);
}

#[tokio::test]
async fn a_retried_rotation_returns_the_same_replacement() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let key = s
        .create_key(
            sk,
            json!({"name": "r", "type": "secret", "environment": "live"}),
        )
        .await;
    let path = format!(
        "{}/api-keys/{}/rotations",
        s.org_path(),
        key["id"].as_str().unwrap()
    );
    let a = s
        .post(&path)
        .key(sk)
        .header("idempotency-key", "rotate-1")
        .send()
        .await;
    let b = s
        .post(&path)
        .key(sk)
        .header("idempotency-key", "rotate-1")
        .send()
        .await;
    assert_eq!(a.ok(201)["revealed_key"], b.ok(201)["revealed_key"]);
    // A fresh key is a fresh request: the key is already rotated.
    s.post(&path)
        .key(sk)
        .header("idempotency-key", "rotate-2")
        .send()
        .await
        .err(409, "resource.conflict");
}

#[tokio::test]
async fn invalid_requests_release_the_key_and_conflicts_are_kept() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let post = |key: &'static str, body: serde_json::Value| {
        s.post("/v1/organizations")
            .key(sk)
            .header("idempotency-key", key)
            .json(body)
            .send()
    };
    // A 422 acted on nothing: the key is free for the corrected request.
    post("k-1", json!({"name": "", "slug": "x"}))
        .await
        .err(422, "request.validation_failed");
    let fixed = post("k-1", json!({"name": "X", "slug": "x"})).await;
    assert_eq!(fixed.ok(201)["slug"], "x");
    assert_eq!(
        fixed.header("idempotent-replayed").as_deref(),
        Some("false")
    );
    // A 409 says the state forbids the action, and says so again on replay.
    post("k-2", json!({"name": "D", "slug": "development"}))
        .await
        .err(409, "resource.conflict");
    let again = post("k-2", json!({"name": "D", "slug": "development"})).await;
    again.err(409, "resource.conflict");
    assert_eq!(again.header("idempotent-replayed").as_deref(), Some("true"));

    let long = "k".repeat(256);
    let r = s
        .post("/v1/organizations")
        .key(sk)
        .header("idempotency-key", &long)
        .json(json!({"name": "a", "slug": "a"}))
        .send()
        .await;
    assert_eq!(
        r.err(422, "request.validation_failed")["details"]["header_name"],
        "Idempotency-Key"
    );
}

#[tokio::test]
async fn refusals_that_took_no_action_release_the_key() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let narrow = s
        .create_key(sk, json!({"name": "narrow", "type": "secret", "environment": "live", "scopes": ["organizations:read"]}))
        .await;
    let narrow_key = narrow["revealed_key"].as_str().unwrap();
    let body = json!({"name": "Later", "slug": "later"});
    let refused = s
        .post("/v1/organizations")
        .key(narrow_key)
        .header("idempotency-key", "retry-me")
        .json(body.clone())
        .send()
        .await;
    refused.err(403, "auth.insufficient_scope");
    s.patch(&format!(
        "{}/api-keys/{}",
        s.org_path(),
        narrow["id"].as_str().unwrap()
    ))
    .key(sk)
    .json(json!({"scopes": ["organizations:read", "organizations:create"]}))
    .send()
    .await
    .ok(200);
    let retried = s
        .post("/v1/organizations")
        .key(narrow_key)
        .header("idempotency-key", "retry-me")
        .json(body)
        .send()
        .await;
    assert_eq!(
        retried.ok(201)["slug"],
        "later",
        "the refusal was not kept for replay"
    );
}

#[tokio::test]
async fn a_client_that_hangs_up_mid_request_can_retry_without_a_second_key() {
    use tokio::io::AsyncWriteExt;
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let path = format!("{}/api-keys", s.org_path());
    let body = r#"{"name":"hung-up","type":"secret","environment":"live"}"#;
    // Send the request and close the connection without reading the answer.
    let addr = s.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {sk}\r\nIdempotency-Key: hang-up-1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    drop(stream);

    // The retry gets the key the first request created, or, while that one is still being
    // answered, a 409 to retry shortly; never a second key.
    let mut replayed = None;
    for _ in 0..100 {
        let r = s
            .post(&path)
            .key(sk)
            .header("idempotency-key", "hang-up-1")
            .raw_body("application/json", body)
            .send()
            .await;
        if r.status == 201 {
            replayed = Some(r);
            break;
        }
        let e = r.err(409, "request.idempotency_conflict");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("still being answered"),
            "{e}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let replayed = replayed.expect("the retry is answered");
    // Usually the first request ran to its end and the retry replays it; under load hyper may
    // see the hang-up before handing the request on, and then the retry is the first to act.
    // Either way there is exactly one key, which is what matters.
    assert!(
        matches!(
            replayed.header("idempotent-replayed").as_deref(),
            Some("true" | "false")
        ),
        "answered through the idempotency layer"
    );
    let listed = s.get(&path).key(sk).send().await;
    let named = listed
        .ok(200)
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["name"] == "hung-up")
        .count();
    assert_eq!(named, 1);
}
