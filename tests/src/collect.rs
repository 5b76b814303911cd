//! The browser's side of the collect protocol, for tests and benchmarks: opening a session with
//! a real ECDH exchange, sealing batches and proving calls as the SDK does, and reading what
//! reached the log; and a decision document as the processor stores it, for tests that write
//! sessions straight to the store.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use p256::ecdh::EphemeralSecret;
use p256::elliptic_curve::Generate;
use p256::elliptic_curve::sec1::ToSec1Point;
use serde_json::{Value, json};

use crate::{Call, Resp, TestServer};

/// An open collect session, its two keys, and the next call-proof counter.
pub struct CollectSession {
    pub id: String,
    pub key: ingest::transport::BatchKey,
    pub proof_key: ingest::transport::ProofKey,
    pub pings: Vec<String>,
    /// The whole `data` of the open answer.
    pub opened: Value,
    /// The counter the next proof takes, as the SDK counts: from 1, one per proven call.
    next_call: AtomicU64,
}

impl CollectSession {
    pub fn new(
        id: String,
        key: ingest::transport::BatchKey,
        proof_key: ingest::transport::ProofKey,
        pings: Vec<String>,
        opened: Value,
    ) -> Self {
        CollectSession {
            id,
            key,
            proof_key,
            pings,
            opened,
            next_call: AtomicU64::new(1),
        }
    }

    /// The `Vigil-Session-Proof` value for `method path` with the next counter.
    pub fn proof(&self, method: &str, path: &str) -> String {
        self.proof_with(self.next_call.fetch_add(1, Ordering::SeqCst), method, path)
    }

    /// The `Vigil-Session-Proof` value for `method path` with a chosen counter (which the
    /// session's own counting does not skip: for replays and other misuse).
    pub fn proof_with(&self, counter: u64, method: &str, path: &str) -> String {
        ingest::proof::sign(&self.proof_key, method, path, &self.id, counter)
    }

    pub fn results_path(&self) -> String {
        format!("/v1/collect/sessions/{}/results", self.id)
    }

    /// `POST …/results` as the SDK sends it, proof included; not yet sent, so a test may add
    /// headers.
    pub fn results<'a>(&self, s: &'a TestServer, pk: &str) -> Call<'a> {
        let path = self.results_path();
        s.post(&path)
            .key(pk)
            .header(ingest::proof::HEADER, &self.proof("POST", &path))
    }

    /// `GET /v1/collect/pings/{ping}` as the SDK sends it, proof included.
    pub async fn ping(&self, s: &TestServer, pk: &str, ping: &str) -> Resp {
        let path = format!("/v1/collect/pings/{ping}");
        s.get(&path)
            .key(pk)
            .header(ingest::proof::HEADER, &self.proof("GET", &path))
            .send()
            .await
    }

    /// `POST /v1/collect/network-checks` for this session as the SDK sends it, proof included;
    /// not yet sent, so a test may add headers.
    pub fn network_check<'a>(&self, s: &'a TestServer, pk: &str) -> Call<'a> {
        let path = "/v1/collect/network-checks";
        s.post(path)
            .key(pk)
            .header(ingest::proof::HEADER, &self.proof("POST", path))
            .json(json!({"session_id": self.id}))
    }

    /// A batch request body: `plaintext` sealed as batch `seq`.
    pub fn batch(&self, seq: u64, plaintext: &Value) -> Value {
        self.sealed_batch(seq, &serde_json::to_vec(plaintext).expect("json"))
    }

    /// A batch request body of `plaintext`, already encoded, sealed as batch `seq`: the
    /// benchmarks seal one encoded batch many times.
    pub fn sealed_batch(&self, seq: u64, plaintext: &[u8]) -> Value {
        let sealed = ingest::transport::seal_batch(&self.key, &self.id, seq, plaintext);
        json!({"seq": seq, "ciphertext": B64.encode(sealed)})
    }
}

/// A fresh client key pair's public half, as the SDK sends it.
pub fn client_public_key(secret: &EphemeralSecret) -> String {
    B64.encode(secret.public_key().to_sec1_point(false).as_bytes())
}

/// Opens a collect session with `pk` and derives its batch key as the SDK does.
pub async fn open_session(s: &TestServer, pk: &str) -> CollectSession {
    open_session_at(&s.client, &s.base, pk)
        .await
        .expect("the session opens")
}

/// [`open_session`] on the server at `base` (a `vigil serve` process, say); `None` if it did not
/// answer 201 (refused, rate-limited, or gone).
pub async fn open_session_at(
    client: &reqwest::Client,
    base: &str,
    pk: &str,
) -> Option<CollectSession> {
    open_session_on(client, base, pk, "https://shop.example/").await
}

/// [`open_session_at`] for a page at `page_url`, as the SDK reports it.
pub async fn open_session_on(
    client: &reqwest::Client,
    base: &str,
    pk: &str,
    page_url: &str,
) -> Option<CollectSession> {
    open_session_with_ticket(client, base, pk, page_url, None).await
}

/// [`open_session_on`], presenting a consent page's `consent_ticket` when given.
pub async fn open_session_with_ticket(
    client: &reqwest::Client,
    base: &str,
    pk: &str,
    page_url: &str,
    ticket: Option<&str>,
) -> Option<CollectSession> {
    let secret = EphemeralSecret::generate();
    let mut body = json!({"client_public_key": client_public_key(&secret), "sdk_version": "1.0.0", "page_url": page_url});
    if let Some(ticket) = ticket {
        body["consent_ticket"] = json!(ticket);
    }
    let r = client
        .post(format!("{base}/v1/collect/sessions"))
        .bearer_auth(pk)
        .json(&body)
        .send()
        .await
        .ok()?;
    if r.status() != 201 {
        return None;
    }
    let body: Value = r.json().await.ok()?;
    let opened = body["data"].clone();
    let id = opened["id"].as_str().expect("session id").to_owned();
    let server_key = B64
        .decode(opened["server_public_key"].as_str().expect("server key"))
        .expect("base64url");
    let server = p256::PublicKey::from_sec1_bytes(&server_key).expect("a P-256 point");
    let shared = secret.diffie_hellman(&server);
    let key = ingest::transport::derive(shared.raw_secret_bytes(), &id);
    let proof_key = ingest::transport::derive_proof_key(shared.raw_secret_bytes(), &id);
    let pings = opened["pings"]
        .as_array()
        .expect("pings")
        .iter()
        .map(|p| p.as_str().unwrap_or_default().to_owned())
        .collect();
    Some(CollectSession::new(id, key, proof_key, pings, opened))
}

/// `POST /v1/handoffs/open` with the test secret key, as the site's backend does.
pub async fn open_handoff(s: &TestServer, handoff: &Value) -> Resp {
    s.post("/v1/handoffs/open")
        .key(&s.creds.keys.secret_test)
        .json(json!({ "handoff": handoff }))
        .send()
        .await
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
    let group = format!("test-{}", ulid::Ulid::generate());
    read_topic(log, &group, topic)
        .await
        .iter()
        .map(|r| serde_json::from_slice::<Value>(&r.payload).expect("a JSON record"))
        .collect()
}

/// Every record of `topic` from `group`'s committed position on (the beginning for a new
/// group), until a poll finds nothing more.
pub async fn read_topic(log: &log::Log, group: &str, topic: &'static str) -> Vec<log::Record> {
    let group = log::Group::new(group).expect("group name");
    let topic = log::Topic::from_static(topic);
    let mut consumer = log.consumer_of_all(&group, &topic).await.expect("consumer");
    consumer
        .read_to_end(Duration::from_millis(300))
        .await
        .expect("poll")
}

/// Drives one session through the whole pipeline: opens it, sends `probes` as batch 1 (with
/// `user_agent` as the HTTP user agent, when given), asks for the handoff, waits (5 s at most)
/// until the stored session, in the shape `POST /v1/handoffs/open` answers with, satisfies
/// `done`, then opens the handoff (a handoff opens once). Returns the session (to make further
/// calls on it) and the open's answer.
pub async fn score_session(
    s: &TestServer,
    probes: &Value,
    user_agent: Option<&str>,
    done: impl Fn(&Value) -> bool,
) -> (CollectSession, Value) {
    let pk = &s.creds.keys.publishable_test;
    let session = open_session(s, pk).await;
    let sid = session.id.clone();
    // A server just started may answer a retryable 503 until its log's topics are prepared;
    // a client retries that, as the SDK does.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut batch = s
            .post(&format!("/v1/collect/sessions/{sid}/batches"))
            .key(pk);
        if let Some(ua) = user_agent {
            batch = batch.header("user-agent", ua);
        }
        let answer = batch.json(session.batch(1, probes)).send().await;
        if answer.status == 503 && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        }
        answer.ok(202);
        break;
    }
    let handoff = session.results(s, pk).send().await.ok(200)["handoff"].clone();
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
            let opened = open_handoff(s, &handoff).await.ok(200).clone();
            assert!(
                done(&opened),
                "the handoff opens to what was stored: {opened}"
            );
            return (session, opened);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the session {sid} did not reach the awaited state within 5 s; last stored: {last}");
}

/// A final snapshot decision with `verdict`, as the processor stores it
/// (`schemas::decision::Decision`), for sessions written straight to the store.
pub fn stored_decision(verdict: schemas::decision::Verdict) -> store::RawJson {
    use schemas::decision::{
        AutomationStatus, Category, Decision, DecisionStatus, Phase, ScoreBreakdown,
    };
    Decision {
        automation_status: AutomationStatus::Uncertain,
        decision_status: DecisionStatus::Final,
        evaluated_at: schemas::time::now(),
        evaluation_duration_ms: 0.5,
        event_id: schemas::DecisionId::generate(),
        highlights: Vec::new(),
        is_provisional: false,
        manipulation: None,
        phase: Phase::Snapshot,
        risk_score: 50,
        rule: "test".into(),
        score_breakdown: ScoreBreakdown {
            categories: Category::ALL.iter().map(|&c| (c, 0)).collect(),
            extra: Default::default(),
        },
        signals_fired: Vec::new(),
        verdict,
        extra: Default::default(),
    }
    .to_raw()
    .expect("a decision encodes")
}

/// The session `sid`'s detail (`GET /v1/sessions/{sid}` with the test secret key) once its
/// decision is final (after its `results`); not found until the processor stores it.
pub async fn final_detail(s: &TestServer, sid: &str) -> Value {
    for _ in 0..400 {
        let detail = s
            .get(&format!("/v1/sessions/{sid}"))
            .key(&s.creds.keys.secret_test)
            .send()
            .await;
        if detail.status != 404 {
            let detail = detail.ok(200).clone();
            if detail["decision"]["decision_status"] == "final" {
                return detail;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("session {sid} was not decided within 10 s");
}

/// The slugs of a session detail's `signals_fired`.
pub fn fired_in(detail: &Value) -> Vec<&str> {
    detail["signals_fired"]
        .as_array()
        .expect("signals_fired")
        .iter()
        .map(|s| s["signal"].as_str().expect("a slug"))
        .collect()
}
