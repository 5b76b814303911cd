//! The embedded engines' (store and log) use of the machine: the memory their journals and
//! memtables may hold, and the free-space reserve. A write is refused, before
//! anything reaches the disk, when the filesystem holding the engine's directory has less room
//! left than the reserve.
//!
//! Why refuse early rather than let the write fail: fjall marks a database poisoned after a
//! failed journal write and refuses every later write until the process restarts. Refused
//! early, a full disk is a retryable answer (docs/architecture.md#retention) that ends by itself
//! once space returns. The reserve also leaves room for the engine's own background work (memtable
//! flushes, compactions), which must not be the writes that fill the disk.

use std::path::{Path, PathBuf};

/// The most journal an embedded engine keeps before it flushes its oldest memtables (fjall's
/// default is 512 MiB): a journal's data is also held in memtables, so this bounds their memory
/// (with the defaults, the many-sessions soak's server grew past 2 GB).
///
/// Both engines write their journals uncompressed (fjall compresses values from 4 KiB by
/// default): a session's row is larger than that, and compressing it in the writer's thread,
/// with a zeroed table allocated for each value, took a sixth of the processor's thread in the
/// many-sessions benchmark. A journal is dropped once flushed; flushed tables stay compressed.
pub const JOURNAL_BYTES: u64 = 128 * 1024 * 1024;
/// The size at which one table's memtable is sealed and written out (fjall's default is
/// 64 MiB), so a few busy tables cannot hold the whole journal's bound each.
pub const MEMTABLE_BYTES: u64 = 16 * 1024 * 1024;
/// The memtable size of the store's tables that every fold of a session rewrites (`sessions`,
/// `session_decisions`). With 16 MiB each sealed every fraction of a second at 4,096 sessions,
/// and while the one background worker compacted, four sealed ones queued and fjall halted the
/// processor's writes for seconds. The journal's bound still bounds what all memtables hold.
pub const HOT_MEMTABLE_BYTES: u64 = 64 * 1024 * 1024;

/// Background threads of each embedded engine (fjall's default is one per core). With more
/// than one, fjall's first worker hands compaction requests on to the others by sending them
/// back to the shared queue, and while another worker compacts it takes them straight back:
/// a busy loop that took 7% of both cores in the many-sessions benchmark. One worker flushes
/// and compacts in turn.
pub const WORKER_THREADS: usize = 1;

/// The reserve on a large filesystem: room for a memtable flush or two.
pub const MAX_RESERVE_BYTES: u64 = 64 * 1024 * 1024;

/// What a filesystem smaller than 20 × [`MAX_RESERVE_BYTES`] keeps free instead: a twentieth
/// of its size, so a small volume (or a test's tmpfs) is still usable.
const SMALL_FILESYSTEM_SHARE: u64 = 20;

/// The reserve of one engine's directory.
#[derive(Debug, Clone)]
pub struct DiskReserve {
    dir: PathBuf,
}

impl DiskReserve {
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
        }
    }

    /// `Ok` when a write may go ahead; otherwise why not, as a short text without the path
    /// (it reaches `/readyz`). A filesystem that cannot be asked is not a reason to refuse:
    /// the write itself will say what is wrong.
    pub fn check(&self) -> Result<(), String> {
        let Ok(stats) = rustix::fs::statvfs(&self.dir) else {
            return Ok(());
        };
        let block = stats.f_frsize.max(1);
        let free = stats.f_bavail.saturating_mul(block);
        let total = stats.f_blocks.saturating_mul(block);
        let reserve = reserve_for(total);
        if free < reserve {
            return Err(format!(
                "disk full: {free} bytes free, under the {reserve}-byte reserve"
            ));
        }
        Ok(())
    }
}

/// The reserve of a filesystem of `total` bytes.
fn reserve_for(total: u64) -> u64 {
    (total / SMALL_FILESYSTEM_SHARE).min(MAX_RESERVE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_filesystem_reserves_a_twentieth_and_a_large_one_a_fixed_amount() {
        assert_eq!(reserve_for(8 * 1024 * 1024), 8 * 1024 * 1024 / 20);
        assert_eq!(reserve_for(1 << 40), MAX_RESERVE_BYTES);
    }

    #[test]
    fn a_directory_with_room_passes() {
        DiskReserve::new(&std::env::temp_dir()).check().unwrap();
    }
}
