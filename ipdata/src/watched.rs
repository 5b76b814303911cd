//! A source in service (the databases, a list), reopened when a file changes on disk or on
//! SIGHUP. Lookups read the one in service without a lock ([`arc_swap`]); a reopened source
//! replaces it whole once every file of it has opened, and one that fails to open leaves the
//! last good one in service.
//!
//! A file is read whole when it opens, so an update may rewrite it in place or rename a new one
//! over it (as `geoipupdate` does); a rename is better, since a reload that reads a file half
//! rewritten fails and waits for the next change.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;

use crate::{IpDatabases, IpFacts, OpenError, Source};

/// What tells a file's versions apart: a rename puts another inode in place, and a copy over
/// it another length or modification time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    inode: u64,
    len: u64,
    modified: Option<SystemTime>,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        inode: meta.ino(),
        len: meta.len(),
        modified: meta.modified().ok(),
    })
}

/// A source of the operator's in service.
pub struct Watched<S> {
    paths: Vec<PathBuf>,
    current: ArcSwap<S>,
    /// Each file's stamp when the set in service was opened.
    opened: Mutex<Vec<Option<Stamp>>>,
}

impl Watched<IpDatabases> {
    /// What the databases in service say about `ip`.
    pub fn lookup(&self, ip: std::net::IpAddr) -> IpFacts {
        self.current.load().lookup(ip)
    }
}

impl<S: Source> Watched<S> {
    /// Opens every file of `paths` (none: the source's empty or shipped form), or fails
    /// naming the first that cannot be read: a start-up error.
    pub fn open(paths: Vec<PathBuf>) -> Result<Arc<Self>, OpenError> {
        let stamps = paths.iter().map(|p| stamp(p)).collect();
        let source = S::open(&paths)?;
        tracing::info!(what = S::WHAT, contents = %source.describe(), "opened");
        Ok(Arc::new(Watched {
            paths,
            current: ArcSwap::from_pointee(source),
            opened: Mutex::new(stamps),
        }))
    }

    /// The source in service, for a caller that looks up many addresses at once.
    pub fn current(&self) -> Arc<S> {
        self.current.load_full()
    }

    /// A lock-free borrow of the source in service, for one lookup.
    pub fn load(&self) -> arc_swap::Guard<Arc<S>> {
        self.current.load()
    }

    /// Reopens the source when a file changed since it was opened, or whatever the files' state
    /// when `forced` (SIGHUP). Whether another set is now in service; on a failure the last
    /// good set stays, and the error says which file failed and why.
    pub fn reload(&self, forced: bool) -> Result<bool, OpenError> {
        let mut opened = self.opened.lock().unwrap_or_else(PoisonError::into_inner);
        let now: Vec<Option<Stamp>> = self.paths.iter().map(|p| stamp(p)).collect();
        if !forced && now == *opened {
            return Ok(false);
        }
        let source = S::open(&self.paths)?;
        self.current.store(Arc::new(source));
        *opened = now;
        Ok(true)
    }

    /// Watches the files: every `every`, and at each SIGHUP, reloads as [`Watched::reload`]
    /// says, logging what changed or why the last good set stays. Ends with the runtime.
    /// The SIGHUP handler is in place when this returns. Must be called within the runtime.
    pub fn watch(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let watched = Arc::clone(self);
        let mut hangups =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                let forced = tokio::select! {
                    _ = ticks.tick() => false,
                    Some(()) = async {
                        match hangups.as_mut() {
                            Some(h) => h.recv().await,
                            None => std::future::pending().await,
                        }
                    } => true,
                };
                let reloading = Arc::clone(&watched);
                let reloaded = tokio::task::spawn_blocking(move || reloading.reload(forced)).await;
                match reloaded {
                    Ok(Ok(true)) => tracing::info!(
                        what = S::WHAT,
                        contents = %watched.current().describe(),
                        forced,
                        "reopened"
                    ),
                    Ok(Ok(false)) => {}
                    Ok(Err(error)) => tracing::warn!(
                        what = S::WHAT,
                        %error,
                        "not reopened; the last good one stays in service"
                    ),
                    Err(error) => tracing::error!(what = S::WHAT, %error, "the reload stopped"),
                }
            }
        })
    }
}
