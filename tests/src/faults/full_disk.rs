//! A store that runs out of space on demand: it wraps the server's real store and, while
//! [`FullDisk::fill`] is in effect, refuses every write (and `ping`) with the error the
//! embedded store gives on a full disk, so a full disk's answers can be tested anywhere,
//! without mounting a filesystem. Reads pass through untouched.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use schemas::credential::Environment;
use schemas::ids::{KeyId, OrgId};
use schemas::time::Timestamp;
use store::{
    ApiKeyRecord, CollectSessionRecord, CredentialHash, DecisionRecord, EventRecord,
    IdempotencyBegin, IdempotencyRecord, IdempotencyScope, IdleSession, OrganizationRecord, Result,
    SessionRecord, SessionSave, Store, StoreBackend, StoreError, VisitorAnchors, VisitorOrder,
    VisitorRecord,
};

/// The switch a test holds to fill and free the wrapped store's "disk".
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
        Arc::new(FaultyStore {
            inner: store,
            full: self.clone(),
        })
    }
}

struct FaultyStore {
    inner: Store,
    full: FullDisk,
}

impl FaultyStore {
    fn refuse(&self) -> Result<()> {
        match self.full.0.load(Ordering::SeqCst) {
            // The embedded store's words for it (`schemas::disk`).
            true => Err(StoreError::Unavailable(
                "disk full: 0 bytes free, under the reserve (injected)".into(),
            )),
            false => Ok(()),
        }
    }
}

#[async_trait]
impl StoreBackend for FaultyStore {
    async fn ping(&self) -> Result<()> {
        self.refuse()?;
        self.inner.ping().await
    }

    async fn create_organization(&self, org: &OrganizationRecord) -> Result<()> {
        self.refuse()?;
        self.inner.create_organization(org).await
    }

    async fn get_organization(&self, id: OrgId) -> Result<Option<OrganizationRecord>> {
        self.inner.get_organization(id).await
    }

    async fn get_organization_by_slug(&self, slug: &str) -> Result<Option<OrganizationRecord>> {
        self.inner.get_organization_by_slug(slug).await
    }

    async fn update_organization(&self, org: &OrganizationRecord) -> Result<()> {
        self.refuse()?;
        self.inner.update_organization(org).await
    }

    async fn create_organization_with_keys(
        &self,
        org: &OrganizationRecord,
        keys: &[ApiKeyRecord],
    ) -> Result<()> {
        self.refuse()?;
        self.inner.create_organization_with_keys(org, keys).await
    }

    async fn create_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        self.refuse()?;
        self.inner.create_api_key(key).await
    }

    async fn get_api_key(
        &self,
        org: OrgId,
        env: Environment,
        id: KeyId,
    ) -> Result<Option<ApiKeyRecord>> {
        self.inner.get_api_key(org, env, id).await
    }

    async fn locate_api_key(&self, id: KeyId) -> Result<Option<(OrgId, Environment)>> {
        self.inner.locate_api_key(id).await
    }

    async fn find_api_key_by_hash(&self, hash: &CredentialHash) -> Result<Option<ApiKeyRecord>> {
        self.inner.find_api_key_by_hash(hash).await
    }

    async fn list_api_keys(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<KeyId>,
        limit: usize,
    ) -> Result<Vec<ApiKeyRecord>> {
        self.inner.list_api_keys(org, env, after, limit).await
    }

    async fn update_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        self.refuse()?;
        self.inner.update_api_key(key).await
    }

    async fn rotate_api_key(&self, old: &ApiKeyRecord, replacement: &ApiKeyRecord) -> Result<()> {
        self.refuse()?;
        self.inner.rotate_api_key(old, replacement).await
    }

    async fn touch_api_key(
        &self,
        org: OrgId,
        env: Environment,
        id: KeyId,
        at: Timestamp,
    ) -> Result<()> {
        self.refuse()?;
        self.inner.touch_api_key(org, env, id, at).await
    }

    async fn idempotency_begin(
        &self,
        scope: &IdempotencyScope,
        record: &IdempotencyRecord,
    ) -> Result<IdempotencyBegin> {
        self.refuse()?;
        self.inner.idempotency_begin(scope, record).await
    }

    async fn idempotency_complete(
        &self,
        scope: &IdempotencyScope,
        record: &IdempotencyRecord,
    ) -> Result<()> {
        self.refuse()?;
        self.inner.idempotency_complete(scope, record).await
    }

    async fn idempotency_abandon(&self, scope: &IdempotencyScope) -> Result<()> {
        self.refuse()?;
        self.inner.idempotency_abandon(scope).await
    }

    async fn open_handoff_once(
        &self,
        handoff: &[u8; 16],
        at: Timestamp,
        expires_at: Timestamp,
    ) -> Result<Option<Timestamp>> {
        self.refuse()?;
        self.inner.open_handoff_once(handoff, at, expires_at).await
    }

    async fn create_collect_session(&self, session: &CollectSessionRecord) -> Result<()> {
        self.refuse()?;
        self.inner.create_collect_session(session).await
    }

    async fn get_collect_session(
        &self,
        id: schemas::SessionId,
    ) -> Result<Option<CollectSessionRecord>> {
        self.inner.get_collect_session(id).await
    }

    async fn find_collect_ping(&self, ping: schemas::PingId) -> Result<Option<schemas::SessionId>> {
        self.inner.find_collect_ping(ping).await
    }

    async fn advance_collect_seq(&self, id: schemas::SessionId, seq: u64) -> Result<bool> {
        self.refuse()?;
        self.inner.advance_collect_seq(id, seq).await
    }

    async fn advance_collect_call(&self, id: schemas::SessionId, counter: u64) -> Result<bool> {
        self.refuse()?;
        self.inner.advance_collect_call(id, counter).await
    }

    async fn record_collect_ping(
        &self,
        id: schemas::SessionId,
        ping: schemas::PingId,
        at: Timestamp,
    ) -> Result<bool> {
        self.refuse()?;
        self.inner.record_collect_ping(id, ping, at).await
    }

    async fn record_collect_ws_identity(
        &self,
        id: schemas::SessionId,
        identity: &serde_json::Value,
    ) -> Result<bool> {
        self.refuse()?;
        self.inner.record_collect_ws_identity(id, identity).await
    }

    async fn mark_collect_results(
        &self,
        id: schemas::SessionId,
        at: Timestamp,
    ) -> Result<Option<CollectSessionRecord>> {
        self.refuse()?;
        self.inner.mark_collect_results(id, at).await
    }

    async fn save_sessions(&self, saves: &[SessionSave]) -> Result<()> {
        self.refuse()?;
        self.inner.save_sessions(saves).await
    }

    async fn get_session(
        &self,
        org: OrgId,
        env: Environment,
        id: schemas::SessionId,
    ) -> Result<Option<SessionRecord>> {
        self.inner.get_session(org, env, id).await
    }

    async fn list_sessions(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<schemas::SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>> {
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
        self.inner
            .list_sessions_by_verdict(org, env, verdict, after, limit)
            .await
    }

    async fn list_decisions(
        &self,
        session: schemas::SessionId,
        limit: usize,
    ) -> Result<Vec<DecisionRecord>> {
        self.inner.list_decisions(session, limit).await
    }

    async fn list_idle_sessions(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> Result<Vec<IdleSession>> {
        self.inner.list_idle_sessions(before, limit).await
    }

    async fn get_event(
        &self,
        org: OrgId,
        env: Environment,
        id: schemas::EventId,
    ) -> Result<Option<EventRecord>> {
        self.inner.get_event(org, env, id).await
    }

    async fn list_events(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<schemas::EventId>,
        limit: usize,
    ) -> Result<Vec<EventRecord>> {
        self.inner.list_events(org, env, after, limit).await
    }

    async fn save_visitor(&self, visitor: &VisitorRecord) -> Result<()> {
        self.refuse()?;
        self.inner.save_visitor(visitor).await
    }

    async fn get_visitor(
        &self,
        org: OrgId,
        env: Environment,
        id: schemas::VisitorId,
    ) -> Result<Option<VisitorRecord>> {
        self.inner.get_visitor(org, env, id).await
    }

    async fn find_visitor_by_anchors(
        &self,
        org: OrgId,
        env: Environment,
        anchors: &VisitorAnchors,
        limit: usize,
    ) -> Result<Vec<VisitorRecord>> {
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
        self.refuse()?;
        self.inner.purge_expired(now, keep_since, budget).await
    }

    async fn get_setting(&self, name: &str) -> Result<Option<Vec<u8>>> {
        self.inner.get_setting(name).await
    }

    async fn put_setting_if_absent(&self, name: &str, value: &[u8]) -> Result<bool> {
        self.refuse()?;
        self.inner.put_setting_if_absent(name, value).await
    }
}
