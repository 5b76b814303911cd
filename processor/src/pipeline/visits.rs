//! A visit: what linking one session does to its visitor, kept apart from the visitor it was
//! applied to so that it can be applied again (docs/architecture.md#fleet-writes). Two
//! processors may link sessions of one visitor at once (its sessions hash to different
//! partitions); each saves the visitor as the revision after the one it read, and the one that
//! finds the visitor saved since reads it again and reapplies its poll's visits to that version. So counts
//! add and recent sessions union, and no processor's visit is lost.

use std::time::Duration;

use schemas::time::Timestamp;
use schemas::{SessionId, VisitorId};
use store::{VisitorAnchors, VisitorRecord, VisitorRequest, VisitorStorage, VisitorTraits};
use tokio_util::sync::CancellationToken;

use super::{Failure, Pipeline};
use crate::retry::{Retried, retry};

/// How many times a poll's visitors are read again and saved over a newer revision before the
/// sessions naming them are given up: each round lost means another processor's save won, so
/// only a fleet linking one visitor from many processors at every instant comes near it.
const MERGE_ROUNDS: usize = 64;

/// One session's visit to its visitor.
#[derive(Debug, Clone)]
pub(super) struct Visit {
    pub session: SessionId,
    /// When ingest received the batch that linked it.
    pub seen_at: Timestamp,
    /// How long a visitor is kept after it was last seen (`--retention`).
    pub retention: Duration,
    pub request: VisitorRequest,
    /// Where the visit's browser still held the visitor token.
    pub storage: VisitorStorage,
    /// The visit's anchors, if its probes reported any.
    pub anchors: Option<VisitorAnchors>,
    /// The visit's component vector and the traits an anchor match must agree on, if its probes
    /// reported any component.
    pub components: Option<(Vec<f64>, VisitorTraits)>,
}

impl Visit {
    /// Applies the visit to `visitor`: counted once however often it is applied (a redelivered
    /// batch, a reapplication after a lost race), and what it saw of the browser kept only if no
    /// later visit is already applied.
    pub(super) fn apply(&self, visitor: &mut VisitorRecord) {
        if !visitor.recent_sessions.contains(&self.session) {
            visitor.seen_count = visitor.seen_count.saturating_add(1);
        }
        visitor.remember_session(self.session);
        let latest = self.seen_at >= visitor.last_seen_at;
        visitor.first_seen_at = visitor.first_seen_at.min(self.seen_at);
        visitor.last_seen_at = visitor.last_seen_at.max(self.seen_at);
        visitor.expires_at = chrono::TimeDelta::from_std(self.retention)
            .ok()
            .and_then(|r| visitor.last_seen_at.checked_add_signed(r))
            .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC);
        if !latest {
            return;
        }
        visitor.latest_request = self.request.clone();
        visitor.storage = self.storage;
        // The latest probes describe the browser as it is now (a driver or browser update moves
        // the hashes); a visit that reported none keeps what was known.
        if let Some(anchors) = &self.anchors {
            visitor.anchors = anchors.clone();
        }
        if let Some((components, traits)) = &self.components {
            visitor.components = components.clone();
            visitor.traits = traits.clone();
        }
    }
}

/// A visitor as this poll's folds left it, with the visits that made it so.
pub(super) struct Linked {
    pub visitor: VisitorRecord,
    pub visits: Vec<Visit>,
}

impl Linked {
    /// The visits applied to the visitor as stored now, to be saved as its next revision; when
    /// retention dropped it meanwhile, the poll's version is saved as it is, starting it again.
    fn rebase(&mut self, stored: Option<VisitorRecord>) {
        if let Some(mut stored) = stored {
            stored.revision += 1;
            for visit in &self.visits {
                visit.apply(&mut stored);
            }
            self.visitor = stored;
        }
    }
}

/// Stores a poll's linked visitors: in one write, each over the revision it was read at; those
/// another processor saved since are read again, their visits reapplied, and written again. A
/// write that fails for good is tried one visitor at a time. The visitors that could not be
/// stored, with why; `None` when shutting down.
pub(super) async fn store_visitors(
    pipeline: &Pipeline,
    mut pending: Vec<Linked>,
    shutdown: &CancellationToken,
) -> Option<Vec<(VisitorId, Failure)>> {
    let mut unsaved = Vec::new();
    for _ in 0..MERGE_ROUNDS {
        if pending.is_empty() {
            return Some(unsaved);
        }
        let visitors: Vec<VisitorRecord> = pending.iter().map(|l| l.visitor.clone()).collect();
        let (stale, failed) = save_round(pipeline, &visitors, shutdown).await?;
        pending.retain(|l| stale.contains(&l.visitor.id));
        unsaved.extend(failed);
        if !pending.is_empty() {
            crate::telemetry::visitor_races(pending.len());
        }
        for linked in &mut pending {
            let (org, env, id) = (
                linked.visitor.organization_id,
                linked.visitor.environment,
                linked.visitor.id,
            );
            let read = retry(
                "reading a visitor saved meanwhile",
                shutdown,
                &mut (pipeline, org, env, id),
                |(pipeline, org, env, id)| {
                    Box::pin(async move {
                        Ok::<_, Failure>(pipeline.store.get_visitor(*org, *env, *id).await?)
                    })
                },
            )
            .await;
            match read {
                Retried::Done(stored) => linked.rebase(stored),
                Retried::Failed(e) => unsaved.push((id, e)),
                Retried::ShuttingDown => return None,
            }
        }
        pending.retain(|l| !unsaved.iter().any(|(id, _)| *id == l.visitor.id));
    }
    unsaved.extend(pending.into_iter().map(|l| {
        let message = format!("saved by other processors {MERGE_ROUNDS} times in a row");
        (l.visitor.id, Failure::Transient(message))
    }));
    Some(unsaved)
}

/// One write of `visitors`, retried while the store is unavailable; if it fails for good, one
/// visitor at a time. The stale ones, and those that failed with why; `None` when shutting down.
async fn save_round(
    pipeline: &Pipeline,
    visitors: &[VisitorRecord],
    shutdown: &CancellationToken,
) -> Option<(Vec<VisitorId>, Vec<(VisitorId, Failure)>)> {
    let together = retry(
        "storing visitors",
        shutdown,
        &mut (pipeline, visitors),
        |(pipeline, visitors)| Box::pin(save_visitors(pipeline, visitors)),
    )
    .await;
    match together {
        Retried::Done(stale) => return Some((stale, Vec::new())),
        Retried::ShuttingDown => return None,
        Retried::Failed(_) => {}
    }
    let (mut stale, mut failed) = (Vec::new(), Vec::new());
    for visitor in visitors {
        match retry(
            "storing a visitor",
            shutdown,
            &mut (pipeline, std::slice::from_ref(visitor)),
            |(pipeline, visitors)| Box::pin(save_visitors(pipeline, visitors)),
        )
        .await
        {
            Retried::Done(s) => stale.extend(s),
            Retried::Failed(e) => failed.push((visitor.id, e)),
            Retried::ShuttingDown => return None,
        }
    }
    Some((stale, failed))
}

async fn save_visitors(
    pipeline: &Pipeline,
    visitors: &[VisitorRecord],
) -> Result<Vec<VisitorId>, Failure> {
    Ok(pipeline.store.save_visitors(visitors).await?)
}
