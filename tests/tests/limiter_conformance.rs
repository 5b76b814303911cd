//! The limiter port's conformance suite: the same bodies run against the in-process limiter and
//! a real Redis, so both backends admit, refuse and refill identically.

use std::time::Duration;

use edge::limiter::Limiter;
use vigil_tests::redis_url;

fn bucket(name: &str) -> String {
    format!("conformance:{name}:{}", ulid::Ulid::generate())
}

async fn admits_exactly_the_limit_then_refuses(l: &Limiter) {
    let b = bucket("exact");
    for i in 0..5u32 {
        let d = l.check(&b, 5).await;
        assert!(d.allowed, "request {i}");
        assert_eq!(d.limit, 5);
        assert_eq!(d.remaining, 4 - i);
        assert_eq!(d.retry_after_secs, 0);
    }
    let d = l.check(&b, 5).await;
    assert!(!d.allowed);
    assert_eq!(d.remaining, 0);
    // Interval 12 s; the refused request counted one more.
    assert_eq!(d.retry_after_secs, 24);
}

async fn buckets_are_independent(l: &Limiter) {
    let (a, b) = (bucket("a"), bucket("b"));
    for _ in 0..2 {
        assert!(l.check(&a, 2).await.allowed);
    }
    assert!(!l.check(&a, 2).await.allowed);
    assert!(l.check(&b, 2).await.allowed);
}

async fn refills_over_the_window(l: &Limiter) {
    // 6000 per minute: one token every 10 ms.
    let b = bucket("refill");
    let mut refused = false;
    // Refills continue while the loop runs (a Redis round trip takes ~100 µs), so allow slack.
    for _ in 0..20_000 {
        if !l.check(&b, 6000).await.allowed {
            refused = true;
            break;
        }
    }
    assert!(refused, "the bucket empties");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let d = l.check(&b, 6000).await;
    assert!(d.allowed, "tokens came back");
    assert!(
        d.remaining >= 50,
        "about 100 tokens in 1.2 s, minus the refusal's: {}",
        d.remaining
    );
}

async fn refused_requests_extend_the_cool_down(l: &Limiter) {
    let b = bucket("extend");
    for _ in 0..10 {
        assert!(l.check(&b, 10).await.allowed);
    }
    // Interval 6 s: the first refusal waits two intervals, each further refusal one more.
    let first = l.check(&b, 10).await.retry_after_secs;
    let second = l.check(&b, 10).await.retry_after_secs;
    assert_eq!(first, 12);
    assert_eq!(second, 18);
    // Capped: a flood locks a key out for at most a window and an interval.
    let mut last = 0;
    for _ in 0..50 {
        last = l.check(&b, 10).await.retry_after_secs;
    }
    assert_eq!(last, 66);
}

macro_rules! limiter_suite {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn admits_exactly_the_limit_then_refuses() {
                super::admits_exactly_the_limit_then_refuses(&$make).await;
            }

            #[tokio::test]
            async fn buckets_are_independent() {
                super::buckets_are_independent(&$make).await;
            }

            #[tokio::test]
            async fn refills_over_the_window() {
                super::refills_over_the_window(&$make).await;
            }

            #[tokio::test]
            async fn refused_requests_extend_the_cool_down() {
                super::refused_requests_extend_the_cool_down(&$make).await;
            }
        }
    };
}

limiter_suite!(in_process, Limiter::local());
limiter_suite!(redis, Limiter::from_url(&redis_url()).unwrap());
