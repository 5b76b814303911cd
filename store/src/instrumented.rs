//! The store port's one instrumented wrapper: every call of every backend gets a tracing span,
//! its latency in `vigil_store_operation_seconds{operation}` and its failures in
//! `vigil_store_errors_total{operation, kind}`, so a slow or failing store shows which
//! operation it is, whatever the backend. The retry policy stays with the callers (the
//! consumer loops share `bus::retry`): only they know which of their writes are idempotent.

use std::sync::LazyLock;
use std::time::Instant;

use async_trait::async_trait;
use prometheus::{HistogramVec, IntCounterVec};
use schemas::credential::Environment;
use schemas::ids::{EventId, KeyId, OrgId, PingId, SessionId, VisitorId};
use schemas::time::Timestamp;
use tracing::Instrument;

use crate::{
    AgentLogin, AgentTokenRecord, ApiKeyRecord, CollectSessionRecord, CredentialHash,
    DecisionRecord, EventRecord, GateAccountRecord, GatePoll, GateServiceRecord, GateServiceWrite,
    GateSessionRecord, GateSessionStatus, IdempotencyBegin, IdempotencyRecord, IdempotencyScope,
    IdleSession, OrganizationRecord, Result, SessionRecord, SessionSave, Store, StoreBackend,
    StoreError, VisitorAnchors, VisitorOrder, VisitorRecord, WebhookDeliveryRecord,
    WebhookEndpointRecord,
};

struct Metrics {
    seconds: HistogramVec,
    errors: IntCounterVec,
}

/// Registered in prometheus's default registry, which every process's `/metrics` serves.
static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let seconds = HistogramVec::new(
        prometheus::HistogramOpts::new(
            "vigil_store_operation_seconds",
            "Time of one store call, by operation.",
        )
        .buckets(vec![
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
        ]),
        &["operation"],
    )
    .expect("a valid histogram");
    let errors = IntCounterVec::new(
        prometheus::Opts::new(
            "vigil_store_errors_total",
            "Store calls that failed, by operation and kind of failure.",
        ),
        &["operation", "kind"],
    )
    .expect("a valid counter");
    for metric in [
        Box::new(seconds.clone()) as Box<dyn prometheus::core::Collector>,
        Box::new(errors.clone()),
    ] {
        if let Err(e) = prometheus::register(metric) {
            tracing::error!(error = %e, "store: registering a metric");
        }
    }
    Metrics { seconds, errors }
});

/// A failure's kind, as its label.
fn kind(e: &StoreError) -> &'static str {
    match e {
        StoreError::Conflict(_) => "conflict",
        StoreError::Unavailable(_) => "unavailable",
        StoreError::Corrupt { .. } => "corrupt",
        StoreError::Invalid(_) => "invalid",
        StoreError::NotEnabled(_) => "not_enabled",
    }
}

fn observe<T>(operation: &'static str, started: Instant, result: &Result<T>) {
    METRICS
        .seconds
        .with_label_values(&[operation])
        .observe(started.elapsed().as_secs_f64());
    if let Err(e) = result {
        METRICS
            .errors
            .with_label_values(&[operation, kind(e)])
            .inc();
    }
}

/// Any backend, instrumented.
pub struct Instrumented {
    inner: Store,
}

/// Wraps a store so its calls are measured.
pub fn instrument(inner: Store) -> Store {
    std::sync::Arc::new(Instrumented { inner })
}

macro_rules! instrumented {
    ($(fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty;)*) => {
        #[async_trait]
        impl StoreBackend for Instrumented {
            $(
                async fn $name(&self $(, $arg: $ty)*) -> $ret {
                    let started = Instant::now();
                    let result = self
                        .inner
                        .$name($($arg),*)
                        .instrument(tracing::debug_span!("store", operation = stringify!($name)))
                        .await;
                    observe(stringify!($name), started, &result);
                    result
                }
            )*
        }
    };
}

instrumented! {
    fn ping(&self) -> Result<()>;
    fn create_organization(&self, org: &OrganizationRecord) -> Result<()>;
    fn get_organization(&self, id: OrgId) -> Result<Option<OrganizationRecord>>;
    fn get_organization_by_slug(&self, slug: &str) -> Result<Option<OrganizationRecord>>;
    fn update_organization(&self, org: &OrganizationRecord) -> Result<()>;
    fn create_organization_with_keys(&self, org: &OrganizationRecord, keys: &[ApiKeyRecord]) -> Result<()>;
    fn create_api_key(&self, key: &ApiKeyRecord) -> Result<()>;
    fn get_api_key(&self, org: OrgId, env: Environment, id: KeyId) -> Result<Option<ApiKeyRecord>>;
    fn locate_api_key(&self, id: KeyId) -> Result<Option<(OrgId, Environment)>>;
    fn find_api_key_by_hash(&self, hash: &CredentialHash) -> Result<Option<ApiKeyRecord>>;
    fn list_api_keys(&self, org: OrgId, env: Environment, after: Option<KeyId>, limit: usize) -> Result<Vec<ApiKeyRecord>>;
    fn update_api_key(&self, key: &ApiKeyRecord) -> Result<()>;
    fn rotate_api_key(&self, old: &ApiKeyRecord, replacement: &ApiKeyRecord) -> Result<()>;
    fn touch_api_key(&self, org: OrgId, env: Environment, id: KeyId, at: Timestamp) -> Result<()>;
    fn idempotency_begin(&self, scope: &IdempotencyScope, record: &IdempotencyRecord) -> Result<IdempotencyBegin>;
    fn idempotency_complete(&self, scope: &IdempotencyScope, record: &IdempotencyRecord) -> Result<()>;
    fn idempotency_abandon(&self, scope: &IdempotencyScope) -> Result<()>;
    fn open_handoff_once(&self, handoff: &[u8; 16], at: Timestamp, expires_at: Timestamp) -> Result<Option<Timestamp>>;
    fn create_collect_session(&self, session: &CollectSessionRecord) -> Result<()>;
    fn get_collect_session(&self, id: SessionId) -> Result<Option<CollectSessionRecord>>;
    fn find_collect_ping(&self, ping: PingId) -> Result<Option<SessionId>>;
    fn advance_collect_seq(&self, id: SessionId, seq: u64) -> Result<bool>;
    fn advance_collect_call(&self, id: SessionId, counter: u64) -> Result<bool>;
    fn record_collect_ping(&self, id: SessionId, ping: PingId, at: Timestamp) -> Result<bool>;
    fn record_collect_ws_identity(&self, id: SessionId, identity: &serde_json::Value) -> Result<bool>;
    fn mark_collect_results(&self, id: SessionId, at: Timestamp) -> Result<Option<CollectSessionRecord>>;
    fn save_sessions(&self, saves: &[SessionSave]) -> Result<()>;
    fn get_session(&self, org: OrgId, env: Environment, id: SessionId) -> Result<Option<SessionRecord>>;
    fn list_sessions(&self, org: OrgId, env: Environment, after: Option<SessionId>, limit: usize) -> Result<Vec<SessionRecord>>;
    fn list_sessions_by_verdict(&self, org: OrgId, env: Environment, verdict: &str, after: Option<SessionId>, limit: usize) -> Result<Vec<SessionRecord>>;
    fn list_decisions(&self, org: OrgId, env: Environment, session: SessionId, limit: usize) -> Result<Vec<DecisionRecord>>;
    fn list_idle_sessions(&self, before: Timestamp, limit: usize) -> Result<Vec<IdleSession>>;
    fn get_event(&self, org: OrgId, env: Environment, id: EventId) -> Result<Option<EventRecord>>;
    fn record_events(&self, events: &[EventRecord]) -> Result<()>;
    fn list_events(&self, org: OrgId, env: Environment, after: Option<EventId>, limit: usize) -> Result<Vec<EventRecord>>;
    fn create_webhook_endpoint(&self, endpoint: &WebhookEndpointRecord) -> Result<()>;
    fn get_webhook_endpoint(&self, org: OrgId, env: Environment, id: schemas::ids::WebhookEndpointId) -> Result<Option<WebhookEndpointRecord>>;
    fn list_webhook_endpoints(&self, org: OrgId, env: Environment, after: Option<schemas::ids::WebhookEndpointId>, limit: usize) -> Result<Vec<WebhookEndpointRecord>>;
    fn update_webhook_endpoint(&self, endpoint: &WebhookEndpointRecord) -> Result<bool>;
    fn disable_webhook_endpoint(&self, org: OrgId, env: Environment, id: schemas::ids::WebhookEndpointId, at: Timestamp) -> Result<bool>;
    fn create_webhook_deliveries(&self, deliveries: &[WebhookDeliveryRecord]) -> Result<Vec<schemas::ids::WebhookDeliveryId>>;
    fn record_webhook_attempts(&self, deliveries: &[WebhookDeliveryRecord]) -> Result<usize>;
    fn defer_webhook_deliveries(&self, deliveries: &[WebhookDeliveryRecord]) -> Result<usize>;
    fn claim_webhook_deliveries(&self, deliveries: &[WebhookDeliveryRecord], until: Timestamp) -> Result<Vec<schemas::ids::WebhookDeliveryId>>;
    fn list_event_deliveries(&self, org: OrgId, env: Environment, event: EventId) -> Result<Vec<WebhookDeliveryRecord>>;
    fn due_webhook_deliveries(&self, before: Timestamp, limit: usize) -> Result<Vec<WebhookDeliveryRecord>>;
    fn create_gate_service(&self, service: &GateServiceRecord, cap: usize) -> Result<GateServiceWrite>;
    fn get_gate_service(&self, id: &str) -> Result<Option<GateServiceRecord>>;
    fn list_gate_services(&self, org: OrgId, env: Environment) -> Result<Vec<GateServiceRecord>>;
    fn update_gate_service(&self, previous_id: &str, service: &GateServiceRecord) -> Result<GateServiceWrite>;
    fn list_gate_registry(&self, env: Environment, after: Option<&str>, limit: usize) -> Result<Vec<GateServiceRecord>>;
    fn create_gate_session(&self, session: &GateSessionRecord) -> Result<()>;
    fn get_gate_session(&self, id: schemas::ids::GateSessionId) -> Result<Option<GateSessionRecord>>;
    fn transition_gate_session(&self, session: &GateSessionRecord, expected: GateSessionStatus, made: Option<(&GateAccountRecord, &AgentTokenRecord)>) -> Result<bool>;
    fn count_gate_poll(&self, id: schemas::ids::GateSessionId, token: &CredentialHash, now: Timestamp, slow_down_secs: u32, max_polls: u32) -> Result<Option<(GateSessionRecord, GatePoll)>>;
    fn get_gate_account(&self, id: schemas::ids::GateAccountId) -> Result<Option<GateAccountRecord>>;
    fn get_login_by_code(&self, code: &CredentialHash) -> Result<Option<GateSessionRecord>>;
    fn get_agent_token(&self, hash: &CredentialHash) -> Result<Option<AgentTokenRecord>>;
    fn update_agent_token(&self, token: &AgentTokenRecord) -> Result<bool>;
    fn count_agent_login(&self, hash: &CredentialHash, now: Timestamp, per_hour: usize) -> Result<AgentLogin>;
    fn revoke_agent_token(&self, hash: &CredentialHash, at: Timestamp) -> Result<Option<AgentTokenRecord>>;
    fn save_visitors(&self, visitors: &[VisitorRecord]) -> Result<()>;
    fn get_visitor(&self, org: OrgId, env: Environment, id: VisitorId) -> Result<Option<VisitorRecord>>;
    fn find_visitor_by_anchors(&self, org: OrgId, env: Environment, anchors: &VisitorAnchors, limit: usize) -> Result<Vec<VisitorRecord>>;
    fn list_visitors(&self, org: OrgId, env: Environment, after: Option<VisitorId>, limit: usize) -> Result<Vec<VisitorRecord>>;
    fn list_visitors_by(&self, org: OrgId, env: Environment, order: VisitorOrder, after: Option<(u64, VisitorId)>, limit: usize) -> Result<Vec<VisitorRecord>>;
    fn purge_expired(&self, now: Timestamp, keep_since: Timestamp, budget: usize) -> Result<bool>;
    fn get_setting(&self, name: &str) -> Result<Option<Vec<u8>>>;
    fn put_setting_if_absent(&self, name: &str, value: &[u8]) -> Result<bool>;
}
