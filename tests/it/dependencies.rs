//! Absent or failing dependencies, over HTTP: a server started while Kafka is unreachable
//! serves at once (`/healthz` 200, `/readyz` 503 naming the bus, collect batches a retryable
//! 503) and recovers by itself when the broker appears; a broker that goes down mid-stream
//! loses no acknowledged batch; a batch past the producer's full queue is refused with a 503 at
//! once, not queued. The broker is librdkafka's mock cluster
//! (docs/testing.md#real-clients-and-servers). (Redis failing open is `limits.rs`'s.)

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use log::kafka::mock::MockKafka;
use schemas::credential::Environment;
use vigil_tests::collect::{CollectSession, open_session};
use vigil_tests::{Resp, TestServer, json};

fn probes() -> serde_json::Value {
    json!({"kind": "probes", "automation": {"webdriver": false}})
}

/// A loopback port nothing listens on (bound, then released).
fn closed_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// Forwards connections on `at` to `to`: the mock cluster binds ephemeral ports, so the
/// server's bootstrap address is this forwarder, opened once the "broker appears". (The
/// cluster's metadata then names its brokers' own ports, which the clients use directly.)
async fn forward(at: SocketAddr, to: String) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::TcpListener::bind(at).await.unwrap();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let to = to.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    })
}

async fn send_batch(s: &TestServer, session: &CollectSession, seq: u64) -> Resp {
    s.post(&format!("/v1/collect/sessions/{}/batches", session.id))
        .key(&s.creds.keys.publishable_test)
        .json(session.batch(seq, &probes()))
        .send()
        .await
}

/// Waits until every session in `ids` has a stored decision.
async fn all_decided(s: &TestServer, ids: &[String], within: Duration) {
    let org = s.creds.org_id().parse().unwrap();
    let deadline = Instant::now() + within;
    for id in ids {
        loop {
            let stored = s
                .store()
                .get_session(org, Environment::Test, id.parse().unwrap())
                .await
                .unwrap();
            if stored.is_some_and(|r| r.latest_decision.is_some()) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the acknowledged batch of session {id} reached no decision"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_started_without_kafka_serves_at_once_and_recovers_when_it_appears() {
    let port = closed_port();
    let started = Instant::now();
    let mut s = TestServer::start_with(move |a| a.log = format!("kafka://{port}")).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "start-up waited for the broker"
    );
    assert_eq!(s.get("/healthz").send().await.status, 200);
    let ready = s.get("/readyz").send().await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert_eq!(ready.body["status"], "unavailable");
    assert_eq!(ready.body["store"], "ok", "{}", ready.body);
    assert_ne!(ready.body["log"], "ok", "{}", ready.body);
    assert!(ready.header("retry-after").is_some());
    // What needs only the store works; a batch, which needs the log, is a retryable 503.
    s.get(&s.org_path())
        .key(&s.creds.keys.secret_live)
        .send()
        .await
        .ok(200);
    let session = open_session(&s, &s.creds.keys.publishable_test).await;
    let asked = Instant::now();
    let refused = send_batch(&s, &session, 1).await;
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "the refusal waited on the broker"
    );
    let e = refused.err(503, "service.unavailable");
    assert_eq!(e["retryable"], true);
    assert!(refused.header("retry-after").is_some());

    // The broker appears at the address the server was given.
    let cluster = MockKafka::start(1).expect("the mock cluster starts");
    vigil_tests::create_kafka_topics(&cluster);
    let forwarder = forward(port, cluster.bootstrap_servers().to_owned()).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = s.get("/readyz").send().await;
        if ready.status == 200 {
            assert_eq!(ready.body["log"], "ok");
            break;
        }
        assert!(Instant::now() < deadline, "never ready: {}", ready.body);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The SDK retries its refused batch, which is now acknowledged and scored.
    send_batch(&s, &session, 1).await.ok(202);
    all_decided(
        &s,
        std::slice::from_ref(&session.id),
        Duration::from_secs(30),
    )
    .await;
    s.stop().await;
    forwarder.abort();
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_going_down_mid_stream_loses_no_acknowledged_batch() {
    let cluster = MockKafka::start(1).expect("the mock cluster starts");
    vigil_tests::create_kafka_topics(&cluster);
    let url = cluster.url();
    let mut s = TestServer::start_with(move |a| a.log = url.clone()).await;
    let pk = s.creds.keys.publishable_test.clone();
    let mut acknowledged = Vec::new();
    // While the broker is down an append waits for it (up to the producer's timeout) or is
    // refused with a retryable 503; the client here gives up after 1.5 s. Only a 202 counts as
    // acknowledged (an append the client gave up on may still land; that is fine).
    let attempt = async |acknowledged: &mut Vec<String>| {
        let session = open_session(&s, &pk).await;
        let answer =
            tokio::time::timeout(Duration::from_millis(1500), send_batch(&s, &session, 1)).await;
        match answer {
            Ok(r) if r.status == 202 => acknowledged.push(session.id.clone()),
            Ok(r) => {
                r.err(503, "service.unavailable");
            }
            Err(_) => {}
        }
    };
    for _ in 0..4 {
        attempt(&mut acknowledged).await;
    }
    assert_eq!(acknowledged.len(), 4, "the broker was up");
    cluster.broker_down(-1).unwrap();
    for _ in 0..4 {
        attempt(&mut acknowledged).await;
    }
    cluster.broker_up(-1).unwrap();
    let before = acknowledged.len();
    let deadline = Instant::now() + Duration::from_secs(60);
    while acknowledged.len() < before + 4 {
        assert!(
            Instant::now() < deadline,
            "batches are not acknowledged again"
        );
        attempt(&mut acknowledged).await;
    }
    all_decided(&s, &acknowledged, Duration::from_secs(60)).await;
    s.stop().await;
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_past_a_full_producer_queue_is_refused_at_once_and_the_queued_one_lands() {
    let cluster = MockKafka::start(1).expect("the mock cluster starts");
    vigil_tests::create_kafka_topics(&cluster);
    // A queue of one append, so one batch waiting for a broker that is down fills it.
    let url = format!("{}?queue.buffering.max.messages=1", cluster.url());
    let mut s = TestServer::start_with(move |a| a.log = url.clone()).await;
    let pk = s.creds.keys.publishable_test.clone();
    let (queued, shed) = (open_session(&s, &pk).await, open_session(&s, &pk).await);

    cluster.broker_down(-1).unwrap();
    let (landed, (refused, took)) = tokio::join!(send_batch(&s, &queued, 1), async {
        // The first batch is in the producer's queue by now, waiting for the broker.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let asked = Instant::now();
        let refused = send_batch(&s, &shed, 1).await;
        let took = asked.elapsed();
        cluster.broker_up(-1).unwrap();
        (refused, took)
    });
    let error = refused.err(503, "service.unavailable");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("no more records"),
        "load shed, not an outage: {error}"
    );
    assert_eq!(refused.header("retry-after").as_deref(), Some("1"));
    assert!(took < Duration::from_secs(1), "refused at once: {took:?}");
    landed.ok(202);
    // The refused batch is not half-taken: sent again, it is accepted as new. (The queue of
    // one may still hold the processor's record of the first batch's event a moment longer.)
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let again = send_batch(&s, &shed, 1).await;
        if again.status != 503 || Instant::now() > deadline {
            again.ok(202);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    all_decided(
        &s,
        &[queued.id.clone(), shed.id.clone()],
        Duration::from_secs(60),
    )
    .await;
    s.stop().await;
    drop(cluster);
}
