//! The dispatcher never misreads nor silently passes over a record of `events.v1` it cannot
//! read: one of a newer schema than its build's, one of an event type it does not know, and one
//! that is not an event at all each land on `events.dead.v1` byte for byte with their reason
//! and are counted in `vigil_dispatcher_dead_letters_total{reason}`, while the event behind them
//! is still delivered. (The processor's equivalent for `collect.batches.v1`: `dead_letters.rs`.)

use std::time::Duration;

use schemas::credential::Environment;
use schemas::events::{
    EVENTS_DEAD_TOPIC, EVENTS_TOPIC, Event, EventDeadLetter, EventDeadReason, EventSubject,
    EventType, LOGGED_EVENT_SCHEMA, LoggedEvent,
};
use vigil_tests::collect::logged;
use vigil_tests::receiver::Receiver;
use vigil_tests::{TestServer, json};

/// Waits (10 s at most) for `n` dead letters of events and returns them.
async fn dead_letters(s: &TestServer, n: usize) -> Vec<EventDeadLetter> {
    for _ in 0..100 {
        let letters = logged(s, EVENTS_DEAD_TOPIC).await;
        if letters.len() >= n {
            assert_eq!(letters.len(), n, "one dead letter per poison record");
            return letters
                .into_iter()
                .map(|l| serde_json::from_value(l).expect("a dead letter"))
                .collect();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("fewer than {n} dead letters of events within 10 s");
}

async fn dead_count(s: &TestServer, reason: EventDeadReason) -> f64 {
    s.metric(&format!(
        "vigil_dispatcher_dead_letters_total{{reason=\"{}\"}}",
        reason.as_str()
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_the_dispatcher_cannot_read_are_dead_lettered_and_the_next_is_delivered() {
    let s = TestServer::start_with(|a| a.allow_private_webhooks = true).await;
    let receiver = Receiver::start().await;
    let endpoints = format!("{}/webhooks/endpoints", s.org_path());
    let made = s
        .post(&endpoints)
        .key(&s.creds.keys.secret_test)
        .json(json!({"name": "receiver", "url": receiver.base, "event_types": ["webhook.test"]}))
        .send()
        .await;
    let made = made.ok(201);
    let endpoint = made["id"].as_str().unwrap().to_owned();

    // Three poison records in the organization's partition, ahead of the event that follows.
    let org = s.creds.org_id().to_owned();
    let log = s.running.as_ref().unwrap().log.clone();
    let events = log::Topic::from_static(EVENTS_TOPIC);
    // From a newer build, of a type this build knows and for an endpoint that subscribed to
    // it: misread, it would be delivered.
    let mut newer = LoggedEvent::new(
        org.parse().unwrap(),
        Environment::Test,
        Event {
            id: schemas::EventId::generate(),
            object: "event".into(),
            event_type: EventType::WebhookTest,
            subject: EventSubject {
                kind: "webhook_endpoint".into(),
                id: endpoint.clone(),
            },
            data: json!({"endpoint_id": endpoint}),
            webhook_deliveries: Vec::new(),
            created_at: schemas::time::now(),
        },
    );
    newer.schema = LOGGED_EVENT_SCHEMA + 1;
    let newer = serde_json::to_vec(&newer).unwrap();
    let mut unknown: serde_json::Value = serde_json::from_slice(&newer).unwrap();
    unknown["schema"] = json!(LOGGED_EVENT_SCHEMA);
    unknown["event"]["type"] = json!("visitor.merged");
    let unknown = serde_json::to_vec(&unknown).unwrap();
    let garbage: &[u8] = b"\xff\x00 not an event";
    for payload in [&newer[..], &unknown, garbage] {
        log.append(&events, org.as_bytes(), payload).await.unwrap();
    }

    // The organization's next event is delivered, and it alone.
    let tested = s
        .post(&format!("{endpoints}/{endpoint}/test"))
        .key(&s.creds.keys.secret_test)
        .send()
        .await;
    let tested = tested.ok(201);
    let got = receiver.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(got[0].header("webhook-id"), tested["id"].as_str().unwrap());

    let letters = dead_letters(&s, 3).await;
    let reasons: Vec<_> = letters.iter().map(|l| l.reason).collect();
    assert_eq!(
        reasons,
        [
            EventDeadReason::NewerSchema,
            EventDeadReason::UnknownEventType,
            EventDeadReason::UnreadableRecord
        ]
    );
    let carried: Vec<Vec<u8>> = letters.iter().map(|l| l.payload().unwrap()).collect();
    assert_eq!(
        carried,
        [newer, unknown, garbage.to_vec()],
        "kept byte for byte"
    );
    assert!(letters.iter().all(|l| l.topic == EVENTS_TOPIC));
    assert!(
        letters[0].message.contains("newer than this build's"),
        "{}",
        letters[0].message
    );
    assert!(
        letters[1].message.contains("visitor.merged"),
        "{}",
        letters[1].message
    );
    for reason in EventDeadReason::ALL {
        assert_eq!(dead_count(&s, reason).await, 1.0, "{}", reason.as_str());
    }
    // Nothing else reached the receiver: the newer event was set aside, not misread.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.received().len(), 1);
}
