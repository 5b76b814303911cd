//! Collect calls are bound to their session (schemas/collect.md section 1.1,
//! docs/architecture.md#collect-transport): a ping, a network check and `results` act on a session
//! only with a `Vigil-Session-Proof` made with that session's key for that very call and an unspent
//! counter. Without one, with another session's, altered, made for another call or replayed, the
//! call is refused with `collect.session_proof_invalid` and writes nothing: no ping arrival, no log
//! record, no handoff, no finalisation, no counter spent.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::Value;
use vigil_tests::collect::{CollectSession, logged_batches, open_handoff, open_session};
use vigil_tests::{Resp, TestServer, json};

const HEADER: &str = "vigil-session-proof";

fn probes() -> Value {
    json!({"kind": "probes", "automation": {"webdriver": false}})
}

/// `proof` with one bit of its MAC flipped.
fn tampered(proof: &str) -> String {
    let (counter, mac) = proof.split_once('.').expect("<counter>.<mac>");
    let mut mac = B64.decode(mac).expect("base64url");
    mac[7] ^= 0x10;
    format!("{counter}.{}", B64.encode(mac))
}

#[track_caller]
fn refused(r: &Resp) {
    let e = r.err(401, "collect.session_proof_invalid");
    assert_eq!(e["details"]["header_name"], "Vigil-Session-Proof");
    assert_eq!(e["retryable"], false);
}

/// The session as the store keeps it.
async fn stored(s: &TestServer, session: &CollectSession) -> store::CollectSessionRecord {
    s.store()
        .get_collect_session(session.id.parse().unwrap())
        .await
        .unwrap()
        .expect("the session exists")
}

/// The server-made records of `kind` the log holds for `session`.
async fn logged_kind(s: &TestServer, session: &CollectSession, kind: &str) -> usize {
    logged_batches(s)
        .await
        .iter()
        .filter(|r| r["session_id"] == session.id.as_str() && r["observations"]["kind"] == kind)
        .count()
}

#[tokio::test]
async fn results_needs_the_sessions_own_proof_and_a_refusal_writes_nothing() {
    let s = TestServer::start().await;
    let pk = &s.creds.keys.publishable_test;
    let a = open_session(&s, pk).await;
    let b = open_session(&s, pk).await;
    s.post(&format!("/v1/collect/sessions/{}/batches", a.id))
        .key(pk)
        .json(a.batch(1, &probes()))
        .send()
        .await
        .ok(202);
    let path = a.results_path();
    let post = || s.post(&path).key(pk);

    // No proof: a publishable key and the session id are not enough. A page on another origin
    // can read why (a 401, unlike a 403, names the origin).
    let r = post().header("origin", "https://shop.example").send().await;
    refused(&r);
    assert_eq!(
        r.header("access-control-allow-origin").as_deref(),
        Some("https://shop.example")
    );
    // Another session's proof, made for this very call.
    refused(&post().header(HEADER, &b.proof("POST", &path)).send().await);
    // This session's proof for another session's results.
    refused(
        &post()
            .header(HEADER, &a.proof("POST", &b.results_path()))
            .send()
            .await,
    );
    // This session's proof for another call (the network check).
    refused(
        &post()
            .header(HEADER, &a.proof("POST", "/v1/collect/network-checks"))
            .send()
            .await,
    );
    // Altered, or not a proof at all.
    refused(
        &post()
            .header(HEADER, &tampered(&a.proof_with(1, "POST", &path)))
            .send()
            .await,
    );
    for junk in ["", "1", "1.", "01.AAAA", "x.y", "1.!!"] {
        refused(&post().header(HEADER, junk).send().await);
    }

    // Nothing was written: not finalised, no handoff record, no counter spent.
    let before = stored(&s, &a).await;
    assert_eq!(
        before.results_at, None,
        "a refused call finalised the session"
    );
    assert_eq!(before.last_call, 0, "a refused call spent a counter");
    assert_eq!(logged_kind(&s, &a, "results").await, 0);
    assert_eq!(
        logged_batches(&s).await.len(),
        1,
        "only the probes batch is in the log"
    );

    // The session's own proof works, even with a counter above ones never used.
    let proof = a.proof_with(5, "POST", &path);
    let minted = post().header(HEADER, &proof).send().await;
    let opened = open_handoff(&s, &minted.ok(200)["handoff"]).await;
    assert_eq!(opened.ok(200)["session_id"], a.id.as_str());
    let after = stored(&s, &a).await;
    assert!(after.results_at.is_some());
    assert_eq!(after.last_call, 5);
    assert_eq!(logged_kind(&s, &a, "results").await, 1);

    // A proof is spent once: replayed, or with a counter not above the last, it is refused and
    // mints nothing.
    refused(&post().header(HEADER, &proof).send().await);
    refused(
        &post()
            .header(HEADER, &a.proof_with(4, "POST", &path))
            .send()
            .await,
    );
    assert_eq!(logged_kind(&s, &a, "results").await, 1);
    post()
        .header(HEADER, &a.proof_with(6, "POST", &path))
        .send()
        .await
        .ok(200);
    assert_eq!(logged_kind(&s, &a, "results").await, 2);

    // The other session was never touched.
    let other = stored(&s, &b).await;
    assert_eq!((other.results_at, other.last_call), (None, 0));
}

#[tokio::test]
async fn pings_need_the_sessions_own_proof_and_a_refusal_records_no_arrival() {
    let s = TestServer::start().await;
    let pk = &s.creds.keys.publishable_test;
    let a = open_session(&s, pk).await;
    let b = open_session(&s, pk).await;
    let ping = a.pings[0].clone();
    let path = format!("/v1/collect/pings/{ping}");
    let get = || s.get(&path).key(pk);

    refused(&get().send().await);
    refused(&get().header(HEADER, &b.proof("GET", &path)).send().await);
    refused(
        &get()
            .header(HEADER, &tampered(&a.proof_with(1, "GET", &path)))
            .send()
            .await,
    );
    // A proof of another of the session's pings, or of the same path as a POST.
    let other_ping = format!("/v1/collect/pings/{}", a.pings[1]);
    refused(
        &get()
            .header(HEADER, &a.proof("GET", &other_ping))
            .send()
            .await,
    );
    refused(&get().header(HEADER, &a.proof("POST", &path)).send().await);
    // Session B's ping with A's proof of it.
    let b_ping = format!("/v1/collect/pings/{}", b.pings[0]);
    refused(
        &s.get(&b_ping)
            .key(pk)
            .header(HEADER, &a.proof("GET", &b_ping))
            .send()
            .await,
    );
    let before = stored(&s, &a).await;
    assert!(
        before.pings.iter().all(|p| p.arrived_at.is_none()),
        "a refused ping was recorded: {:?}",
        before.pings
    );
    assert_eq!(before.last_call, 0);
    assert!(stored(&s, &b).await.pings[0].arrived_at.is_none());

    // Proven, it is recorded; its proof replayed is refused.
    let proof = a.proof_with(1, "GET", &path);
    assert_eq!(
        get().header(HEADER, &proof).send().await.ok(200)["id"],
        ping.as_str()
    );
    let after = stored(&s, &a).await;
    assert!(after.pings[0].arrived_at.is_some());
    assert_eq!(after.last_call, 1);
    refused(&get().header(HEADER, &proof).send().await);
    assert_eq!(stored(&s, &a).await, after, "a replay changed the session");
}

#[tokio::test]
async fn network_checks_need_the_sessions_own_proof_and_a_refusal_logs_nothing() {
    let s = TestServer::start().await;
    let pk = &s.creds.keys.publishable_test;
    let a = open_session(&s, pk).await;
    let b = open_session(&s, pk).await;
    let path = "/v1/collect/network-checks";
    let post = || s.post(path).key(pk).json(json!({"session_id": a.id}));

    refused(&post().send().await);
    refused(&post().header(HEADER, &b.proof("POST", path)).send().await);
    refused(
        &post()
            .header(HEADER, &tampered(&a.proof_with(1, "POST", path)))
            .send()
            .await,
    );
    refused(
        &post()
            .header(HEADER, &a.proof("POST", &a.results_path()))
            .send()
            .await,
    );
    // B's own valid proof does not check A either: the session named in the body is the one
    // that must be proven.
    let b_proof = b.proof("POST", path);
    refused(&post().header(HEADER, &b_proof).send().await);
    assert_eq!(logged_kind(&s, &a, "network_check").await, 0);
    assert!(
        logged_batches(&s).await.is_empty(),
        "a refused check logged"
    );
    assert_eq!(stored(&s, &a).await.last_call, 0);

    let proof = a.proof_with(1, "POST", path);
    assert_eq!(
        post().header(HEADER, &proof).send().await.ok(200)["session_id"],
        a.id.as_str()
    );
    assert_eq!(logged_kind(&s, &a, "network_check").await, 1);
    refused(&post().header(HEADER, &proof).send().await);
    assert_eq!(
        logged_kind(&s, &a, "network_check").await,
        1,
        "a replayed check logged"
    );
    // B's proof, unused so far, still checks B.
    s.post(path)
        .key(pk)
        .header(HEADER, &b_proof)
        .json(json!({"session_id": b.id}))
        .send()
        .await
        .ok(200);
}

#[tokio::test]
async fn the_sdks_call_sequence_proves_every_call_in_turn() {
    // Pings, the network check and results share one counter, in the order the SDK sends them.
    let s = TestServer::start().await;
    let pk = &s.creds.keys.publishable_test;
    let a = open_session(&s, pk).await;
    for ping in &a.pings {
        a.ping(&s, pk, ping).await.ok(200);
    }
    a.network_check(&s, pk).send().await.ok(200);
    a.results(&s, pk).send().await.ok(200);
    let session = stored(&s, &a).await;
    assert_eq!(session.last_call, 5);
    assert!(session.pings.iter().all(|p| p.arrived_at.is_some()));
}
