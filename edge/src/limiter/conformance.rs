//! The limiter port's conformance suite: the same bodies run against every [`LimiterBackend`]
//! (the embedded table and a real Redis), so both admit, refuse and refill identically. Run on
//! the backend itself, not on [`Limiter`](super::Limiter): the policy's fall-back to the
//! embedded table would hide a shared backend that does not answer.
//!
//! A backend's test file invokes [`limiter_conformance_suite!`](crate::limiter_conformance_suite)
//! with an expression that makes a fresh backend.

use std::time::Duration;

use super::LimiterBackend;

/// A bucket name no other case or run shares.
fn bucket(name: &str) -> String {
    format!("conformance:{name}:{}", ulid::Ulid::generate())
}

async fn check(l: &dyn LimiterBackend, bucket: &str, limit: u32) -> super::RateDecision {
    l.check(bucket, limit, super::WINDOW)
        .await
        .unwrap_or_else(|e| panic!("the {} backend answers: {e}", l.name()))
}

pub async fn admits_exactly_the_limit_then_refuses(l: &dyn LimiterBackend) {
    let b = bucket("exact");
    for i in 0..5u32 {
        let d = check(l, &b, 5).await;
        assert!(d.allowed, "request {i}");
        assert_eq!(d.limit, 5);
        assert_eq!(d.remaining, 4 - i);
        assert_eq!(d.retry_after_secs, 0);
    }
    let d = check(l, &b, 5).await;
    assert!(!d.allowed);
    assert_eq!(d.remaining, 0);
    // Interval 12 s; the refused request counted one more.
    assert_eq!(d.retry_after_secs, 24);
}

pub async fn buckets_are_independent(l: &dyn LimiterBackend) {
    let (a, b) = (bucket("a"), bucket("b"));
    for _ in 0..2 {
        assert!(check(l, &a, 2).await.allowed);
    }
    assert!(!check(l, &a, 2).await.allowed);
    assert!(check(l, &b, 2).await.allowed);
}

pub async fn refills_over_the_window(l: &dyn LimiterBackend) {
    // 6000 per minute: one token every 10 ms.
    let b = bucket("refill");
    let mut refused = false;
    // Refills continue while the loop runs (a Redis round trip takes ~100 µs), so allow slack.
    for _ in 0..20_000 {
        if !check(l, &b, 6000).await.allowed {
            refused = true;
            break;
        }
    }
    assert!(refused, "the bucket empties");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let d = check(l, &b, 6000).await;
    assert!(d.allowed, "tokens came back");
    assert!(
        d.remaining >= 50,
        "about 100 tokens in 1.2 s, minus the refusal's: {}",
        d.remaining
    );
}

pub async fn refused_requests_extend_the_cool_down(l: &dyn LimiterBackend) {
    let b = bucket("extend");
    for _ in 0..10 {
        assert!(check(l, &b, 10).await.allowed);
    }
    // Interval 6 s: the first refusal waits two intervals, each further refusal one more.
    let first = check(l, &b, 10).await.retry_after_secs;
    let second = check(l, &b, 10).await.retry_after_secs;
    assert_eq!(first, 12);
    assert_eq!(second, 18);
    // Capped: a flood locks a key out for at most a window and an interval.
    let mut last = 0;
    for _ in 0..50 {
        last = check(l, &b, 10).await.retry_after_secs;
    }
    assert_eq!(last, 66);
}

/// A quota over a longer window (Gate's signups per 15 minutes): its limit, then a wait that
/// is the window's share of one request, not a minute's.
pub async fn a_longer_window_spreads_the_same_limit(l: &dyn LimiterBackend) {
    let b = bucket("quota");
    let window = Duration::from_secs(15 * 60);
    for _ in 0..3 {
        let d = l.check(&b, 3, window).await.unwrap();
        assert!(d.allowed);
    }
    let refused = l.check(&b, 3, window).await.unwrap();
    assert!(!refused.allowed, "the quota is spent");
    // One request's share of 15 minutes is 5 minutes; refused, it waits two shares.
    assert_eq!(refused.retry_after_secs, 600, "{refused:?}");
}

/// One `#[tokio::test]` per case, each on a backend `$make` returns.
#[macro_export]
macro_rules! limiter_conformance_suite {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[::tokio::test]
            async fn admits_exactly_the_limit_then_refuses() {
                $crate::limiter::conformance::admits_exactly_the_limit_then_refuses(&$make).await;
            }

            #[::tokio::test]
            async fn buckets_are_independent() {
                $crate::limiter::conformance::buckets_are_independent(&$make).await;
            }

            #[::tokio::test]
            async fn refills_over_the_window() {
                $crate::limiter::conformance::refills_over_the_window(&$make).await;
            }

            #[::tokio::test]
            async fn a_longer_window_spreads_the_same_limit() {
                $crate::limiter::conformance::a_longer_window_spreads_the_same_limit(&$make).await;
            }

            #[::tokio::test]
            async fn refused_requests_extend_the_cool_down() {
                $crate::limiter::conformance::refused_requests_extend_the_cool_down(&$make).await;
            }
        }
    };
}
