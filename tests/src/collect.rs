//! The browser's side of the collect protocol, for tests and benchmarks: opening a session with
//! a real ECDH exchange, sealing batches as the SDK does, and reading what reached the log.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use p256::ecdh::EphemeralSecret;
use p256::elliptic_curve::Generate;
use p256::elliptic_curve::sec1::ToSec1Point;
use serde_json::{Value, json};

use crate::TestServer;

/// An open collect session and its batch key.
pub struct CollectSession {
    pub id: String,
    pub key: ingest::transport::BatchKey,
    pub pings: Vec<String>,
    /// The whole `data` of the open answer.
    pub opened: Value,
}

impl CollectSession {
    /// A batch request body: `plaintext` sealed as batch `seq`.
    pub fn batch(&self, seq: u64, plaintext: &Value) -> Value {
        let sealed = ingest::transport::seal_batch(
            &self.key,
            &self.id,
            seq,
            &serde_json::to_vec(plaintext).expect("json"),
        );
        json!({"seq": seq, "ciphertext": B64.encode(sealed)})
    }
}

/// A fresh client key pair's public half, as the SDK sends it.
pub fn client_public_key(secret: &EphemeralSecret) -> String {
    B64.encode(secret.public_key().to_sec1_point(false).as_bytes())
}

/// Opens a collect session with `pk` and derives its batch key as the SDK does.
pub async fn open_session(s: &TestServer, pk: &str) -> CollectSession {
    let secret = EphemeralSecret::generate();
    let r = s
        .post("/v1/collect/sessions")
        .key(pk)
        .json(json!({"client_public_key": client_public_key(&secret), "sdk_version": "1.0.0", "page_url": "https://shop.example/"}))
        .send()
        .await;
    let opened = r.ok(201).clone();
    let id = opened["id"].as_str().expect("session id").to_owned();
    let server_key = B64
        .decode(opened["server_public_key"].as_str().expect("server key"))
        .expect("base64url");
    let server = p256::PublicKey::from_sec1_bytes(&server_key).expect("a P-256 point");
    let key = ingest::transport::derive(secret.diffie_hellman(&server).raw_secret_bytes(), &id);
    let pings = opened["pings"]
        .as_array()
        .expect("pings")
        .iter()
        .map(|p| p.as_str().unwrap_or_default().to_owned())
        .collect();
    CollectSession {
        id,
        key,
        pings,
        opened,
    }
}

/// Every record on the batches topic, read by a fresh consumer group.
pub async fn logged_batches(s: &TestServer) -> Vec<Value> {
    logged(s, schemas::collect::BATCHES_TOPIC).await
}

/// Every record on the events topic, read by a fresh consumer group.
pub async fn logged_events(s: &TestServer) -> Vec<Value> {
    logged(s, schemas::events::EVENTS_TOPIC).await
}

/// Every record on `topic`, read by a fresh consumer group, as JSON.
pub async fn logged(s: &TestServer, topic: &'static str) -> Vec<Value> {
    let log = &s.running.as_ref().expect("running").log;
    let topic = bus::Topic::from_static(topic);
    let group = bus::Group::new(&format!("test-{}", ulid::Ulid::generate())).expect("group name");
    let mut consumer = log.consumer_of_all(&group, &topic).await.expect("consumer");
    let mut out = Vec::new();
    loop {
        let records = consumer
            .poll(1000, Duration::from_millis(200))
            .await
            .expect("poll");
        if records.is_empty() {
            break;
        }
        out.extend(
            records
                .iter()
                .map(|r| serde_json::from_slice::<Value>(&r.payload).expect("a JSON record")),
        );
    }
    out
}

/// Drives one session through the whole pipeline: opens it, sends `probes` as batch 1 (with
/// `user_agent` as the HTTP user agent, when given), asks for the handoff, and polls
/// `POST /v1/handoffs/open` until `done` holds of its answer (5 s at most). Returns the session
/// id and that answer.
pub async fn score_session(
    s: &TestServer,
    probes: &Value,
    user_agent: Option<&str>,
    done: impl Fn(&Value) -> bool,
) -> (String, Value) {
    let pk = &s.creds.keys.publishable_test;
    let session = open_session(s, pk).await;
    let sid = session.id.clone();
    let mut batch = s
        .post(&format!("/v1/collect/sessions/{sid}/batches"))
        .key(pk);
    if let Some(ua) = user_agent {
        batch = batch.header("user-agent", ua);
    }
    batch.json(session.batch(1, probes)).send().await.ok(202);
    let handoff = s
        .post(&format!("/v1/collect/sessions/{sid}/results"))
        .key(pk)
        .send()
        .await
        .ok(200)["handoff"]
        .clone();
    // The processor works from the log, so the decision arrives shortly after. A handoff opens
    // once, so the wait watches the stored session (in the shape the open answers with), and
    // the handoff is opened when it is there.
    let (org, env, id) = (
        s.creds.org_id().parse().expect("org id"),
        schemas::credential::Environment::Test,
        sid.parse().expect("session id"),
    );
    let mut last = Value::Null;
    for _ in 0..200 {
        let stored = s.store().get_session(org, env, id).await.expect("store");
        last = json!({
            "object": "handoff",
            "session_id": sid,
            "visitor_id": stored.as_ref().and_then(|r| r.visitor_id).map(|v| v.to_string()),
            "decision": stored.and_then(|r| r.latest_decision).map(|d| d.to_value()),
        });
        if done(&last) {
            let opened = s
                .post("/v1/handoffs/open")
                .key(&s.creds.keys.secret_test)
                .json(json!({"handoff": handoff}))
                .send()
                .await;
            let opened = opened.ok(200).clone();
            assert!(
                done(&opened),
                "the handoff opens to what was stored: {opened}"
            );
            return (sid, opened);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the session {sid} did not reach the awaited state within 5 s; last stored: {last}");
}
