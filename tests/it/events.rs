//! Events of the scoring pipeline (docs/architecture.md#events), through the real interface: a
//! session driven over HTTP is linked and finalised by the processor, which records
//! `session.fingerprint.calculated` and `session.result.persisted` per organization (in the store,
//! in the interface's event shape) and publishes them to `events.v1`. Also idle finalisation
//! (docs/architecture.md#decisions): a session that stops sending batches gets a final decision
//! after `--session-idle`.

use std::time::Duration;

use schemas::credential::Environment;
use serde_json::Value;
use store::EventRecord;
use vigil_tests::collect::{CollectSession, logged_events, open_session};
use vigil_tests::{TestServer, json};

fn probes() -> Value {
    json!({
        "kind": "probes",
        "automation": {"webdriver": true, "languages": []},
        "rendering": {"webgl_vendor": "Google Inc. (Google)", "webgl_renderer": "ANGLE (Google, SwiftShader driver)"}
    })
}

/// The organization's test-environment events once there are at least `n` (5 s at most).
async fn recorded_events(s: &TestServer, n: usize) -> Vec<EventRecord> {
    let org = s.creds.org_id().parse().unwrap();
    for _ in 0..200 {
        let events = s
            .store()
            .list_events(org, Environment::Test, None, 50)
            .await
            .unwrap();
        if events.len() >= n {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("fewer than {n} events recorded within 5 s");
}

/// Opens a session, sends `probes` as batch 1, and asks for the handoff; returns the session.
async fn probed_and_finished(s: &TestServer) -> (CollectSession, String) {
    let pk = &s.creds.keys.publishable_test;
    let session = open_session(s, pk).await;
    let sid = session.id.clone();
    s.post(&format!("/v1/collect/sessions/{sid}/batches"))
        .key(pk)
        .json(session.batch(1, &probes()))
        .send()
        .await
        .ok(202);
    session.results(s, pk).send().await.ok(200);
    (session, sid)
}

/// The session as `GET /v1/sessions/{id}` shows it, once `done` holds of it (`within` at most).
async fn session_when(
    s: &TestServer,
    sid: &str,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let mut last = Value::Null;
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        let r = s
            .get(&format!("/v1/sessions/{sid}"))
            .key(&s.creds.keys.secret_test)
            .send()
            .await;
        if r.status == 200 {
            last = r.body["data"].clone();
            if done(&last) {
                return last;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{sid} did not reach the awaited state within {within:?}; last: {last}");
}

fn decision_of(session: &Value) -> &Value {
    &session["decision"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linking_and_the_final_result_are_recorded_once_and_published() {
    let mut s = TestServer::start().await;
    let (session, sid) = probed_and_finished(&s).await;
    let read = session_when(&s, &sid, Duration::from_secs(5), |r| {
        decision_of(r)["decision_status"] == "final" && r["visitor_fingerprint"]["id"].is_string()
    })
    .await;
    let vid = read["visitor_fingerprint"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let final_decision = decision_of(&read)["event_id"].clone();

    let events = recorded_events(&s, 2).await;
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types,
        ["session.result.persisted", "session.fingerprint.calculated"],
        "newest first"
    );
    for e in &events {
        assert_eq!(e.subject.kind, "session");
        assert_eq!(e.subject.id, sid);
        assert_eq!(e.organization_id.to_string(), s.creds.org_id());
        assert_eq!(e.environment, Environment::Test);
    }
    let (result, fingerprint) = (&events[0], &events[1]);
    assert_eq!(fingerprint.data["visitor_id"], vid.as_str());
    assert_eq!(fingerprint.data["session_id"], sid.as_str());
    assert_eq!(fingerprint.data["linked_by"], "new_visitor");
    assert_eq!(fingerprint.data["seen_count"], 1);
    assert_eq!(result.data["visitor_id"], vid.as_str());
    assert_eq!(result.data["decision"]["decision_status"], "final");
    assert_eq!(result.data["decision"]["verdict"], "bot");
    // The first final decision: `results` may be folded in with batch 1 or after it, and each
    // fold stores a decision, so the event names one of the session's final decisions.
    let history = s
        .store()
        .list_decisions(
            s.creds.org_id().parse().unwrap(),
            Environment::Test,
            sid.parse().unwrap(),
            10,
        )
        .await
        .unwrap();
    let named = history
        .iter()
        .find(|d| d.decision.to_value()["event_id"] == result.data["decision"]["event_id"])
        .unwrap_or_else(|| panic!("the event names no decision of {sid}: {result:?}"));
    assert_eq!(named.decision.to_value()["decision_status"], "final");

    // The same two on the events log, in the interface's event shape.
    let logged = logged_events(&s).await;
    assert_eq!(logged.len(), 2, "{logged:?}");
    for record in &logged {
        assert_eq!(record["schema"], 1);
        assert_eq!(record["organization_id"], s.creds.org_id());
        assert_eq!(record["environment"], "test");
        let event = &record["event"];
        let id = event["id"].as_str().unwrap();
        assert!(
            id.len() == 37
                && id.starts_with("wevt_")
                && id[5..]
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{id}"
        );
        let stored = events
            .iter()
            .find(|e| e.id.to_string() == id)
            .unwrap_or_else(|| panic!("logged event {id} is not recorded"));
        assert_eq!(event["object"], "event");
        assert_eq!(event["type"], stored.event_type.as_str());
        assert_eq!(event["subject"], json!({"type": "session", "id": sid}));
        assert_eq!(event["data"], stored.data);
        assert_eq!(event["webhook_deliveries"], json!([]));
        assert_eq!(
            event["created_at"],
            schemas::time::format(&stored.created_at)
        );
    }

    // A batch after the final decision is decided again; the result was persisted once.
    let interactions = json!({"kind": "interactions", "events": [
        {"type": "pointermove", "t": 10.0, "x": 5, "y": 5, "trusted": true}
    ]});
    s.post(&format!("/v1/collect/sessions/{sid}/batches"))
        .key(&s.creds.keys.publishable_test)
        .json(session.batch(2, &interactions))
        .send()
        .await
        .ok(202);
    session_when(&s, &sid, Duration::from_secs(5), |r| {
        decision_of(r)["event_id"] != final_decision
    })
    .await;
    let org = s.creds.org_id().parse().unwrap();
    let again = s
        .store()
        .list_events(org, Environment::Test, None, 50)
        .await
        .unwrap();
    assert_eq!(
        again, events,
        "no second result event for a decided session"
    );
    assert_eq!(logged_events(&s).await.len(), 2);

    s.restart().await;
    let after = recorded_events(&s, 2).await;
    assert_eq!(after, events, "events survive a restart, each once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_is_finalised_after_the_idle_time() {
    let s = TestServer::start_with(|a| a.session_idle = Duration::from_millis(1500)).await;
    let pk = &s.creds.keys.publishable_test;
    let session = open_session(&s, pk).await;
    let sid = session.id.clone();
    s.post(&format!("/v1/collect/sessions/{sid}/batches"))
        .key(pk)
        .json(session.batch(1, &probes()))
        .send()
        .await
        .ok(202);
    // No `results` call: the first decision is preliminary, and only idleness makes it final.
    let first = session_when(&s, &sid, Duration::from_secs(5), |r| {
        decision_of(r).is_object()
    })
    .await;
    assert_eq!(decision_of(&first)["decision_status"], "preliminary");
    let finalised = session_when(&s, &sid, Duration::from_secs(10), |r| {
        decision_of(r)["decision_status"] == "final"
    })
    .await;
    let decision = decision_of(&finalised);
    assert_eq!(decision["phase"], "final");
    assert_eq!(decision["is_provisional"], false);
    let events = recorded_events(&s, 2).await;
    assert_eq!(
        events[0].event_type.as_str(),
        "session.result.persisted",
        "{events:?}"
    );
    assert_eq!(
        events[0].data["decision"]["event_id"], decision["event_id"],
        "nothing was folded in after idleness made it final"
    );
}
