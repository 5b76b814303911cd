//! Backpressure on Kafka (librdkafka's mock cluster): once the producer holds as many appends
//! as its queue takes, the next client append (`try_append`) is refused at once as busy, a
//! retryable error, rather than queued behind them, while an internal append waits for room;
//! the appends already queued still land once the brokers are back.

#![cfg(feature = "kafka")]

use std::time::{Duration, Instant};

use log::kafka::mock::MockKafka;
use log::{LogError, Topic};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_producer_queue_refuses_the_next_append_at_once() {
    let cluster = MockKafka::start(1).expect("the mock cluster starts");
    let topic = Topic::new("collect.batches").unwrap();
    cluster.create_topic(&topic, 1).unwrap();
    // A queue of two, overriding the default of thousands, so two appends fill it.
    let url = format!("{}?queue.buffering.max.messages=2", cluster.url());
    let log = log::open(&url).await.unwrap();
    log.append(&topic, b"warm", b"the brokers are up")
        .await
        .unwrap();

    cluster.broker_down(-1).unwrap();
    let waiting: Vec<_> = (0..2)
        .map(|n| {
            let (log, topic) = (log.clone(), topic.clone());
            tokio::spawn(async move {
                log.append(&topic, b"k", format!("queued {n}").as_bytes())
                    .await
            })
        })
        .collect();
    // Both are in librdkafka's queue once their futures have run to the first await.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        waiting.iter().all(|t| !t.is_finished()),
        "the two wait for the broker"
    );

    let asked = Instant::now();
    let refused = log.try_append(&topic, b"k", b"one too many").await;
    match refused {
        Err(e @ LogError::Busy(_)) => assert!(e.is_transient(), "busy is retryable"),
        other => panic!("a full queue took another append: {other:?}"),
    }
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "refused at once, not after waiting for room: {:?}",
        asked.elapsed()
    );

    // An internal append waits for room instead, and lands once the broker is back.
    let patient = {
        let (log, topic) = (log.clone(), topic.clone());
        tokio::spawn(async move { log.append(&topic, b"k", b"internal").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!patient.is_finished(), "an internal append waits for room");

    cluster.broker_up(-1).unwrap();
    for t in waiting.into_iter().chain([patient]) {
        let landed = tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("the queued appends land once the broker is back")
            .unwrap();
        assert!(landed.is_ok(), "{landed:?}");
    }
    // With room again, appends are taken.
    log.append(&topic, b"k", b"after").await.unwrap();
}
