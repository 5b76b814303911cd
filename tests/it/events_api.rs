//! `GET /v1/organizations/{organizationId}/events` through the real interface
//! (docs/architecture.md: #scopes, #lists, #environments, #events): newest first across pages,
//! per environment of the key, filtered by type and by endpoint, with the interface's errors; read
//! with Node's `fetch`, Python's `requests` and curl as customer backends call it; and a real
//! session's events as the processor records them.

use std::time::Duration;

use schemas::credential::Environment;
use schemas::events::{EventSubject, EventType};
use serde_json::Value;
use store::{EventRecord, RawJson, SessionRecord};
use vigil_tests::collect::open_session;
use vigil_tests::{TestServer, json, run_client};

fn session(org: schemas::ids::OrgId, env: Environment) -> SessionRecord {
    let now = schemas::time::now();
    SessionRecord {
        id: schemas::SessionId::generate(),
        organization_id: org,
        environment: env,
        visitor_id: None,
        opened_at: now,
        updated_at: now,
        page_url: "https://shop.example/".into(),
        ip: "203.0.113.7".into(),
        user_agent: "events/1.0".into(),
        processed_through: 1,
        processed_seqs: Vec::new(),
        state: RawJson::null(),
        latest_decision: None,
        finalized: true,
    }
}

/// Stores `n` events of `env` for one session, alternating the two session event types, a
/// millisecond apart so their order is known; returns their ids, oldest first.
async fn seed(s: &TestServer, env: Environment, n: usize) -> Vec<String> {
    let org: schemas::ids::OrgId = s.creds.org_id().parse().unwrap();
    let session = session(org, env);
    let mut events = Vec::new();
    for i in 0..n {
        let event_type = if i % 2 == 0 {
            EventType::SessionFingerprintCalculated
        } else {
            EventType::SessionResultPersisted
        };
        events.push(EventRecord {
            id: schemas::EventId::generate(),
            organization_id: org,
            environment: env,
            event_type,
            subject: EventSubject {
                kind: "session".into(),
                id: session.id.to_string(),
            },
            data: json!({"n": i}),
            created_at: schemas::time::now(),
        });
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    s.store()
        .save_session(&session, None, &events)
        .await
        .unwrap();
    events.iter().map(|e| e.id.to_string()).collect()
}

fn ids(rows: &[Value]) -> Vec<String> {
    rows.iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

fn events_path(s: &TestServer) -> String {
    format!("{}/events", s.org_path())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_list_newest_first_across_pages_per_environment() {
    let s = TestServer::start().await;
    let test_ids = seed(&s, Environment::Test, 125).await;
    let live_ids = seed(&s, Environment::Live, 3).await;
    let path = format!("{}?limit=50", events_path(&s));

    let pages = s.pages(&s.creds.keys.secret_test, &path).await;
    assert_eq!(
        pages.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![50, 50, 25]
    );
    let listed: Vec<String> = pages.iter().flat_map(|p| ids(p)).collect();
    let newest_first: Vec<String> = test_ids.iter().rev().cloned().collect();
    assert_eq!(
        listed, newest_first,
        "newest first, each once, test events only"
    );

    let first = &pages[0][0];
    assert_eq!(first["object"], "event");
    assert_eq!(first["type"], "session.fingerprint.calculated");
    assert_eq!(first["subject"]["type"], "session");
    assert_eq!(first["data"], json!({"n": 124}));
    assert_eq!(first["webhook_deliveries"], json!([]));
    assert!(first["created_at"].as_str().unwrap().ends_with('Z'));

    let live = s.pages(&s.creds.keys.secret_live, &path).await;
    assert_eq!(
        live.concat().len(),
        3,
        "a live key reads the live events only"
    );
    assert_eq!(
        ids(&live.concat()),
        live_ids.into_iter().rev().collect::<Vec<_>>()
    );

    // Exactly `limit` rows left: the last full page says there are no more.
    let exact = s
        .get(&format!("{}?limit=125", events_path(&s)))
        .key(&s.creds.keys.secret_test)
        .send()
        .await;
    assert_eq!(exact.ok(200).as_array().unwrap().len(), 125);
    assert_eq!(exact.body["pagination"]["has_more"], false);
    assert!(exact.body["pagination"]["next_cursor"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_filter_by_type_and_endpoint() {
    let s = TestServer::start().await;
    let test_ids = seed(&s, Environment::Test, 30).await;
    let sk = &s.creds.keys.secret_test;
    let path = format!(
        "{}?type=session.fingerprint.calculated&limit=4",
        events_path(&s)
    );
    let pages = s.pages(sk, &path).await;
    let listed: Vec<Value> = pages.concat();
    assert_eq!(pages[0].len(), 4, "a filtered page is full until the last");
    assert!(
        listed
            .iter()
            .all(|e| e["type"] == "session.fingerprint.calculated")
    );
    let expected: Vec<String> = test_ids.iter().step_by(2).rev().cloned().collect();
    assert_eq!(ids(&listed), expected);

    // A type nobody emitted yet lists nothing.
    let none = s
        .get(&format!("{}?type=webhook.test", events_path(&s)))
        .key(sk)
        .send()
        .await;
    assert_eq!(none.ok(200), &json!([]));
    assert_eq!(none.body["pagination"]["has_more"], false);

    // No delivery was made to an endpoint nobody has.
    let nobody = format!("we_{}", "0123456789abcdef".repeat(2));
    let by_nobody = s
        .get(&format!("{}?endpoint_id={nobody}", events_path(&s)))
        .key(sk)
        .send()
        .await;
    assert_eq!(by_nobody.ok(200), &json!([]));

    // Deliveries the store has are listed with their events, and filter them by endpoint.
    let org: schemas::ids::OrgId = s.creds.org_id().parse().unwrap();
    let endpoint = schemas::ids::WebhookEndpointId::generate();
    let now = schemas::time::now();
    let delivered: Vec<store::WebhookDeliveryRecord> = [0usize, 3]
        .iter()
        .map(|&i| store::WebhookDeliveryRecord {
            status: store::DeliveryStatus::Succeeded,
            attempts: 2,
            response_status: Some(204),
            response_body: Some(String::new()),
            next_attempt_at: None,
            ..store::WebhookDeliveryRecord::pending(
                org,
                Environment::Test,
                (
                    test_ids[i].parse().unwrap(),
                    EventType::SessionResultPersisted,
                ),
                endpoint,
                now,
            )
        })
        .collect();
    s.store()
        .create_webhook_deliveries(&delivered)
        .await
        .unwrap();
    let by_endpoint = s
        .get(&format!("{}?endpoint_id={endpoint}", events_path(&s)))
        .key(sk)
        .send()
        .await;
    let rows = by_endpoint.ok(200).as_array().unwrap().clone();
    assert_eq!(ids(&rows), vec![test_ids[3].clone(), test_ids[0].clone()]);
    let d = &rows[0]["webhook_deliveries"][0];
    assert_eq!(d["object"], "webhook_delivery");
    assert_eq!(d["id"], delivered[1].id.to_string());
    assert_eq!(d["endpoint_id"], endpoint.to_string());
    assert_eq!(d["event_id"], test_ids[3]);
    assert_eq!(d["status"], "succeeded");
    assert_eq!(d["attempts"], 2);
    assert_eq!(d["response_status"], 204);
    // A delivery that succeeded has no error: left out, never null.
    assert!(d.get("error").is_none(), "{d}");
    assert!(d["created_at"].as_str().unwrap().ends_with('Z'));
    // The other environment's key sees none of it.
    let live = s
        .get(&format!("{}?endpoint_id={endpoint}", events_path(&s)))
        .key(&s.creds.keys.secret_live)
        .send()
        .await;
    assert_eq!(live.ok(200), &json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_list_refuses_bad_queries_other_organizations_and_missing_scopes() {
    let s = TestServer::start().await;
    seed(&s, Environment::Test, 2).await;
    let sk = &s.creds.keys.secret_test;
    let get = |query: &str| {
        s.get(&format!("{}?{query}", events_path(&s)))
            .key(sk)
            .send()
    };

    let r = get("type=session.created").await;
    let e = r.err(422, "request.validation_failed");
    assert_eq!(e["details"]["fields"][0]["name"], "type", "{e}");
    assert_eq!(e["details"]["allowed_values"], json!(EventType::ALL), "{e}");
    for bad in [
        "endpoint_id=we_123",
        "endpoint_id=we_0123456789ABCDEF0123456789abcdef",
        "endpoint_id=wh_0123456789abcdef0123456789abcdef",
    ] {
        let r = get(bad).await;
        let e = r.err(422, "request.validation_failed");
        assert_eq!(
            e["details"]["fields"][0]["name"], "endpoint_id",
            "{bad}: {e}"
        );
    }
    for bad in ["limit=0", "limit=201", "limit=ten"] {
        get(bad).await.err(422, "request.validation_failed");
    }
    get("cursor=not-a-cursor")
        .await
        .err(422, "request.validation_failed");
    get("sort=oldest")
        .await
        .err(422, "request.validation_failed");

    // Another organization's events are not even found.
    let other = s.second_organization("events-elsewhere").await;
    s.get(&format!("/v1/organizations/{}/events", other.org_id()))
        .key(sk)
        .send()
        .await
        .err(404, "resource.not_found");

    // The events list needs `organizations:read`.
    let narrow = s
        .create_key(
            &s.creds.keys.secret_live,
            json!({"name": "sessions only", "environment": "test", "scopes": ["sessions:list"]}),
        )
        .await;
    let narrow = narrow["revealed_key"].as_str().unwrap();
    s.get(&events_path(&s))
        .key(narrow)
        .send()
        .await
        .err(403, "auth.insufficient_scope");
    // A publishable key never reaches it.
    s.get(&events_path(&s))
        .key(&s.creds.keys.publishable_test)
        .send()
        .await
        .err(403, "auth.credential_type_not_allowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn customer_backends_read_a_real_sessions_events() {
    let s = TestServer::start().await;
    let pk = &s.creds.keys.publishable_test;
    let session = open_session(&s, pk).await;
    let probes = json!({
        "kind": "probes",
        "automation": {"webdriver": true, "languages": []},
        "rendering": {"webgl_vendor": "Google Inc. (Google)", "webgl_renderer": "ANGLE (Google, SwiftShader driver)"}
    });
    s.post(&format!("/v1/collect/sessions/{}/batches", session.id))
        .key(pk)
        .json(session.batch(1, &probes))
        .send()
        .await
        .ok(202);
    session.results(&s, pk).send().await.ok(200);

    let url = format!(
        "{}{}?type=session.result.persisted",
        s.base,
        events_path(&s)
    );
    let sk = s.creds.keys.secret_test.clone();
    // The processor records the final result shortly after the handoff.
    let mut listed = Value::Null;
    for _ in 0..200 {
        let r = s
            .get(&format!(
                "{}?type=session.result.persisted",
                events_path(&s)
            ))
            .key(&sk)
            .send()
            .await;
        listed = r.ok(200).clone();
        if listed.as_array().is_some_and(|a| !a.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let event = &listed[0];
    assert_eq!(
        event["subject"],
        json!({"type": "session", "id": session.id})
    );
    let id = event["id"].as_str().unwrap().to_owned();

    // Node's fetch, Python's requests and curl, as customer backends call it.
    let node = r#"
        const [url, key] = process.argv.slice(1);
        fetch(url, { headers: { authorization: `Bearer ${key}` } })
          .then(async (r) => { const b = await r.json(); console.log(r.status, b.data[0].id, b.data[0].type); })
          .catch((e) => { console.error(e); process.exit(1); });
    "#;
    let expected = format!("200 {id} session.result.persisted");
    assert_eq!(run_client("node", &["-e", node, &url, &sk]), expected);
    let python = r#"
import sys, requests
url, key = sys.argv[1:]
r = requests.get(url, headers={"Authorization": "Bearer " + key})
e = r.json()["data"][0]
print(r.status_code, e["id"], e["type"])
"#;
    assert_eq!(run_client("python3", &["-c", python, &url, &sk]), expected);
    let auth = format!("authorization: Bearer {sk}");
    let body = run_client("curl", &["-s", "-H", &auth, &url]);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["data"][0]["id"], id.as_str());
    assert_eq!(s.metric("vigil_secret_keys_exposed_total").await, 0.0);
}
