//! The poll's part in replay detection (docs/detection.md#replayed-sessions): the marks its
//! batches leave in the replay record, left in one call for the whole poll rather than one per
//! session, and the batches whose marks another session left first, by session.

use std::collections::HashMap;

use super::{Failure, Pipeline, Polled, read_batch};
use crate::observations::Batch;

/// The marks the poll's batches leave in the replay record (docs/detection.md#replayed-sessions),
/// each with the batch's number and kind.
pub(super) fn marks(groups: &[Vec<Polled<'_>>]) -> Vec<(u64, &'static str, store::ReplayMark)> {
    let mut marks = Vec::new();
    for polled in groups.iter().flatten() {
        if polled.batch.seq == 0 {
            continue;
        }
        let read;
        let observed = match &polled.observed {
            Some(observed) => observed,
            None => match read_batch(&polled.batch) {
                Ok(batch) => {
                    read = batch;
                    &read
                }
                // Dead-lettered when folded.
                Err(_) => continue,
            },
        };
        if let Some(mark) = crate::replay::mark(&polled.batch, observed) {
            let kind = match observed {
                Batch::Probes(_) => "probes",
                Batch::Interactions(_) => "interactions",
            };
            marks.push((polled.batch.seq, kind, mark));
        }
    }
    marks
}

/// Leaves `marked` in the replay record; the batches another session left first, by session.
pub(super) async fn replayed(
    pipeline: &Pipeline,
    marked: &[(u64, &'static str, store::ReplayMark)],
) -> Result<HashMap<schemas::SessionId, Vec<crate::ReplayedBatch>>, Failure> {
    let mut replays: HashMap<schemas::SessionId, Vec<crate::ReplayedBatch>> = HashMap::new();
    if marked.is_empty() {
        return Ok(replays);
    }
    let marks: Vec<store::ReplayMark> = marked.iter().map(|(_, _, m)| m.clone()).collect();
    let found = pipeline
        .store
        .leave_replay_marks(
            &marks,
            schemas::time::now()
                + chrono::TimeDelta::from_std(pipeline.replay_memory)
                    .unwrap_or(chrono::TimeDelta::MAX),
        )
        .await?;
    for ((seq, kind, own), found) in marked.iter().zip(found) {
        if let Some(found) = found.filter(|f| crate::replay::replayed(own, f)) {
            replays
                .entry(own.session_id)
                .or_default()
                .push(crate::ReplayedBatch {
                    seq: *seq,
                    kind: (*kind).to_owned(),
                    first_seen_in: found.session_id,
                });
        }
    }
    Ok(replays)
}
