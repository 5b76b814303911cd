//! Rate limiting (docs/api.md#rate-limits, docs/architecture.md#rate-limits): a GCRA bucket per key
//! whose capacity is the key's limit and which refills over a 60-second window. The limiter is a
//! port like the store and the log: [`LimiterBackend`] has two backends that run the same
//! arithmetic, the embedded in-process table (`local`, the default) and Redis (`redis://`), where
//! one Lua script does the whole check atomically on Redis's clock in one round trip, so a fleet
//! shares each key's bucket. They pass one conformance suite (`conformance`, behind the `testsuite`
//! feature), and each is wrapped once in [`Instrumented`] (latency and failures per backend).
//! [`Limiter`] is the policy on top: if Redis stops answering, requests are limited in-process
//! until it answers again, and the fallback is logged and counted.
//!
//! The arithmetic is written here rather than taken from a crate because the interface wants
//! denied requests to count (a client hammering through a 429 extends its own cool-down), the
//! limit varies per key, and the Redis script must match it exactly.

#[cfg(any(test, feature = "testsuite"))]
pub mod conformance;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use redis::aio::ConnectionManager;
use telemetry::{CallMetricNames, CallMetrics};

/// Why a backend did not answer a check. The embedded backend always answers; a shared one may
/// be unreachable or slow, which the caller may retry or, as [`Limiter`] does, fall back from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimiterError {
    /// The backend did not answer in time or refused the call.
    #[error("limiter unavailable: {0}")]
    Unavailable(String),
}

/// The limiter port: counts one request against a bucket and says whether it may proceed.
#[async_trait]
pub trait LimiterBackend: Send + Sync + 'static {
    /// `local` or `redis`: what `/readyz` and the metrics call it.
    fn name(&self) -> &'static str;
    /// Counts one request against `bucket`, which holds `limit` requests refilled over
    /// `window` ([`WINDOW`] for every API bucket; longer for quotas such as Gate's signups).
    async fn check(
        &self,
        bucket: &str,
        limit: u32,
        window: Duration,
    ) -> Result<RateDecision, LimiterError>;
    /// Whether the backend answers now (`/readyz`): one round trip, counting nothing. The
    /// process's own table always does.
    async fn ping(&self) -> Result<(), LimiterError> {
        Ok(())
    }
}

/// The refill window of every bucket.
pub const WINDOW: Duration = Duration::from_secs(60);

/// What one counted request learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateDecision {
    pub allowed: bool,
    pub limit: u32,
    /// Requests left in the bucket after this one; 0 on the last allowed request and on denials.
    pub remaining: u32,
    /// Whole seconds (at least 1) until a request would be allowed again; 0 when allowed.
    pub retry_after_secs: u64,
}

/// One GCRA step. `tat` is the bucket's stored theoretical arrival time (µs, 0 for a new
/// bucket); returns the value to store and the decision. A denied request still advances the
/// stored time, but never beyond two windows ahead, so a flood locks a key out for at most one
/// window past its last request.
pub fn gcra_step(now_us: i64, tat: i64, limit: u32, window_us: i64) -> (i64, RateDecision) {
    let limit = limit.max(1);
    let interval = (window_us / i64::from(limit)).max(1);
    let tau = window_us;
    let new_tat = tat.max(now_us) + interval;
    let allow_at = new_tat - tau;
    if allow_at <= now_us {
        let remaining = ((now_us - allow_at) / interval).clamp(0, i64::from(limit)) as u32;
        (
            new_tat,
            RateDecision {
                allowed: true,
                limit,
                remaining,
                retry_after_secs: 0,
            },
        )
    } else {
        let stored = new_tat.min(now_us + 2 * tau);
        // The next request is allowed once `max(stored, now) + interval - tau <= now`.
        let wait_us = stored + interval - tau - now_us;
        let retry_after_secs = ((wait_us + 999_999) / 1_000_000).max(1) as u64;
        (
            stored,
            RateDecision {
                allowed: false,
                limit,
                remaining: 0,
                retry_after_secs,
            },
        )
    }
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// The embedded backend: buckets in this process's memory.
#[derive(Default)]
pub struct LocalLimiter {
    buckets: Mutex<HashMap<String, i64>>,
}

impl LocalLimiter {
    pub fn check(&self, bucket: &str, limit: u32, window: Duration) -> RateDecision {
        let now = now_us();
        let window = window.as_micros() as i64;
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        // Forget full buckets now and then so the table holds only keys seen within a window.
        if buckets.len() > 100_000 {
            buckets.retain(|_, tat| *tat > now);
        }
        // A bucket seen before is updated in place: one hash and no copy of its name.
        if let Some(tat) = buckets.get_mut(bucket) {
            let (stored, decision) = gcra_step(now, *tat, limit, window);
            *tat = stored;
            return decision;
        }
        let (stored, decision) = gcra_step(now, 0, limit, window);
        buckets.insert(bucket.to_owned(), stored);
        decision
    }
}

#[async_trait]
impl LimiterBackend for LocalLimiter {
    fn name(&self) -> &'static str {
        "local"
    }

    async fn check(
        &self,
        bucket: &str,
        limit: u32,
        window: Duration,
    ) -> Result<RateDecision, LimiterError> {
        Ok(LocalLimiter::check(self, bucket, limit, window))
    }
}

/// The same step as [`gcra_step`], in Redis, on Redis's clock.
const GCRA_SCRIPT: &str = r#"
local limit = math.max(tonumber(ARGV[1]), 1)
local window = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = math.max(math.floor(window / limit), 1)
local tau = window
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - tau
if allow_at <= now then
  redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1000)
  local remaining = math.floor((now - allow_at) / interval)
  if remaining > limit then remaining = limit end
  return {1, remaining, 0}
end
local stored = math.min(new_tat, now + 2 * tau)
redis.call('SET', KEYS[1], string.format('%.0f', stored), 'PX', math.ceil((stored - now) / 1000) + 1000)
local wait = stored + interval - tau - now
local secs = math.ceil(wait / 1000000)
if secs < 1 then secs = 1 end
return {0, 0, secs}
"#;

/// The URL without its `ca` parameter, and that parameter's value.
fn take_ca(url: &str) -> (String, Option<String>) {
    let (head, fragment) = match url.split_once('#') {
        Some((head, fragment)) => (head, Some(fragment)),
        None => (url, None),
    };
    let Some((base, query)) = head.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut ca = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.strip_prefix("ca=") {
            Some(value) => {
                ca = url::form_urlencoded::parse(format!("v={value}").as_bytes())
                    .next()
                    .map(|(_, v)| v.into_owned());
                false
            }
            None => !pair.is_empty(),
        })
        .collect();
    let mut rest = base.to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    if let Some(fragment) = fragment {
        rest.push('#');
        rest.push_str(fragment);
    }
    (rest, ca)
}

/// How long a Redis call may take before the request is limited in-process instead.
const REDIS_TIMEOUT: Duration = Duration::from_millis(250);
/// After a failure, how long to stay on the in-process limiter before trying Redis again.
const REDIS_RETRY_AFTER: Duration = Duration::from_secs(1);

pub struct RedisLimiter {
    client: redis::Client,
    /// Set on first use; the manager reconnects by itself after that. Not a lock per request:
    /// every request shares the one multiplexed connection.
    connection: tokio::sync::OnceCell<ConnectionManager>,
    script: redis::Script,
    /// Unix µs before which Redis is not tried (a tripped breaker).
    skip_until_us: AtomicU64,
}

impl RedisLimiter {
    /// A limiter on the Redis at `url`: `redis://host:6379`, or `rediss://host:6380` for TLS,
    /// verified against the machine's roots or, with `?ca=<PEM file>`, that CA alone
    /// (docs/operations.md#connecting-to-managed-engines). A `#insecure` fragment, redis's own,
    /// turns verification off.
    pub fn new(url: &str) -> Result<Self, String> {
        let bad = |e: &dyn std::fmt::Display| {
            format!("bad redis URL `{}`: {e}", schemas::redact::redact_url(url))
        };
        let (url_without_ca, ca) = take_ca(url);
        let client = match ca {
            None => redis::Client::open(url_without_ca.as_str()).map_err(|e| bad(&e))?,
            Some(ca) => {
                if !url_without_ca.starts_with("rediss://") {
                    return Err(bad(&"ca= is for rediss:// URLs"));
                }
                let root = std::fs::read(&ca).map_err(|e| bad(&format!("ca {ca}: {e}")))?;
                redis::Client::build_with_tls(
                    url_without_ca.as_str(),
                    redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(root),
                    },
                )
                .map_err(|e| bad(&e))?
            }
        };
        // The redis crate's rustls takes the process's provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Ok(RedisLimiter {
            client,
            connection: tokio::sync::OnceCell::new(),
            script: redis::Script::new(GCRA_SCRIPT),
            skip_until_us: AtomicU64::new(0),
        })
    }

    async fn connection(&self) -> Result<ConnectionManager, String> {
        self.connection
            .get_or_try_init(|| self.connect())
            .await
            .cloned()
    }

    async fn connect(&self) -> Result<ConnectionManager, String> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(REDIS_TIMEOUT))
            .set_response_timeout(Some(REDIS_TIMEOUT))
            .set_number_of_retries(1);
        tokio::time::timeout(
            REDIS_TIMEOUT * 2,
            self.client.get_connection_manager_with_config(config),
        )
        .await
        .map_err(|_| "timed out connecting".to_string())?
        .map_err(|e| e.to_string())
    }

    /// One round trip; `Err` when Redis did not answer in time (and, for a second after a
    /// failure, without trying: a breaker, so an outage costs requests no timeouts).
    pub async fn check(
        &self,
        bucket: &str,
        limit: u32,
        window: Duration,
    ) -> Result<RateDecision, LimiterError> {
        if (now_us() as u64) < self.skip_until_us.load(Ordering::Relaxed) {
            return Err(LimiterError::Unavailable("redis recently failed".into()));
        }
        let result = async {
            let mut conn = self.connection().await?;
            let mut invocation = self.script.key(format!("vigil:rl:{bucket}"));
            invocation.arg(limit.max(1)).arg(window.as_micros() as i64);
            let call = invocation.invoke_async::<(i64, i64, i64)>(&mut conn);
            tokio::time::timeout(REDIS_TIMEOUT, call)
                .await
                .map_err(|_| "timed out".to_string())?
                .map_err(|e| e.to_string())
        }
        .await;
        match result {
            Ok((allowed, remaining, retry)) => Ok(RateDecision {
                allowed: allowed == 1,
                limit: limit.max(1),
                remaining: remaining.max(0) as u32,
                retry_after_secs: retry.max(0) as u64,
            }),
            Err(e) => {
                self.skip_until_us.store(
                    now_us() as u64 + REDIS_RETRY_AFTER.as_micros() as u64,
                    Ordering::Relaxed,
                );
                Err(LimiterError::Unavailable(e))
            }
        }
    }
}

#[async_trait]
impl LimiterBackend for RedisLimiter {
    fn name(&self) -> &'static str {
        "redis"
    }

    async fn check(
        &self,
        bucket: &str,
        limit: u32,
        window: Duration,
    ) -> Result<RateDecision, LimiterError> {
        RedisLimiter::check(self, bucket, limit, window).await
    }

    /// A `PING`, tried whatever the breaker says: a probe wants to know whether Redis answers
    /// now, and its failure does not open the breaker (requests find out for themselves).
    async fn ping(&self) -> Result<(), LimiterError> {
        let answer = async {
            let mut conn = self.connection().await?;
            let ping = redis::cmd("PING");
            let call = ping.query_async::<String>(&mut conn);
            tokio::time::timeout(REDIS_TIMEOUT, call)
                .await
                .map_err(|_| "timed out".to_string())?
                .map_err(|e| e.to_string())
        }
        .await;
        answer.map(drop).map_err(LimiterError::Unavailable)
    }
}

/// Registered in prometheus's default registry, which `/metrics` serves. Its time is observed
/// on every request by both cores: counted per thread (see `telemetry::per_thread_histogram`).
static METRICS: LazyLock<CallMetrics> = LazyLock::new(|| {
    CallMetrics::register(
        "limiter",
        CallMetricNames {
            seconds: (
                "vigil_limiter_check_seconds",
                "Time of one rate-limit check, by backend.",
            ),
            errors: (
                "vigil_limiter_errors_total",
                "Rate-limit checks a backend did not answer, by backend.",
            ),
            labels: &["backend"],
            error_labels: &["backend"],
        },
    )
});

/// Any limiter backend, with its checks' latency and failures measured.
pub struct Instrumented<B> {
    backend: B,
}

impl<B: LimiterBackend> Instrumented<B> {
    pub fn new(backend: B) -> Self {
        // Shown from the start: the embedded backend behind Redis is checked only on a fallback.
        METRICS.seconds.declare(&[backend.name()]);
        Instrumented { backend }
    }
}

#[async_trait]
impl<B: LimiterBackend> LimiterBackend for Instrumented<B> {
    fn name(&self) -> &'static str {
        self.backend.name()
    }

    async fn check(
        &self,
        bucket: &str,
        limit: u32,
        window: Duration,
    ) -> Result<RateDecision, LimiterError> {
        let started = std::time::Instant::now();
        let answer = self.backend.check(bucket, limit, window).await;
        METRICS
            .seconds
            .observe_named(self.backend.name(), started.elapsed().as_secs_f64());
        if answer.is_err() {
            METRICS
                .errors
                .with_label_values(&[self.backend.name()])
                .inc();
        }
        answer
    }

    async fn ping(&self) -> Result<(), LimiterError> {
        self.backend.ping().await
    }
}

/// The limiter the API uses: the embedded backend alone, or a shared one with the embedded
/// table behind it for when the shared one does not answer (limits fail open to the
/// process's own count, never closed: docs/architecture.md#rate-limits).
pub struct Limiter {
    shared: Option<Arc<dyn LimiterBackend>>,
    local: Instrumented<LocalLimiter>,
}

impl Limiter {
    pub fn local() -> Self {
        Limiter {
            shared: None,
            local: Instrumented::new(LocalLimiter::default()),
        }
    }

    /// Chosen by URL: `local` (or `embedded`), or `redis://host:port`.
    pub fn from_url(url: &str) -> Result<Self, String> {
        if url == "local" || url == "embedded" {
            Ok(Self::local())
        } else if url.starts_with("redis://") || url.starts_with("rediss://") {
            Ok(Limiter {
                shared: Some(Arc::new(Instrumented::new(RedisLimiter::new(url)?))),
                local: Instrumented::new(LocalLimiter::default()),
            })
        } else {
            Err(format!(
                "unknown limiter `{}`: expected `local` or `redis://host:6379`",
                schemas::redact::redact_url(url)
            ))
        }
    }

    pub fn backend_name(&self) -> &'static str {
        match &self.shared {
            Some(shared) => shared.name(),
            None => self.local.name(),
        }
    }

    /// Whether the shared backend answers now; `Err` says why not, while requests are limited
    /// in-process (`/readyz` reports the limiter as degraded then). Always `Ok` for the
    /// process's own table.
    pub async fn ping(&self) -> Result<(), String> {
        match &self.shared {
            Some(shared) => shared.ping().await.map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }

    /// Counts one request against `bucket` (refilled over [`WINDOW`]) and says whether it
    /// may proceed.
    pub async fn check(&self, bucket: &str, limit: u32) -> RateDecision {
        self.check_within(bucket, limit, WINDOW).await
    }

    /// [`Limiter::check`] for a bucket refilled over `window`: a quota of `limit` in any such
    /// span.
    pub async fn check_within(&self, bucket: &str, limit: u32, window: Duration) -> RateDecision {
        if let Some(shared) = &self.shared {
            match shared.check(bucket, limit, window).await {
                Ok(decision) => return decision,
                Err(error) => {
                    if let Some(total) = crate::metrics::limiter_fell_back() {
                        tracing::warn!(
                            request_id = %crate::context::request_id(),
                            %error,
                            total,
                            "redis rate limiter unavailable; limiting in-process"
                        );
                    }
                }
            }
        }
        match self.local.check(bucket, limit, window).await {
            Ok(decision) => decision,
            // The embedded backend always answers; were it not to, the request is counted
            // as the first of a fresh bucket rather than refused.
            Err(_) => gcra_step(now_us(), 0, limit, window.as_micros() as i64).1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const W: i64 = 60_000_000;

    #[test]
    fn a_fresh_bucket_admits_exactly_its_limit_then_refills() {
        let mut tat = 0;
        let now = 1_000_000_000;
        for i in 0..10 {
            let (t, d) = gcra_step(now, tat, 10, W);
            tat = t;
            assert!(d.allowed, "request {i}");
            assert_eq!(d.remaining, 9 - i);
        }
        let (t, d) = gcra_step(now, tat, 10, W);
        assert!(!d.allowed);
        assert_eq!(d.remaining, 0);
        assert_eq!(
            d.retry_after_secs, 12,
            "one interval (6 s) plus the one the denial counted"
        );
        // After a full window the bucket is full again.
        let (_, d) = gcra_step(now + 3 * W, t, 10, W);
        assert!(d.allowed);
        assert_eq!(d.remaining, 9);
    }

    proptest! {
        #[test]
        fn never_admits_more_than_limit_plus_refill(limit in 1u32..700, steps in proptest::collection::vec(0i64..2_000_000, 1..400)) {
            let mut tat = 0;
            let mut now = 5_000_000_000i64;
            let start = now;
            let mut allowed = 0i64;
            for step in steps {
                now += step;
                let (t, d) = gcra_step(now, tat, limit, W);
                tat = t;
                if d.allowed { allowed += 1; }
                prop_assert!(d.remaining <= limit);
                prop_assert!(d.allowed || d.retry_after_secs >= 1);
                prop_assert!(d.retry_after_secs <= 121);
            }
            let interval = (W / i64::from(limit)).max(1);
            prop_assert!(allowed <= i64::from(limit) + (now - start) / interval + 1);
        }
    }
}
