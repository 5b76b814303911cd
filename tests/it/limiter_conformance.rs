//! The limiter port's conformance suite (`edge::limiter::conformance`) on both backends: the
//! embedded table and a real Redis, each wrapped as the server wraps it, and again over TLS
//! (`rediss://`) to a redis-server started here with a certificate from a CA made here. And the
//! port's typed failure: a Redis that does not answer is an `Unavailable` error from the
//! backend, which the policy (`Limiter`) answers from the embedded table instead.

use edge::limiter::{Instrumented, LimiterBackend, LimiterError, LocalLimiter, RedisLimiter};
use vigil_tests::redis_url;

edge::limiter_conformance_suite!(embedded, Instrumented::new(LocalLimiter::default()));
edge::limiter_conformance_suite!(
    redis,
    Instrumented::new(RedisLimiter::new(&redis_url()).unwrap())
);

#[tokio::test]
async fn a_redis_that_does_not_answer_is_an_error_and_the_policy_falls_back() {
    // Nothing listens on the discard port.
    let gone = RedisLimiter::new("redis://127.0.0.1:9").unwrap();
    let started = std::time::Instant::now();
    let answer = LimiterBackend::check(&gone, "conformance:gone", 5, edge::limiter::WINDOW).await;
    assert!(
        matches!(answer, Err(LimiterError::Unavailable(_))),
        "{answer:?}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "a failing Redis answers within its timeout"
    );
    let limiter = edge::limiter::Limiter::from_url("redis://127.0.0.1:9").unwrap();
    let d = limiter.check("conformance:gone", 5).await;
    assert!(d.allowed && d.remaining == 4, "counted in-process: {d:?}");
}

/// A redis-server taking TLS only, its certificate for `localhost` signed by a throwaway CA;
/// stopped when dropped.
struct TlsRedis {
    child: std::process::Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl TlsRedis {
    fn start() -> TlsRedis {
        let dir = tempfile::tempdir().unwrap();
        for (name, pem) in [
            ("ca.pem", vigil_tests::tls::TEST_CA.ca.clone()),
            ("other-ca.pem", vigil_tests::tls::OTHER_CA.ca.clone()),
            ("server.pem", vigil_tests::tls::TEST_CA.server.clone()),
            ("server.key", vigil_tests::tls::TEST_CA.key.clone()),
        ] {
            std::fs::write(dir.path().join(name), pem).unwrap();
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let p = |name: &str| dir.path().join(name).display().to_string();
        let child = std::process::Command::new("redis-server")
            .args(["--port", "0", "--tls-port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args([
                "--tls-cert-file",
                &p("server.pem"),
                "--tls-key-file",
                &p("server.key"),
            ])
            .args([
                "--tls-ca-cert-file",
                &p("ca.pem"),
                "--tls-auth-clients",
                "no",
            ])
            .args(["--dir", &p("")])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (scripts/test.sh installs it)");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server took TLS on {port}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        TlsRedis { child, dir, port }
    }

    fn url(&self, ca: &str) -> String {
        format!(
            "rediss://localhost:{}/?ca={}",
            self.port,
            self.dir.path().join(ca).display()
        )
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_passes_over_rediss_and_another_ca_is_refused() {
    use edge::limiter::conformance as suite;
    let redis = TlsRedis::start();
    let over_tls = Instrumented::new(RedisLimiter::new(&redis.url("ca.pem")).unwrap());
    suite::admits_exactly_the_limit_then_refuses(&over_tls).await;
    suite::buckets_are_independent(&over_tls).await;
    suite::refills_over_the_window(&over_tls).await;
    suite::refused_requests_extend_the_cool_down(&over_tls).await;
    suite::a_longer_window_spreads_the_same_limit(&over_tls).await;
    over_tls.ping().await.expect("a PING over TLS");

    // Another CA: the handshake is refused, and the port says so; nothing goes in plaintext.
    let wrong = RedisLimiter::new(&redis.url("other-ca.pem")).unwrap();
    let answer =
        LimiterBackend::check(&wrong, "conformance:wrong-ca", 5, edge::limiter::WINDOW).await;
    match answer {
        Err(LimiterError::Unavailable(why)) => {
            assert!(why.to_lowercase().contains("certificate"), "{why}");
        }
        other => panic!("a certificate of another CA is refused: {other:?}"),
    }
    // `/readyz` asks with a PING, which is refused the same way.
    match LimiterBackend::ping(&wrong).await {
        Err(LimiterError::Unavailable(why)) => {
            assert!(why.to_lowercase().contains("certificate"), "{why}");
        }
        other => panic!("a PING past a refused handshake: {other:?}"),
    }
    // A CA for a plaintext URL is a configuration error.
    assert!(RedisLimiter::new("redis://localhost:6379/?ca=/x.pem").is_err());
}
