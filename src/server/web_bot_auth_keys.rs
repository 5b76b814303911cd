//! Keeps the trusted agents' key directories (`--web-bot-auth-keys`) current without a restart:
//! the file is read again on SIGHUP and every `--web-bot-auth-refresh`, so an operator can add
//! an agent or roll a key in place. A file that does not read or parse leaves the directories in
//! use as they were and is logged, since a half-edited file must not make every agent unknown.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ingest::web_bot_auth::TrustedAgents;
use tokio_util::sync::CancellationToken;

/// Reloads `path` into `agents` on SIGHUP and every `every` (never on a timer when zero),
/// until `shutdown`.
pub async fn keep_current(
    agents: Arc<TrustedAgents>,
    path: PathBuf,
    every: Duration,
    shutdown: CancellationToken,
) {
    let mut hangups = hangups();
    // Zero, or too long to represent, means no timer.
    let first = tokio::time::Instant::now().checked_add(every);
    let mut ticks = first.filter(|_| !every.is_zero()).map(|first| {
        let mut ticks = tokio::time::interval_at(first, every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks
    });
    loop {
        let cause = tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = next_hangup(&mut hangups) => "SIGHUP",
            _ = async {
                match ticks.as_mut() {
                    Some(ticks) => { ticks.tick().await; }
                    None => std::future::pending().await,
                }
            } => "refresh interval",
        };
        reload(&agents, &path, cause);
    }
}

fn reload(agents: &TrustedAgents, path: &std::path::Path, cause: &str) {
    match agents.reload(path) {
        Ok(reloaded) if reloaded.changed => tracing::info!(
            path = %path.display(), keys = reloaded.keys, cause,
            "web bot auth keys reloaded"
        ),
        Ok(reloaded) => tracing::debug!(
            path = %path.display(), keys = reloaded.keys, cause,
            "web bot auth keys unchanged"
        ),
        Err(e) => tracing::warn!(
            error = %e, cause,
            "web bot auth keys not reloaded; the keys in use stay"
        ),
    }
}

#[cfg(unix)]
type Hangups = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangups = ();

#[cfg(unix)]
fn hangups() -> Hangups {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; keys reload on the interval only");
            None
        }
    }
}

#[cfg(not(unix))]
fn hangups() -> Hangups {}

#[cfg(unix)]
async fn next_hangup(hangups: &mut Hangups) {
    if let Some(signal) = hangups
        && signal.recv().await.is_some()
    {
        return;
    }
    std::future::pending().await
}

#[cfg(not(unix))]
async fn next_hangup(_: &mut Hangups) {
    std::future::pending().await
}
