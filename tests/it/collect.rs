//! The Collect API over HTTP (schemas/collect.md; docs/architecture.md: #collect-transport, #cors):
//! opening an encrypted session with a real ECDH exchange, pings, batches that reach the log only
//! when accepted, and every refusal with its documented error: wrong origin, the other
//! environment's key, replayed, tampered and misdirected batches, oversize and malformed bodies,
//! expired sessions. (Calls that must prove their session are tested in collect_binding.rs.)

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use p256::ecdh::EphemeralSecret;
use p256::elliptic_curve::Generate;
use p256::elliptic_curve::sec1::ToSec1Point;
use serde_json::Value;
use vigil_tests::collect::{CollectSession, logged_batches, open_session};
use vigil_tests::{TestServer, json};

fn probes() -> Value {
    json!({"kind": "probes", "collected_in_ms": 12.0, "automation": {"webdriver": true}, "network": {"ping_rtts_ms": [1.0, 1.1, 0.9]}})
}

#[tokio::test]
async fn a_session_streams_batches_into_the_log() {
    let s = TestServer::start().await;
    let pk = &s.creds.keys.publishable_test;
    let b = open_session(&s, pk).await;
    for ping in &b.pings {
        let r = b.ping(&s, pk, ping).await;
        assert_eq!(r.ok(200)["id"], ping.as_str());
    }
    let path = format!("/v1/collect/sessions/{}/batches", b.id);
    let r = s
        .post(&path)
        .key(pk)
        .header("user-agent", "TestBrowser/1.0")
        .json(b.batch(1, &probes()))
        .send()
        .await;
    let accepted = r.ok(202);
    assert_eq!(accepted["seq"], 1);
    assert_eq!(accepted["accepted"], true);
    let interactions = json!({"kind": "interactions", "events": [{"t": 1.0, "type": "pointermove", "x": 1, "y": 2, "trusted": true}]});
    s.post(&path)
        .key(pk)
        .json(b.batch(2, &interactions))
        .send()
        .await
        .ok(202);
    // Numbers may skip (a lost batch must not block the rest) but never go back.
    s.post(&path)
        .key(pk)
        .json(b.batch(5, &interactions))
        .send()
        .await
        .ok(202);

    let records = logged_batches(&s).await;
    assert_eq!(records.len(), 3);
    let first = &records[0];
    assert_eq!(first["schema"], 1);
    assert_eq!(first["session_id"], b.id.as_str());
    assert_eq!(first["environment"], "test");
    assert_eq!(first["organization_id"], s.creds.org_id());
    assert_eq!(first["seq"], 1);
    assert_eq!(first["observations"]["automation"]["webdriver"], true);
    assert_eq!(first["request"]["user_agent"], "TestBrowser/1.0");
    assert!(
        first["request"]["header_names"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h == "authorization")
    );
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, vec![1, 2, 5], "one session's batches in order");
}

#[tokio::test]
async fn refused_batches_get_their_error_and_write_nothing() {
    let s = TestServer::start().await;
    let pk = &s.creds.keys.publishable_test;
    let a = open_session(&s, pk).await;
    let other = open_session(&s, pk).await;
    let path = format!("/v1/collect/sessions/{}/batches", a.id);
    s.post(&path)
        .key(pk)
        .json(a.batch(1, &probes()))
        .send()
        .await
        .ok(202);

    // Replayed: the same number again, even with a valid ciphertext.
    s.post(&path)
        .key(pk)
        .json(a.batch(1, &probes()))
        .send()
        .await
        .err(409, "collect.batch_replayed");
    // A valid batch 2 presented as batch 3.
    let mut renumbered = a.batch(2, &probes());
    renumbered["seq"] = json!(3);
    s.post(&path)
        .key(pk)
        .json(renumbered)
        .send()
        .await
        .err(422, "collect.batch_invalid");
    // Tampered ciphertext.
    let mut tampered = a.batch(2, &probes());
    let mut bytes = B64
        .decode(tampered["ciphertext"].as_str().unwrap())
        .unwrap();
    bytes[3] ^= 0x40;
    tampered["ciphertext"] = json!(B64.encode(bytes));
    s.post(&path)
        .key(pk)
        .json(tampered)
        .send()
        .await
        .err(422, "collect.batch_invalid");
    // Another session's batch.
    s.post(&path)
        .key(pk)
        .json(other.batch(2, &probes()))
        .send()
        .await
        .err(422, "collect.batch_invalid");
    // Not a batch the protocol knows, nor an object that names one.
    for plaintext in [
        json!({"kind": "keylogger"}),
        json!(["probes"]),
        json!("probes"),
    ] {
        s.post(&path)
            .key(pk)
            .json(a.batch(2, &plaintext))
            .send()
            .await
            .err(422, "collect.batch_invalid");
    }
    // Oversize: 64 KiB of plaintext plus one byte.
    let huge = json!({"kind": "interactions", "pad": "x".repeat(65536)});
    let r = s.post(&path).key(pk).json(a.batch(2, &huge)).send().await;
    r.err(413, "request.too_large");
    // Malformed bodies.
    let r = s
        .post(&path)
        .key(pk)
        .json(json!({"seq": 0, "ciphertext": "!!"}))
        .send()
        .await;
    r.err(422, "request.validation_failed");
    let mut names = r.field_names();
    names.sort();
    assert_eq!(names, vec!["ciphertext", "seq"]);
    s.post(&path)
        .key(pk)
        .raw_body("application/json", "{")
        .send()
        .await
        .err(400, "request.malformed");
    s.post(&path)
        .key(pk)
        .raw_body("text/plain", "{}")
        .send()
        .await
        .err(415, "request.unsupported_media_type");
    s.post("/v1/collect/sessions/sid_bad/batches")
        .key(pk)
        .json(a.batch(2, &probes()))
        .send()
        .await
        .err(422, "request.validation_failed");
    s.post("/v1/collect/sessions/sid_00000000000000000000000000/batches")
        .key(pk)
        .json(a.batch(2, &probes()))
        .send()
        .await
        .err(404, "resource.not_found");

    let records = logged_batches(&s).await;
    assert_eq!(records.len(), 1, "only the accepted batch reached the log");
    // The next real batch is still accepted.
    s.post(&path)
        .key(pk)
        .json(a.batch(2, &probes()))
        .send()
        .await
        .ok(202);
}

#[tokio::test]
async fn keys_are_checked_for_type_origin_and_environment() {
    let s = TestServer::start().await;
    let pk_test = &s.creds.keys.publishable_test;
    let b = open_session(&s, pk_test).await;
    let path = format!("/v1/collect/sessions/{}/batches", b.id);
    // The live key of the same organization cannot see a test session.
    s.post(&path)
        .key(&s.creds.keys.publishable_live)
        .json(b.batch(1, &probes()))
        .send()
        .await
        .err(404, "resource.not_found");
    b.ping(&s, &s.creds.keys.publishable_live, &b.pings[0])
        .await
        .err(404, "resource.not_found");
    // A secret key here has been put in a page: it is revoked at once
    // (docs/architecture.md#exposed-keys).
    let leaked = s
        .create_key(&s.creds.keys.secret_test, json!({"name": "leaked"}))
        .await;
    s.post("/v1/collect/sessions")
        .key(leaked["revealed_key"].as_str().unwrap())
        .json(json!({}))
        .send()
        .await
        .err(401, "auth.key_exposed");
    // An origin the key does not allow.
    let shop = s
        .create_key(&s.creds.keys.secret_test, json!({"name": "shop", "type": "publishable", "environment": "test", "allowed_origins": ["https://shop.example"]}))
        .await;
    let shop_pk = shop["revealed_key"].as_str().unwrap();
    let secret = EphemeralSecret::generate();
    let body = json!({"client_public_key": B64.encode(secret.public_key().to_sec1_point(false).as_bytes()), "sdk_version": "1", "page_url": "https://evil.example/"});
    let r = s
        .post("/v1/collect/sessions")
        .key(shop_pk)
        .header("origin", "https://evil.example")
        .json(body.clone())
        .send()
        .await;
    r.err(403, "auth.origin_not_allowed");
    assert!(
        r.header("access-control-allow-origin").is_none(),
        "a refused origin is not told it may read"
    );
    let r = s
        .post("/v1/collect/sessions")
        .key(shop_pk)
        .header("origin", "https://shop.example")
        .json(body)
        .send()
        .await;
    r.ok(201);
    assert_eq!(
        r.header("access-control-allow-origin").as_deref(),
        Some("https://shop.example")
    );
    assert!(
        r.header("access-control-expose-headers")
            .unwrap()
            .contains("x-ratelimit-remaining")
    );
    // A bad public key is a validation error naming the field.
    let r = s.post("/v1/collect/sessions").key(pk_test).json(json!({"client_public_key": B64.encode([4u8; 65]), "sdk_version": "1", "page_url": "https://a.example/"})).send().await;
    assert_eq!(r.field_names(), vec!["client_public_key"]);
}

#[tokio::test]
async fn preflights_are_answered_without_a_key_and_never_counted() {
    let s = TestServer::start().await;
    let pk = &s.creds.keys.publishable_test;
    for _ in 0..3 {
        let r = s
            .call(reqwest::Method::OPTIONS, "/v1/collect/sessions")
            .header("origin", "https://shop.example")
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization, content-type",
            )
            .send()
            .await;
        assert_eq!(r.status, 204);
        assert_eq!(
            r.header("access-control-allow-origin").as_deref(),
            Some("https://shop.example")
        );
        let allowed = r.header("access-control-allow-headers").unwrap();
        assert!(allowed.contains("authorization"), "{allowed}");
        assert!(
            allowed.contains("vigil-session-proof"),
            "the SDK may send its session proof: {allowed}"
        );
    }
    let b = open_session(&s, pk).await;
    let r = b.ping(&s, pk, &b.pings[0]).await;
    assert_eq!(
        r.header("x-ratelimit-remaining").as_deref(),
        Some("118"),
        "the open and this ping; no preflight"
    );
    let sdk = s.get("/sdk/v1/vigil.js").send().await;
    assert_eq!(sdk.status, 200);
    assert!(
        sdk.header("content-type")
            .unwrap()
            .starts_with("application/javascript")
    );
    assert!(sdk.body.as_str().unwrap().contains("Vigil"));
}

#[tokio::test]
async fn an_expired_session_is_gone() {
    let s = TestServer::start().await;
    let pk = &s.creds.keys.publishable_test;
    let b = open_session(&s, pk).await;
    // Age the session as 31 minutes would.
    let id: schemas::SessionId = b.id.parse().unwrap();
    let store = s.store();
    let mut record = store.get_collect_session(id).await.unwrap().unwrap();
    record.id = schemas::SessionId::generate();
    record.expires_at = schemas::time::now() - chrono::Duration::seconds(1);
    record.pings = vec![store::PingRecord {
        id: schemas::PingId::generate(),
        arrived_at: None,
    }];
    let sealed_key = s
        .running
        .as_ref()
        .unwrap()
        .secret
        .seal(&b.key.0, record.id.to_string().as_bytes());
    record.sealed_batch_key = sealed_key;
    record.sealed_proof_key = s
        .running
        .as_ref()
        .unwrap()
        .secret
        .seal(&b.proof_key.0, record.id.to_string().as_bytes());
    store.create_collect_session(&record).await.unwrap();
    let expired = CollectSession::new(
        record.id.to_string(),
        b.key.clone(),
        b.proof_key.clone(),
        vec![record.pings[0].id.to_string()],
        Value::Null,
    );
    let path = format!("/v1/collect/sessions/{}/batches", expired.id);
    s.post(&path)
        .key(pk)
        .json(expired.batch(1, &probes()))
        .send()
        .await
        .err(410, "collect.session_expired");
    expired
        .ping(&s, pk, &expired.pings[0])
        .await
        .err(410, "collect.session_expired");
    expired
        .results(&s, pk)
        .send()
        .await
        .err(410, "collect.session_expired");
    assert!(logged_batches(&s).await.is_empty());
}

#[tokio::test]
async fn the_handoff_opens_for_the_sites_backend_only() {
    let s = TestServer::start().await;
    let pk = &s.creds.keys.publishable_test;
    let b = open_session(&s, pk).await;
    let minted = b.results(&s, pk).send().await.ok(200).clone();
    let handoff = minted["handoff"].as_str().unwrap().to_owned();
    assert!(handoff.starts_with("vh1.k1."));
    assert!(
        !handoff.contains(&b.id),
        "the browser cannot read what it carries"
    );

    let opened = s
        .post("/v1/handoffs/open")
        .key(&s.creds.keys.secret_test)
        .json(json!({"handoff": handoff}))
        .send()
        .await;
    assert_eq!(opened.ok(200)["session_id"], b.id.as_str());
    assert!(
        opened.header("access-control-allow-origin").is_none(),
        "secret-key routes answer no CORS"
    );
    // Another environment's or organization's backend cannot open it.
    s.post("/v1/handoffs/open")
        .key(&s.creds.keys.secret_live)
        .json(json!({"handoff": handoff}))
        .send()
        .await
        .err(404, "resource.not_found");
    let other = s.second_organization("second").await;
    s.post("/v1/handoffs/open")
        .key(&other.keys.secret_test)
        .json(json!({"handoff": handoff}))
        .send()
        .await
        .err(404, "resource.not_found");
    // Not with a publishable key, and not altered.
    s.post("/v1/handoffs/open")
        .key(pk)
        .json(json!({"handoff": handoff}))
        .send()
        .await
        .err(403, "auth.credential_type_not_allowed");
    let mut altered = handoff.clone();
    let at = altered.len() - 5;
    altered.replace_range(
        at..at + 1,
        if &handoff[at..at + 1] == "A" {
            "B"
        } else {
            "A"
        },
    );
    let r = s
        .post("/v1/handoffs/open")
        .key(&s.creds.keys.secret_test)
        .json(json!({"handoff": altered}))
        .send()
        .await;
    assert_eq!(
        r.err(422, "request.validation_failed")["details"]["fields"][0]["name"],
        "handoff"
    );
    s.post("/v1/handoffs/open")
        .key(&s.creds.keys.secret_test)
        .json(json!({}))
        .send()
        .await
        .err(422, "request.validation_failed");
}

#[tokio::test]
async fn the_network_check_compares_the_websocket_with_http() {
    use futures::StreamExt;
    let s = TestServer::start().await;
    let pk = &s.creds.keys.publishable_test;
    let addr = s.base.trim_start_matches("http://").to_owned();
    let b = open_session(&s, pk).await;
    let session = b.id.clone();
    let token = b.opened["network_check_token"].as_str().unwrap().to_owned();

    // A wrong token is refused before any upgrade.
    let bad = tokio_tungstenite::connect_async(format!(
        "ws://{addr}/v1/collect/ws?session={session}&token=wrong"
    ))
    .await;
    assert!(bad.is_err());
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(format!(
            "ws://{addr}/v1/collect/ws?session={session}&token={token}"
        ))
        .unwrap();
    request
        .headers_mut()
        .insert("user-agent", "SameBrowser/1".parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("the websocket opens");
    let hello = socket.next().await.unwrap().unwrap();
    assert!(hello.to_text().unwrap().contains(&session));

    let same = b
        .network_check(&s, pk)
        .header("user-agent", "SameBrowser/1")
        .send()
        .await;
    assert_eq!(same.ok(200)["consistent"], true);
    let different = b
        .network_check(&s, pk)
        .header("user-agent", "OtherBrowser/2")
        .send()
        .await;
    assert_eq!(different.ok(200)["consistent"], false);
    s.post("/v1/collect/network-checks")
        .key(pk)
        .json(json!({"session_id": "sid_nope"}))
        .send()
        .await
        .err(422, "request.validation_failed");

    let records = logged_batches(&s).await;
    let checks: Vec<&Value> = records
        .iter()
        .filter(|r| r["observations"]["kind"] == "network_check")
        .collect();
    assert_eq!(checks.len(), 2);
    assert_eq!(checks[0]["seq"], 0, "server-made records are number 0");
    assert_eq!(
        checks[0]["observations"]["websocket"]["user_agent"],
        "SameBrowser/1"
    );
}
