//! Frees the memtables fjall has written out on a thread of its own, outside fjall's locks.
//!
//! fjall lets go of a flushed memtable when it prunes a table's version history, and it prunes
//! holding that table's version lock (lsm-tree 3.1, `SuperVersions::maintenance`), which every
//! write to the table and every snapshot read of it takes too. Freed there, a 64 MiB memtable
//! (a skip list, freed node by node) held the lock for 100–240 ms on a 2-core machine, and the
//! processor's saves waited as long: those stalls set the ingest benchmark's decision p99 (see
//! docs/performance.md#ingest). So this thread keeps a reference to every table's active
//! memtable and, once one is replaced, keeps it until fjall has dropped every reference of its
//! own; the last reference is then this thread's, and the memory is freed here, with no lock
//! held. Pruning still deletes the files of obsolete versions and tables under the lock (see
//! docs/performance.md#many-sessions-at-once): only the memory moves here.
//!
//! A memtable installed and replaced between two looks is missed, and freed by fjall as
//! before; one that is seen lives about a look longer than it would.
//!
//! This leans on `Keyspace::tree`, public but hidden from fjall's documentation, and on fjall
//! pruning under the lock: look at both again when fjall or lsm-tree is upgraded.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use fjall::{AbstractTree, Keyspace};

/// How often the thread looks at the tables' memtables: far shorter than filling a memtable
/// takes (at least 16 MiB, see `schemas::disk::MEMTABLE_BYTES`), so hardly any is missed.
const LOOK: Duration = Duration::from_millis(20);

/// The handle the store keeps on the thread; dropping it stops the thread and waits for it,
/// so no reference to a table outlives the store.
pub struct MemtableReaper {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MemtableReaper {
    /// Starts the thread for `tables`.
    pub fn start(tables: Vec<Keyspace>) -> std::io::Result<Self> {
        let (stop, stopped) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            // Linux keeps 15 bytes of a thread's name: this is what profiles show.
            .name("vigil-memtables".into())
            .spawn(move || reap(&tables, &stopped))?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for MemtableReaper {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("embedded store memtable thread panicked");
        }
    }
}

fn reap(tables: &[Keyspace], stopped: &Receiver<()>) {
    let current = || tables.iter().map(|t| t.tree.active_memtable());
    let mut active: Vec<_> = current().collect();
    let mut retired = Vec::new();
    while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(LOOK) {
        watch(current(), &mut active, &mut retired);
        // One at a time, watching between frees: a free takes up to a few tens of
        // milliseconds, long enough for a small table's memtable to come and go unseen.
        while let Some(memtable) = take_released(&mut retired) {
            drop(memtable);
            watch(current(), &mut active, &mut retired);
        }
    }
}

/// Moves the memtable held for each table that has a new one (`current`, in the order of
/// `active`) to `retired`, and holds the new one.
fn watch<M>(
    current: impl Iterator<Item = Arc<M>>,
    active: &mut [Arc<M>],
    retired: &mut Vec<Arc<M>>,
) {
    for (current, held) in current.zip(active.iter_mut()) {
        if !Arc::ptr_eq(&current, held) {
            retired.push(std::mem::replace(held, current));
        }
    }
}

/// A retired memtable fjall no longer holds, taken out of `retired`. A count of one is
/// `retired`'s own reference, and nothing can take another from it: the caller frees it.
fn take_released<M>(retired: &mut Vec<Arc<M>>) -> Option<Arc<M>> {
    let at = retired.iter().position(|m| Arc::strong_count(m) == 1)?;
    Some(retired.swap_remove(at))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Weak};
    use std::time::{Duration, Instant};

    use fjall::{AbstractTree, Database, Keyspace, KeyspaceCreateOptions};

    use super::{MemtableReaper, take_released, watch};

    /// Writes and flushes `table` until fjall holds no reference of its own to `memtable` (only
    /// the test's `held_here` are left), which it drops at a later flush once no snapshot can
    /// read it; whether it got there.
    fn flush_until_released<M>(table: &Keyspace, memtable: &Weak<M>, held_here: usize) -> bool {
        for flush in 0..50 {
            if memtable.strong_count() <= held_here {
                return true;
            }
            table.insert(format!("k{flush}"), "v").unwrap();
            table.rotate_memtable_and_wait().unwrap();
            // Time for the thread, where there is one, to look.
            std::thread::sleep(super::LOOK * 2);
        }
        false
    }

    fn open_table(dir: &std::path::Path) -> (Database, Keyspace) {
        let db = Database::builder(dir).open().unwrap();
        let table = db.keyspace("t", KeyspaceCreateOptions::default).unwrap();
        (db, table)
    }

    /// fjall lets go of a flushed memtable while the thread still holds it, and it is freed
    /// only when the thread takes it out.
    #[test]
    fn a_flushed_memtable_outlives_fjalls_references_until_taken() {
        let dir = tempfile::tempdir().unwrap();
        let (_db, table) = open_table(dir.path());
        let mut active = vec![table.tree.active_memtable()];
        let mut retired = Vec::new();
        let first = Arc::downgrade(&active[0]);

        assert!(
            flush_until_released(&table, &first, 1),
            "fjall kept the flushed memtable through 50 flushes"
        );
        // Only `active` holds it now: fjall has let go, and it is not freed.
        assert_eq!(first.strong_count(), 1);

        watch(
            std::iter::once(table.tree.active_memtable()),
            &mut active,
            &mut retired,
        );
        assert_eq!(retired.len(), 1);
        assert!(first.upgrade().is_some(), "held in `retired`");
        drop(take_released(&mut retired));
        assert!(first.upgrade().is_none(), "freed by whoever took it");
        assert!(retired.is_empty());
    }

    /// A retired memtable fjall still holds (a flush under way, a snapshot reading it) stays.
    #[test]
    fn a_memtable_fjall_still_holds_is_kept() {
        let old = Arc::new(1);
        let fjalls = Arc::clone(&old);
        let mut active = vec![old];
        let mut retired = Vec::new();
        watch(std::iter::once(Arc::new(2)), &mut active, &mut retired);
        assert_eq!(retired.len(), 1);
        assert_eq!(*active[0], 2);
        assert!(
            take_released(&mut retired).is_none(),
            "kept while fjall holds it"
        );
        drop(fjalls);
        assert!(take_released(&mut retired).is_some());
        assert!(retired.is_empty());
    }

    /// The thread itself: a memtable it saw retired is freed once fjall lets go (nothing is
    /// kept for good), and dropping the handle stops it and lets go of the tables, so the
    /// directory opens again.
    #[test]
    fn the_thread_frees_what_fjall_let_go_and_stops_with_its_handle() {
        let dir = tempfile::tempdir().unwrap();
        let (db, table) = open_table(dir.path());
        let reaper = MemtableReaper::start(vec![table.clone()]).unwrap();
        let first = Arc::downgrade(&table.tree.active_memtable());
        // Flushed until no reference is left at all: fjall's go at a later flush, the thread's
        // at its next look after that.
        assert!(
            flush_until_released(&table, &first, 0),
            "a flushed memtable was still held after 50 flushes"
        );

        let stopping = Instant::now();
        drop(reaper);
        assert!(
            stopping.elapsed() < Duration::from_secs(5),
            "the thread stopped late"
        );
        drop((table, db));
        let (_db, _table) = open_table(dir.path());
    }
}
