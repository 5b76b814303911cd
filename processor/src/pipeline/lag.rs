//! The processor's lag per partition of `collect.batches.v1` (`vigil_processor_lag`): how many
//! records were appended that the processor has not read yet, for the partitions it reads now
//! (they change as replicas join and leave the group).

use std::time::{Duration, Instant};

use log::Record;

use super::Pipeline;

/// The processor's lag per partition of the batches topic: the log's end offsets against the
/// position after the last record read, sampled at most every [`Lag::EVERY`].
pub(super) struct Lag {
    /// The offset after the last record read, per entry of `partitions`; unknown until a
    /// record of the partition was read or a poll found nothing anywhere.
    next: Vec<Option<u64>>,
    partitions: Vec<u32>,
    sampled: Option<Instant>,
}

impl Lag {
    const EVERY: Duration = Duration::from_secs(1);

    pub(super) fn new(partitions: &[u32]) -> Self {
        Lag {
            next: vec![None; partitions.len()],
            partitions: partitions.to_vec(),
            sampled: None,
        }
    }

    /// Follows the consumer's partitions after a rebalance (`partitions` ascending): those
    /// kept keep what is known of them, new ones start unknown, and those given up leave the
    /// gauge (the replica that reads them now reports them).
    pub(super) fn follow(&mut self, partitions: &[u32]) {
        for &p in &self.partitions {
            if partitions.binary_search(&p).is_err() {
                crate::telemetry::lag_gone(p);
            }
        }
        let next = partitions
            .iter()
            .map(|p| {
                self.partitions
                    .binary_search(p)
                    .ok()
                    .and_then(|i| self.next[i])
            })
            .collect();
        self.next = next;
        self.partitions = partitions.to_vec();
        // Sampled at the next poll, so a new partition shows at once.
        self.sampled = None;
    }

    /// Takes note of a poll's records and, at most every [`Lag::EVERY`], samples the log's
    /// ends and sets the gauge.
    pub(super) async fn polled(&mut self, pipeline: &Pipeline, records: &[Record]) {
        for r in records {
            if let Ok(i) = self.partitions.binary_search(&r.partition) {
                self.next[i] = Some(r.offset + 1);
            }
        }
        if self.sampled.is_some_and(|at| at.elapsed() < Self::EVERY) {
            return;
        }
        self.sampled = Some(Instant::now());
        // A gauge is worth no retry: the next sample comes soon.
        let Ok(ends) = pipeline.log.end_offsets(&pipeline.batches).await else {
            return;
        };
        for (i, &p) in self.partitions.iter().enumerate() {
            let Some(&end) = ends.get(p as usize) else {
                continue;
            };
            // A poll that found nothing has read every partition to its end.
            if records.is_empty() {
                self.next[i] = Some(self.next[i].map_or(end, |n| n.max(end)));
            }
            if let Some(next) = self.next[i] {
                crate::telemetry::lag(p, end.saturating_sub(next));
            }
        }
    }
}
