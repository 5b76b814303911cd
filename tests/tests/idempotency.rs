//! Idempotent POSTs (D18): a retried key creation or rotation returns the same key instead of
//! minting a second one; the same Idempotency-Key with another body is a 409.

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
    // Another credential has its own key space.
    let r = s
        .post(&path)
        .key(&s.creds.keys.secret_live)
        .header("idempotency-key", "create-once-2")
        .json(body.clone())
        .send()
        .await;
    assert_ne!(r.ok(201)["id"], a["id"]);
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
async fn failed_requests_are_replayed_as_failed_and_bad_keys_are_refused() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let bad = json!({"name": "", "slug": "x"});
    let first = s
        .post("/v1/organizations")
        .key(sk)
        .header("idempotency-key", "k-1")
        .json(bad.clone())
        .send()
        .await;
    first.err(422, "request.validation_failed");
    let again = s
        .post("/v1/organizations")
        .key(sk)
        .header("idempotency-key", "k-1")
        .json(bad)
        .send()
        .await;
    again.err(422, "request.validation_failed");
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
