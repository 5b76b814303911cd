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
//! held.
//!
//! A memtable lives at most one look longer than it would (see `LOOK`), and a memtable filled,
//! flushed and pruned between two looks is freed by fjall as before.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

// The memtable of a keyspace's tree: hidden from fjall's documentation, but public, and the
// only handle on a memtable's lifetime fjall gives.
use fjall::{AbstractTree, Keyspace};

/// How often the thread looks at the tables' memtables. A flush of a full memtable takes
/// longer than this, so a memtable is seen as retired before fjall lets go of it.
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
            .name("vigil-store-memtables".into())
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
    let mut active: Vec<_> = tables.iter().map(|t| t.tree.active_memtable()).collect();
    let mut retired = Vec::new();
    while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(LOOK) {
        let current = tables.iter().map(|t| t.tree.active_memtable());
        look(current, &mut active, &mut retired);
    }
}

/// One look: a table whose active memtable is no longer the one held has its old one moved to
/// `retired`, and every retired memtable only this thread still holds is freed.
fn look<M>(
    current: impl Iterator<Item = Arc<M>>,
    active: &mut [Arc<M>],
    retired: &mut Vec<Arc<M>>,
) {
    for (current, held) in current.zip(active.iter_mut()) {
        if !Arc::ptr_eq(&current, held) {
            retired.push(std::mem::replace(held, current));
        }
    }
    // A count of one is this thread's own reference, and nothing can take another from it:
    // the memtable is freed here.
    retired.retain(|memtable| Arc::strong_count(memtable) > 1);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fjall::{AbstractTree, Database, KeyspaceCreateOptions};

    use super::look;

    /// fjall lets go of a flushed memtable while the thread still holds it, and the look that
    /// follows frees it: the memory is never freed under fjall's lock.
    #[test]
    fn a_flushed_memtable_is_freed_by_the_look_after_fjall_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::builder(dir.path()).open().unwrap();
        let table = db.keyspace("t", KeyspaceCreateOptions::default).unwrap();
        let mut active = vec![table.tree.active_memtable()];
        let mut retired = Vec::new();
        let first = Arc::downgrade(&active[0]);

        // fjall prunes the versions that hold a flushed memtable at a later flush, once no
        // snapshot can read them; a few flushes get there.
        let mut flushes = 0;
        while first.strong_count() > 1 {
            assert!(
                flushes < 50,
                "fjall kept the flushed memtable through {flushes} flushes"
            );
            table.insert(format!("k{flushes}"), "v").unwrap();
            table.rotate_memtable_and_wait().unwrap();
            flushes += 1;
        }
        // Only `active` holds it now: fjall has let go, and nothing was freed.
        assert_eq!(first.strong_count(), 1);

        look(
            std::iter::once(table.tree.active_memtable()),
            &mut active,
            &mut retired,
        );
        assert!(
            first.upgrade().is_none(),
            "the look freed the retired memtable"
        );
        assert!(retired.is_empty());
    }

    /// A retired memtable fjall still holds (a flush under way, a snapshot reading it) stays.
    #[test]
    fn a_memtable_fjall_still_holds_is_kept() {
        let old = Arc::new(1);
        let fjalls = Arc::clone(&old);
        let mut active = vec![old];
        let mut retired = Vec::new();
        look(std::iter::once(Arc::new(2)), &mut active, &mut retired);
        assert_eq!(retired.len(), 1, "kept while fjall holds it");
        assert_eq!(*active[0], 2);
        drop(fjalls);
        look(
            std::iter::once(Arc::clone(&active[0])),
            &mut active,
            &mut retired,
        );
        assert!(retired.is_empty(), "freed at the look after fjall let go");
    }
}
