//! Webhook deliveries end to end (docs/architecture.md: #webhooks, #dispatcher): endpoints
//! registered through the API, events made by the test call and by real scored sessions, delivered
//! by the dispatcher role of a running server to a throwaway receiver (`vigil_tests::receiver`),
//! which checks headers and bodies and verifies signatures with its own HMAC and with the Node
//! snippet of docs/webhooks.md. Retries on 500s and timeouts with a compressed schedule,
//! `Retry-After`, a 410 that disables the endpoint, a spent schedule, redirects not followed, the
//! outbound address rule at delivery time, and a slow endpoint that does not hold up another.
//! Deliveries are read back through the events API.

use std::time::{Duration, Instant};

use serde_json::Value;
use store::{EndpointStatus, WebhookEndpointRecord};
use vigil_tests::collect::score_session;
use vigil_tests::receiver::{Answer, Received, Receiver, docs_snippet_verifies, verify};
use vigil_tests::{TestServer, json};

/// A server that delivers to the receiver's loopback address, with `schedule` between
/// attempts and a one-second attempt timeout.
async fn server(schedule: &'static str) -> TestServer {
    TestServer::start_with(move |a| {
        a.allow_private_webhooks = true;
        a.webhook_retry_schedule = dispatcher::attempts::RetrySchedule::parse(schedule).unwrap();
        a.webhook_timeout = Duration::from_secs(1);
    })
    .await
}

fn endpoints(s: &TestServer) -> String {
    format!("{}/webhooks/endpoints", s.org_path())
}

/// Registers an endpoint at `url` with the test secret key; its id and signing secret.
async fn register(s: &TestServer, url: &str, types: &[&str]) -> (String, String) {
    let made = s
        .post(&endpoints(s))
        .key(&s.creds.keys.secret_test)
        .json(json!({"name": "receiver", "url": url, "event_types": types}))
        .send()
        .await;
    let made = made.ok(201);
    (
        made["id"].as_str().unwrap().to_owned(),
        made["signing_secret"].as_str().unwrap().to_owned(),
    )
}

/// Sends the endpoint a test event; the event's id.
async fn test_event(s: &TestServer, endpoint: &str) -> String {
    let made = s
        .post(&format!("{}/{endpoint}/test", endpoints(s)))
        .key(&s.creds.keys.secret_test)
        .send()
        .await;
    made.ok(201)["id"].as_str().unwrap().to_owned()
}

/// The event `event` as the events API lists it, once its delivery to `endpoint` satisfies
/// `done` (10 s at most).
async fn delivery_of(
    s: &TestServer,
    event: &str,
    endpoint: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let path = format!("{}/events?limit=200", s.org_path());
    let mut last = Value::Null;
    for _ in 0..400 {
        let listed = s.get(&path).key(&s.creds.keys.secret_test).send().await;
        let listed = listed.ok(200);
        if let Some(e) = listed.as_array().unwrap().iter().find(|e| e["id"] == event) {
            last = e.clone();
            if let Some(d) = e["webhook_deliveries"]
                .as_array()
                .unwrap()
                .iter()
                .find(|d| d["endpoint_id"] == endpoint)
                && done(d)
            {
                return d.clone();
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the delivery of {event} to {endpoint} did not reach the awaited state; last: {last}");
}

/// A probes batch that scores as automated (enough for a final result).
fn webdriver_probes() -> Value {
    json!({"kind": "probes", "automation": {"webdriver": true}})
}

/// What every delivery carries: the Standard Webhooks headers, signed by `secret` (checked by
/// the receiver's HMAC and the snippet of docs/webhooks.md; a changed body fails both), and the event.
fn check_signed(secret: &str, received: &Received, event: &str) {
    assert_eq!(received.header("content-type"), "application/json");
    assert_eq!(
        received.header("webhook-id"),
        event,
        "webhook-id is the event id"
    );
    let timestamp: i64 = received.header("webhook-timestamp").parse().unwrap();
    assert!(
        (schemas::time::now().timestamp() - timestamp).abs() < 30,
        "webhook-timestamp is when it was signed: {timestamp}"
    );
    assert!(verify(secret, received), "the receiver's HMAC verifies it");
    assert!(docs_snippet_verifies(secret, received, &received.body));
    let mut tampered = received.body.to_vec();
    tampered.extend_from_slice(b" ");
    assert!(!docs_snippet_verifies(secret, received, &tampered));
    let body = received.json();
    assert_eq!(body["id"], event);
    assert_eq!(body["object"], "event");
    assert!(body.get("webhook_deliveries").is_none(), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_event_and_a_session_result_arrive_signed_and_read_back() {
    let s = server("1s").await;
    let receiver = Receiver::start().await;
    let url = format!("{}/hooks/orders", receiver.base);
    let (endpoint, secret) = register(&s, &url, &["session.result.persisted"]).await;

    let test = test_event(&s, &endpoint).await;
    let got = receiver.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(got[0].path, "/hooks/orders");
    check_signed(&secret, &got[0], &test);
    let body = got[0].json();
    assert_eq!(body["type"], "webhook.test");
    assert_eq!(body["data"]["endpoint_id"], endpoint.as_str());
    assert_eq!(
        body["subject"],
        json!({"type": "webhook_endpoint", "id": endpoint})
    );
    let delivery = delivery_of(&s, &test, &endpoint, |d| d["status"] == "succeeded").await;
    assert_eq!(delivery["object"], "webhook_delivery");
    assert!(delivery["id"].as_str().unwrap().starts_with("wdlv_"));
    assert_eq!(delivery["event_id"], test.as_str());
    assert_eq!(delivery["event_type"], "webhook.test");
    assert_eq!(delivery["attempts"], 1);
    assert_eq!(delivery["response_status"], 204);

    // A real session's final result, scored through the collect API and the processor.
    let (session, _) = score_session(&s, &webdriver_probes(), None, |v| {
        v["decision"]["decision_status"] == "final"
    })
    .await;
    let got = receiver.wait_for(2, Duration::from_secs(10)).await;
    let result = got[1].json();
    assert_eq!(result["type"], "session.result.persisted");
    assert_eq!(result["data"]["session_id"], session.id.as_str());
    assert_eq!(result["data"]["decision"]["decision_status"], "final");
    let event = result["id"].as_str().unwrap().to_owned();
    check_signed(&secret, &got[1], &event);
    delivery_of(&s, &event, &endpoint, |d| d["status"] == "succeeded").await;

    // The endpoint filter keeps the events delivered to it; another endpoint has none.
    let (other, _) = register(&s, &url, &["gate.session.approved"]).await;
    let path = |id: &str| format!("{}/events?endpoint_id={id}", s.org_path());
    let mine = s
        .get(&path(&endpoint))
        .key(&s.creds.keys.secret_test)
        .send()
        .await;
    let ids: Vec<&str> = mine
        .ok(200)
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![event.as_str(), test.as_str()]);
    let theirs = s
        .get(&path(&other))
        .key(&s.creds.keys.secret_test)
        .send()
        .await;
    assert_eq!(theirs.ok(200), &json!([]));
    // A subscriber to neither type got nothing, and nothing came twice.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.received().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotating_secret_signs_with_both() {
    let s = server("1s").await;
    let receiver = Receiver::start().await;
    let (endpoint, old) = register(&s, &receiver.base, &["webhook.test"]).await;
    let rotated = s
        .post(&format!("{}/{endpoint}/rotations", endpoints(&s)))
        .key(&s.creds.keys.secret_test)
        .send()
        .await;
    let new = rotated.ok(200)["signing_secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let event = test_event(&s, &endpoint).await;
    let got = receiver.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(got[0].header("webhook-signature").split(' ').count(), 2);
    check_signed(&new, &got[0], &event);
    check_signed(&old, &got[0], &event);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_and_timeouts_are_retried_with_the_same_webhook_id() {
    let s = server("1s,1s,1s").await;
    let receiver = Receiver::start().await;
    receiver.then(Answer::status(500));
    // Longer than the one-second attempt timeout: no answer.
    receiver.then(Answer::status(200).after(Duration::from_secs(3)));
    receiver.answer(Answer::status(200));
    let (endpoint, secret) = register(&s, &receiver.base, &["webhook.test"]).await;
    let event = test_event(&s, &endpoint).await;
    let got = receiver.wait_for(3, Duration::from_secs(15)).await;
    for r in &got {
        check_signed(&secret, r, &event);
    }
    for pair in got.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= Duration::from_millis(900),
            "a retry waits the schedule's 1 s: {gap:?}"
        );
    }
    let delivery = delivery_of(&s, &event, &endpoint, |d| d["status"] == "succeeded").await;
    assert_eq!(delivery["attempts"], 3);
    assert_eq!(delivery["response_status"], 200);
    assert_eq!(delivery["response_body"], "received");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(receiver.received().len(), 3, "nothing after the success");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured_and_a_spent_schedule_fails() {
    let s = server("1s").await;
    let receiver = Receiver::start().await;
    receiver.then(Answer::status(503).header("retry-after", "3"));
    let (endpoint, _) = register(&s, &receiver.base, &["webhook.test"]).await;
    let event = test_event(&s, &endpoint).await;
    let got = receiver.wait_for(2, Duration::from_secs(15)).await;
    let gap = got[1].at - got[0].at;
    assert!(
        gap >= Duration::from_millis(2_900),
        "Retry-After: 3 waited for: {gap:?}"
    );
    delivery_of(&s, &event, &endpoint, |d| d["status"] == "succeeded").await;

    // Two failures spend a one-wait schedule: the delivery fails, with the last answer kept.
    receiver.answer(Answer::status(500));
    let event = test_event(&s, &endpoint).await;
    let failed = delivery_of(&s, &event, &endpoint, |d| d["status"] == "failed").await;
    assert_eq!(failed["attempts"], 2);
    assert_eq!(failed["response_status"], 500);
    assert_eq!(failed["error"], "HTTP 500");
    assert_eq!(receiver.received().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_disables_the_endpoint_and_it_receives_nothing_more() {
    let s = server("1s").await;
    let receiver = Receiver::start().await;
    receiver.answer(Answer::status(410));
    let (endpoint, _) = register(
        &s,
        &receiver.base,
        &["webhook.test", "session.result.persisted"],
    )
    .await;
    let event = test_event(&s, &endpoint).await;
    let failed = delivery_of(&s, &event, &endpoint, |d| d["status"] == "failed").await;
    assert_eq!(
        (
            failed["attempts"].clone(),
            failed["response_status"].clone()
        ),
        (json!(1), json!(410))
    );
    let read = s
        .get(&format!("{}/{endpoint}", endpoints(&s)))
        .key(&s.creds.keys.secret_test)
        .send()
        .await;
    assert_eq!(read.ok(200)["status"], "disabled");

    // A session result it subscribes to creates no delivery and sends nothing.
    receiver.answer(Answer::status(204));
    score_session(&s, &webdriver_probes(), None, |v| {
        v["decision"]["decision_status"] == "final"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.received().len(), 1);
    let events = s
        .get(&format!("{}/events?endpoint_id={endpoint}", s.org_path()))
        .key(&s.creds.keys.secret_test)
        .send()
        .await;
    let listed = events.ok(200).clone();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["id"], event.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_not_followed() {
    let s = server("").await;
    let receiver = Receiver::start().await;
    let elsewhere = Receiver::start().await;
    receiver.answer(Answer::status(307).header("location", format!("{}/moved", elsewhere.base)));
    let (endpoint, _) = register(&s, &receiver.base, &["webhook.test"]).await;
    let event = test_event(&s, &endpoint).await;
    let failed = delivery_of(&s, &event, &endpoint, |d| d["status"] == "failed").await;
    assert_eq!(failed["response_status"], 307);
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("redirects are not followed"),
        "{failed}"
    );
    assert_eq!(receiver.received().len(), 1);
    assert!(
        elsewhere.received().is_empty(),
        "the redirect's target got nothing"
    );
}

/// Without `--allow-private-webhooks`, loopback URLs are refused at creation, and at delivery
/// too: an endpoint whose name now resolves to loopback (as if its DNS changed after it was
/// created; written to the store here, since the API refuses it) gets nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_destinations_are_refused_at_creation_and_at_delivery() {
    let s = TestServer::start_with(|a| {
        a.webhook_retry_schedule = dispatcher::attempts::RetrySchedule::parse("").unwrap();
    })
    .await;
    let receiver = Receiver::start().await;
    let port = receiver.base.rsplit(':').next().unwrap().to_owned();
    let by_name = format!("https://localhost:{port}/hooks");
    let by_address = format!("https://127.0.0.1:{port}/hooks");
    for url in [&by_name, &by_address, &receiver.base] {
        let refused = s
            .post(&endpoints(&s))
            .key(&s.creds.keys.secret_test)
            .json(json!({"name": "inside", "url": url, "event_types": ["webhook.test"]}))
            .send()
            .await;
        refused.err(422, "request.validation_failed");
    }

    let org: schemas::OrgId = s.creds.org_id().parse().unwrap();
    let secret = &s.running.as_ref().unwrap().secret;
    let now = schemas::time::now();
    let mut planted = Vec::new();
    for url in [&by_name, &by_address] {
        let id = schemas::ids::WebhookEndpointId::generate();
        let endpoint = WebhookEndpointRecord {
            id,
            organization_id: org,
            environment: schemas::credential::Environment::Test,
            name: "moved".into(),
            url: url.clone(),
            status: EndpointStatus::Active,
            event_types: vec![schemas::events::EventType::WebhookTest],
            sealed_secret: secret.seal(
                b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                &WebhookEndpointRecord::secret_context(org, id),
            ),
            previous_secret: None,
            created_at: now,
            updated_at: now,
        };
        let caps = store::EndpointCaps {
            active: admin_api::webhook_endpoints::MAX_ACTIVE_ENDPOINTS,
            total: admin_api::webhook_endpoints::MAX_ENDPOINTS,
        };
        let written = s.store().create_webhook_endpoint(&endpoint, caps).await;
        assert_eq!(written.unwrap(), store::EndpointWrite::Written);
        planted.push(id.to_string());
    }
    for (endpoint, by_name) in planted.iter().zip([true, false]) {
        let event = test_event(&s, endpoint).await;
        let failed = delivery_of(&s, &event, endpoint, |d| d["status"] == "failed").await;
        let error = failed["error"].as_str().unwrap();
        assert!(error.contains("loopback"), "{error}");
        // What a name resolves to is the operator's to know, not the tenant's.
        if by_name {
            assert!(
                !error.contains("127.0.0.1") && !error.contains("::1"),
                "{error}"
            );
        }
        assert_eq!(failed["response_status"], Value::Null);
    }
    assert!(
        receiver.received().is_empty(),
        "nothing reached the loopback receiver"
    );
}

/// One endpoint that answers slowly holds its own turns and its own places in memory only:
/// with more of its deliveries due than it may queue (the rest are put off in the store),
/// another endpoint's deliveries of the same moment arrive at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_endpoint_does_not_delay_another() {
    let s = TestServer::start_with(|a| {
        a.allow_private_webhooks = true;
        a.webhook_timeout = Duration::from_secs(10);
    })
    .await;
    let slow = Receiver::start().await;
    slow.answer(Answer::status(204).after(Duration::from_secs(5)));
    let fast = Receiver::start().await;
    let (slow_id, _) = register(&s, &slow.base, &["webhook.test"]).await;
    let (fast_id, _) = register(&s, &fast.base, &["webhook.test"]).await;
    s.unlimit(&s.creds.keys.secret_test).await;
    for _ in 0..dispatcher::scheduling::ENDPOINT_QUEUE + 50 {
        test_event(&s, &slow_id).await;
    }
    let n = 40;
    let started = Instant::now();
    for _ in 0..n {
        test_event(&s, &fast_id).await;
    }
    fast.wait_for(n, Duration::from_secs(3)).await;
    let took = started.elapsed();
    let slow_at_once = slow.most_at_once();
    println!(
        "{n} deliveries to the fast endpoint in {took:?}; the slow one answered at most {slow_at_once} at once"
    );
    assert!(
        slow_at_once <= dispatcher::scheduling::PER_ENDPOINT,
        "the slow endpoint has at most its own turns in flight: {slow_at_once}"
    );
    // Its deliveries past its queue were put off by the due scan, not held in memory.
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.metric("vigil_dispatcher_deferred_total").await < 1.0 {
        assert!(Instant::now() < deadline, "nothing was put off");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
