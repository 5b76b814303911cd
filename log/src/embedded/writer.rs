//! The embedded log's single writer thread, which group-commits.
//!
//! An fsync costs about as much for one record as for a thousand, and fjall takes one per
//! synced batch (under its journal lock, so concurrent batches would queue for it anyway). So
//! appends, commits and topic creations are queued to this thread, which writes everything that
//! queued up while its previous fsync ran as one batch and fsyncs it once: under load a single
//! fsync acknowledges many appends, and when idle an append waits for its own fsync only.
//!
//! Being the only writer also makes it the only place offsets are assigned: per partition it
//! keeps the next offset (recovered from the last stored record on first use), advancing it
//! only once a batch is durable, so offsets stay dense even when a batch fails. And it is where
//! a partition's time marks are written (see the module above), in the batch of the record they
//! mark.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::thread::JoinHandle;

use fjall::PersistMode;
use tokio::sync::{mpsc, oneshot};

use super::{Shared, TopicState, key};
use crate::{LogError, Result, Topic};

/// How many ops may wait for the writer before appends wait to enqueue (backpressure).
const QUEUE: usize = 8192;
/// Bounds on one group commit, so one fsync's batch stays a few MiB of journal at most.
const MAX_GROUP_OPS: usize = 4096;
const MAX_GROUP_BYTES: usize = 8 << 20;

pub(super) enum Op {
    CreateTopic {
        topic: Topic,
        partitions: u32,
        done: oneshot::Sender<Result<u32>>,
    },
    Append {
        topic: Topic,
        state: Arc<TopicState>,
        partition: u32,
        /// The encoded record value (key and payload).
        value: Vec<u8>,
        done: oneshot::Sender<Result<u64>>,
    },
    Commit {
        /// `log_committed` keys and the next offset to store under each.
        entries: Vec<(Vec<u8>, u64)>,
        /// Only where the group has no position yet (a member's first join), never over one.
        if_absent: bool,
        done: oneshot::Sender<Result<()>>,
    },
}

impl Op {
    fn size(&self) -> usize {
        match self {
            Op::Append { value, .. } => value.len(),
            Op::CreateTopic { .. } | Op::Commit { .. } => 64,
        }
    }
}

/// The handle on the writer thread: dropping it lets the thread drain its queue and stop, and
/// waits for that, so the directory is released once the log is dropped.
pub(super) struct Writer {
    ops: Option<mpsc::Sender<Op>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    pub(super) fn start(shared: Arc<Shared>) -> Result<Self> {
        let (ops, queue) = mpsc::channel(QUEUE);
        let thread = std::thread::Builder::new()
            .name("vigil-log-writer".into())
            .spawn(move || run(&shared, queue))
            .map_err(|e| LogError::Unavailable(format!("embedded log writer thread: {e}")))?;
        Ok(Self {
            ops: Some(ops),
            thread: Some(thread),
        })
    }

    pub(super) fn sender(&self) -> &mpsc::Sender<Op> {
        self.ops.as_ref().expect("the sender lives until drop")
    }

    pub(super) fn weak_sender(&self) -> mpsc::WeakSender<Op> {
        self.ops
            .as_ref()
            .expect("the sender lives until drop")
            .downgrade()
    }

    pub(super) fn check_alive(&self) -> Result<()> {
        match &self.thread {
            Some(thread) if !thread.is_finished() => Ok(()),
            _ => Err(LogError::Unavailable(
                "embedded log writer has stopped".into(),
            )),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the queue ends the thread once it has written what is queued. Consumers only
        // hold weak senders, so they cannot keep it open; a commit in flight holds a strong one
        // for the moment it takes to enqueue.
        self.ops.take();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("embedded log writer thread panicked");
        }
    }
}

fn run(shared: &Shared, mut queue: mpsc::Receiver<Op>) {
    let mut next = NextOffsets::default();
    let mut marked = MarkedAt::default();
    let mut group = Vec::new();
    while let Some(first) = queue.blocking_recv() {
        let mut bytes = first.size();
        group.push(first);
        // Everything that queued during the previous fsync joins this batch.
        while group.len() < MAX_GROUP_OPS && bytes < MAX_GROUP_BYTES {
            match queue.try_recv() {
                Ok(op) => {
                    bytes += op.size();
                    group.push(op);
                }
                Err(_) => break,
            }
        }
        commit_group(shared, &mut next, &mut marked, group.drain(..));
    }
}

/// The next offset of each partition written since open.
type NextOffsets = HashMap<(Topic, u32), u64>;
/// When each partition written since open was last marked (Unix milliseconds).
type MarkedAt = HashMap<(Topic, u32), u64>;

/// What to answer an op once its batch is durable (or failed).
enum Reply {
    Created(oneshot::Sender<Result<u32>>, u32),
    Appended(oneshot::Sender<Result<u64>>, u64),
    Committed(oneshot::Sender<Result<()>>),
}

impl Reply {
    /// A caller that stopped waiting (a dropped future) is not an error here.
    fn send(self, failed: Option<&str>) {
        let err = || LogError::Unavailable(failed.unwrap_or_default().to_owned());
        let _ = match (self, failed) {
            (Reply::Created(done, n), None) => done.send(Ok(n)).map_err(drop),
            (Reply::Created(done, _), Some(_)) => done.send(Err(err())).map_err(drop),
            (Reply::Appended(done, offset), None) => done.send(Ok(offset)).map_err(drop),
            (Reply::Appended(done, _), Some(_)) => done.send(Err(err())).map_err(drop),
            (Reply::Committed(done), None) => done.send(Ok(())).map_err(drop),
            (Reply::Committed(done), Some(_)) => done.send(Err(err())).map_err(drop),
        };
    }
}

fn commit_group(
    shared: &Shared,
    next: &mut NextOffsets,
    marked: &mut MarkedAt,
    group: impl Iterator<Item = Op>,
) {
    // fdatasync: the journal's data and length reach the disk; its timestamps need not.
    let mut batch = shared.db.batch().durability(Some(PersistMode::SyncData));
    // Next offsets as they will be once this batch is durable; merged into `next` only then.
    let mut staged = NextOffsets::new();
    // Marks this batch writes; merged into `marked` once it is durable. Taken before the
    // fsync, so a record may be a few milliseconds younger than its mark says: retention
    // drops it that much early at most.
    let now = super::unix_millis();
    let mark_every = shared.mark_every_ms.load(Ordering::Relaxed);
    let mut staged_marks = MarkedAt::new();
    // Positions this batch commits, by `log_committed` key.
    let mut positions: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut created: Vec<(Topic, Arc<TopicState>)> = Vec::new();
    let mut touched: Vec<Arc<TopicState>> = Vec::new();
    let mut replies = Vec::new();

    for op in group {
        match op {
            Op::CreateTopic {
                topic,
                partitions,
                done,
            } => {
                // Created before, or earlier in this batch: the first creation's count stands.
                if let Ok(existing) = shared.topic(&topic) {
                    let _ = done.send(Ok(existing.partitions));
                    continue;
                }
                if let Some((_, state)) = created.iter().find(|(t, _)| *t == topic) {
                    replies.push(Reply::Created(done, state.partitions));
                    continue;
                }
                // Its partitions' keyspaces first: should the batch fail, they stay empty and
                // are opened again by the next creation.
                let state = match TopicState::open(&shared.db, &topic, partitions) {
                    Ok(state) => state,
                    Err(e) => {
                        let _ = done.send(Err(e));
                        continue;
                    }
                };
                batch.insert(&shared.topics, key::topic(&topic), partitions.to_be_bytes());
                created.push((topic, state));
                replies.push(Reply::Created(done, partitions));
            }
            Op::Append {
                topic,
                state,
                partition,
                value,
                done,
            } => {
                let slot = (topic, partition);
                let placed = state.records(partition).and_then(|records| {
                    let offset = match staged.get(&slot).or_else(|| next.get(&slot)) {
                        Some(&n) => n,
                        // Recovered on first use from the last stored record.
                        None => state.end(partition)?,
                    };
                    Ok((records, offset))
                });
                let (records, offset) = match placed {
                    Ok(placed) => placed,
                    Err(e) => {
                        let _ = done.send(Err(e));
                        continue;
                    }
                };
                batch.insert(records, key::record(offset), value);
                let due = marked
                    .get(&slot)
                    .is_none_or(|at| now.saturating_sub(*at) >= mark_every);
                if due && !staged_marks.contains_key(&slot) {
                    batch.insert(
                        &shared.marks,
                        key::mark(&slot.0, partition, offset),
                        key::mark_value(now, mark_every),
                    );
                    staged_marks.insert(slot.clone(), now);
                }
                staged.insert(slot, offset + 1);
                replies.push(Reply::Appended(done, offset));
                if !touched.iter().any(|t| Arc::ptr_eq(t, &state)) {
                    touched.push(state);
                }
            }
            Op::Commit {
                entries,
                if_absent,
                done,
            } => {
                let mut wanted = Vec::with_capacity(entries.len());
                let mut failed = None;
                for (k, offset) in entries {
                    if if_absent {
                        match shared.committed.contains_key(&k) {
                            Ok(false) if !positions.contains_key(&k) => {}
                            Ok(_) => continue,
                            Err(e) => {
                                failed = Some(super::unavailable(e));
                                break;
                            }
                        }
                    }
                    wanted.push((k, offset));
                }
                match failed {
                    Some(e) => {
                        let _ = done.send(Err(e));
                    }
                    None => {
                        positions.extend(wanted);
                        replies.push(Reply::Committed(done));
                    }
                }
            }
        }
    }

    // Each position once per batch (its ops in order, the last standing), with when it was
    // committed beside it.
    for (k, offset) in positions {
        batch.insert(&shared.committed_at, k.clone(), now.to_be_bytes());
        batch.insert(&shared.committed, k, offset.to_be_bytes());
    }

    // Refused before fjall sees it when the disk is nearly full: a failed journal write would
    // poison the database until a restart, where this refusal ends when space returns.
    if let Err(full) = shared.space.check() {
        tracing::warn!(reason = %full, "embedded log batch refused");
        for reply in replies {
            reply.send(Some(&format!("embedded log: {full}")));
        }
        return;
    }
    if let Err(e) = batch.commit() {
        // fjall poisons the database after a failed fsync; every later batch fails too, and
        // `ping` reports it. Nothing of this batch was applied, so no offset advances.
        let failed = format!("embedded log: {e}");
        tracing::error!(error = %e, "embedded log batch failed");
        for reply in replies {
            reply.send(Some(&failed));
        }
        return;
    }
    next.extend(staged);
    marked.extend(staged_marks);
    if !created.is_empty() {
        let mut catalog = shared
            .catalog
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        for (topic, state) in created {
            catalog.entry(topic).or_insert(state);
        }
    }
    for reply in replies {
        reply.send(None);
    }
    for state in touched {
        state.appended.send_modify(|n| *n = n.wrapping_add(1));
    }
}
