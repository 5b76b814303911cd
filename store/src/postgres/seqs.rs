//! Ingest's batch counters on PostgreSQL (`advance_collect_seq`), raised in groups: the
//! advances that arrive while one group is being written wait and are written together, in
//! one transaction of three statements whatever their number. Ingest advances a counter for
//! every batch it accepts; one transaction each (a locking read, a write and a commit's WAL
//! flush) held one ingest process to about 2,500 batches a second.

use crate::rules::CollectChange;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use deadpool_postgres::Pool;
use schemas::ids::SessionId;
use tokio::sync::oneshot;

use super::collect::COLLECT_SESSIONS;
use super::{db_error, decode, described, execute, json, rows, ulid_bytes};
use crate::{CollectSessionRecord, Result, StoreError};

/// The most advances one transaction takes.
const GROUP: usize = 1024;

/// One advance waiting: raise `id`'s counter to `seq`, and answer whether it rose.
struct Advance {
    id: SessionId,
    seq: u64,
    answer: oneshot::Sender<Result<bool>>,
}

#[derive(Default)]
struct Waiting {
    advances: Vec<Advance>,
    /// Whether a writer task is running; it takes what waits until nothing does.
    writing: bool,
}

/// The advances waiting for their group, and the writer of the groups.
pub(super) struct SeqGroups {
    pool: Pool,
    waiting: Mutex<Waiting>,
}

impl SeqGroups {
    pub(super) fn new(pool: Pool) -> Arc<Self> {
        Arc::new(SeqGroups {
            pool,
            waiting: Mutex::new(Waiting::default()),
        })
    }

    /// Raises `id`'s counter to `seq` if it is below; whether it rose (`false` also when the
    /// session does not exist). The group is written by a task of its own, so a caller that
    /// stops waiting (a client gone mid-request) leaves the others' answers to come.
    pub(super) async fn advance(self: &Arc<Self>, id: SessionId, seq: u64) -> Result<bool> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            StoreError::Unavailable("the batch counter is raised on a Tokio runtime only".into())
        })?;
        let (answer, answered) = oneshot::channel();
        let start = {
            let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            waiting.advances.push(Advance { id, seq, answer });
            !std::mem::replace(&mut waiting.writing, true)
        };
        if start {
            runtime.spawn(Arc::clone(self).write_groups());
        }
        answered
            .await
            .map_err(|_| StoreError::Unavailable("the batch counter's writer stopped".into()))?
    }

    /// Writes groups until none waits.
    async fn write_groups(self: Arc<Self>) {
        let mut writer = Writer {
            groups: &self,
            done: false,
        };
        loop {
            let group: Vec<Advance> = {
                let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
                if waiting.advances.is_empty() {
                    waiting.writing = false;
                    writer.done = true;
                    return;
                }
                let n = waiting.advances.len().min(GROUP);
                waiting.advances.drain(..n).collect()
            };
            match self.raise(&group).await {
                Ok(answers) => {
                    for (advance, answer) in group.into_iter().zip(answers) {
                        let _ = advance.answer.send(answer);
                    }
                }
                Err(e) => {
                    for advance in group {
                        let _ = advance.answer.send(Err(again(&e)));
                    }
                }
            }
        }
    }

    /// Raises the group's counters in one transaction; one answer per advance, in order. A
    /// session whose row does not decode is answered as damaged, alone: the others are raised.
    /// The rows are locked in id order, as every group and every other change of a collect
    /// session takes them one at a time, so two ingest processes cannot deadlock.
    async fn raise(&self, group: &[Advance]) -> Result<Vec<Result<bool>>> {
        let mut client = self.pool.get().await.map_err(|e| {
            StoreError::Unavailable(format!("PostgreSQL connection: {}", described(&e)))
        })?;
        let tx = client.transaction().await.map_err(db_error)?;
        let mut keys: Vec<Vec<u8>> = group.iter().map(|a| ulid_bytes(a.id.ulid())).collect();
        keys.sort_unstable();
        keys.dedup();
        let found = rows(
            &tx,
            "SELECT id, body FROM collect_sessions WHERE id = ANY($1) ORDER BY id FOR UPDATE",
            &[&keys],
        )
        .await?;
        // Each session with whether the group raised it: a session advanced twice in a group
        // is raised from its first raise, as one after the other would be.
        let mut sessions: HashMap<
            Vec<u8>,
            std::result::Result<(CollectSessionRecord, bool), StoreError>,
        > = HashMap::with_capacity(found.len());
        for row in &found {
            let session = decode::<CollectSessionRecord>(COLLECT_SESSIONS, row, 1);
            sessions.insert(row.get(0), session.map(|s| (s, false)));
        }
        let answers = group
            .iter()
            .map(
                |a| match sessions.get_mut(ulid_bytes(a.id.ulid()).as_slice()) {
                    None => Ok(false),
                    Some(Err(damaged)) => Err(again(damaged)),
                    Some(Ok((session, raised))) => {
                        let rose = CollectChange::Seq(a.seq).apply(session);
                        *raised |= rose;
                        Ok(rose)
                    }
                },
            )
            .collect();
        let raised: Vec<&CollectSessionRecord> = sessions
            .values()
            .filter_map(|s| match s {
                Ok((session, true)) => Some(session),
                _ => None,
            })
            .collect();
        if !raised.is_empty() {
            execute(
                &tx,
                "UPDATE collect_sessions AS c SET body = raised.body
                 FROM unnest($1::bytea[], $2::json[]) AS raised (id, body)
                 WHERE c.id = raised.id",
                &[
                    &raised
                        .iter()
                        .map(|s| ulid_bytes(s.id.ulid()))
                        .collect::<Vec<_>>(),
                    &raised.iter().map(|s| json(*s)).collect::<Vec<_>>(),
                ],
            )
            .await?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok(answers)
    }
}

/// The running writer. Should it end before its queue is empty (its runtime shutting down, a
/// panic), the advances still waiting are answered as failed (their senders dropped) and the
/// next advance starts a writer again, rather than every later advance waiting forever.
struct Writer<'a> {
    groups: &'a SeqGroups,
    done: bool,
}

impl Drop for Writer<'_> {
    fn drop(&mut self) {
        if !self.done {
            let mut waiting = self
                .groups
                .waiting
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            waiting.advances.clear();
            waiting.writing = false;
        }
    }
}

/// The same error for each advance of a group (`StoreError` is not `Clone`): its kind kept,
/// its text not wrapped twice.
fn again(e: &StoreError) -> StoreError {
    match e {
        StoreError::Corrupt { table, detail } => StoreError::Corrupt {
            table,
            detail: detail.clone(),
        },
        StoreError::Unavailable(message) => StoreError::Unavailable(message.clone()),
        other => StoreError::Unavailable(other.to_string()),
    }
}
