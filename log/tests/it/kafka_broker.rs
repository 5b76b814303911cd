//! The log on a real Apache Kafka broker, which the test command starts (`scripts/engines.sh`)
//! and names in `VIGIL_TEST_KAFKA_URL`, `VIGIL_TEST_KAFKA_TLS_URL` and
//! `VIGIL_TEST_KAFKA_SCRAM_URL`: the conformance suite on its plaintext listener, and the TLS
//! and SASL/SCRAM settings of docs/operations.md#connecting-to-managed-engines on the others.
//! librdkafka's mock cluster stays for the quick cases of `conformance.rs`; this is the broker
//! the design runs on. Without the broker these tests fail; they never pass by skipping.

#![cfg(feature = "kafka")]

use std::time::Duration;

use log::Log;

/// A broker URL the test command set.
fn url(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run the tests with scripts/test.sh, which starts a Kafka broker")
    })
}

/// With a short group session, as in the mock cluster's suite, so a member that left is
/// noticed in seconds rather than librdkafka's default 45 s.
fn with_group_timing(url: &str) -> String {
    let joiner = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joiner}session.timeout.ms=6000&heartbeat.interval.ms=500")
}

async fn open(url: &str) -> Log {
    log::open(&with_group_timing(url))
        .await
        .unwrap_or_else(|e| panic!("open the log on the broker: {e}"))
}

/// A namespace of its own (docs/operations.md#kafka), as every test on the run's one broker
/// takes, so that the suite also proves names are kept apart.
fn namespaced(url: &str) -> String {
    let joiner = if url.contains('?') { '&' } else { '?' };
    let ns = format!("test-{}", std::process::id());
    format!("{url}{joiner}namespace={ns}")
}

/// Each case on the one broker of the run, in a namespace; the suite names its topics and
/// groups afresh.
async fn broker_log() -> (Log, ()) {
    (open(&namespaced(&url("VIGIL_TEST_KAFKA_URL"))).await, ())
}

log::log_conformance_suite!(broker_log());

/// Whether the log answers within a minute: librdkafka retries a failing handshake until its
/// own request timeout, so a refusal takes seconds, and a minute bounds one that never comes.
async fn ready(log: &Log) -> bool {
    tokio::time::timeout(Duration::from_secs(60), log.ping())
        .await
        .expect("a ping answers within a minute")
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_round_trip_over_tls_and_over_sasl_scram() {
    for var in ["VIGIL_TEST_KAFKA_TLS_URL", "VIGIL_TEST_KAFKA_SCRAM_URL"] {
        let log = open(&url(var)).await;
        assert!(ready(&log).await, "{var}: the broker answers");
        log::conformance::records_round_trip_in_order_per_key(log.clone()).await;
        log::conformance::commit_and_resume(log).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_or_an_unknown_ca_is_refused_and_tls_never_falls_back() {
    let scram = url("VIGIL_TEST_KAFKA_SCRAM_URL");
    let tls = url("VIGIL_TEST_KAFKA_TLS_URL");
    let (user_info, hosts) = scram
        .strip_prefix("kafka://")
        .and_then(|rest| rest.split_once('@'))
        .expect("the SCRAM URL has user-info");
    let (user, _) = user_info.split_once(':').expect("user:password");
    let wrong_password = format!("kafka://{user}:not-the-password@{hosts}");
    // The broker's certificate is of the test's own CA, which the machine's roots lack.
    let unknown_ca = tls.split('?').next().unwrap().to_owned() + "?security.protocol=ssl";
    // Plaintext to the TLS listener: a client must not read a handshake as an answer.
    let plaintext_to_tls = tls.split('?').next().unwrap().to_owned();
    for (what, url) in [
        ("a wrong password", wrong_password),
        ("a CA the client does not trust", unknown_ca),
        ("plaintext to a TLS listener", plaintext_to_tls),
    ] {
        let log = log::open(&url)
            .await
            .unwrap_or_else(|e| panic!("{what}: the log is made, and refused on use: {e}"));
        assert!(!ready(&log).await, "{what}: the broker must refuse");
    }
}

/// Two deployments on one cluster, each in its namespace: the same topic and group names are
/// theirs alone, on the broker as in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_keep_deployments_apart_on_one_cluster() {
    let base = url("VIGIL_TEST_KAFKA_URL");
    let run = std::process::id();
    let (a, b) = (
        open(&format!("{base}?namespace=a-{run}")).await,
        open(&format!("{base}?namespace=b-{run}")).await,
    );
    let topic = log::Topic::new("collect.batches.v1").unwrap();
    assert_eq!(a.create_topic(&topic, 2).await.unwrap(), 2);
    assert!(
        matches!(
            b.partitions(&topic).await,
            Err(log::LogError::UnknownTopic(_))
        ),
        "b sees a's topic"
    );
    assert_eq!(b.create_topic(&topic, 3).await.unwrap(), 3);
    a.append(&topic, b"k", b"from a").await.unwrap();
    b.append(&topic, b"k", b"from b").await.unwrap();
    let group = log::Group::new("processor").unwrap();
    for (log, expected) in [(&a, "from a"), (&b, "from b")] {
        let mut consumer = log.member(&group, &topic).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut read = Vec::new();
        while read.is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "{expected} within a minute"
            );
            read = consumer.poll(10, Duration::from_millis(500)).await.unwrap();
        }
        let payloads: Vec<&[u8]> = read.iter().map(|r| r.payload.as_ref()).collect();
        assert_eq!(payloads, [expected.as_bytes()]);
    }
}
