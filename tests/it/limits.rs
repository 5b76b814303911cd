//! Rate limits over HTTP (docs/api.md#rate-limits, docs/architecture.md#rate-limits): the headers
//! on every authenticated answer, the 429 path with Retry-After, the per-IP bucket for requests
//! without a valid key, and the same behaviour on Redis, including the fall-back when Redis is
//! unreachable.

use schemas::credential::Environment::Live;
use vigil_tests::{TestServer, json, redis_url};

async fn limited_key(s: &TestServer, limit: u32) -> String {
    let key = s
        .create_key(
            &s.creds.keys.secret_live,
            json!({"name": "limited", "type": "secret", "environment": "live"}),
        )
        .await;
    s.edit_key(Live, key["id"].as_str().unwrap(), |k| {
        k.rate_limit_override = Some(limit)
    })
    .await;
    key["revealed_key"].as_str().unwrap().to_owned()
}

async fn exhaust_and_check_429(s: &TestServer) {
    let key = limited_key(s, 3).await;
    for expected in ["2", "1", "0"] {
        let r = s.get(&s.org_path()).key(&key).send().await;
        r.ok(200);
        assert_eq!(r.header("x-ratelimit-limit").as_deref(), Some("3"));
        assert_eq!(r.header("x-ratelimit-remaining").as_deref(), Some(expected));
    }
    let r = s.get(&s.org_path()).key(&key).send().await;
    let e = r.err(429, "rate.limited");
    assert_eq!(e["retryable"], true);
    assert_eq!(e["details"]["next_action"], "retry");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=120).contains(&retry), "Retry-After {retry}");
    assert_eq!(r.header("x-ratelimit-remaining").as_deref(), Some("0"));
    // Errors count too, and a refused request extends the cool-down rather than resetting it.
    let again = s.get("/v1/organizations/org_bad").key(&key).send().await;
    again.err(429, "rate.limited");
    let retry_again: u64 = again.header("retry-after").unwrap().parse().unwrap();
    assert!(retry_again >= retry, "{retry_again} >= {retry}");
    // Other keys have their own buckets.
    s.get(&s.org_path())
        .key(&s.creds.keys.secret_live)
        .send()
        .await
        .ok(200);
}

#[tokio::test]
async fn the_in_process_limiter_refuses_with_429_and_headers() {
    let s = TestServer::start().await;
    exhaust_and_check_429(&s).await;
}

#[tokio::test]
async fn the_redis_limiter_refuses_with_429_and_headers() {
    let url = redis_url();
    let s = TestServer::start_with(move |a| a.limiter = url.clone()).await;
    assert_eq!(s.get("/readyz").send().await.body["limiter"], "redis");
    exhaust_and_check_429(&s).await;
    assert_eq!(
        s.metric("vigil_rate_limiter_fallbacks_total").await,
        0.0,
        "redis answered every time"
    );
}

#[tokio::test]
async fn two_replicas_on_one_redis_share_a_keys_bucket() {
    let url = redis_url();
    let u = url.clone();
    let a = TestServer::start_with(move |args| args.limiter = u.clone()).await;
    // A second server on the same store data would fight over the embedded store's lock, so the
    // second replica shares only Redis, and the bucket is named by key id: copy the key across.
    let key = limited_key(&a, 4).await;
    for _ in 0..2 {
        a.get(&a.org_path()).key(&key).send().await.ok(200);
    }
    assert_eq!(a.metric("vigil_rate_limiter_fallbacks_total").await, 0.0);
    let limiter = edge::limiter::Limiter::from_url(&url).unwrap();
    let org: schemas::OrgId = a.creds.org_id().parse().unwrap();
    let keys = a.store().list_api_keys(org, Live, None, 10).await.unwrap();
    let limited = keys
        .iter()
        .find(|k| k.rate_limit_override == Some(4))
        .unwrap();
    let d = limiter.check(&format!("key:{}", limited.id), 4).await;
    assert!(d.allowed);
    assert_eq!(
        d.remaining, 1,
        "the other replica's two requests are in the shared bucket"
    );
}

#[tokio::test]
async fn an_unreachable_redis_falls_back_to_the_in_process_limiter() {
    // Nothing listens on port 1.
    let s = TestServer::start_with(|a| a.limiter = "redis://127.0.0.1:1".into()).await;
    let r = s
        .get(&s.org_path())
        .key(&s.creds.keys.secret_live)
        .send()
        .await;
    r.ok(200);
    assert_eq!(r.header("x-ratelimit-remaining").as_deref(), Some("599"));
    exhaust_and_check_429(&s).await;
    let fallbacks = s.metric("vigil_rate_limiter_fallbacks_total").await;
    assert!(fallbacks >= 5.0, "counted {fallbacks}");
    // Readiness is not gated on the limiter, but the page says it is degraded, and why.
    let ready = s.get("/readyz").send().await;
    assert_eq!(ready.status, 200);
    assert_eq!(ready.body["status"], "degraded", "{}", ready.body);
    let limiter = ready.body["limiter"].as_str().unwrap();
    assert!(
        limiter.starts_with("redis unavailable: ")
            && limiter.ends_with("limits count in this process"),
        "{limiter}"
    );
}

#[tokio::test]
async fn requests_without_a_valid_key_are_limited_per_ip() {
    let s = TestServer::start_with(|a| a.anonymous_rate_limit = 3).await;
    for _ in 0..3 {
        s.get(&s.org_path())
            .key("sk_live_guess")
            .send()
            .await
            .err(401, "auth.invalid_credentials");
    }
    let r = s.get(&s.org_path()).key("sk_live_guess").send().await;
    r.err(429, "rate.limited");
    assert!(r.header("retry-after").is_some());
    s.get(&s.org_path()).send().await.err(429, "rate.limited");
    // A valid key is not held back by its address's bucket.
    s.get(&s.org_path())
        .key(&s.creds.keys.secret_live)
        .send()
        .await
        .ok(200);
}

#[tokio::test]
async fn preflight_requests_are_never_counted() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    for _ in 0..3 {
        s.call(reqwest::Method::OPTIONS, &s.org_path())
            .key(sk)
            .send()
            .await;
    }
    let r = s.get(&s.org_path()).key(sk).send().await;
    r.ok(200);
    assert_eq!(
        r.header("x-ratelimit-remaining").as_deref(),
        Some("599"),
        "only the GET counted"
    );
}
