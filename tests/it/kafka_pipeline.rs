//! The whole scoring pipeline on the Kafka log backend (`--log kafka://…`), against librdkafka's
//! mock cluster (the Kafka protocol over loopback TCP; see
//! docs/testing.md#real-clients-and-servers): batches go in over HTTP, ingest produces them to
//! `collect.batches.v1`, the processor's consumer group reads them, stores the decision and
//! publishes the session's events to `events.v1`.

use std::time::Duration;

use log::Topic;
use log::kafka::mock::MockKafka;
use schemas::credential::Environment;
use serde_json::Value;
use vigil_tests::collect::score_session;
use vigil_tests::{TestServer, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_scored_and_its_events_published_through_kafka() {
    let cluster = MockKafka::start(1).expect("the mock cluster starts");
    vigil_tests::create_kafka_topics(&cluster);
    let url = cluster.url();
    let mut s = TestServer::start_with(move |a| a.log = url.clone()).await;

    let probes = json!({
        "kind": "probes",
        "automation": {"webdriver": true, "languages": []},
        "rendering": {"webgl_vendor": "Google Inc. (Google)", "webgl_renderer": "ANGLE (Google, SwiftShader driver)"}
    });
    let (session, answer) = score_session(&s, &probes, None, |a| {
        a["decision"]["decision_status"] == "final" && a["visitor_id"].is_string()
    })
    .await;
    assert_eq!(answer["decision"]["verdict"], "bot", "{answer}");
    assert!(
        answer["decision"]["highlights"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["evidence"]["signal"] == "webdriver"),
        "{answer}"
    );

    let org = s.creds.org_id().parse().unwrap();
    let mut recorded = Vec::new();
    for _ in 0..100 {
        recorded = s
            .store()
            .list_events(org, Environment::Test, None, 10)
            .await
            .unwrap();
        if recorded.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(recorded.len(), 2, "{recorded:?}");
    // A new consumer group on Kafka takes a moment to join and fetch: read until both arrive.
    let log = &s.running.as_ref().unwrap().log;
    let group = log::Group::new(&format!("test-{}", ulid::Ulid::generate())).unwrap();
    let mut consumer = log
        .consumer_of_all(&group, &Topic::from_static(schemas::events::EVENTS_TOPIC))
        .await
        .unwrap();
    let mut recorded_ids: Vec<String> = recorded.iter().map(|e| e.id.to_string()).collect();
    recorded_ids.sort_unstable();
    let mut logged: Vec<Value> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let mut logged_ids: Vec<&str> = logged
            .iter()
            .map(|r| r["event"]["id"].as_str().unwrap())
            .collect();
        logged_ids.sort_unstable();
        logged_ids.dedup();
        if logged_ids == recorded_ids {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "events.v1 holds {logged_ids:?}, the store {recorded_ids:?}"
        );
        for record in consumer
            .poll(100, Duration::from_millis(200))
            .await
            .unwrap()
        {
            logged.push(serde_json::from_slice(&record.payload).unwrap());
        }
    }
    assert!(
        logged
            .iter()
            .all(|r| r["event"]["subject"]["id"] == session.id.as_str())
    );
    s.stop().await;
    drop(cluster);
}
