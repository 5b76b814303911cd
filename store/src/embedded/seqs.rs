//! Ingest's batch counters (`advance_collect_seq`), raised in groups: one thread takes every
//! advance waiting, raises them under one hold of the collect rows' lock and commits them as one
//! batch. Ingest advances a counter for every batch it accepts; one at a time, each took a
//! blocking-pool thread, the writer mutex and a commit of its own, and at a few thousand
//! batches a second they queued on the mutex for a quarter of a second. Grouped but still under
//! the writer mutex, each waited for the processor's save in progress (its encoding and fsync,
//! about 2 ms), which was a third of a saturated batch's acknowledgement.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::{PoisonError, Weak};

use schemas::ids::SessionId;
use tokio::sync::oneshot;

use super::row_cache::Changes;
use super::{COLLECT_SESSIONS, Inner, encode, key};
use crate::{CollectSessionRecord, Result, StoreError};

/// The most advances one commit takes.
const GROUP: usize = 1024;

/// One advance waiting: raise `id`'s counter to `seq`, and answer whether it rose.
struct Advance {
    id: SessionId,
    seq: u64,
    answer: oneshot::Sender<Result<bool>>,
}

/// The handle the store keeps: advances are sent to the raising thread, which stops once the
/// store (and with it this sender) is dropped.
pub struct SeqRaiser {
    advances: Sender<Advance>,
}

impl SeqRaiser {
    /// Starts the raising thread. It holds the store weakly, so dropping the store closes it.
    pub fn start(inner: Weak<Inner>) -> std::io::Result<Self> {
        let (advances, waiting) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("vigil-store-seqs".into())
            .spawn(move || raise(inner, waiting))?;
        Ok(Self { advances })
    }

    /// Raises `id`'s counter to `seq` if it is below; whether it rose (`false` also when the
    /// session does not exist).
    pub async fn advance(&self, id: SessionId, seq: u64) -> Result<bool> {
        let (answer, answered) = oneshot::channel();
        let gone = || StoreError::Unavailable("the embedded store is closing".into());
        self.advances
            .send(Advance { id, seq, answer })
            .map_err(|_| gone())?;
        answered.await.map_err(|_| gone())?
    }
}

fn raise(inner: Weak<Inner>, waiting: Receiver<Advance>) {
    while let Ok(first) = waiting.recv() {
        let mut group = vec![first];
        while group.len() < GROUP {
            match waiting.try_recv() {
                Ok(next) => group.push(next),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let answers = match inner.upgrade() {
            Some(inner) => inner.raise_seqs(&group),
            None => Err(StoreError::Unavailable(
                "the embedded store is closed".into(),
            )),
        };
        match answers {
            Ok(answers) => {
                for (advance, answer) in group.into_iter().zip(answers) {
                    let _ = advance.answer.send(answer);
                }
            }
            Err(e) => {
                let message = e.to_string();
                for advance in group {
                    let _ = advance
                        .answer
                        .send(Err(StoreError::Unavailable(message.clone())));
                }
            }
        }
    }
}

impl Inner {
    /// Raises each advance's counter under the collect rows' lock and commits the rows that changed
    /// in one buffered batch (see `advance_collect_seq` for why buffered). One answer per
    /// advance, in order; `Err` when nothing could be written (the disk nearly full, a failed
    /// commit), for all of them.
    fn raise_seqs(&self, group: &[Advance]) -> Result<Vec<Result<bool>>> {
        // Not the writer mutex: only the collect rows' own lock (see `Inner::collect_rows`).
        let _rows = self
            .collect_rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.space.check().map_err(StoreError::Unavailable)?;
        // Each session read once per group, with whether the group raised it: a session
        // advanced twice is raised from its first raise.
        let mut read: HashMap<SessionId, (CollectSessionRecord, bool)> = HashMap::new();
        let mut answers = Vec::with_capacity(group.len());
        for advance in group {
            let (row, raised) = match read.entry(advance.id) {
                Entry::Occupied(read) => read.into_mut(),
                Entry::Vacant(unread) => match self.get_collect_session(advance.id) {
                    Ok(Some(row)) => unread.insert((row, false)),
                    Ok(None) => {
                        answers.push(Ok(false));
                        continue;
                    }
                    Err(e) => {
                        answers.push(Err(e));
                        continue;
                    }
                },
            };
            let rises = advance.seq > row.last_seq;
            if rises {
                row.last_seq = advance.seq;
                *raised = true;
            }
            answers.push(Ok(rises));
        }
        let raised: Vec<CollectSessionRecord> = read
            .into_values()
            .filter_map(|(row, raised)| raised.then_some(row))
            .collect();
        if raised.is_empty() {
            return Ok(answers);
        }
        // Written to the OS and fsynced with the next synced batch (or fjall's journal flush).
        let mut batch = self.db.batch();
        let ids: Vec<SessionId> = raised.iter().map(|row| row.id).collect();
        for row in &raised {
            batch.insert(
                &self.collect_sessions,
                key::collect_session(row.id),
                encode(COLLECT_SESSIONS, row)?,
            );
        }
        self.commit(
            batch,
            Changes {
                collect_sessions: &ids,
                ..Changes::default()
            },
        )?;
        for row in raised {
            self.cache.written_collect_session(row);
        }
        Ok(answers)
    }
}
