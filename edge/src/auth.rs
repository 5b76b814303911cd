//! Credentials (docs/api.md#keys; docs/architecture.md: #errors, #rate-limits, #organizations,
//! #tls-and-proxies, #exposed-keys). The credential layer ([`Guard`]) resolves the Bearer
//! credential of every API request once: it refuses unknown, revoked and expired keys, revokes
//! exposed secret keys, counts the request against the key's bucket (or the client IP's,
//! without a valid key), enforces TLS for live keys, suspended organizations and
//! publishable-key origins, and stamps the rate-limit headers on whatever the request answers.
//! The extractors `SecretKey<P>` and `PublishableKey` then apply each route's policy.

use std::marker::PhantomData;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use chrono::Duration;
use ipnet::IpNet;
use schemas::credential::{Credential, Environment, KeyType};
use schemas::ids::KeyId;
use schemas::resources::OrgStatus;
use schemas::time::Timestamp;
use schemas::{ErrorCode, Scope};
use store::{ApiKeyRecord, CredentialHash, KeyAndOrganization, OrganizationRecord, Store};

use crate::error::ApiError;
use crate::limiter::{Limiter, RateDecision};
use crate::metrics;
use crate::policy::{RoutePolicy, WhileSuspended};
use crate::transport::{ClientInfo, address_bucket, client_info};
use secrets::ServerSecret;

/// Default bucket sizes per window (docs/api.md#rate-limits).
pub const PUBLISHABLE_RATE_LIMIT: u32 = 120;
pub const SECRET_RATE_LIMIT: u32 = 600;

/// Everything the credential layer needs, shared by all requests.
pub struct Authenticator {
    pub store: Store,
    pub secret: ServerSecret,
    pub limiter: Limiter,
    pub trusted_proxies: Vec<IpNet>,
    /// `--client-fingerprint-header`: where a trusted proxy that terminates TLS puts the
    /// client's JA4 (docs/detection.md#transport-identity).
    pub client_fingerprint_header: Option<axum::http::HeaderName>,
    /// Requests per window for a client IP that presents no valid credential.
    pub anonymous_rate_limit: u32,
    /// The `last_used_at` writes this process has begun.
    pub last_used: LastUsedWrites,
}

/// The `last_used_at` writes this process has begun, by key, so that each key is written about
/// once a minute (docs/architecture.md#api-keys). The stored time alone does not ensure
/// it: once it is a minute old, every request that reads the key starts a write until the first
/// one lands (122 writes for 200 requests at once), and each write also drops the key from the
/// store's cache, so the requests after it read the key from disk again.
#[derive(Default)]
pub struct LastUsedWrites(std::sync::Mutex<std::collections::HashMap<KeyId, Timestamp>>);

/// The most keys remembered; past it the memory is cleared (costing each key one extra write).
const LAST_USED_CAPACITY: usize = 100_000;

impl LastUsedWrites {
    /// Whether a request at `now` should write `key`'s `last_used_at`: no write of it began in
    /// this process during the last minute. Asked only when the stored time is a minute old. A
    /// write that fails is not tried again before the minute is out; a key forgotten when the
    /// memory is cleared may be written twice in a minute.
    fn claim(&self, key: KeyId, now: Timestamp) -> bool {
        let mut begun = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if begun
            .get(&key)
            .is_some_and(|t| now - *t < LAST_USED_INTERVAL)
        {
            return false;
        }
        if begun.len() >= LAST_USED_CAPACITY {
            begun.clear();
        }
        begun.insert(key, now);
        true
    }
}

/// How often a key's `last_used_at` is written.
const LAST_USED_INTERVAL: Duration = Duration::seconds(60);

/// The caller of a request that presented a valid key.
#[derive(Debug, Clone)]
pub struct AuthContext {
    // Shared (with the embedded store's row cache, on a hit) rather than copied per request.
    pub key: Arc<ApiKeyRecord>,
    pub organization: Arc<OrganizationRecord>,
    pub credential_hash: CredentialHash,
    pub client: ClientInfo,
}

impl AuthContext {
    pub fn environment(&self) -> Environment {
        self.key.environment
    }

    /// Whether the key carries `scope` (routes check it through their policy).
    pub fn holds(&self, scope: Scope) -> bool {
        self.key.scopes.contains(&scope)
    }
}

/// A slot the route's credential extractor fills with the scope its policy demands, so the
/// idempotency layer (`crate::idempotency`) can keep the answer with it and hold a replay to it.
#[derive(Clone, Default)]
pub struct RequiredScope(Arc<std::sync::OnceLock<Scope>>);

impl RequiredScope {
    pub fn record(&self, scope: Scope) {
        let _ = self.0.set(scope);
    }

    pub(crate) fn get(&self) -> Option<Scope> {
        self.0.get().copied()
    }
}

/// 403 `auth.insufficient_scope`, naming the scope needed.
pub fn insufficient_scope(scope: Scope) -> ApiError {
    ApiError::new(
        ErrorCode::InsufficientScope,
        format!("this route needs the scope {scope}"),
    )
    .with_allowed_values([scope.as_str()])
}

/// The limit a key's bucket holds: the operator's override, else the default for its type.
pub fn effective_rate_limit(key: &ApiKeyRecord) -> u32 {
    key.rate_limit_override.unwrap_or(match key.key_type {
        KeyType::Publishable => PUBLISHABLE_RATE_LIMIT,
        KeyType::Secret => SECRET_RATE_LIMIT,
    })
}

/// A key's status at `now` (docs/architecture.md#api-keys).
pub fn key_is_usable(
    key: &ApiKeyRecord,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), &'static str> {
    if key.revoked_at.is_some() {
        return Err("this key has been revoked");
    }
    if key.grace_expires_at.is_some_and(|t| t <= now) {
        return Err("this key was rotated and its grace window has ended");
    }
    Ok(())
}

/// The bucket a keyed request is counted in (docs/architecture.md#rate-limits). A publishable key
/// is in every page of its site, so anyone can spend it: its limit applies per client address, and
/// a scraper at one address cannot use up the budget of the site's visitors at others. A secret key
/// is one backend's, so it has one bucket.
fn key_bucket(key: &ApiKeyRecord, client: ClientInfo) -> BucketName {
    match key.key_type {
        KeyType::Publishable => {
            BucketName::of(format_args!("key:{}:{}", key.id, address_bucket(client.ip)))
        }
        KeyType::Secret => BucketName::of(format_args!("key:{}", key.id)),
    }
}

/// The bucket of a request without a valid credential: its client address.
pub fn anonymous_bucket(client: ClientInfo) -> BucketName {
    BucketName::of(format_args!("ip:{}", address_bucket(client.ip)))
}

/// A limiter bucket's name, spelled on the stack: every request names one. The longest,
/// a publishable key's at an IPv6 client (`key:key_<26>:<four groups>::/64`), takes 59 bytes.
pub struct BucketName {
    spelled: [u8; 64],
    len: usize,
}

impl Default for BucketName {
    fn default() -> Self {
        BucketName {
            spelled: [0; 64],
            len: 0,
        }
    }
}

impl BucketName {
    fn of(name: std::fmt::Arguments<'_>) -> Self {
        let mut spelled = BucketName::default();
        // Cannot fail: every name fits (see the type's doc and its test).
        let whole = std::fmt::Write::write_fmt(&mut spelled, name);
        debug_assert!(whole.is_ok(), "a bucket name longer than the type holds");
        spelled
    }

    pub fn as_str(&self) -> &str {
        // Only whole `str`s are written in.
        std::str::from_utf8(&self.spelled[..self.len]).unwrap_or_default()
    }
}

impl std::fmt::Write for BucketName {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        self.spelled
            .get_mut(self.len..end)
            .ok_or(std::fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

// Named once: a name given as a string is parsed and checked on every insert.
const RATE_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const RATE_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");

fn rate_headers(headers: &mut HeaderMap, d: &RateDecision) {
    headers.insert(RATE_LIMIT, HeaderValue::from(d.limit));
    headers.insert(RATE_REMAINING, HeaderValue::from(d.remaining));
}

fn rate_limited(d: &RateDecision, kind: &'static str) -> ApiError {
    metrics::rate_limited(kind);
    let mut e = ApiError::new(
        ErrorCode::RateLimited,
        "rate limit exceeded; retry after the time in Retry-After",
    )
    .with_next_action("retry");
    e.retry_after = Some(d.retry_after_secs);
    e
}

/// The credential layer of a group of routes, given to `Router::layer` (its service is in
/// `crate::credential_layer`). The group's body limit, whether only browsers call it and its
/// idempotent POSTs are this layer's too, rather than layers of their own: each layer of a
/// router costs every request a clone of the routes it wraps.
#[derive(Clone)]
pub struct Guard {
    pub auth: Arc<Authenticator>,
    /// The largest request body the group's routes read, in bytes.
    pub body_limit: usize,
    /// Only a browser calls these routes (the Collect API, the SDK's endpoints): a secret key
    /// that arrives on one has been put in a page (docs/architecture.md#exposed-keys).
    pub browser_route: bool,
    /// A POST with an `Idempotency-Key` is answered once per key (`crate::idempotency`).
    pub idempotent_posts: bool,
}

impl Guard {
    /// The guard of routes that servers call.
    pub fn server_routes(auth: Arc<Authenticator>, body_limit: usize) -> Self {
        Guard {
            auth,
            body_limit,
            browser_route: false,
            idempotent_posts: false,
        }
    }

    /// The guard of routes that only browsers call.
    pub fn browser_routes(auth: Arc<Authenticator>, body_limit: usize) -> Self {
        Guard {
            browser_route: true,
            ..Guard::server_routes(auth, body_limit)
        }
    }

    /// The same guard, answering each `Idempotency-Key` of a POST once.
    pub fn with_idempotent_posts(self) -> Self {
        Guard {
            idempotent_posts: true,
            ..self
        }
    }
}

fn bearer(headers: &HeaderMap) -> Option<Result<&str, ()>> {
    let value = headers.get(header::AUTHORIZATION)?;
    let Ok(value) = value.to_str() else {
        return Some(Err(()));
    };
    let mut parts = value.splitn(2, ' ');
    match (parts.next(), parts.next()) {
        (Some(scheme), Some(token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Some(Ok(token.trim()))
        }
        _ => Some(Err(())),
    }
}

/// How a presented credential failed, before any key was identified.
fn invalid(message: &str) -> ApiError {
    ApiError::new(ErrorCode::InvalidCredentials, message)
}

/// The credential layer, answering the request it lets through with `answer` (the routes, or
/// `crate::idempotency` inside this layer's future), which is handed the authenticator when a
/// key was resolved; see the module docs for what it checks and in which order.
pub(crate) async fn authenticate_then<F, Fut>(guard: Guard, mut req: Request, answer: F) -> Response
where
    F: FnOnce(Request, Option<Arc<Authenticator>>) -> Fut,
    Fut: std::future::Future<Output = Response>,
{
    DefaultBodyLimit::max(guard.body_limit).apply(&mut req);
    let auth = guard.auth;
    let (mut parts, body) = req.into_parts();
    let client = client_info(&parts, &auth.trusted_proxies);

    // Preflights carry no credential and never count against a key (docs/architecture.md#cors);
    // like every request without one, they are charged to the client address
    // (docs/architecture.md#connections).
    let token = match bearer(&parts.headers) {
        _ if parts.method == Method::OPTIONS => None,
        None => None,
        Some(Err(())) => {
            return refuse_anonymous(
                &auth,
                client,
                invalid("the Authorization header must be `Bearer <key>`"),
            )
            .await;
        }
        Some(Ok(token)) => Some(token),
    };
    // Gate's workflow credentials (`gtpoll_`, `agt_`, `ack_`) are not keys: the Gate route
    // that takes one checks it, and the request is charged to the client address like one
    // without a credential.
    let token = token.filter(|t| schemas::gate::TokenKind::of(t).is_none());
    let Some(token) = token else {
        // No credential: the route decides whether that is allowed, but the client address's
        // bucket is charged so that probing the API anonymously is slow. A keyed request's
        // client is its `AuthContext`'s (see `client_of`).
        parts.extensions.insert(client);
        return charge_anonymous(&auth, client, || {
            answer(Request::from_parts(parts, body), None)
        })
        .await;
    };

    let resolved = match resolve(&auth, token, &parts, client, guard.browser_route).await {
        Ok(r) => r,
        Err(Refusal::Anonymous(e)) => return refuse_anonymous(&auth, client, e).await,
        Err(Refusal::Keyed(e)) => return e.into_response(),
    };
    let (ctx, decision) = resolved;
    let mut response = match ctx {
        Err(e) => e.into_response(),
        Ok(ctx) => {
            parts.extensions.insert(Arc::new(ctx));
            answer(Request::from_parts(parts, body), Some(auth)).await
        }
    };
    rate_headers(response.headers_mut(), &decision);
    response
}

/// The client of a request the credential layer let through: its key's context's, or the one
/// set on a request without a credential.
pub fn client_of(extensions: &axum::http::Extensions) -> Option<ClientInfo> {
    match extensions.get::<Arc<AuthContext>>() {
        Some(ctx) => Some(ctx.client),
        None => extensions.get::<ClientInfo>().copied(),
    }
}

enum Refusal {
    /// No usable key was identified: charge the client IP.
    Anonymous(ApiError),
    /// A key was identified but must not be used, and is not charged (it is revoked now).
    Keyed(ApiError),
}

async fn refuse_anonymous(auth: &Authenticator, client: ClientInfo, e: ApiError) -> Response {
    charge_anonymous(auth, client, || async { e.into_response() }).await
}

/// Charges a request without a usable credential to its client address's bucket
/// (docs/architecture.md: #rate-limits, #connections) and answers it with `answer` while the bucket
/// allows, else with a 429; either way with the bucket's headers. Preflights, unknown routes and
/// bad credentials all come through here, so a flood of them costs one limiter step each and
/// nothing more.
pub async fn charge_anonymous<F, Fut>(
    auth: &Authenticator,
    client: ClientInfo,
    answer: F,
) -> Response
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Response>,
{
    let d = auth
        .limiter
        .check(anonymous_bucket(client).as_str(), auth.anonymous_rate_limit)
        .await;
    let mut response = if d.allowed {
        answer().await
    } else {
        rate_limited(&d, "ip").into_response()
    };
    rate_headers(response.headers_mut(), &d);
    response
}

type Resolved = (Result<AuthContext, ApiError>, RateDecision);

async fn resolve(
    auth: &Authenticator,
    token: &str,
    parts: &Parts,
    client: ClientInfo,
    browser_route: bool,
) -> Result<Resolved, Refusal> {
    let credential = Credential::parse(token)
        .ok_or_else(|| Refusal::Anonymous(invalid("the credential is not a valid Vigil key")))?;
    let hash = auth.secret.hash_credential(&credential);
    // The key, with its organization when the store holds both at hand; the organization is
    // checked, and read if the store left it out, only once the key is counted (`admit`).
    let KeyAndOrganization { key, organization } = auth
        .store
        .find_key_and_organization(&hash)
        .await
        .map_err(|e| Refusal::Keyed(e.into()))?
        .ok_or_else(|| Refusal::Anonymous(invalid("unknown credential")))?;
    let now = schemas::time::now();
    key_is_usable(&key, now).map_err(|why| Refusal::Anonymous(invalid(why)))?;

    // Request headers are never evidence on their own (Node's fetch sends `sec-fetch-mode:
    // cors`, proxies forward `Origin`); a secret key on a route only browsers call is.
    if key.key_type == KeyType::Secret && browser_route {
        revoke_exposed(auth, &key, parts)
            .await
            .map_err(Refusal::Keyed)?;
        return Err(Refusal::Keyed(ApiError::new(
            ErrorCode::KeyExposed,
            "a secret key was sent to a browser route, so it is in a page; it has been revoked. Keep secret keys server-side, use a publishable key in pages, and issue a new secret key",
        )));
    }

    let decision = auth
        .limiter
        .check(
            key_bucket(&key, client).as_str(),
            effective_rate_limit(&key),
        )
        .await;
    if !decision.allowed {
        return Ok((Err(rate_limited(&decision, "key")), decision));
    }
    let admitted = admit(auth, key, organization, hash, parts, client, now).await;
    Ok((admitted, decision))
}

/// Checks that apply to a counted key before any route sees the request.
async fn admit(
    auth: &Authenticator,
    key: Arc<ApiKeyRecord>,
    organization: Option<Arc<OrganizationRecord>>,
    credential_hash: CredentialHash,
    parts: &Parts,
    client: ClientInfo,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<AuthContext, ApiError> {
    if key.environment == Environment::Live && client.plain_from_afar() {
        return Err(ApiError::new(
            ErrorCode::TlsRequired,
            "live keys are accepted over TLS only",
        ));
    }
    let organization = match organization {
        Some(organization) => organization,
        None => Arc::new(
            auth.store
                .get_organization(key.organization_id)
                .await?
                .ok_or_else(|| invalid("the key's organization no longer exists"))?,
        ),
    };
    if organization.status == OrgStatus::Suspended && key.key_type == KeyType::Publishable {
        return Err(ApiError::new(
            ErrorCode::OrganizationSuspended,
            "the organization is suspended",
        ));
    }
    if key.key_type == KeyType::Publishable && !key.allowed_origins.is_empty() {
        // A browser sends no `Origin` on a same-origin GET; it says `Sec-Fetch-Site:
        // same-origin` instead, and the page's origin is then this server's own.
        let same_origin = parts
            .headers
            .get("sec-fetch-site")
            .is_some_and(|v| v == "same-origin");
        let own_origin = same_origin
            .then(|| url::Url::parse(crate::context::public_url()).ok())
            .flatten()
            .map(|u| u.origin().ascii_serialization());
        let origin = parts
            .headers
            .get(header::ORIGIN)
            .and_then(|v| v.to_str().ok())
            .or(own_origin.as_deref());
        if !origin.is_some_and(|o| {
            key.allowed_origins
                .iter()
                .any(|a| a.eq_ignore_ascii_case(o))
        }) {
            return Err(ApiError::new(
                ErrorCode::OriginNotAllowed,
                "this key may not be used from this origin",
            )
            .with_header_name("Origin"));
        }
    }
    // `last_used_at` is written at most once a minute per key (docs/architecture.md#api-keys), off
    // the request path.
    if key
        .last_used_at
        .is_none_or(|t| now - t >= LAST_USED_INTERVAL)
        && auth.last_used.claim(key.id, now)
    {
        let store = auth.store.clone();
        let (org, env, id) = (key.organization_id, key.environment, key.id);
        let request_id = crate::context::request_id();
        tokio::spawn(async move {
            if let Err(e) = store.touch_api_key(org, env, id, now).await {
                tracing::warn!(%request_id, error = %e, key_id = %id, "recording last_used_at");
            }
        });
    }
    Ok(AuthContext {
        key,
        organization,
        credential_hash,
        client,
    })
}

async fn revoke_exposed(
    auth: &Authenticator,
    key: &ApiKeyRecord,
    parts: &Parts,
) -> Result<(), ApiError> {
    let mut revoked = key.clone();
    revoked.revoked_at = Some(schemas::time::now());
    auth.store.update_api_key(&revoked).await?;
    metrics::secret_key_exposed();
    // Logged by its preview only.
    tracing::warn!(
        request_id = %crate::context::request_id(),
        key_id = %key.id,
        organization_id = %key.organization_id,
        key = %key.key_preview,
        path = parts.uri.path(),
        "secret key sent to a browser route: revoked"
    );
    Ok(())
}

fn context(parts: &Parts) -> Result<Arc<AuthContext>, ApiError> {
    parts
        .extensions
        .get::<Arc<AuthContext>>()
        .cloned()
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::MissingCredentials,
                "this route needs `Authorization: Bearer <key>`",
            )
            .with_header_name("Authorization")
        })
}

/// A secret key that passed route policy `P`.
pub struct SecretKey<P> {
    pub ctx: Arc<AuthContext>,
    policy: PhantomData<P>,
}

impl<P> std::ops::Deref for SecretKey<P> {
    type Target = AuthContext;
    fn deref(&self) -> &AuthContext {
        &self.ctx
    }
}

impl<S: Send + Sync, P: RoutePolicy> FromRequestParts<S> for SecretKey<P> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let ctx = context(parts)?;
        let key = &ctx.key;
        if key.key_type != KeyType::Secret {
            return Err(ApiError::new(
                ErrorCode::CredentialTypeNotAllowed,
                "this route needs a secret key",
            )
            .with_allowed_values(["sk_live_", "sk_test_"]));
        }
        if P::ORGANIZATION_ROUTE && key.scopes.contains(&Scope::OrganizationsManage) {
            return Err(ApiError::new(
                ErrorCode::ScopeRemoved,
                format!(
                    "this key ({}) carries the removed scope organizations:manage; rotate it \
                     (POST /v1/organizations/{}/api-keys/{}/rotations) to use organization routes",
                    key.id, key.organization_id, key.id
                ),
            )
            .with_next_action("rotate"));
        }
        if let Some(slot) = parts.extensions.get::<RequiredScope>() {
            slot.record(P::SCOPE);
        }
        if !key.scopes.contains(&P::SCOPE) {
            return Err(insufficient_scope(P::SCOPE));
        }
        if P::LIVE_ONLY && key.environment != Environment::Live {
            return Err(ApiError::new(
                ErrorCode::EnvironmentNotAllowed,
                "organization state is shared by both environments; only a live secret key may change it",
            )
            .with_allowed_values(["sk_live_"]));
        }
        if ctx.organization.status == OrgStatus::Suspended {
            match P::WHILE_SUSPENDED {
                WhileSuspended::Answered => {}
                WhileSuspended::LiveKeysOnly if key.environment == Environment::Live => {}
                WhileSuspended::LiveKeysOnly | WhileSuspended::Refused => {
                    return Err(ApiError::new(
                        ErrorCode::OrganizationSuspended,
                        "the organization is suspended; its secret keys can read it and set it active again, and its live secret keys can list, revoke and rotate keys",
                    ));
                }
            }
        }
        Ok(SecretKey {
            ctx,
            policy: PhantomData,
        })
    }
}

/// A publishable key (origin and organization status already checked by the layer).
pub struct PublishableKey {
    pub ctx: Arc<AuthContext>,
}

impl<S: Send + Sync> FromRequestParts<S> for PublishableKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let ctx = context(parts)?;
        if ctx.key.key_type != KeyType::Publishable {
            return Err(ApiError::new(
                ErrorCode::CredentialTypeNotAllowed,
                "this route needs a publishable key",
            )
            .with_allowed_values(["pk_live_", "pk_test_"]));
        }
        Ok(PublishableKey { ctx })
    }
}

/// Any valid key, publishable or secret: for the few reads both kinds may make (the Gate
/// registry). A secret key needs no scope here; a publishable one passed the origin check.
pub struct AnyKey {
    pub ctx: Arc<AuthContext>,
}

impl<S: Send + Sync> FromRequestParts<S> for AnyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let ctx = context(parts)?;
        if ctx.organization.status == OrgStatus::Suspended {
            return Err(ApiError::new(
                ErrorCode::OrganizationSuspended,
                "the organization is suspended",
            ));
        }
        Ok(AnyKey { ctx })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_use_is_claimed_once_a_minute_and_the_memory_stays_bounded() {
        let writes = LastUsedWrites::default();
        let key = KeyId::generate();
        let t = schemas::time::now();
        assert!(writes.claim(key, t));
        assert!(!writes.claim(key, t), "a second request at once");
        assert!(!writes.claim(key, t + Duration::seconds(59)));
        assert!(
            writes.claim(key, t + Duration::seconds(60)),
            "a minute later"
        );
        assert!(writes.claim(KeyId::generate(), t), "another key is its own");

        // At capacity the memory is cleared rather than grown.
        let remembered = writes.0.lock().unwrap().len();
        for _ in remembered..LAST_USED_CAPACITY {
            assert!(writes.claim(KeyId::generate(), t));
        }
        assert!(writes.claim(KeyId::generate(), t));
        assert_eq!(writes.0.lock().unwrap().len(), 1);
    }

    #[test]
    fn bucket_names_are_spelled_whole_on_the_stack() {
        let client = |ip: &str| ClientInfo {
            ip: ip.parse().unwrap(),
            tls: false,
            forwarded: false,
        };
        let widest = client("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
        let mut key = store::conformance::api_key(
            schemas::ids::OrgId::generate(),
            Environment::Test,
            KeyId::generate(),
        );
        let id = key.id;
        // The names a fleet's processes share in Redis: spelled as they always were.
        assert_eq!(key_bucket(&key, widest).as_str(), format!("key:{id}"));
        key.key_type = KeyType::Publishable;
        let name = key_bucket(&key, widest);
        assert_eq!(name.as_str(), format!("key:{id}:ffff:ffff:ffff:ffff::/64"));
        assert_eq!(
            name.as_str().len(),
            59,
            "the longest name the type's doc names"
        );
        assert_eq!(
            key_bucket(&key, client("::ffff:198.51.100.7")).as_str(),
            format!("key:{id}:198.51.100.7")
        );
        assert_eq!(
            anonymous_bucket(client("192.0.2.1")).as_str(),
            "ip:192.0.2.1"
        );
        assert_eq!(
            anonymous_bucket(client("2001:db8:1:2::9")).as_str(),
            "ip:2001:db8:1:2::/64"
        );

        // A piece that does not fit is refused whole rather than written in part.
        let mut full = BucketName::default();
        assert!(std::fmt::Write::write_str(&mut full, &"x".repeat(65)).is_err());
        assert_eq!(full.as_str(), "");
    }
}
