//! Fault-injecting backends for tests: a store that fails chosen calls a set number of times
//! before passing them through (a store outage the processor must ride out) and can report a
//! session's row as corrupt (a damaged disk), and a log that
//! refuses one key's records on one topic as over its size (a topic configured with a smaller
//! `max.message.bytes` than Vigil assumes). Both wrap the real backends and change nothing else.
//! The same store also runs out of space on demand ([`FullDisk`]): while its switch is on,
//! every write (and `ping`) is refused with the error the embedded store gives on a full disk,
//! so a full disk's answers can be tested without mounting a filesystem; reads pass through.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bus::{BusError, Group, LogBackend, LogConsumer, Position, Topic};
use schemas::credential::Environment;
use schemas::ids::{KeyId, OrgId};
use schemas::time::Timestamp;
use store::*;

/// The store, with the next `n` calls of chosen methods failing as `Unavailable` (see
/// [`FlakyStore::fail_next`]).
pub struct FlakyStore {
    inner: Store,
    /// Failures still to inject, by method name.
    failures_left: Mutex<HashMap<&'static str, u32>>,
    /// Sessions whose row reads as corrupt.
    corrupt_sessions: Mutex<HashSet<schemas::SessionId>>,
    /// How many calls failed so far.
    pub failed: AtomicU32,
    /// While on, writes are refused as on a full disk.
    disk: FullDisk,
}

/// The switch a test holds to fill and free a [`FlakyStore`]'s "disk".
#[derive(Clone, Default)]
pub struct FullDisk(Arc<AtomicBool>);

impl FullDisk {
    pub fn fill(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn free(&self) {
        self.0.store(false, Ordering::SeqCst);
    }

    /// `store`, refusing writes while this switch is on.
    pub fn wrap(&self, store: Store) -> Store {
        FlakyStore::with_disk(store, self.clone())
    }
}

/// The `StoreBackend` methods that write (and `ping`, which a full disk fails too).
const WRITES: &[&str] = &[
    "ping",
    "create_organization",
    "update_organization",
    "create_organization_with_keys",
    "create_api_key",
    "update_api_key",
    "rotate_api_key",
    "touch_api_key",
    "idempotency_begin",
    "idempotency_complete",
    "idempotency_abandon",
    "open_handoff_once",
    "create_collect_session",
    "advance_collect_seq",
    "advance_collect_call",
    "record_collect_ping",
    "record_collect_ws_identity",
    "mark_collect_results",
    "save_sessions",
    "save_visitor",
    "save_visitors",
    "record_events",
    "create_webhook_endpoint",
    "update_webhook_endpoint",
    "disable_webhook_endpoint",
    "create_webhook_deliveries",
    "record_webhook_attempts",
    "defer_webhook_deliveries",
    "claim_webhook_deliveries",
    "create_gate_service",
    "update_gate_service",
    "create_gate_session",
    "transition_gate_session",
    "update_agent_token",
    "count_agent_login",
    "count_gate_poll",
    "revoke_agent_token",
    "purge_expired",
    "put_setting_if_absent",
];

impl FlakyStore {
    /// Wraps `inner`; nothing fails until [`FlakyStore::fail_next`] says so.
    pub fn new(inner: Store) -> Arc<Self> {
        Self::with_disk(inner, FullDisk::default())
    }

    /// Wraps `inner`, its disk filled and freed by `disk`.
    fn with_disk(inner: Store, disk: FullDisk) -> Arc<Self> {
        Arc::new(FlakyStore {
            inner,
            failures_left: Mutex::default(),
            corrupt_sessions: Mutex::default(),
            failed: AtomicU32::new(0),
            disk,
        })
    }

    /// The store it wraps, for a test to read without meeting the faults.
    pub fn inner(&self) -> &Store {
        &self.inner
    }

    /// Makes the next `n` calls of `method` (a `StoreBackend` method's name) fail.
    pub fn fail_next(&self, method: &'static str, n: u32) {
        self.failures_left
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(method, n);
    }

    /// From now on, reading `session`'s row fails as `Corrupt`, as a damaged row would.
    pub fn corrupt_session(&self, session: schemas::SessionId) {
        self.corrupt_sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(session);
    }

    fn fault(&self, method: &'static str) -> Result<()> {
        if self.disk.0.load(Ordering::SeqCst) && WRITES.contains(&method) {
            // The embedded store's words for it (`schemas::disk`).
            return Err(StoreError::Unavailable(
                "disk full: 0 bytes free, under the reserve (injected)".into(),
            ));
        }
        let mut left = self
            .failures_left
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let took = left.get_mut(method).filter(|n| **n > 0).map(|n| *n -= 1);
        if took.is_some() {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::Unavailable(format!(
                "injected fault in {method}"
            )));
        }
        Ok(())
    }
}

#[async_trait]
impl StoreBackend for FlakyStore {
    async fn ping(&self) -> Result<()> {
        self.fault("ping")?;
        self.inner.ping().await
    }

    async fn create_organization(&self, org: &OrganizationRecord) -> Result<()> {
        self.fault("create_organization")?;
        self.inner.create_organization(org).await
    }

    async fn get_organization(&self, id: OrgId) -> Result<Option<OrganizationRecord>> {
        self.fault("get_organization")?;
        self.inner.get_organization(id).await
    }

    async fn get_organization_by_slug(&self, slug: &str) -> Result<Option<OrganizationRecord>> {
        self.fault("get_organization_by_slug")?;
        self.inner.get_organization_by_slug(slug).await
    }

    async fn update_organization(&self, org: &OrganizationRecord) -> Result<()> {
        self.fault("update_organization")?;
        self.inner.update_organization(org).await
    }

    async fn create_organization_with_keys(
        &self,
        org: &OrganizationRecord,
        keys: &[ApiKeyRecord],
    ) -> Result<()> {
        self.fault("create_organization_with_keys")?;
        self.inner.create_organization_with_keys(org, keys).await
    }

    async fn create_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        self.fault("create_api_key")?;
        self.inner.create_api_key(key).await
    }

    async fn get_api_key(
        &self,
        org: OrgId,
        env: Environment,
        id: KeyId,
    ) -> Result<Option<ApiKeyRecord>> {
        self.fault("get_api_key")?;
        self.inner.get_api_key(org, env, id).await
    }

    async fn locate_api_key(&self, id: KeyId) -> Result<Option<(OrgId, Environment)>> {
        self.fault("locate_api_key")?;
        self.inner.locate_api_key(id).await
    }

    async fn find_api_key_by_hash(&self, hash: &CredentialHash) -> Result<Option<ApiKeyRecord>> {
        self.fault("find_api_key_by_hash")?;
        self.inner.find_api_key_by_hash(hash).await
    }

    async fn list_api_keys(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<KeyId>,
        limit: usize,
    ) -> Result<Vec<ApiKeyRecord>> {
        self.fault("list_api_keys")?;
        self.inner.list_api_keys(org, env, after, limit).await
    }

    async fn update_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        self.fault("update_api_key")?;
        self.inner.update_api_key(key).await
    }

    async fn rotate_api_key(&self, old: &ApiKeyRecord, replacement: &ApiKeyRecord) -> Result<()> {
        self.fault("rotate_api_key")?;
        self.inner.rotate_api_key(old, replacement).await
    }

    async fn touch_api_key(
        &self,
        org: OrgId,
        env: Environment,
        id: KeyId,
        at: Timestamp,
    ) -> Result<()> {
        self.fault("touch_api_key")?;
        self.inner.touch_api_key(org, env, id, at).await
    }

    async fn idempotency_begin(
        &self,
        scope: &IdempotencyScope,
        record: &IdempotencyRecord,
    ) -> Result<IdempotencyBegin> {
        self.fault("idempotency_begin")?;
        self.inner.idempotency_begin(scope, record).await
    }

    async fn idempotency_complete(
        &self,
        scope: &IdempotencyScope,
        record: &IdempotencyRecord,
    ) -> Result<()> {
        self.fault("idempotency_complete")?;
        self.inner.idempotency_complete(scope, record).await
    }

    async fn idempotency_abandon(&self, scope: &IdempotencyScope) -> Result<()> {
        self.fault("idempotency_abandon")?;
        self.inner.idempotency_abandon(scope).await
    }

    async fn open_handoff_once(
        &self,
        handoff: &[u8; 16],
        at: Timestamp,
        expires_at: Timestamp,
    ) -> Result<Option<Timestamp>> {
        self.fault("open_handoff_once")?;
        self.inner.open_handoff_once(handoff, at, expires_at).await
    }

    async fn create_collect_session(&self, session: &CollectSessionRecord) -> Result<()> {
        self.fault("create_collect_session")?;
        self.inner.create_collect_session(session).await
    }

    async fn get_collect_session(
        &self,
        id: schemas::SessionId,
    ) -> Result<Option<CollectSessionRecord>> {
        self.fault("get_collect_session")?;
        self.inner.get_collect_session(id).await
    }

    async fn find_collect_ping(&self, ping: schemas::PingId) -> Result<Option<schemas::SessionId>> {
        self.fault("find_collect_ping")?;
        self.inner.find_collect_ping(ping).await
    }

    async fn advance_collect_seq(&self, id: schemas::SessionId, seq: u64) -> Result<bool> {
        self.fault("advance_collect_seq")?;
        self.inner.advance_collect_seq(id, seq).await
    }

    async fn advance_collect_call(&self, id: schemas::SessionId, counter: u64) -> Result<bool> {
        self.fault("advance_collect_call")?;
        self.inner.advance_collect_call(id, counter).await
    }

    async fn record_collect_ping(
        &self,
        id: schemas::SessionId,
        ping: schemas::PingId,
        at: Timestamp,
    ) -> Result<bool> {
        self.fault("record_collect_ping")?;
        self.inner.record_collect_ping(id, ping, at).await
    }

    async fn record_collect_ws_identity(
        &self,
        id: schemas::SessionId,
        identity: &serde_json::Value,
    ) -> Result<bool> {
        self.fault("record_collect_ws_identity")?;
        self.inner.record_collect_ws_identity(id, identity).await
    }

    async fn mark_collect_results(
        &self,
        id: schemas::SessionId,
        at: Timestamp,
    ) -> Result<Option<CollectSessionRecord>> {
        self.fault("mark_collect_results")?;
        self.inner.mark_collect_results(id, at).await
    }

    // `save_session` keeps the trait's default, which calls `save_sessions` below.
    async fn save_sessions(&self, saves: &[SessionSave]) -> Result<()> {
        self.fault("save_sessions")?;
        self.inner.save_sessions(saves).await
    }

    async fn get_session(
        &self,
        org: OrgId,
        env: Environment,
        id: schemas::SessionId,
    ) -> Result<Option<SessionRecord>> {
        self.fault("get_session")?;
        let corrupt = self
            .corrupt_sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&id);
        if corrupt {
            // What the embedded store answers for a row whose bytes do not decode.
            return Err(StoreError::Corrupt {
                table: "sessions",
                detail: format!("injected: the row of {id} does not decode"),
            });
        }
        self.inner.get_session(org, env, id).await
    }

    async fn list_sessions(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<schemas::SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>> {
        self.fault("list_sessions")?;
        self.inner.list_sessions(org, env, after, limit).await
    }

    async fn list_sessions_by_verdict(
        &self,
        org: OrgId,
        env: Environment,
        verdict: &str,
        after: Option<schemas::SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>> {
        self.fault("list_sessions_by_verdict")?;
        self.inner
            .list_sessions_by_verdict(org, env, verdict, after, limit)
            .await
    }

    async fn list_decisions(
        &self,
        org: OrgId,
        env: Environment,
        session: schemas::SessionId,
        limit: usize,
    ) -> Result<Vec<DecisionRecord>> {
        self.fault("list_decisions")?;
        self.inner.list_decisions(org, env, session, limit).await
    }

    async fn list_idle_sessions(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> Result<Vec<IdleSession>> {
        self.fault("list_idle_sessions")?;
        self.inner.list_idle_sessions(before, limit).await
    }

    async fn get_event(
        &self,
        org: OrgId,
        env: Environment,
        id: schemas::EventId,
    ) -> Result<Option<EventRecord>> {
        self.fault("get_event")?;
        self.inner.get_event(org, env, id).await
    }

    async fn list_events(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<schemas::EventId>,
        limit: usize,
    ) -> Result<Vec<EventRecord>> {
        self.fault("list_events")?;
        self.inner.list_events(org, env, after, limit).await
    }

    async fn create_webhook_deliveries(
        &self,
        deliveries: &[WebhookDeliveryRecord],
    ) -> Result<Vec<schemas::ids::WebhookDeliveryId>> {
        self.fault("create_webhook_deliveries")?;
        self.inner.create_webhook_deliveries(deliveries).await
    }

    async fn record_webhook_attempts(&self, deliveries: &[WebhookDeliveryRecord]) -> Result<usize> {
        self.fault("record_webhook_attempts")?;
        self.inner.record_webhook_attempts(deliveries).await
    }

    async fn list_event_deliveries(
        &self,
        org: OrgId,
        env: Environment,
        event: schemas::EventId,
    ) -> Result<Vec<WebhookDeliveryRecord>> {
        self.fault("list_event_deliveries")?;
        self.inner.list_event_deliveries(org, env, event).await
    }

    async fn disable_webhook_endpoint(
        &self,
        org: OrgId,
        env: Environment,
        id: schemas::ids::WebhookEndpointId,
        at: Timestamp,
    ) -> Result<bool> {
        self.fault("disable_webhook_endpoint")?;
        self.inner.disable_webhook_endpoint(org, env, id, at).await
    }

    async fn create_gate_session(&self, session: &GateSessionRecord) -> Result<()> {
        self.fault("create_gate_session")?;
        self.inner.create_gate_session(session).await
    }

    async fn get_gate_session(
        &self,
        id: schemas::ids::GateSessionId,
    ) -> Result<Option<GateSessionRecord>> {
        self.fault("get_gate_session")?;
        self.inner.get_gate_session(id).await
    }

    async fn transition_gate_session(
        &self,
        session: &GateSessionRecord,
        expected: GateSessionStatus,
        made: Option<(&GateAccountRecord, &AgentTokenRecord)>,
    ) -> Result<bool> {
        self.fault("transition_gate_session")?;
        self.inner
            .transition_gate_session(session, expected, made)
            .await
    }

    async fn count_gate_poll(
        &self,
        id: schemas::ids::GateSessionId,
        token: &CredentialHash,
        now: Timestamp,
        slow_down_secs: u32,
        max_polls: u32,
    ) -> Result<Option<(GateSessionRecord, GatePoll)>> {
        self.fault("count_gate_poll")?;
        self.inner
            .count_gate_poll(id, token, now, slow_down_secs, max_polls)
            .await
    }

    async fn get_gate_account(
        &self,
        id: schemas::ids::GateAccountId,
    ) -> Result<Option<GateAccountRecord>> {
        self.fault("get_gate_account")?;
        self.inner.get_gate_account(id).await
    }

    async fn count_agent_login(
        &self,
        hash: &CredentialHash,
        now: Timestamp,
        per_hour: usize,
    ) -> Result<AgentLogin> {
        self.fault("count_agent_login")?;
        self.inner.count_agent_login(hash, now, per_hour).await
    }

    async fn revoke_agent_token(
        &self,
        hash: &CredentialHash,
        at: Timestamp,
    ) -> Result<Option<AgentTokenRecord>> {
        self.fault("revoke_agent_token")?;
        self.inner.revoke_agent_token(hash, at).await
    }

    async fn get_login_by_code(&self, code: &CredentialHash) -> Result<Option<GateSessionRecord>> {
        self.fault("get_login_by_code")?;
        self.inner.get_login_by_code(code).await
    }

    async fn get_agent_token(&self, hash: &CredentialHash) -> Result<Option<AgentTokenRecord>> {
        self.fault("get_agent_token")?;
        self.inner.get_agent_token(hash).await
    }

    async fn update_agent_token(&self, token: &AgentTokenRecord) -> Result<bool> {
        self.fault("update_agent_token")?;
        self.inner.update_agent_token(token).await
    }

    async fn create_gate_service(
        &self,
        service: &GateServiceRecord,
        cap: usize,
    ) -> Result<GateServiceWrite> {
        self.fault("create_gate_service")?;
        self.inner.create_gate_service(service, cap).await
    }

    async fn get_gate_service(&self, id: &str) -> Result<Option<GateServiceRecord>> {
        self.fault("get_gate_service")?;
        self.inner.get_gate_service(id).await
    }

    async fn list_gate_services(
        &self,
        org: OrgId,
        env: Environment,
    ) -> Result<Vec<GateServiceRecord>> {
        self.fault("list_gate_services")?;
        self.inner.list_gate_services(org, env).await
    }

    async fn update_gate_service(
        &self,
        previous_id: &str,
        service: &GateServiceRecord,
    ) -> Result<GateServiceWrite> {
        self.fault("update_gate_service")?;
        self.inner.update_gate_service(previous_id, service).await
    }

    async fn list_gate_registry(
        &self,
        env: Environment,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<GateServiceRecord>> {
        self.fault("list_gate_registry")?;
        self.inner.list_gate_registry(env, after, limit).await
    }

    async fn defer_webhook_deliveries(
        &self,
        deliveries: &[WebhookDeliveryRecord],
    ) -> Result<usize> {
        self.fault("defer_webhook_deliveries")?;
        self.inner.defer_webhook_deliveries(deliveries).await
    }

    async fn claim_webhook_deliveries(
        &self,
        deliveries: &[WebhookDeliveryRecord],
        until: Timestamp,
    ) -> Result<Vec<schemas::ids::WebhookDeliveryId>> {
        self.fault("claim_webhook_deliveries")?;
        self.inner.claim_webhook_deliveries(deliveries, until).await
    }

    async fn due_webhook_deliveries(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> Result<Vec<WebhookDeliveryRecord>> {
        self.fault("due_webhook_deliveries")?;
        self.inner.due_webhook_deliveries(before, limit).await
    }

    async fn record_events(&self, events: &[EventRecord]) -> Result<()> {
        self.fault("record_events")?;
        self.inner.record_events(events).await
    }

    async fn create_webhook_endpoint(&self, endpoint: &WebhookEndpointRecord) -> Result<()> {
        self.fault("create_webhook_endpoint")?;
        self.inner.create_webhook_endpoint(endpoint).await
    }

    async fn get_webhook_endpoint(
        &self,
        org: OrgId,
        env: Environment,
        id: schemas::ids::WebhookEndpointId,
    ) -> Result<Option<WebhookEndpointRecord>> {
        self.fault("get_webhook_endpoint")?;
        self.inner.get_webhook_endpoint(org, env, id).await
    }

    async fn list_webhook_endpoints(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<schemas::ids::WebhookEndpointId>,
        limit: usize,
    ) -> Result<Vec<WebhookEndpointRecord>> {
        self.fault("list_webhook_endpoints")?;
        self.inner
            .list_webhook_endpoints(org, env, after, limit)
            .await
    }

    async fn update_webhook_endpoint(&self, endpoint: &WebhookEndpointRecord) -> Result<bool> {
        self.fault("update_webhook_endpoint")?;
        self.inner.update_webhook_endpoint(endpoint).await
    }

    async fn save_visitors(&self, visitors: &[VisitorRecord]) -> Result<()> {
        self.fault("save_visitors")?;
        self.inner.save_visitors(visitors).await
    }

    async fn get_visitor(
        &self,
        org: OrgId,
        env: Environment,
        id: schemas::VisitorId,
    ) -> Result<Option<VisitorRecord>> {
        self.fault("get_visitor")?;
        self.inner.get_visitor(org, env, id).await
    }

    async fn find_visitor_by_anchors(
        &self,
        org: OrgId,
        env: Environment,
        anchors: &VisitorAnchors,
        limit: usize,
    ) -> Result<Vec<VisitorRecord>> {
        self.fault("find_visitor_by_anchors")?;
        self.inner
            .find_visitor_by_anchors(org, env, anchors, limit)
            .await
    }

    async fn list_visitors(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<schemas::VisitorId>,
        limit: usize,
    ) -> Result<Vec<VisitorRecord>> {
        self.fault("list_visitors")?;
        self.inner.list_visitors(org, env, after, limit).await
    }

    async fn list_visitors_by(
        &self,
        org: OrgId,
        env: Environment,
        order: VisitorOrder,
        after: Option<(u64, schemas::VisitorId)>,
        limit: usize,
    ) -> Result<Vec<VisitorRecord>> {
        self.fault("list_visitors_by")?;
        self.inner
            .list_visitors_by(org, env, order, after, limit)
            .await
    }

    async fn purge_expired(
        &self,
        now: Timestamp,
        keep_since: Timestamp,
        budget: usize,
    ) -> Result<bool> {
        self.fault("purge_expired")?;
        self.inner.purge_expired(now, keep_since, budget).await
    }

    async fn get_setting(&self, name: &str) -> Result<Option<Vec<u8>>> {
        self.fault("get_setting")?;
        self.inner.get_setting(name).await
    }

    async fn put_setting_if_absent(&self, name: &str, value: &[u8]) -> Result<bool> {
        self.fault("put_setting_if_absent")?;
        self.inner.put_setting_if_absent(name, value).await
    }
}

/// The log, refusing as `TooLarge` every append to `topic` whose key is one of `keys`.
pub struct RefusingLog {
    inner: bus::Log,
    topic: Topic,
    keys: Mutex<HashSet<Vec<u8>>>,
}

impl RefusingLog {
    pub fn new(inner: bus::Log, topic: &'static str) -> Arc<Self> {
        Arc::new(RefusingLog {
            inner,
            topic: Topic::from_static(topic),
            keys: Mutex::new(HashSet::new()),
        })
    }

    /// From now on, appends to the topic with this key are refused.
    pub fn refuse(&self, key: &[u8]) {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key.to_vec());
    }

    /// From now on, appends with this key pass again (the topic's limit was raised).
    pub fn allow(&self, key: &[u8]) {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }
}

#[async_trait]
impl LogBackend for RefusingLog {
    async fn ping(&self) -> bus::Result<()> {
        self.inner.ping().await
    }

    async fn create_topic(&self, topic: &Topic, partitions: u32) -> bus::Result<u32> {
        self.inner.create_topic(topic, partitions).await
    }

    async fn partitions(&self, topic: &Topic) -> bus::Result<u32> {
        self.inner.partitions(topic).await
    }

    async fn append(&self, topic: &Topic, key: &[u8], payload: &[u8]) -> bus::Result<Position> {
        let refused = *topic == self.topic
            && self
                .keys
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains(key);
        if refused {
            return Err(BusError::TooLarge {
                size: key.len() + payload.len(),
                limit: key.len() + payload.len() - 1,
            });
        }
        self.inner.append(topic, key, payload).await
    }

    async fn end_offsets(&self, topic: &Topic) -> bus::Result<Vec<u64>> {
        self.inner.end_offsets(topic).await
    }

    async fn consumer(
        &self,
        group: &Group,
        topic: &Topic,
        partitions: &[u32],
    ) -> bus::Result<Box<dyn LogConsumer>> {
        self.inner.consumer(group, topic, partitions).await
    }

    async fn member(&self, group: &Group, topic: &Topic) -> bus::Result<Box<dyn LogConsumer>> {
        self.inner.member(group, topic).await
    }

    async fn expire(&self, retention: std::time::Duration, budget: usize) -> bus::Result<bool> {
        self.inner.expire(retention, budget).await
    }
}
