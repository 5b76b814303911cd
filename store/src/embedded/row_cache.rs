//! An exact in-memory cache of the decoded rows the hot paths read on every request: api keys
//! by credential hash (`find_api_key_by_hash`) and organizations by id (`get_organization`),
//! which authentication reads (both at once, `find_key_and_organization`), and collect sessions
//! by id, which ingest reads for every batch (its counter, kept apart: see `seqs`) and the
//! processor for every fold (its pings).
//!
//! Exact, never stale, and only because this is the embedded backend: the store directory is
//! owned by one process (fjall locks it), so every write of these rows passes through this
//! struct and can invalidate it. A distributed backend (ScyllaDB) has writers in other
//! processes that no local cache hears of; it must not reuse this scheme.
//!
//! The protocol, which makes a cached row always equal to what fjall would answer at the same
//! instant:
//! - A write of a cached table brackets its commit with [`RowCache::write`]: before the commit
//!   it drops the entries it is about to change and marks a write in flight; after the commit
//!   (also on error or panic) it ends the write. Both steps bump `generation`.
//! - A reader that misses takes a [`Ticket`] (the generation, or nothing if a write is in
//!   flight) before it reads fjall, and its fill is kept only if the generation is unchanged
//!   when it takes the lock to insert. So a row read before or during a commit is never
//!   inserted after it: the classic "miss, read old row, writer commits and invalidates, reader
//!   inserts old row" race loses its last step.
//!
//! - A writer that has just committed a collect session, still holding the collect rows' lock
//!   (which every writer of those rows holds), puts the row it wrote in
//!   ([`RowCache::written_collect_session`]): no other write can change it before the lock is
//!   let go, and a reader's fill from before the commit is refused by the generation its
//!   commit bumped.
//!
//! Unknown credential hashes are never cached (they are attacker-controlled), and each map is
//! cleared whenever a fill would grow it past its capacity ([`CAPACITY`],
//! [`COLLECT_CAPACITY`]), so memory stays bounded.
//!
//! Authentication reads a key and its organization on every request, and on two cores the
//! shared lock's word and the two rows' reference counts bounce between them on every read.
//! So each thread keeps its own copies of the pairs it served (`Front`), valid while no write of
//! a key or an organization has ended since they were taken (`credentials`, raised by such a
//! write's end under the lock): the write's own call returns only after that, so the next
//! request after a revocation misses every thread's copy.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use schemas::ids::{OrgId, SessionId};

use crate::{
    ApiKeyRecord, CollectSessionRecord, CredentialHash, KeyAndOrganization, OrganizationRecord,
};

/// The most entries the api keys or the organizations map holds; a fill into a full map clears
/// it first.
pub const CAPACITY: usize = 100_000;
/// The most collect sessions held (a decoded one weighs about a kilobyte): the sessions
/// collecting at once on a busy server, not every one of the day.
pub const COLLECT_CAPACITY: usize = 16_384;

/// The most key-and-organization pairs a thread keeps copies of; a thread's copies are
/// dropped when one more would pass it.
const FRONT_CAPACITY: usize = 1024;

pub struct RowCache {
    state: RwLock<State>,
    /// Tells this cache's copies in a thread's `Front` from another store's (tests open many).
    id: u64,
    /// Raised, under the write lock, when a write of keys or organizations ends: a thread's
    /// copies taken under an older value are not served.
    credentials: AtomicU64,
}

impl Default for RowCache {
    fn default() -> Self {
        static IDS: AtomicU64 = AtomicU64::new(0);
        RowCache {
            state: RwLock::default(),
            id: IDS.fetch_add(1, Ordering::Relaxed),
            credentials: AtomicU64::new(0),
        }
    }
}

/// One thread's copies of the key-and-organization pairs it served from one cache.
struct Front {
    cache: u64,
    credentials: u64,
    /// By credential hash: a keyed hash of the credential, which no client can choose, so a fast
    /// hasher.
    pairs: HashMap<
        CredentialHash,
        (Arc<ApiKeyRecord>, Arc<OrganizationRecord>),
        foldhash::fast::RandomState,
    >,
}

thread_local! {
    static FRONT: RefCell<Option<Front>> = const { RefCell::new(None) };
}

#[derive(Default)]
struct State {
    /// Bumped when a write begins and when it ends: a fill is kept only if no write began or
    /// ended since its ticket was taken.
    generation: u64,
    /// Writes between their two steps (at most one, as the writer mutex serialises writes).
    writes_in_flight: u32,
    api_keys: HashMap<CredentialHash, Arc<ApiKeyRecord>>,
    organizations: HashMap<OrgId, Arc<OrganizationRecord>>,
    collect_sessions: HashMap<SessionId, Arc<CollectSessionRecord>>,
}

/// Taken on a miss, before the backing read; lets [`RowCache`] refuse a fill that may be stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Ticket(Option<u64>);

/// The answer of a cache lookup.
pub enum Lookup<T> {
    Hit(T),
    /// Read the row from fjall, then offer it to the matching `fill_*` with this ticket.
    Miss(Ticket),
}

/// The rows a write is about to change, dropped from the cache before its commit.
#[derive(Default)]
pub struct Changes<'a> {
    pub api_keys: &'a [CredentialHash],
    pub organizations: &'a [OrgId],
    pub collect_sessions: &'a [SessionId],
}

/// A write in flight: no fill is kept until it is dropped (after the commit).
#[must_use = "the write ends when this is dropped, which must be after the commit"]
pub struct WriteInFlight<'a> {
    cache: &'a RowCache,
    /// The write changes keys or organizations: the threads' copies go when it ends.
    credentials: bool,
}

impl Drop for WriteInFlight<'_> {
    fn drop(&mut self) {
        let mut state = self.cache.write_state();
        state.writes_in_flight -= 1;
        state.generation += 1;
        if self.credentials {
            self.cache.credentials.fetch_add(1, Ordering::Release);
        }
    }
}

impl RowCache {
    // Nothing under the lock can panic part-way (map operations and integer steps; allocation
    // failure aborts), so a poisoned lock still guards consistent state.
    fn read_state(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_state(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn api_key(&self, hash: &CredentialHash) -> Lookup<ApiKeyRecord> {
        self.lookup(|state| &state.api_keys, hash)
    }

    /// Caches `row`, found by `hash` in fjall after `ticket` was taken, unless a write
    /// intervened. Only rows that exist are offered: an unknown hash is never remembered. A row
    /// whose own hash differs (a damaged lookup row) is not cached, since writes drop entries by
    /// the row's hash.
    pub fn fill_api_key(&self, ticket: Ticket, hash: &CredentialHash, row: &ApiKeyRecord) {
        if row.key_hash == *hash {
            self.fill(
                ticket,
                |state| &mut state.api_keys,
                CAPACITY,
                row.key_hash,
                row,
            );
        }
    }

    /// The cached key of `hash` and its cached organization, taken under one hold of the lock,
    /// so they are the rows fjall holds at one instant; `None` unless both are cached. Served
    /// from this thread's copies while no write of a key or an organization has ended since
    /// they were taken (see the module's docs): authentication reads them on every request.
    pub fn key_and_organization(&self, hash: &CredentialHash) -> Option<KeyAndOrganization> {
        let current = self.credentials.load(Ordering::Acquire);
        let copied = FRONT.with_borrow(|front| {
            let front = front
                .as_ref()
                .filter(|f| f.cache == self.id && f.credentials == current)?;
            let (key, organization) = front.pairs.get(hash)?;
            Some(KeyAndOrganization {
                key: Arc::clone(key),
                organization: Some(Arc::clone(organization)),
            })
        });
        if copied.is_some() {
            return copied;
        }
        let (key, organization, credentials) = {
            let state = self.read_state();
            let key = state.api_keys.get(hash)?;
            let organization = state.organizations.get(&key.organization_id)?;
            // Read under the lock, so the pair is current as of this value.
            let credentials = self.credentials.load(Ordering::Relaxed);
            (
                ApiKeyRecord::clone(key),
                OrganizationRecord::clone(organization),
                credentials,
            )
        };
        // This thread's own copies, so their reference counts stay on this core.
        let (key, organization) = (Arc::new(key), Arc::new(organization));
        FRONT.with_borrow_mut(|front| {
            let front = front.get_or_insert_with(|| Front {
                cache: self.id,
                credentials,
                pairs: HashMap::default(),
            });
            if front.cache != self.id
                || front.credentials != credentials
                || front.pairs.len() >= FRONT_CAPACITY
            {
                front.cache = self.id;
                front.credentials = credentials;
                front.pairs.clear();
            }
            front
                .pairs
                .insert(*hash, (Arc::clone(&key), Arc::clone(&organization)));
        });
        Some(KeyAndOrganization {
            key,
            organization: Some(organization),
        })
    }

    pub fn organization(&self, id: OrgId) -> Lookup<OrganizationRecord> {
        self.lookup(|state| &state.organizations, &id)
    }

    /// Caches `row`, read by `id` from fjall after `ticket` was taken, unless a write
    /// intervened (and only if it is the row of `id`).
    pub fn fill_organization(&self, ticket: Ticket, id: OrgId, row: &OrganizationRecord) {
        if row.id == id {
            self.fill(ticket, |state| &mut state.organizations, CAPACITY, id, row);
        }
    }

    /// The cached row shared, not copied: for reads of a member or two.
    pub fn collect_session(&self, id: SessionId) -> Lookup<Arc<CollectSessionRecord>> {
        self.lookup_shared(|state| &state.collect_sessions, &id)
    }

    /// Caches `row`, read by `id` from fjall after `ticket` was taken, unless a write
    /// intervened (and only if it is the row of `id`).
    pub fn fill_collect_session(&self, ticket: Ticket, id: SessionId, row: &CollectSessionRecord) {
        if row.id == id {
            self.fill(
                ticket,
                |state| &mut state.collect_sessions,
                COLLECT_CAPACITY,
                id,
                row,
            );
        }
    }

    /// Caches the collect session a write has just committed. Only for the writer, after its
    /// commit's [`WriteInFlight`] ended and before it lets the collect rows' lock go: then nothing
    /// but this row can be what fjall holds.
    pub fn written_collect_session(&self, row: CollectSessionRecord) {
        let row = Arc::new(row);
        insert_bounded(
            &mut self.write_state().collect_sessions,
            COLLECT_CAPACITY,
            row.id,
            row,
        );
    }

    /// The cached row under `key` in `map`, cloned outside the lock; else a ticket for a fill.
    fn lookup<K: Eq + Hash, V: Clone>(
        &self,
        map: impl FnOnce(&State) -> &HashMap<K, Arc<V>>,
        key: &K,
    ) -> Lookup<V> {
        match self.lookup_shared(map, key) {
            Lookup::Hit(row) => Lookup::Hit(V::clone(&row)),
            Lookup::Miss(ticket) => Lookup::Miss(ticket),
        }
    }

    /// The cached row under `key` in `map`, shared; else a ticket for a fill.
    fn lookup_shared<K: Eq + Hash, V>(
        &self,
        map: impl FnOnce(&State) -> &HashMap<K, Arc<V>>,
        key: &K,
    ) -> Lookup<Arc<V>> {
        let state = self.read_state();
        match map(&state).get(key) {
            Some(row) => Lookup::Hit(Arc::clone(row)),
            None => Lookup::Miss(state.ticket()),
        }
    }

    fn fill<K: Eq + Hash, V: Clone>(
        &self,
        ticket: Ticket,
        map: impl FnOnce(&mut State) -> &mut HashMap<K, Arc<V>>,
        capacity: usize,
        key: K,
        row: &V,
    ) {
        let Ticket(Some(taken)) = ticket else {
            return;
        };
        // Built before taking the lock, and cheap to drop if refused.
        let row = Arc::new(row.clone());
        let mut state = self.write_state();
        if state.generation != taken {
            return;
        }
        insert_bounded(map(&mut state), capacity, key, row);
    }

    /// Begins a write that changes `changes` (which must name every cached row the commit
    /// writes): drops their entries and refuses every fill until the returned guard is dropped,
    /// which the caller does once the commit has returned.
    pub fn write(&self, changes: Changes<'_>) -> WriteInFlight<'_> {
        let mut state = self.write_state();
        for hash in changes.api_keys {
            state.api_keys.remove(hash);
        }
        for id in changes.organizations {
            state.organizations.remove(id);
        }
        for id in changes.collect_sessions {
            state.collect_sessions.remove(id);
        }
        state.writes_in_flight += 1;
        state.generation += 1;
        WriteInFlight {
            cache: self,
            credentials: !(changes.api_keys.is_empty() && changes.organizations.is_empty()),
        }
    }
}

/// Inserts into a map that is cleared first when it holds `capacity` entries already.
fn insert_bounded<K: Eq + Hash, V>(map: &mut HashMap<K, V>, capacity: usize, key: K, row: V) {
    if map.len() >= capacity {
        map.clear();
    }
    map.insert(key, row);
}

impl State {
    fn ticket(&self) -> Ticket {
        Ticket((self.writes_in_flight == 0).then_some(self.generation))
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;
    use schemas::resources::OrgStatus;

    use super::*;

    fn org() -> OrganizationRecord {
        let now = schemas::time::now();
        OrganizationRecord {
            id: OrgId::generate(),
            name: "Cached".into(),
            slug: "cached".into(),
            status: OrgStatus::Active,
            created_at: now,
            updated_at: now,
        }
    }

    fn hit(cache: &RowCache, id: OrgId) -> Option<OrganizationRecord> {
        match cache.organization(id) {
            Lookup::Hit(row) => Some(row),
            Lookup::Miss(_) => None,
        }
    }

    fn ticket(cache: &RowCache, id: OrgId) -> Ticket {
        match cache.organization(id) {
            Lookup::Hit(_) => panic!("expected a miss"),
            Lookup::Miss(ticket) => ticket,
        }
    }

    #[test]
    fn a_fill_is_served_until_a_write_drops_it() {
        let cache = RowCache::default();
        let row = org();
        let t = ticket(&cache, row.id);
        cache.fill_organization(t, row.id, &row);
        assert_eq!(hit(&cache, row.id), Some(row.clone()));

        drop(cache.write(Changes {
            organizations: &[row.id],
            ..Changes::default()
        }));
        assert_eq!(hit(&cache, row.id), None);
    }

    #[test]
    fn a_fill_read_before_a_write_is_refused() {
        let cache = RowCache::default();
        let old = org();
        // The reader misses and reads the old row; the write commits and ends; the reader's
        // fill comes last and must not be kept.
        let t = ticket(&cache, old.id);
        drop(cache.write(Changes {
            organizations: &[old.id],
            ..Changes::default()
        }));
        cache.fill_organization(t, old.id, &old);
        assert_eq!(hit(&cache, old.id), None);

        // Nor is one whose ticket was taken before a write that is still in flight.
        let t = ticket(&cache, old.id);
        let write = cache.write(Changes {
            organizations: &[old.id],
            ..Changes::default()
        });
        cache.fill_organization(t, old.id, &old);
        assert_eq!(hit(&cache, old.id), None);
        drop(write);
        assert_eq!(hit(&cache, old.id), None);
    }

    #[test]
    fn no_fill_is_kept_while_a_write_is_in_flight() {
        let cache = RowCache::default();
        let row = org();
        let write = cache.write(Changes::default());
        // Taken during the commit: the row read may be old or new, so it is not kept.
        let t = ticket(&cache, row.id);
        assert_eq!(t, Ticket(None));
        drop(write);
        cache.fill_organization(t, row.id, &row);
        assert_eq!(hit(&cache, row.id), None);

        let t = ticket(&cache, row.id);
        cache.fill_organization(t, row.id, &row);
        assert_eq!(hit(&cache, row.id), Some(row));
    }

    #[test]
    fn a_write_drops_only_what_it_changes() {
        let cache = RowCache::default();
        let (a, b) = (org(), org());
        for row in [&a, &b] {
            let t = ticket(&cache, row.id);
            cache.fill_organization(t, row.id, row);
        }
        let changed = OrganizationRecord {
            updated_at: a.updated_at + TimeDelta::seconds(1),
            ..a.clone()
        };
        drop(cache.write(Changes {
            organizations: &[changed.id],
            ..Changes::default()
        }));
        assert_eq!(hit(&cache, a.id), None);
        assert_eq!(hit(&cache, b.id), Some(b));
    }

    #[test]
    fn a_written_collect_session_is_served_and_an_older_fill_refused() {
        let cache = RowCache::default();
        let row = crate::conformance::collect_session(2);
        let id = row.id;
        // A reader misses and reads the row as it was; the writer commits a change and puts it
        // in; the reader's fill comes last and must not replace it.
        let Lookup::Miss(t) = cache.collect_session(id) else {
            panic!("expected a miss")
        };
        let mut raised = row.clone();
        raised.last_seq = 7;
        drop(cache.write(Changes {
            collect_sessions: &[id],
            ..Changes::default()
        }));
        cache.written_collect_session(raised.clone());
        cache.fill_collect_session(t, id, &row);
        match cache.collect_session(id) {
            Lookup::Hit(cached) => assert_eq!(*cached, raised),
            Lookup::Miss(_) => panic!("the written row is cached"),
        }
        // A purge (or any other write naming it) drops it.
        drop(cache.write(Changes {
            collect_sessions: &[id],
            ..Changes::default()
        }));
        assert!(matches!(cache.collect_session(id), Lookup::Miss(_)));
    }

    /// Caches `key` and `organization` as a reader's fills would, each if it is not cached.
    fn fill_pair(cache: &RowCache, key: &ApiKeyRecord, organization: &OrganizationRecord) {
        if let Lookup::Miss(t) = cache.api_key(&key.key_hash) {
            cache.fill_api_key(t, &key.key_hash, key);
        }
        if let Lookup::Miss(t) = cache.organization(organization.id) {
            cache.fill_organization(t, organization.id, organization);
        }
    }

    #[test]
    fn each_threads_copies_go_when_a_key_or_an_organization_is_written() {
        use schemas::credential::Environment;
        use schemas::ids::KeyId;

        let cache = RowCache::default();
        let organization = org();
        let key =
            crate::conformance::api_key(organization.id, Environment::Live, KeyId::generate());
        fill_pair(&cache, &key, &organization);
        let pair = |cache: &RowCache| cache.key_and_organization(&key.key_hash);
        let first = pair(&cache).unwrap();
        let again = pair(&cache).unwrap();
        // The second answer is this thread's copy, not the shared row.
        assert!(Arc::ptr_eq(&first.key, &again.key));
        assert!(!Arc::ptr_eq(
            &again.key,
            &cache.read_state().api_keys[&key.key_hash]
        ));
        // Another thread has copies of its own.
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(pair(&cache).unwrap().key.revoked_at, None));
        });
        // Another store's cache on this thread sees none of them.
        assert!(pair(&RowCache::default()).is_none());

        // A write of collect sessions alone leaves the copies.
        drop(cache.write(Changes {
            collect_sessions: &[crate::conformance::collect_session(1).id],
            ..Changes::default()
        }));
        assert!(Arc::ptr_eq(&first.key, &pair(&cache).unwrap().key));

        // A revocation: no thread serves its copy once the write has ended.
        let revoked = ApiKeyRecord {
            revoked_at: Some(schemas::time::now()),
            ..key.clone()
        };
        drop(cache.write(Changes {
            api_keys: &[key.key_hash],
            ..Changes::default()
        }));
        assert!(
            pair(&cache).is_none(),
            "the shared entry went, and the copy is not served"
        );
        fill_pair(&cache, &revoked, &organization);
        assert_eq!(pair(&cache).unwrap().key.revoked_at, revoked.revoked_at);
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(pair(&cache).unwrap().key.revoked_at, revoked.revoked_at));
        });

        // A suspension likewise.
        let suspended = OrganizationRecord {
            status: OrgStatus::Suspended,
            ..organization.clone()
        };
        drop(cache.write(Changes {
            organizations: &[organization.id],
            ..Changes::default()
        }));
        fill_pair(&cache, &revoked, &suspended);
        let read = pair(&cache).unwrap();
        assert_eq!(read.organization.unwrap().status, OrgStatus::Suspended);
    }

    #[test]
    fn a_full_map_is_cleared() {
        let cache = RowCache::default();
        let first = org();
        let t = ticket(&cache, first.id);
        cache.fill_organization(t, first.id, &first);
        for _ in 1..CAPACITY {
            let row = org();
            let t = ticket(&cache, row.id);
            cache.fill_organization(t, row.id, &row);
        }
        assert_eq!(cache.read_state().organizations.len(), CAPACITY);
        let last = org();
        let t = ticket(&cache, last.id);
        cache.fill_organization(t, last.id, &last);
        assert_eq!(cache.read_state().organizations.len(), 1);
        assert_eq!(hit(&cache, first.id), None);
        assert_eq!(hit(&cache, last.id), Some(last));
    }
}
