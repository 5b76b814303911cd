//! Answers that show a secret once (a new or rotated API key, a webhook endpoint's signing
//! secret, a Gate signup's tokens and its delivery) carry `Cache-Control: no-store`, replays of
//! them too, so no browser, proxy or client cache keeps a copy. Reads that show none do not
//! need it.

use vigil_tests::{TestServer, json};

fn never_cached(r: &vigil_tests::Resp, what: &str) {
    assert_eq!(
        r.header("cache-control").as_deref(),
        Some("no-store"),
        "{what} must not be cached"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_showing_a_secret_are_never_cached() {
    let s = TestServer::start_with(|a| a.allow_private_webhooks = true).await;
    let sk = &s.creds.keys.secret_live;
    let keys = format!("{}/api-keys", s.org_path());

    let created = s
        .post(&keys)
        .key(sk)
        .header("idempotency-key", "make-backend-key")
        .json(json!({"name": "backend", "type": "secret", "environment": "live"}))
        .send()
        .await;
    never_cached(&created, "a new key");
    let id = created.ok(201)["id"].as_str().unwrap().to_owned();
    let replayed = s
        .post(&keys)
        .key(sk)
        .header("idempotency-key", "make-backend-key")
        .json(json!({"name": "backend", "type": "secret", "environment": "live"}))
        .send()
        .await;
    assert_eq!(
        replayed.header("idempotent-replayed").as_deref(),
        Some("true")
    );
    never_cached(&replayed, "a replayed new key");
    let rotated = s
        .post(&format!("{keys}/{id}/rotations"))
        .key(sk)
        .send()
        .await;
    never_cached(&rotated, "a rotated key");
    rotated.ok(201);
    let read = s.get(&format!("{keys}/{id}")).key(sk).send().await;
    read.ok(200);

    let endpoints = format!("{}/webhooks/endpoints", s.org_path());
    let endpoint = s
        .post(&endpoints)
        .key(sk)
        .json(json!({"name": "hooks", "url": "http://127.0.0.1:9/hook", "event_types": ["webhook.test"]}))
        .send()
        .await;
    let endpoint_id = endpoint.ok(201)["id"].as_str().unwrap().to_owned();
    never_cached(&endpoint, "a new endpoint's secret");
    let rotated = s
        .post(&format!("{endpoints}/{endpoint_id}/rotations"))
        .key(sk)
        .send()
        .await;
    never_cached(&rotated, "a rotated endpoint secret");

    let service = s
        .post("/v1/gate/services")
        .key(&s.creds.keys.secret_test)
        .json(json!({"id": "acme-cli", "name": "Acme", "website": "https://acme.example", "discoverable": true}))
        .send()
        .await;
    never_cached(&service, "a new service's webhook secret");
    service.ok(201);
    let signup = s.post("/v1/gate/services/acme-cli/signups").send().await;
    never_cached(&signup, "a signup's poll token");
    let signup = signup.ok(201).clone();
    let poll = s
        .get(&format!(
            "/v1/gate/sessions/{}",
            signup["id"].as_str().unwrap()
        ))
        .header(
            "authorization",
            &format!("Bearer {}", signup["poll_token"].as_str().unwrap()),
        )
        .send()
        .await;
    never_cached(&poll, "a poll, which delivers the secrets once approved");
}
