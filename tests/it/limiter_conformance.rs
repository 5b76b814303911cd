//! The limiter port's conformance suite (`edge::limiter::conformance`) on both backends: the
//! embedded table and a real Redis, each wrapped as the server wraps it. And the port's typed
//! failure: a Redis that does not answer is an `Unavailable` error from the backend, which the
//! policy (`Limiter`) answers from the embedded table instead.

use edge::limiter::{Instrumented, LimiterBackend, LimiterError, LocalLimiter, RedisLimiter};
use vigil_tests::redis_url;

edge::limiter_conformance_suite!(embedded, Instrumented(LocalLimiter::default()));
edge::limiter_conformance_suite!(
    redis,
    Instrumented(RedisLimiter::new(&redis_url()).unwrap())
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
