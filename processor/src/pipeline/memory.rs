//! What the processor keeps in memory of the sessions it folds, bounded by bytes
//! (`--processor-cache-mb`): real traffic is many sessions each sending a batch now and then, and
//! decoding a session's state from its stored row was a third of a fold. A state evicted past the
//! bound is decoded from the store at its next batch, so the bound costs time, never results.

use quick_cache::Weighter;
use schemas::SessionId;
use schemas::credential::Environment;
use schemas::time::Timestamp;
use schemas::{OrgId, VisitorId};
use store::{SessionRecord, VisitorRecord};

use super::SessionState;
use super::visits::{Linked, Visit};

/// Memory a cached state takes beyond its stored JSON: the map's slot, the key, the timestamp
/// and the state's own allocations (vectors, strings, the probes' fields).
const ENTRY_OVERHEAD: u64 = 512;
/// In memory, a state takes about this many times the bytes of its stored JSON (its compact
/// event rows widen into structs of floats and enums; measured by the many-sessions benchmark,
/// which prints the process's memory beside the cache's estimate).
const WIDENING: u64 = 2;

/// A session as last stored (its `state` column left empty: the decoded state is beside it).
struct Cached {
    /// The partition of the batches topic its records are in.
    partition: u32,
    session: SessionRecord,
    state: SessionState,
    /// The estimated bytes it holds, fixed when it is cached (a weight must never change).
    bytes: u64,
}

#[derive(Clone)]
struct ByBytes;

impl Weighter<SessionId, Cached> for ByBytes {
    fn weight(&self, _: &SessionId, cached: &Cached) -> u64 {
        cached.bytes
    }
}

/// `pending`: sessions of the save in flight, as that save writes them (at most one poll's
/// sessions); cached once it lands, or discarded if their records were dead-lettered instead. A
/// poll that holds one of them waits for that landing before it folds: a fold on top of a save
/// that then failed would store the effects of batches that were never stored. `states`: the
/// sessions of confirmed saves with their decoded states, so a session's next batches are
/// folded without reading its row or decoding its state. That is sound because the processor
/// that consumes a session's partition is the only writer of its row (ingest and the APIs
/// never write sessions); a processor that loses a partition must forget what it held of it
/// ([`Memory::forget_partitions`]), since another processor writes those sessions from then on
/// and the partition may come back later.
///
/// `linked`: the visitors this poll's folds linked, with the visits that changed them, saved
/// together (one write) before the poll's sessions are sent to the store; a later session of the
/// same poll links against them as it would against the store.
pub(super) struct Memory {
    /// Per session: its partition, row, state and the bytes of its stored state (both parts).
    pending: std::collections::HashMap<SessionId, (u32, SessionRecord, SessionState, usize)>,
    states: quick_cache::unsync::Cache<SessionId, Cached, ByBytes>,
    linked: Vec<Linked>,
}

impl Memory {
    /// A memory that keeps at most `bytes` of confirmed states (estimated).
    pub(super) fn new(bytes: u64) -> Self {
        Memory {
            pending: Default::default(),
            linked: Vec::new(),
            // The item estimate only sizes the first allocation: a typical state is a few KB.
            states: quick_cache::unsync::Cache::with_weighter(
                usize::try_from(bytes / 4096).unwrap_or(usize::MAX).max(16),
                bytes,
                ByBytes,
            ),
        }
    }

    /// Whether the save in flight writes this session.
    pub(super) fn is_pending(&self, id: SessionId) -> bool {
        self.pending.contains_key(&id)
    }

    /// A session (whose records are in `partition`) folded into the save about to be sent,
    /// its state stored in `stored_bytes` of JSON (both parts of it): cached once the save
    /// lands.
    pub(super) fn hold(
        &mut self,
        partition: u32,
        session: SessionRecord,
        state: SessionState,
        stored_bytes: usize,
    ) {
        self.pending
            .insert(session.id, (partition, session, state, stored_bytes));
    }

    /// A session as last stored, with its state, taken out (the fold changes both, and the
    /// save puts them back).
    pub(super) fn take_stored(&mut self, id: SessionId) -> Option<(SessionRecord, SessionState)> {
        let (_, cached) = self.states.remove(&id)?;
        Some((cached.session, cached.state))
    }

    /// Drops what is held of the sessions of `partitions` (given up to another processor):
    /// if a partition comes back, its sessions' rows are read from the store again. Call it
    /// once their saves landed, so that none is pending.
    pub(super) fn forget_partitions(&mut self, partitions: &[u32]) {
        self.pending
            .retain(|_, (p, _, _, _)| !partitions.contains(p));
        self.states
            .retain(|_, cached| !partitions.contains(&cached.partition));
        crate::telemetry::cache(self.states.len(), self.states.weight());
    }

    /// This poll's linked visitors of one organization and environment, the latest first.
    pub(super) fn linked(
        &self,
        org: OrgId,
        env: Environment,
    ) -> impl Iterator<Item = &VisitorRecord> {
        self.linked
            .iter()
            .rev()
            .map(|l| &l.visitor)
            .filter(move |v| v.organization_id == org && v.environment == env)
    }

    /// This poll's version of a visitor, if a fold of it linked the visitor.
    pub(super) fn linked_visitor(
        &self,
        org: OrgId,
        env: Environment,
        id: VisitorId,
    ) -> Option<&VisitorRecord> {
        self.linked(org, env).find(|v| v.id == id)
    }

    /// A fold's `visit` made `visitor` (new, or seen again) what it is: it is saved with the
    /// poll's visitors.
    pub(super) fn link(&mut self, visitor: VisitorRecord, visit: Visit) {
        let mut visits = match self.linked.iter().position(|l| l.visitor.id == visitor.id) {
            Some(at) => self.linked.remove(at).visits,
            None => Vec::new(),
        };
        visits.push(visit);
        self.linked.push(Linked { visitor, visits });
    }

    /// The poll's linked visitors, to be saved; the next poll starts with none.
    pub(super) fn take_linked(&mut self) -> Vec<Linked> {
        std::mem::take(&mut self.linked)
    }

    /// Sessions whose save was given up on (their records dead-lettered): the store does not
    /// hold what they were folded into, so their next fold reads the stored row again.
    pub(super) fn discard(&mut self, ids: &[SessionId]) {
        for id in ids {
            self.pending.remove(id);
        }
    }

    /// A save landed: its sessions still pending (no later fold superseded them) are now what
    /// the store holds, and their states are cached for the next fold, evicting the least
    /// recently useful past the bound.
    pub(super) fn confirm(&mut self, saved: &[(SessionId, Timestamp)]) {
        for (id, updated_at) in saved {
            if self
                .pending
                .get(id)
                .is_some_and(|(_, s, _, _)| s.updated_at == *updated_at)
                && let Some((partition, mut session, state, stored)) = self.pending.remove(id)
            {
                let decision = session
                    .latest_decision
                    .as_ref()
                    .map_or(0, |d| d.as_str().len());
                let bytes = ENTRY_OVERHEAD + WIDENING * stored as u64 + decision as u64;
                session.state = store::RawJson::null();
                self.states.insert(
                    *id,
                    Cached {
                        partition,
                        session,
                        state,
                        bytes,
                    },
                );
            }
        }
        crate::telemetry::cache(self.states.len(), self.states.weight());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session whose stored state is `state_bytes` of JSON.
    fn session(state_bytes: usize) -> SessionRecord {
        let now = schemas::time::now();
        SessionRecord {
            id: SessionId::generate(),
            organization_id: schemas::OrgId::generate(),
            environment: schemas::credential::Environment::Test,
            visitor_id: None,
            opened_at: now,
            updated_at: now,
            page_url: String::new(),
            ip: String::new(),
            user_agent: String::new(),
            processed_through: 0,
            processed_seqs: Vec::new(),
            state: store::RawJson::encode(&"x".repeat(state_bytes)).unwrap(),
            latest_decision: None,
            finalized: false,
        }
    }

    #[test]
    fn confirmed_states_stay_under_the_byte_bound() {
        let bound = 64 * 1024;
        let mut memory = Memory::new(bound);
        let mut ids = Vec::new();
        for _ in 0..200 {
            let s = session(2_000);
            ids.push((s.id, s.updated_at));
            memory.hold(0, s, SessionState::default(), 2_002);
            memory.confirm(&ids[ids.len() - 1..]);
            assert!(
                memory.states.weight() <= bound,
                "{} over {bound}",
                memory.states.weight()
            );
        }
        // About bound / (512 + 2 × 2,002) states fit; the rest were evicted, and read back
        // from the store when their session sends again.
        assert!(
            memory.states.len() >= 10 && memory.states.len() <= 15,
            "{}",
            memory.states.len()
        );
        assert!(memory.pending.is_empty());
        let (id, _) = *ids.last().unwrap();
        assert!(memory.take_stored(id).is_some());
        assert!(memory.take_stored(id).is_none(), "taken out");
        assert!(
            memory.take_stored(ids[0].0).is_none(),
            "the oldest were evicted"
        );
    }

    #[test]
    fn a_save_superseded_by_a_later_fold_is_not_cached() {
        let mut memory = Memory::new(1 << 20);
        let s = session(10);
        let (id, first) = (s.id, s.updated_at);
        let mut later = s.clone();
        later.updated_at = first + chrono::Duration::seconds(1);
        memory.hold(0, s, SessionState::default(), 12);
        // The next poll folded the session again before the first save landed.
        memory.hold(0, later, SessionState::default(), 12);
        memory.confirm(&[(id, first)]);
        assert!(
            memory.take_stored(id).is_none(),
            "the first save is not what comes next"
        );
        assert!(memory.is_pending(id), "the later fold is still pending");
    }

    #[test]
    fn the_sessions_of_given_up_partitions_are_forgotten() {
        let mut memory = Memory::new(1 << 20);
        let (kept, given_up, in_flight) = (session(10), session(10), session(10));
        for (partition, s) in [(0, &kept), (1, &given_up)] {
            memory.hold(partition, s.clone(), SessionState::default(), 12);
            memory.confirm(&[(s.id, s.updated_at)]);
        }
        memory.hold(1, in_flight.clone(), SessionState::default(), 12);
        memory.forget_partitions(&[1]);
        assert!(
            memory.take_stored(kept.id).is_some(),
            "partition 0 is still ours"
        );
        assert!(
            memory.take_stored(given_up.id).is_none(),
            "read from the store if partition 1 comes back"
        );
        assert!(!memory.is_pending(in_flight.id));
    }
}
