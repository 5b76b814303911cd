//! Ingest's batch counters (`advance_collect_seq`): raised in memory, written behind.
//!
//! Ingest advances a session's counter for every batch it accepts, after the batch is in the
//! log. The counter is not durable by design (see `advance_collect_seq`): a raise a crash loses
//! only lets a replayed batch through once more, which the processor drops by number. So a
//! raise is answered from memory, at once: `Inner::pending_seqs` holds the counters raised but
//! not yet written, reads take them over what fjall holds, and one thread writes them to
//! `collect_seqs` (eight bytes a session; see `COLLECT_SEQS`) in groups, dropping each from
//! memory once written. Answered on that thread instead, each raise waited for fjall's journal,
//! which a processor's save holds through its write and fsync: about a millisecond of every
//! saturated batch's acknowledgement, and a thread hop.
//!
//! Lock order: `collect_rows` before `pending_seqs`, which is held only for map steps (under
//! it nothing takes another lock).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, MutexGuard, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use schemas::ids::SessionId;

use super::{Inner, key, unavailable};
use crate::Result;

/// How long the writing thread sleeps without a wake before it tries again what a failed pass
/// (a nearly full disk, say) left pending.
const RETRY: Duration = Duration::from_secs(1);
/// The least time between two passes, so raises coming one after another share one: a pass
/// costs a commit and a look at the disk's free space, and a pass for every few raises cost a
/// saturated ingest 3% of its CPU.
const PASS_INTERVAL: Duration = Duration::from_millis(5);

/// The handle the store keeps on the writing thread. Dropping it lets the thread write what is
/// still pending, and waits for that.
pub struct SeqWriter {
    wake: Option<Sender<()>>,
    /// Set by the raise that wakes the thread, cleared by the thread before it takes what is
    /// pending: a raise that finds it set is taken by a pass still to come.
    scheduled: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SeqWriter {
    /// Starts the writing thread. It holds the store weakly, so it never keeps it open.
    pub fn start(inner: Weak<Inner>) -> std::io::Result<Self> {
        let (wake, woken) = std::sync::mpsc::channel();
        let scheduled = Arc::new(AtomicBool::new(false));
        let thread = {
            let scheduled = Arc::clone(&scheduled);
            std::thread::Builder::new()
                .name("vigil-store-seqs".into())
                .spawn(move || write_behind(&inner, &woken, &scheduled))?
        };
        Ok(Self {
            wake: Some(wake),
            scheduled,
            thread: Some(thread),
        })
    }

    /// Raises `id`'s counter to `seq` if it is below; whether it rose (`false` also when the
    /// session does not exist). Answered from memory; the raise is written behind.
    pub fn advance(&self, inner: &Inner, id: SessionId, seq: u64) -> Result<bool> {
        let rose = inner.raise_seq(id, seq)?;
        // One wake per pass: every raise before the thread clears the flag is in its snapshot
        // (it clears the flag before taking `pending_seqs`, which the raise held to insert).
        if rose
            && !self.scheduled.swap(true, Ordering::AcqRel)
            && let Some(wake) = &self.wake
        {
            let _ = wake.send(());
        }
        Ok(rose)
    }
}

impl Drop for SeqWriter {
    fn drop(&mut self) {
        self.wake.take();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("embedded store counter thread panicked");
        }
    }
}

fn write_behind(inner: &Weak<Inner>, woken: &Receiver<()>, scheduled: &AtomicBool) {
    loop {
        // A timeout passes too: it retries what a failed pass kept (an empty pass costs two
        // uncontended locks).
        let open = !matches!(
            woken.recv_timeout(RETRY),
            Err(RecvTimeoutError::Disconnected)
        );
        scheduled.store(false, Ordering::Release);
        let Some(inner) = inner.upgrade() else { return };
        if let Err(e) = inner.write_pending_seqs() {
            // Kept pending, so reads still see them; written by the next pass that succeeds,
            // or lost with the process, which costs what a lost raise costs (see the module).
            tracing::warn!(error = %e, "embedded store: batch counters not written yet");
        }
        if !open {
            return;
        }
        std::thread::sleep(PASS_INTERVAL);
    }
}

impl Inner {
    /// Raises `id`'s counter in memory if `seq` is above it; whether it rose.
    ///
    /// A counter pending is compared at once. Otherwise the stored counter is read with
    /// `pending_seqs` let go, so no fjall read (a cache miss may reach the disk) holds up
    /// every other raise; it is stale only if a pass dropped a written counter from memory
    /// since (or a purge forgot one), which `seqs_written` tells: then it is read again.
    fn raise_seq(&self, id: SessionId, seq: u64) -> Result<bool> {
        loop {
            let passes = {
                let mut pending = self.pending();
                if let Some(&current) = pending.get(&id) {
                    let rises = seq > current;
                    if rises {
                        pending.insert(id, seq);
                    }
                    return Ok(rises);
                }
                self.seqs_written.load(Ordering::Acquire)
            };
            let stored = self.stored_collect_seq(id)?;
            let mut pending = self.pending();
            let current = match (pending.get(&id), stored) {
                (Some(&current), _) => current,
                _ if self.seqs_written.load(Ordering::Acquire) != passes => continue,
                (None, Some(current)) => current,
                (None, None) => return Ok(false),
            };
            if seq <= current {
                return Ok(false);
            }
            pending.insert(id, seq);
            return Ok(true);
        }
    }

    /// The counters raised in memory and not yet written. A poisoned lock still guards a
    /// whole map: nothing under it panics part-way.
    fn pending(&self) -> MutexGuard<'_, HashMap<SessionId, u64>> {
        self.pending_seqs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The counter raised in memory and not yet written, if any.
    pub(super) fn pending_seq(&self, id: SessionId) -> Option<u64> {
        self.pending().get(&id).copied()
    }

    /// Forgets the pending counters of sessions just purged, so none is written back. The
    /// caller holds `collect_rows` through its purge and this.
    pub(super) fn forget_pending_seqs(&self, purged: &[SessionId]) {
        let mut pending = self.pending();
        for id in purged {
            pending.remove(id);
        }
        // A raise that read a purged session's row before the purge reads it again.
        self.seqs_written.fetch_add(1, Ordering::AcqRel);
    }

    /// Writes every pending counter in one buffered batch (not synced: see the module doc),
    /// under `collect_rows`, so a purge cannot interleave, then drops from memory those not
    /// raised again meanwhile.
    pub(super) fn write_pending_seqs(&self) -> Result<()> {
        let _rows = self
            .collect_rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let taken: Vec<(SessionId, u64)> =
            self.pending().iter().map(|(id, seq)| (*id, *seq)).collect();
        if taken.is_empty() {
            return Ok(());
        }
        self.space.check().map_err(crate::StoreError::Unavailable)?;
        let mut batch = self.db.batch();
        for (id, seq) in &taken {
            batch.insert(
                &self.collect_seqs,
                key::collect_session(*id),
                seq.to_be_bytes(),
            );
        }
        batch.commit().map_err(unavailable)?;
        let mut pending = self.pending();
        for (id, seq) in taken {
            if pending.get(&id) == Some(&seq) {
                pending.remove(&id);
            }
        }
        // Under the lock: a raise that read the stored counter before this pass committed
        // sees the count moved and reads it again.
        self.seqs_written.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}
