//! The store port: one trait per table group, each implemented directly by every backend in a
//! file named after the group (`store/src/<backend>/<group>.rs`), and [`StoreBackend`], the
//! union of them all that a backend is. Adding a method touches its group's trait, one file per
//! backend and the group's conformance cases (`store/src/conformance/<group>.rs`), nothing else.
//!
//! The groups follow the families of tables that are written together, each served to one part
//! of the service: organizations and API keys (authentication and the admin API), idempotency
//! (every POST of the REST surface), collect sessions and handoffs (ingest), scored sessions and
//! their decisions (the processor and the session reads), visitors (linking and the fingerprint
//! reads), events and webhooks (the events API and the dispatcher), Gate, and retention, which
//! spans them all. Handoff openings sit with collect because a handoff is minted from a collect
//! session and both expire within the hour; events sit with webhooks because every delivery
//! names its event and the dispatcher reads both.
//!
//! Every query is one that ScyllaDB answers from a single partition (or a primary-key lookup),
//! never with `ALLOW FILTERING`.
//!
//! The traits are declared through `store_port!`, which also implements each of them for
//! [`Layered`]: a store wrapped in a [`StoreLayer`] that sees every call by the name of its
//! method (the metrics of `instrumented`, the tests' fault injection). So no wrapper forwards a
//! method by hand, and a method added to a trait reaches every wrapper by itself.

use std::future::Future;

use async_trait::async_trait;
use schemas::credential::Environment;
use schemas::ids::{KeyId, OrgId};
use schemas::session_digest::SessionDigest;
use schemas::time::Timestamp;

use crate::error::Result;
use crate::model::{
    AgentLogin, AgentTokenRecord, ApiKeyRecord, CollectSessionRecord, CredentialHash,
    DecisionRecord, EventRecord, GateAccountRecord, GateAttempt, GateAttemptCount, GatePoll,
    GateServiceRecord, GateServiceWrite, GateSessionRecord, GateSessionStatus, HandoffOpening,
    IdempotencyBegin, IdempotencyRecord, IdempotencyScope, IdleSession, KeyAndOrganization,
    OrganizationRecord, PartitionFence, ReplayMark, SessionRecord, SessionSave, VisitorAnchors,
    VisitorOrder, VisitorRecord, WebhookDeliveryRecord, WebhookEndpointRecord,
};
use crate::model::{ApiKeyWrite, EndpointCaps, EndpointWrite};
use crate::rules::CollectChange;

/// The store every role shares.
pub type Store = std::sync::Arc<dyn StoreBackend>;

/// What a wrapper does around each call of the store it wraps (see [`Layered`]).
pub trait StoreLayer: Send + Sync + 'static {
    /// Runs `call`, the wrapped store's call of the method named `operation`, and answers in its
    /// place: it may time it, fail it without running it, or change its answer.
    fn around<'a, T: Send + 'static>(
        &'a self,
        operation: &'static str,
        call: impl Future<Output = Result<T>> + Send + 'a,
    ) -> impl Future<Output = Result<T>> + Send + 'a;
}

/// A layer shared with whoever controls it (a test switching its faults on and off).
impl<L: StoreLayer> StoreLayer for std::sync::Arc<L> {
    fn around<'a, T: Send + 'static>(
        &'a self,
        operation: &'static str,
        call: impl Future<Output = Result<T>> + Send + 'a,
    ) -> impl Future<Output = Result<T>> + Send + 'a {
        L::around(self, operation, call)
    }
}

/// A store whose every call goes through `layer`.
pub struct Layered<L> {
    inner: Store,
    layer: L,
}

impl<L: StoreLayer> Layered<L> {
    pub fn new(inner: Store, layer: L) -> Self {
        Layered { inner, layer }
    }

    /// The wrapped store, for a caller that must not meet the layer.
    pub fn inner(&self) -> &Store {
        &self.inner
    }

    pub fn layer(&self) -> &L {
        &self.layer
    }
}

/// Declares the port's traits, and implements each for [`Layered`] by handing every call to
/// the layer under its method's name. A trait lists its required methods; methods with a body
/// go in a `provided { … }` block after it, which `Layered` inherits rather than wraps (they
/// call the required methods, which it does wrap).
macro_rules! store_port {
    ($(
        $(#[$trait_meta:meta])*
        pub trait $group:ident $(: $first:ident $(+ $more:ident)*)? {
            $(
                $(#[$meta:meta])*
                async fn $method:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty;
            )*
        }
        $(provided { $($provided:tt)* })?
    )*) => {
        $(
            $(#[$trait_meta])*
            #[async_trait]
            pub trait $group: Send + Sync + 'static $(+ $first $(+ $more)*)? {
                $(
                    $(#[$meta])*
                    async fn $method(&self $(, $arg: $ty)*) -> $ret;
                )*
                $($($provided)*)?
            }

            #[async_trait]
            impl<L: StoreLayer> $group for Layered<L> {
                $(
                    async fn $method(&self $(, $arg: $ty)*) -> $ret {
                        self.layer
                            .around(stringify!($method), self.inner.$method($($arg),*))
                            .await
                    }
                )*
            }
        )*
    };
}

store_port! {
    /// A backend: every table group, plus reachability and the store's own settings. One
    /// struct per backend implements it and each group; the backend's `mod.rs` holds this part.
    pub trait StoreBackend: OrganizationStore + IdempotencyStore + CollectStore + SessionStore
        + VisitorStore + EventStore + GateStore + RetentionStore
    {
        /// Answers when the backend is reachable (`/readyz`).
        async fn ping(&self) -> Result<()>;
        /// A named value the service keeps in the store itself (such as which development
        /// organization `vigil serve` made).
        async fn get_setting(&self, name: &str) -> Result<Option<Vec<u8>>>;
        /// Sets `name` only if absent; returns whether this call set it.
        async fn put_setting_if_absent(&self, name: &str, value: &[u8]) -> Result<bool>;
    }

    /// Organizations and their API keys (`organizations`, `organizations_by_slug`, `api_keys`,
    /// `api_keys_by_hash`, `api_key_ids`): the rows authentication reads on every request.
    ///
    /// Each backend implements it in `store/src/<backend>/organizations.rs`.
    pub trait OrganizationStore {
        // organizations, organizations_by_slug

        /// Inserts the organization and claims its slug in one step; `Conflict` if the slug is taken.
        async fn create_organization(&self, org: &OrganizationRecord) -> Result<()>;
        async fn get_organization(&self, id: OrgId) -> Result<Option<OrganizationRecord>>;
        async fn get_organization_by_slug(&self, slug: &str) -> Result<Option<OrganizationRecord>>;
        /// Replaces the mutable columns (name, status, updated_at); the slug never changes.
        async fn update_organization(&self, org: &OrganizationRecord) -> Result<()>;
        /// Creates an organization (claiming its slug) together with its first API keys (each with
        /// its lookup rows) in one step, or nothing: `Conflict` if the slug, or any key's id or
        /// hash, is taken.
        ///
        /// Every key must belong to `org`: if a key's `organization_id` is not `org.id`, the call
        /// fails with `Invalid` (a caller bug, not a conflict), checked before anything is read.
        /// Two keys of `keys` sharing an id or a hash are a `Conflict`, as if one had been created
        /// first. So is an existing organization with `org.id`, as in `create_organization`. With no
        /// keys this is `create_organization`. Nothing of a failed call is written, and nothing it
        /// checked stays claimed: a retry with the conflict fixed can succeed.
        async fn create_organization_with_keys(
            &self,
            org: &OrganizationRecord,
            keys: &[ApiKeyRecord],
        ) -> Result<()>;

        // api_keys, api_keys_by_hash, api_key_ids

        /// Inserts the key and its lookup rows in one step; `Conflict` if the id or hash exists.
        async fn create_api_key(&self, key: &ApiKeyRecord) -> Result<()>;
        async fn get_api_key(
            &self,
            org: OrgId,
            env: Environment,
            id: KeyId,
        ) -> Result<Option<ApiKeyRecord>>;
        /// Where a key lives, from its id alone (the operator CLI has no organization to hand).
        async fn locate_api_key(&self, id: KeyId) -> Result<Option<(OrgId, Environment)>>;
        async fn find_api_key_by_hash(&self, hash: &CredentialHash) -> Result<Option<ApiKeyRecord>>;
        /// What authentication reads on every request (`edge::auth`): the key `hash` names, as
        /// `find_api_key_by_hash` answers it, with its organization as `get_organization`
        /// answers it when the backend holds both at hand (a cache of both); `None` for an
        /// unknown hash. A backend that would need a read of its own for the organization leaves
        /// it out, so refused requests never pay for it.
        async fn find_key_and_organization(
            &self,
            hash: &CredentialHash,
        ) -> Result<Option<KeyAndOrganization>>;
        /// Keys of one organization and environment, newest first, strictly after `after` when given.
        async fn list_api_keys(
            &self,
            org: OrgId,
            env: Environment,
            after: Option<KeyId>,
            limit: usize,
        ) -> Result<Vec<ApiKeyRecord>>;
        /// Replaces an existing key row (its id and hash are unchanged); a missing row stays missing.
        ///
        /// The rotation columns `rotated_at`, `grace_expires_at` and `replaced_by` are never written
        /// here: the row keeps their stored values whatever the caller passed, before a rotation
        /// (they stay `None`) as after it (a stale copy racing a rotation cannot un-rotate the key,
        /// detach its replacement or move its grace period). `rotate_api_key` is their only writer.
        ///
        /// Two columns are merged with the stored row rather than replaced, atomically with the
        /// write, so a caller's stale copy cannot undo a concurrent write:
        /// - revocation is sticky: if the stored `revoked_at` is `Some(t)`, the written row keeps
        ///   `Some(t)` whatever the caller passed (a key is never un-revoked, nor its time moved);
        ///   while it is `None`, the caller's value is written;
        /// - `last_used_at` is the later of the stored and the given value (`None` counts as
        ///   earliest), so an update cannot roll back a concurrent `touch_api_key`.
        async fn update_api_key(&self, key: &ApiKeyRecord) -> Result<()>;
        /// Stores the rotated old key and its replacement together, or neither.
        ///
        /// `Conflict`, writing nothing, if the old key does not exist, if the stored old row is
        /// revoked or already has `replaced_by` set (a rotation racing a revocation or another
        /// rotation must neither resurrect the key nor rotate it twice: of concurrent rotations of
        /// one key, exactly one succeeds), or if the replacement's id or hash is taken. The check
        /// and the write are one atomic step. As in `update_api_key`, the old row keeps the later
        /// of the stored and the given `last_used_at`. This is the only method that writes an
        /// existing row's `rotated_at`, `grace_expires_at` and `replaced_by` (taken from `old`), and
        /// it writes them once: a rotated row's are final.
        async fn rotate_api_key(&self, old: &ApiKeyRecord, replacement: &ApiKeyRecord) -> Result<()>;
        /// Writes `last_used_at` only, so it cannot undo a concurrent revocation.
        async fn touch_api_key(
            &self,
            org: OrgId,
            env: Environment,
            id: KeyId,
            at: Timestamp,
        ) -> Result<()>;
        /// `create_api_key`, unless the key's organization has `cap` keys in use already (over
        /// both environments; in use: `ApiKeyRecord::in_use`), counted in the same step as the
        /// write, so creates racing each other cannot pass the cap (`CapReached`, nothing
        /// written). `Conflict` as in `create_api_key`.
        async fn create_api_key_capped(&self, key: &ApiKeyRecord, cap: usize) -> Result<ApiKeyWrite>;
    }

    /// The answers of idempotent POSTs (`idempotency_records`), held while a request runs and
    /// replayed for its retries.
    ///
    /// Each backend implements it in `store/src/<backend>/idempotency.rs`.
    pub trait IdempotencyStore {
        // idempotency_records

        /// Holds `scope` for the caller unless a live (unexpired) record exists, which it returns.
        async fn idempotency_begin(
            &self,
            scope: &IdempotencyScope,
            record: &IdempotencyRecord,
        ) -> Result<IdempotencyBegin>;
        /// Stores the answer of a held record.
        async fn idempotency_complete(
            &self,
            scope: &IdempotencyScope,
            record: &IdempotencyRecord,
        ) -> Result<()>;
        /// Releases a held record whose request failed in a way a retry may fix.
        async fn idempotency_abandon(&self, scope: &IdempotencyScope) -> Result<()>;
    }

    /// Collect sessions while a browser collects (`collect_sessions`, `collect_pings`), and the
    /// handoffs they mint, each opened once (`handoff_openings`).
    ///
    /// Each backend implements it in `store/src/<backend>/collect.rs`.
    pub trait CollectStore {
        // replay_marks

        /// Leaves each of `marks` in the replay record until `until`, unless a mark with its key
        /// is there already: in order, `None` for a mark left now, or the mark found (whichever
        /// session left it, this one included, so a batch delivered again finds its own). The
        /// embedded store and PostgreSQL check and write in one step; ScyllaDB reads, then
        /// writes without a lightweight transaction (one per batch would cost a Paxos round), so
        /// two sessions leaving one mark at the same instant may both find none.
        async fn leave_replay_marks(
            &self,
            marks: &[ReplayMark],
            until: Timestamp,
        ) -> Result<Vec<Option<ReplayMark>>>;

        // handoff_openings

        /// Records the opening of the handoff `handoff` (a handoff opens once:
        /// docs/architecture.md#collect-transport) unless it was opened before: `None` when this
        /// call is the first, else the time of the first opening. The check and the write are one
        /// atomic step, so of concurrent openings exactly one is first. The row is kept until
        /// `expires_at` (the handoff's own expiry, after which it cannot be opened anyway) and may
        /// be dropped after.
        async fn open_handoff_once(&self, opening: &HandoffOpening) -> Result<Option<Timestamp>>;

        // collect_sessions, collect_pings

        /// Inserts a collect session and its pings' lookup rows in one step; `Conflict` if the id
        /// or a ping id exists.
        async fn create_collect_session(&self, session: &CollectSessionRecord) -> Result<()>;
        async fn get_collect_session(
            &self,
            id: schemas::SessionId,
        ) -> Result<Option<CollectSessionRecord>>;
        /// The session a ping belongs to (`collect_pings`, partition key `ping_id`).
        async fn find_collect_ping(&self, ping: schemas::PingId) -> Result<Option<schemas::SessionId>>;
        /// Raises `last_seq` to `seq` if `seq` is above it; `false` (and no write) when it is not,
        /// which is a replayed batch. Missing session: `false`. Need not be durable when it
        /// returns: a lost advance lets one replay through after a crash, which the processor drops
        /// by number.
        async fn advance_collect_seq(&self, id: schemas::SessionId, seq: u64) -> Result<bool>;
        /// Applies one of a session's one-way changes ([`CollectChange`], the rules of
        /// `store/src/rules.rs`) under the backend's own lock or condition, so reading the row,
        /// applying the change and writing it back is one step, and writes only when the change
        /// changed it. `None` when the session does not exist (nothing is written); otherwise
        /// whether this call wrote, and the row as it now stands. Durable when it returns.
        /// `CollectChange::Seq` is `advance_collect_seq`'s: a store that keeps that counter apart
        /// from the row refuses it here as `Invalid`.
        async fn change_collect_session(
            &self,
            id: schemas::SessionId,
            change: CollectChange,
        ) -> Result<Option<(bool, CollectSessionRecord)>>;
        /// Spends a nonce (a Web Bot Auth signature's) of `scope` (the signing key), remembered
        /// until `until`: true the first time, false if it was spent before and has not expired,
        /// so a request replayed to any process of the fleet is caught. The embedded store keeps
        /// them in memory, bounded (`Unavailable` when full of unexpired ones): it is one
        /// process's.
        async fn spend_nonce(&self, scope: &str, nonce: &str, until: Timestamp) -> Result<bool>;
    }
    provided {
        /// Raises `last_call` to `counter` if `counter` is above it; `false` (and no write) when it
        /// is not, which is a replayed call proof. Missing session: `false`. Durable when it
        /// returns: a lost advance would let a seen proof mint a handoff again after a crash.
        async fn advance_collect_call(&self, id: schemas::SessionId, counter: u64) -> Result<bool> {
            let changed = self.change_collect_session(id, CollectChange::Call(counter)).await?;
            Ok(crate::rules::written(changed))
        }
        /// Records a ping's arrival once; `false` if the ping is unknown to the session or already
        /// arrived (the first arrival is the one that counts).
        async fn record_collect_ping(
            &self,
            id: schemas::SessionId,
            ping: schemas::PingId,
            at: Timestamp,
        ) -> Result<bool> {
            let changed = self.change_collect_session(id, CollectChange::Ping { ping, at }).await?;
            Ok(crate::rules::written(changed))
        }
        /// Records what the network-check WebSocket showed, once; `false` if already recorded.
        async fn record_collect_ws_identity(
            &self,
            id: schemas::SessionId,
            identity: &serde_json::Value,
        ) -> Result<bool> {
            let change = CollectChange::WsIdentity(identity.clone());
            Ok(crate::rules::written(self.change_collect_session(id, change).await?))
        }
        /// Sets `results_at` if unset (the first call wins); returns the stored session, or `None`
        /// when it does not exist.
        async fn mark_collect_results(
            &self,
            id: schemas::SessionId,
            at: Timestamp,
        ) -> Result<Option<CollectSessionRecord>> {
            let changed = self.change_collect_session(id, CollectChange::Results(at)).await?;
            Ok(changed.map(|(_, session)| session))
        }
    }

    /// Scored sessions and their decision history (`sessions`, `session_decisions`, and the
    /// `sessions_idle` and `sessions_by_verdict` indexes a save moves).
    ///
    /// Each backend implements it in `store/src/<backend>/sessions.rs`.
    pub trait SessionStore {
        // sessions, session_decisions, events

        /// Several `save_session`s for one acknowledgement (the processor saves a poll's sessions
        /// together). Each session's save is one step as above; the embedded backend makes the
        /// whole list one step. `Invalid`, with nothing written, if any save is, or if a session
        /// appears twice. `Fenced`, with nothing written, if a save's fence names a partition
        /// claimed with a higher generation since, naming every such partition. After any other
        /// failure some saves may have landed: the caller retries the same list, which is
        /// idempotent.
        async fn save_sessions(&self, saves: &[SessionSave]) -> Result<()>;
        /// Claims `partitions` of `collect.batches.v1` for a processor just assigned them: each
        /// one's generation is raised by one and answered, in the order given. From then on a
        /// save fenced with an older generation of it is refused, so a processor that lost the
        /// partition while stalled cannot overwrite what its new owner saved.
        async fn claim_partitions(&self, partitions: &[u32]) -> Result<Vec<PartitionFence>>;
        async fn get_session(
            &self,
            org: OrgId,
            env: Environment,
            id: schemas::SessionId,
        ) -> Result<Option<SessionRecord>>;
        /// Sessions of one organization and environment, newest first, strictly after `after`.
        async fn list_sessions(
            &self,
            org: OrgId,
            env: Environment,
            after: Option<schemas::SessionId>,
            limit: usize,
        ) -> Result<Vec<SessionRecord>>;
        /// Sessions of one organization and environment whose latest decision has `verdict`
        /// (`sessions_by_verdict`), newest first, strictly after `after`.
        async fn list_sessions_by_verdict(
            &self,
            org: OrgId,
            env: Environment,
            verdict: &str,
            after: Option<schemas::SessionId>,
            limit: usize,
        ) -> Result<Vec<SessionRecord>>;
        /// What the sessions export reads (`schemas::session_digest`) of the sessions of one
        /// organization and environment, newest first, strictly after `after`; with `verdict`,
        /// only those whose latest decision has it. Each is written with its session's row.
        async fn list_session_digests(
            &self,
            org: OrgId,
            env: Environment,
            verdict: Option<&str>,
            after: Option<schemas::SessionId>,
            limit: usize,
        ) -> Result<Vec<SessionDigest>>;
        /// A session's kept decisions (see `save_session`), newest first; none for a session that
        /// is not this organization's and environment's.
        async fn list_decisions(
            &self,
            org: OrgId,
            env: Environment,
            session: schemas::SessionId,
            limit: usize,
        ) -> Result<Vec<DecisionRecord>>;

        /// Sessions not yet finalised whose `updated_at` is before `before`, oldest first within
        /// each bucket, at most `limit`.
        async fn list_idle_sessions(&self, before: Timestamp, limit: usize)
        -> Result<Vec<IdleSession>>;
    }
    provided {
        /// Writes the session (insert or replace), appends the decision to its history when one is
        /// given (pruning the history to the decisions where the phase or verdict changed plus the
        /// latest: when the decision is newer than the stored latest, that latest is dropped unless
        /// its phase or verdict differs from the decision kept before it), moves the session's
        /// `sessions_by_verdict` row to its latest decision's verdict, records the events (insert or replace by id, so saving them again after a
        /// redelivery keeps one of each), and moves the session's `sessions_idle` row to its new
        /// `updated_at` (or removes it once `finalized`), in one step. `Invalid`, with nothing
        /// written, if the decision is another session's or an event another organization's or
        /// environment's.
        async fn save_session(
            &self,
            session: &SessionRecord,
            decision: Option<&DecisionRecord>,
            events: &[EventRecord],
        ) -> Result<()> {
            self.save_sessions(&[SessionSave {
                session: session.clone(),
                decision: decision.cloned(),
                events: events.to_vec(),
                settled: None,
                fence: None,
            }])
            .await
        }
    }

    /// Visitor fingerprints (`visitors`) with the anchor index linking reads and the three order
    /// tables the fingerprint list reads.
    ///
    /// Each backend implements it in `store/src/<backend>/visitors.rs`.
    pub trait VisitorStore {
        // visitors, visitors_by_anchor

        /// Several `save_visitor`s (the processor saves the visitors a poll linked together,
        /// before the sessions that name them), each conditional on its `revision`: a visitor is
        /// written only if the stored row is at the revision before it, or there is none
        /// (retention may have dropped it since it was read: the visit starts it again). The
        /// others are stale, since another writer saved them after
        /// they were read: they are left as stored and their ids answered, for the caller to
        /// read again and reapply its change. `Invalid`, with nothing written, if one visitor is
        /// given twice.
        async fn save_visitors(&self, visitors: &[VisitorRecord]) -> Result<Vec<schemas::VisitorId>>;
        async fn get_visitor(
            &self,
            org: OrgId,
            env: Environment,
            id: schemas::VisitorId,
        ) -> Result<Option<VisitorRecord>>;
        /// The visitors of one organization and environment indexed under any digest of `anchors`
        /// (they share at least two anchor values with it), newest first, at most `limit`, each
        /// once. Candidates only: whether they match (no conflicting anchor, compatible traits) is
        /// the caller's decision.
        async fn find_visitor_by_anchors(
            &self,
            org: OrgId,
            env: Environment,
            anchors: &VisitorAnchors,
            limit: usize,
        ) -> Result<Vec<VisitorRecord>>;
        /// Visitors of one organization and environment, newest first (by id), strictly after
        /// `after`.
        async fn list_visitors(
            &self,
            org: OrgId,
            env: Environment,
            after: Option<schemas::VisitorId>,
            limit: usize,
        ) -> Result<Vec<VisitorRecord>>;

        /// Visitors of one organization and environment in `order` (its value descending, then id
        /// descending), strictly after the position `after` (`(value, id)` of the last row read).
        /// Served by the order's index table, which `save_visitor` keeps.
        async fn list_visitors_by(
            &self,
            org: OrgId,
            env: Environment,
            order: VisitorOrder,
            after: Option<(u64, schemas::VisitorId)>,
            limit: usize,
        ) -> Result<Vec<VisitorRecord>>;
    }
    provided {
        /// Writes the visitor and its anchor index rows in one step: a
        /// `visitors_by_anchor` row for each of its anchors' digests, and the removal of the rows
        /// of digests its stored version had and it no longer has, so the index never names a
        /// visitor for anchors it lost; and its rows in the three order tables (`list_visitors_by`),
        /// moved to its new values. `Conflict`, with nothing written, if the stored row is no
        /// at the revision before the visitor's (see `save_visitors`).
        async fn save_visitor(&self, visitor: &VisitorRecord) -> Result<()> {
            let stale = self.save_visitors(std::slice::from_ref(visitor)).await?;
            match stale.first() {
                None => Ok(()),
                Some(id) => Err(crate::error::StoreError::Conflict(format!(
                    "visitor {id} is not at revision {} in the store",
                    visitor.revision.saturating_sub(1)
                ))),
            }
        }
    }

    /// Events and the webhooks that deliver them (`events`, `webhook_endpoints`,
    /// `webhook_deliveries` and the due index).
    ///
    /// Each backend implements it in `store/src/<backend>/events.rs`.
    pub trait EventStore {
        async fn get_event(
            &self,
            org: OrgId,
            env: Environment,
            id: schemas::EventId,
        ) -> Result<Option<EventRecord>>;
        /// Records events that belong to no session save (a webhook endpoint's test event), in
        /// one step: insert or replace by id, kept for the retention like a session's events.
        async fn record_events(&self, events: &[EventRecord]) -> Result<()>;
        /// Events of one organization and environment, newest first, strictly after `after`.
        async fn list_events(
            &self,
            org: OrgId,
            env: Environment,
            after: Option<schemas::EventId>,
            limit: usize,
        ) -> Result<Vec<EventRecord>>;

        // webhook_endpoints

        /// Inserts a new endpoint unless its organization has `caps.total` endpoints in its
        /// environment already (disabled ones included) or `caps.active` active ones; the count
        /// and the write are one step, so creates racing each other cannot pass a cap.
        /// `Conflict` if its id is taken. Nothing is written unless the answer is `Written`.
        async fn create_webhook_endpoint(
            &self,
            endpoint: &WebhookEndpointRecord,
            caps: EndpointCaps,
        ) -> Result<EndpointWrite>;
        async fn get_webhook_endpoint(
            &self,
            org: OrgId,
            env: Environment,
            id: schemas::ids::WebhookEndpointId,
        ) -> Result<Option<WebhookEndpointRecord>>;
        /// Endpoints of one organization and environment, newest first, strictly after `after`.
        async fn list_webhook_endpoints(
            &self,
            org: OrgId,
            env: Environment,
            after: Option<schemas::ids::WebhookEndpointId>,
            limit: usize,
        ) -> Result<Vec<WebhookEndpointRecord>>;
        /// Replaces a stored endpoint; `Missing` if there is none with its id in its organization
        /// and environment. One that was disabled and is written active is refused
        /// (`ActiveCapReached`) while its environment has `caps.active` active endpoints, counted
        /// in the same step as the write. Nothing is written unless the answer is `Written`.
        async fn update_webhook_endpoint(
            &self,
            endpoint: &WebhookEndpointRecord,
            caps: EndpointCaps,
        ) -> Result<EndpointWrite>;
        /// Sets a stored endpoint's status to disabled (and its `updated_at` to `at`), changing
        /// nothing else, in one step: a 410's consequence must not undo an update made meanwhile.
        /// False if it is not stored or was disabled already.
        async fn disable_webhook_endpoint(
            &self,
            org: OrgId,
            env: Environment,
            id: schemas::ids::WebhookEndpointId,
            at: Timestamp,
        ) -> Result<bool>;

        // webhook_deliveries, webhook_deliveries_due

        /// Stores the deliveries not stored yet (one per event and endpoint), pending ones in the
        /// due index too, in one step; a delivery already stored is left as it is, so fanning an
        /// event out again creates nothing twice. The ids of those that were new, in the order
        /// given (the dispatcher attempts those; the others are already someone's).
        async fn create_webhook_deliveries(
            &self,
            deliveries: &[WebhookDeliveryRecord],
        ) -> Result<Vec<schemas::ids::WebhookDeliveryId>>;
        /// Records attempts, in one step: each delivery replaces its stored row and moves its
        /// due-index row to its new `next_attempt_at` (none once it succeeded or failed). A
        /// delivery is written only if the stored row is the one its attempt started from (its
        /// `attempts` one less), so an outcome recorded twice, or one that raced another attempt's,
        /// changes nothing. How many were written.
        async fn record_webhook_attempts(&self, deliveries: &[WebhookDeliveryRecord]) -> Result<usize>;
        /// Puts off the next attempt of pending deliveries, each to its `next_attempt_at`, without
        /// attempting them (their endpoint has as many attempts waiting as the dispatcher lets it
        /// have), moving their due rows; a delivery whose stored row has moved on (attempted since,
        /// or finished) is left as it is. How many were put off.
        async fn defer_webhook_deliveries(&self, deliveries: &[WebhookDeliveryRecord])
        -> Result<usize>;
        /// Claims pending deliveries the due scan found, for one dispatcher, until `until`: each
        /// whose stored row is still the one read (same delivery, same attempts, the same
        /// `next_attempt_at`) has its next attempt moved to `until`, in one step, so the due scan
        /// of another dispatcher (or this one's next) does not find it again before then. The ids
        /// of those claimed; the others were claimed, attempted or put off by someone else since.
        async fn claim_webhook_deliveries(
            &self,
            deliveries: &[WebhookDeliveryRecord],
            until: Timestamp,
        ) -> Result<Vec<schemas::ids::WebhookDeliveryId>>;
        /// One event's deliveries, by endpoint id.
        async fn list_event_deliveries(
            &self,
            org: OrgId,
            env: Environment,
            event: schemas::EventId,
        ) -> Result<Vec<WebhookDeliveryRecord>>;
        /// Deliveries whose next attempt is due before `before`, earliest first, at most `limit`.
        async fn due_webhook_deliveries(
            &self,
            before: Timestamp,
            limit: usize,
        ) -> Result<Vec<WebhookDeliveryRecord>>;
    }

    /// Gate: services with their owner and registry indexes, signup and login sessions, the
    /// accounts they make and the agents' tokens.
    ///
    /// Each backend implements it in `store/src/<backend>/gate.rs`.
    pub trait GateStore {
        // gate_services, gate_services_by_owner, gate_registry

        /// Inserts a new service, claiming its id over every organization and environment (with
        /// `-` and `_` taken alike: both become `_` in the agent token's variable), unless the
        /// id is taken or the organization has `cap` services already in the service's
        /// environment (disabled ones included); checked and written in one step.
        async fn create_gate_service(
            &self,
            service: &GateServiceRecord,
            cap: usize,
        ) -> Result<GateServiceWrite>;
        /// The service with this id, whoever owns it.
        async fn get_gate_service(&self, id: &str) -> Result<Option<GateServiceRecord>>;
        /// The services of one organization and environment, by id.
        async fn list_gate_services(
            &self,
            org: OrgId,
            env: Environment,
        ) -> Result<Vec<GateServiceRecord>>;
        /// Replaces the stored service `previous_id` (same owner) with `service`, in one step; a
        /// changed id is claimed (`IdTaken` if another service has it, or its form with `-` and
        /// `_` alike) and the old one freed. The registry index follows whether it is published.
        async fn update_gate_service(
            &self,
            previous_id: &str,
            service: &GateServiceRecord,
        ) -> Result<GateServiceWrite>;
        /// Published services (active and discoverable) of one environment, by id, strictly
        /// after `after`.
        async fn list_gate_registry(
            &self,
            env: Environment,
            after: Option<&str>,
            limit: usize,
        ) -> Result<Vec<GateServiceRecord>>;

        // gate_sessions, gate_accounts, agent_tokens

        async fn create_gate_session(&self, session: &GateSessionRecord) -> Result<()>;
        async fn get_gate_session(
            &self,
            id: schemas::ids::GateSessionId,
        ) -> Result<Option<GateSessionRecord>>;
        /// Replaces the stored session if its status is still `expected` (so an approval, a
        /// denial, an acknowledgement or a consumption happens once), and if its login code (when
        /// it has one) is no other session's; false, with nothing written, otherwise. With an approved signup, its account and agent token are written in
        /// the same step.
        async fn transition_gate_session(
            &self,
            session: &GateSessionRecord,
            expected: GateSessionStatus,
            made: Option<(&GateAccountRecord, &AgentTokenRecord)>,
        ) -> Result<bool>;
        /// Counts a poll at `now` of the session `id` by the holder of the poll token `token`, in
        /// one step (so parallel polls cannot pass the interval or the cap): too soon after the
        /// last one, the interval grows by `slow_down_secs`; past `max_polls`, nothing is written.
        /// The session as stored after, with how the poll counted; `None` if `token` is not its
        /// poll token.
        async fn count_gate_poll(
            &self,
            id: schemas::ids::GateSessionId,
            token: &CredentialHash,
            now: Timestamp,
            slow_down_secs: u32,
            max_polls: u32,
        ) -> Result<Option<(GateSessionRecord, GatePoll)>>;
        /// Counts one `attempt` on the session `id` while it waits (`Pending`), in one step
        /// with its budget of `max`, so parallel attempts cannot pass it; a user code is compared
        /// in the same step and counted only when wrong. Nothing is written for a right code,
        /// once the budget is spent, or when the session no longer waits. `None` if there is no
        /// such session.
        async fn count_gate_attempt(
            &self,
            id: schemas::ids::GateSessionId,
            attempt: GateAttempt,
            max: u32,
        ) -> Result<Option<GateAttemptCount>>;
        async fn get_gate_account(
            &self,
            id: schemas::ids::GateAccountId,
        ) -> Result<Option<GateAccountRecord>>;
        /// The login session whose one-time code has this hash, while it has one (the index
        /// follows `login_code` through every transition).
        async fn get_login_by_code(&self, code: &CredentialHash) -> Result<Option<GateSessionRecord>>;
        async fn get_agent_token(&self, hash: &CredentialHash) -> Result<Option<AgentTokenRecord>>;
        /// Replaces a stored agent token; false if none.
        async fn update_agent_token(&self, token: &AgentTokenRecord) -> Result<bool>;
        /// Counts a login session started at `now` against the token, in one step with the checks
        /// that it is usable (not revoked, not expired) and under `per_hour` logins in the hour.
        async fn count_agent_login(
            &self,
            hash: &CredentialHash,
            now: Timestamp,
            per_hour: usize,
        ) -> Result<AgentLogin>;
        /// Revokes the token at `at` unless it is revoked already, in one step; the token as
        /// stored after, or `None` if there is none.
        async fn revoke_agent_token(
            &self,
            hash: &CredentialHash,
            at: Timestamp,
        ) -> Result<Option<AgentTokenRecord>>;
    }

    /// Retention: the bounded purge of rows past their lifetime.
    ///
    /// Each backend implements it in `store/src/<backend>/retention.rs`.
    pub trait RetentionStore {
        // retention (docs/architecture.md#retention)

        /// One bounded step of expiry: drops sessions (with their decisions and index rows) not
        /// updated since `keep_since`, events created before it and visitors (with their index
        /// rows) not seen since it; and idempotency records, handoff openings and collect sessions
        /// past their own expiry at `now`. Touches at most about `budget` rows of each kind, so a
        /// step holds the writer only briefly; returns whether expired rows may remain (call again).
        /// ScyllaDB does the same with TTLs (`store/cql/`), and its backend answers `false`.
        async fn purge_expired(
            &self,
            now: Timestamp,
            keep_since: Timestamp,
            budget: usize,
        ) -> Result<bool>;
    }
}

/// `find_key_and_organization` as `find_api_key_by_hash`, with the organization left unread: for
/// a backend that holds no joint copy of the two.
pub(crate) async fn key_alone<S: OrganizationStore + ?Sized>(
    store: &S,
    hash: &CredentialHash,
) -> Result<Option<KeyAndOrganization>> {
    Ok(store
        .find_api_key_by_hash(hash)
        .await?
        .map(|key| KeyAndOrganization {
            key: std::sync::Arc::new(key),
            organization: None,
        }))
}
