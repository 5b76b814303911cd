//! TLS to Kafka is built in (docs/operations.md#connecting-to-managed-engines): librdkafka
//! reports ssl and SASL PLAIN and SCRAM among its built-in features, a log with
//! `security.protocol=ssl` or `sasl_ssl` is made (a build without OpenSSL refuses the property
//! at once: "OpenSSL not available at build time"), and one pointed at the test broker, which
//! speaks plaintext, is not ready, its handshake failing, rather than falling back.

use rdkafka::ClientConfig;

#[test]
fn librdkafka_is_built_with_tls_and_sasl() {
    let native = ClientConfig::new()
        .create_native_config()
        .expect("a librdkafka configuration");
    let features = native.get("builtin.features").expect("builtin.features");
    for needed in ["ssl", "sasl_plain", "sasl_scram"] {
        assert!(
            features.split(',').any(|f| f == needed),
            "librdkafka lacks {needed}: {features}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_log_against_a_plaintext_broker_is_not_ready() {
    let cluster = log::kafka::mock::MockKafka::start(1).expect("the mock cluster starts");
    for properties in [
        "security.protocol=ssl",
        "security.protocol=sasl_ssl&sasl.mechanism=SCRAM-SHA-256&sasl.username=u&sasl.password=p",
    ] {
        let url = format!("{}?{properties}", cluster.url());
        let log = log::open(&url)
            .await
            .unwrap_or_else(|e| panic!("{properties}: TLS is built in, so the log is made: {e}"));
        // librdkafka retries the handshake until its own request timeout (about ten seconds
        // here, more on a loaded machine); a minute bounds a ping that would never answer.
        let ready = tokio::time::timeout(std::time::Duration::from_secs(60), log.ping())
            .await
            .expect("ping answers within a minute");
        assert!(
            ready.is_err(),
            "{properties}: a plaintext broker is no TLS peer"
        );
    }
}
