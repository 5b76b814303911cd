//! The processor's consumer loop (docs/architecture.md: #data-flow, #decisions): reads
//! `collect.batches.v1` in order per session, folds each batch into the session's state, decides,
//! and stores the session with its new decision, then commits its position in the log. The log
//! delivers at least once: a redelivered batch is recognised by its number and skipped, so a crash
//! between storing and committing costs a repeat, never a lost or doubled effect.
//!
//! Failures are of two kinds (docs/architecture.md#conv-consumer-failures). Permanent ones (a
//! record or SDK batch that does not decode, a stored row or session state that does not decode, an
//! event over the log's record size) can never succeed: the records concerned go to
//! `collect.dead.v1` with the reason ([`schemas::collect::DeadLetter`]), are counted, and are
//! committed past, so the sessions behind them go on. Transient ones (the store or the log
//! unavailable) are retried with backoff ([`crate::retry`]) and never skipped. On shutdown the save
//! in flight is finished and the position committed, so a restart reads nothing twice.
//!
//! The first probes batch of a session links it to a visitor (docs/architecture.md#visitors): a
//! valid signed visitor token from the SDK's storage, else an exact anchor match with compatible
//! browser traits, else the nearest component vector above [`LINK_THRESHOLD`] among the partition's
//! newest visitors, else a new `vid_`. The visitor is saved before the session that names it; a
//! visitor already holding the session among its recent sessions is not counted again, so a
//! redelivery after a crash between the two saves links the same visitor without a second
//! `seen_count`.
//!
//! Events (docs/architecture.md#events): linking records `session.fingerprint.calculated`, and the
//! first final decision `session.result.persisted` (see [`crate::events`]). A decision becomes
//! final when `results` is called or the session goes idle ([`idle`]).
//!
//! Processors are members of one consumer group ([`log::LogBackend::member`]): on Kafka,
//! replicas share the partitions of `collect.batches.v1`, and a session, whose records share a
//! partition, is folded by one replica at a time. When a partition moves away, this replica
//! stores and commits what it folded of it before its next poll hands the partition over, and
//! forgets the sessions it held of it; the next owner starts after that commit.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use log::{Group, Log, LogConsumer, Record, Topic};
use schemas::collect::{BatchRecord, DeadReason, ServerRecord};
use schemas::{DecisionId, VisitorId};
use secrets::ServerSecret;
use serde::{Deserialize, Serialize};
use store::{
    CollectSessionRecord, DecisionRecord, EventRecord, PartitionFence, RawJson, SessionRecord,
    SessionSave, Store, StoreError, VisitorRecord, VisitorRequest, VisitorStorage,
};
use tokio_util::sync::CancellationToken;

mod dead_letters;
mod idle;
mod lag;
mod memory;
mod polled;
mod replays;
mod visits;

use crate::events::{self, LinkedBy};
use crate::fingerprint::{Anchors, BrowserTraits, LINK_THRESHOLD, component_vector, similarity};
use crate::retry::{Retried, Transience, retry};
use crate::{Batch, Probes, ServerContext, SessionObservations};
use dead_letters::{Dead, dead_letter, dead_letter_all};
use lag::Lag;
use memory::Memory;
use visits::{Visit, store_visitors};

/// The consumer group of the processor role.
pub const GROUP: &str = "processor";

/// The most records one poll takes: one store write covers them all.
const POLL_RECORDS: usize = 1024;
/// How many sessions' events are being appended to `events.v1` at once.
const PUBLISH_CONCURRENCY: usize = 256;
/// How often the consumer's position is committed to the log.
const COMMIT_INTERVAL: Duration = Duration::from_millis(250);
/// The least time from one poll's start to the next one's while sessions send faster than the
/// processor polls. Most of a fold's cost is paid per session, not per batch (reading its
/// collect session, deciding, encoding its state and decision, one row each), so a session that
/// sends again while the last poll is folded is cheaper folded with its next batches than once
/// for each. Under a saturated load of 64 sessions, polls as fast as they came folded 1.2
/// batches a fold; spaced by this they fold several, for about a fifth less CPU a batch
/// (docs/performance.md#ingest). A poll that held two records of one session spaces the next,
/// for every session this processor reads: one session sending faster than about every 15 ms
/// holds each decision back by up to this long. Many sessions sending now and then leave polls
/// unspaced, and so does a full poll (a backlog, which waiting cannot make any bigger).
const POLL_SPACING: Duration = Duration::from_millis(15);

/// How many visitors sharing an anchor pair are checked for an exact anchor match.
const ANCHOR_CANDIDATES: usize = 50;
/// How many of a partition's newest visitors the nearest-vector search compares, so linking
/// stays bounded however many visitors an organization has.
const VECTOR_SCAN: usize = 2_000;

/// A save of one poll's sessions running while the next poll is folded.
struct InFlight {
    /// What it could not store; `None` if shutdown came first.
    task: tokio::task::JoinHandle<Option<Unstored>>,
    /// The log positions it covers, committed once it is stored.
    positions: Vec<log::Position>,
    /// The sessions it writes, with the `updated_at` each is written with.
    saved: Vec<(schemas::SessionId, schemas::time::Timestamp)>,
}

/// What a save of a poll's sessions left unstored.
#[derive(Default)]
struct Unstored {
    /// Sessions given up on: their records were dead-lettered.
    given_up: Vec<schemas::SessionId>,
    /// Partitions another processor claimed since this one did (it stalled past its poll
    /// interval, and the group gave them away): their sessions' saves were refused, and their
    /// new owner folds their records again from the last commit.
    fenced: Vec<u32>,
}

/// What the processor keeps of a session between batches (`SessionRecord::state`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
struct SessionState {
    observations: SessionObservations,
    context: ServerContext,
    /// The SDK asked for the handoff: the decision is final from then on.
    final_requested: bool,
}

impl SessionState {
    /// The state as a save stores it (`SessionSave::settled`): everything but the
    /// observations' probes and kept events, and those two apart, which stop changing once the
    /// probes came and 400 events are kept, so the store need not write them with every fold.
    /// Merged, the two are the state's whole JSON.
    fn parts(&self) -> serde_json::Result<(RawJson, RawJson)> {
        #[derive(Serialize)]
        struct Unsettled<'a> {
            observations: crate::observations::Unsettled<'a>,
            context: &'a ServerContext,
            final_requested: bool,
        }
        #[derive(Serialize)]
        struct Settled<'a> {
            observations: crate::observations::Settled<'a>,
        }
        Ok((
            RawJson::encode(&Unsettled {
                observations: crate::observations::Unsettled(&self.observations),
                context: &self.context,
                final_requested: self.final_requested,
            })?,
            RawJson::encode(&Settled {
                observations: crate::observations::Settled(&self.observations),
            })?,
        ))
    }
}

/// Why a session's records could not be folded or stored.
#[derive(Debug, thiserror::Error)]
enum Failure {
    /// Worth retrying: the store or the log did not answer. Never skipped.
    #[error("transient: {0}")]
    Transient(String),
    /// Can never succeed: the records it concerns are dead-lettered with the reason.
    #[error("{reason}: {1}", reason = .0.as_str())]
    Permanent(DeadReason, String),
    /// A save refused because these partitions were claimed by another processor since: not
    /// this processor's to store any more, nor to dead-letter.
    #[error("partitions {0:?} were claimed by another processor")]
    Fenced(Vec<u32>),
}

impl Transience for Failure {
    fn is_transient(&self) -> bool {
        matches!(self, Failure::Transient(_))
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        match e {
            // A row that does not decode will not decode on a retry either.
            StoreError::Corrupt { .. } => Failure::Permanent(DeadReason::CorruptRow, e.to_string()),
            StoreError::Fenced { partitions } => Failure::Fenced(partitions),
            // Anything else (unavailable, a conflict or an invalid request, which are bugs here)
            // may be transient and is never grounds to skip a record: retried, and logged.
            other => Failure::Transient(other.to_string()),
        }
    }
}

impl Failure {
    /// An append to the log that failed: over the log's size is permanent, the rest is retried.
    fn of_append(what: &str, e: log::LogError) -> Self {
        match e {
            log::LogError::TooLarge { .. } => {
                Failure::Permanent(DeadReason::OversizeEvent, format!("{what}: {e}"))
            }
            other => Failure::Transient(format!("{what}: {other}")),
        }
    }
}

/// What the processor role runs with.
#[derive(Clone)]
pub struct Pipeline {
    pub store: Store,
    pub log: Log,
    /// `collect.batches.v1`: consumed, and where idle sessions are sent their finalisation.
    pub batches: Topic,
    /// `events.v1`: where recorded events are published.
    pub events: Topic,
    /// `collect.dead.v1`: where records that can never be processed go, with why.
    pub dead: Topic,
    /// Verifies the visitor tokens the SDK presents (docs/architecture.md#visitors).
    pub secret: ServerSecret,
    /// How long a session goes without a batch before its decision is made final
    /// (docs/architecture.md#decisions).
    pub idle_after: Duration,
    /// How long a visitor is kept after it was last seen (`--retention`,
    /// docs/architecture.md#retention): its `expires_at` is last seen plus this, when the retention
    /// sweep drops it.
    pub retention: Duration,
    /// The bytes of session state kept in memory between batches (`--processor-cache-mb`);
    /// states evicted past it are decoded from the store again.
    pub cache_bytes: u64,
    /// How long the replay record keeps a batch's mark (`--replay-memory`,
    /// docs/detection.md#replayed-sessions); zero leaves none.
    pub replay_memory: Duration,
    /// The operator's IP data, looked up once per session (docs/detection.md#network-identity).
    pub network: Option<std::sync::Arc<ipdata::NetworkData>>,
}

/// The topics the processor publishes to.
pub struct Topics {
    /// `events.v1`.
    pub events: Topic,
    /// `collect.dead.v1`.
    pub dead: Topic,
}

/// Creates the topics the processor publishes to (the batches topic is ingest's).
pub async fn prepare_log(log: &Log) -> Result<Topics, log::LogError> {
    let events = Topic::from_static(schemas::events::EVENTS_TOPIC);
    log.create_topic(&events, schemas::events::EVENTS_PARTITIONS)
        .await?;
    let dead = Topic::from_static(schemas::collect::DEAD_TOPIC);
    log.create_topic(&dead, schemas::collect::DEAD_PARTITIONS)
        .await?;
    Ok(Topics { events, dead })
}

/// Runs until `shutdown` is cancelled, consuming its group's share of the batches topic, with
/// the idle sweep beside it. If the consumer stops on its own (a store write that panicked),
/// it cancels `shutdown`: the server stops rather than accept batches nobody scores.
pub async fn run(pipeline: Pipeline, shutdown: CancellationToken) {
    crate::telemetry::init();
    let owned = idle::Owned::default();
    let sweep = tokio::spawn(idle::sweep(
        pipeline.clone(),
        owned.clone(),
        shutdown.clone(),
    ));
    consume(&pipeline, &owned, &shutdown).await;
    shutdown.cancel();
    let _ = sweep.await;
}

/// One record of a poll with the batch it carries.
struct Polled<'a> {
    record: &'a Record,
    /// Its `observations` are `null` when `observed` holds them.
    batch: BatchRecord,
    /// The SDK batch, when it was read with the record (see `polled`); otherwise it is read from
    /// `batch.observations` when folded.
    observed: Option<Batch>,
}

async fn consume(pipeline: &Pipeline, owned: &idle::Owned, shutdown: &CancellationToken) {
    let group = Group::from_static(GROUP);
    let opened = retry(
        "opening the consumer",
        shutdown,
        &mut (pipeline, &group),
        |(pipeline, group)| {
            Box::pin(async move {
                // Retried while the log is unavailable; refused for good (a second processor
                // on the embedded log, say), the processor stops.
                pipeline.log.member(group, &pipeline.batches).await
            })
        },
    )
    .await;
    let mut consumer = match opened {
        Retried::Done(consumer) => consumer,
        Retried::Failed(e) => {
            tracing::error!(error = %e, "processor: cannot consume the batches; nothing is scored");
            return;
        }
        Retried::ShuttingDown => return,
    };
    let mut memory = Memory::new(pipeline.cache_bytes);
    let mut in_flight: Option<InFlight> = None;
    let mut uncommitted = Vec::new();
    let mut last_commit = Instant::now();
    let mut lag = Lag::new(consumer.partitions());
    owned.set(consumer.partitions());
    // The generation of this processor's claim on each partition it reads: its saves carry it,
    // and the store refuses them once another processor claimed the partition since.
    let mut claims: HashMap<u32, u64> = HashMap::new();
    // Partitions whose saves were refused as fenced: another processor owns them now, so none
    // of their positions may be committed here until the group assigns them back.
    let mut fenced: HashSet<u32> = HashSet::new();
    if !claim(pipeline, consumer.partitions(), &mut claims, shutdown).await {
        return;
    }
    // When the last poll began, if it held two records of one session and was not full (see
    // POLL_SPACING).
    let mut spaced_from: Option<Instant> = None;
    // Whether the group has assigned this processor anything yet: its first assignment is the
    // start's, not a move.
    let mut started = !claims.is_empty();
    'polls: while !shutdown.is_cancelled() {
        if let Some(rest) = spaced_from.and_then(|at| POLL_SPACING.checked_sub(at.elapsed())) {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(rest) => {}
            }
        }
        let polled_at = Instant::now();
        // While a save is in flight, only a short wait: the save's confirmation (and its
        // commit) must not hang on the next batch arriving.
        let wait = if in_flight.is_some() {
            Duration::from_millis(2)
        } else {
            Duration::from_millis(500)
        };
        // A poll that fails is retried, never skipped past: what it would have read is unknown.
        let polled = tokio::select! {
            _ = shutdown.cancelled() => break,
            polled = retry("polling the log", shutdown, &mut *consumer, |consumer| {
                Box::pin(async move {
                    consumer.poll(POLL_RECORDS, wait).await.map_err(|e| Failure::Transient(e.to_string()))
                })
            }) => polled,
        };
        let Retried::Done(records) = polled else {
            break;
        };
        // Partitions moved between the group's processors during the poll: those given up are
        // still ours until the next poll, which hands them over (see the end of the loop).
        let revoked = match consumer.take_rebalance() {
            Some(rebalance) => {
                // The start's assignment (the first, or the partitions claimed already) is no
                // move: said at DEBUG.
                let moved = !rebalance.revoked.is_empty()
                    || !rebalance.assigned.iter().all(|p| claims.contains_key(p));
                let first = !std::mem::replace(&mut started, true);
                if first || !moved {
                    tracing::debug!(assigned = %log::shown_partitions(&rebalance.assigned), "processor: partitions assigned");
                } else {
                    tracing::info!(assigned = %log::shown_partitions(&rebalance.assigned), revoked = %log::shown_partitions(&rebalance.revoked), "processor: partitions moved");
                }
                lag.follow(consumer.partitions());
                owned.set(consumer.partitions());
                // Claimed before anything of them is folded: a processor that held them and
                // stalled may still have a save of them in flight, which this claim fences off.
                if !claim(pipeline, &rebalance.assigned, &mut claims, shutdown).await {
                    break;
                }
                for partition in &rebalance.assigned {
                    fenced.remove(partition);
                }
                rebalance.revoked
            }
            None => Vec::new(),
        };
        lag.polled(pipeline, &records).await;
        let mut dead = Vec::new();
        let groups = by_session(&records, &mut dead);
        spaced_from = (records.len() < POLL_RECORDS && groups.iter().any(|g| g.len() > 1))
            .then_some(polled_at);
        // The save in flight lands before the poll is folded if it already finished (its
        // sessions are then cached, or read from their rows, rather than waited for later), or
        // if it holds a session of this poll: it may yet give that session up (its records
        // dead-lettered), and a fold on top of it would then store the effects of batches the
        // store never took. A session sending again within a save's few milliseconds is rare.
        if in_flight.as_ref().is_some_and(|f| {
            f.task.is_finished()
                || groups
                    .iter()
                    .any(|g| memory.is_pending(g[0].batch.session_id))
        }) && let Some(previous) = in_flight.take()
            && !land(previous, &mut memory, &mut uncommitted, &mut fenced).await
        {
            return;
        }
        // Idle, unless positions stored earlier still wait for their commit: committed now,
        // rather than at the next batch, so a crash while idle redelivers nothing.
        let commit_due = !uncommitted.is_empty() && last_commit.elapsed() >= COMMIT_INTERVAL;
        if records.is_empty() && in_flight.is_none() && !commit_due && revoked.is_empty() {
            continue;
        }
        // One store write per poll, not per record nor per session: each session's state is
        // read and every new batch of it folded in, then all the poll's sessions are stored
        // with their new decisions in one acknowledged write (one fsync on the embedded store).
        // That write runs while the next poll is folded.
        // Sized once: grown one push at a time, the two were reallocated (and their fresh pages
        // faulted in) several times a poll, 2% of a saturated ingest benchmark's samples.
        let mut saves = Vec::with_capacity(groups.len());
        // What each save leaves in memory once sent, with when ingest accepted its batches.
        let mut pending: Vec<Pending> = Vec::with_capacity(groups.len());
        // The poll's batches' marks, left in the replay record in one call.
        let marked = if pipeline.replay_memory.is_zero() {
            Vec::new()
        } else {
            replays::marks(&groups)
        };
        // Evidence, not the decision itself: a record the store cannot read is logged and the
        // poll decided without it, rather than held (and every later poll of its partitions).
        let replays = match retry(
            "leaving replay marks",
            shutdown,
            &mut (pipeline, &marked),
            |(pipeline, marked)| Box::pin(replays::replayed(pipeline, marked)),
        )
        .await
        {
            Retried::Done(replays) => replays,
            Retried::Failed(e) => {
                tracing::warn!(error = %e, marks = marked.len(), "processor: the replay record could not be read; this poll is decided without it");
                HashMap::new()
            }
            Retried::ShuttingDown => break 'polls,
        };
        for group in groups {
            let started = Instant::now();
            let replayed = replays
                .get(&group[0].batch.session_id)
                .map_or(&[][..], Vec::as_slice);
            let folded = retry(
                "folding a session",
                shutdown,
                &mut (pipeline, &group[..], &mut memory),
                |(pipeline, group, memory)| Box::pin(fold(pipeline, group, replayed, memory)),
            )
            .await;
            match folded {
                Retried::Done(Folded { save, unreadable }) => {
                    crate::telemetry::folded(group.len(), started.elapsed());
                    dead.extend(unreadable);
                    if let Some((mut save, state)) = save {
                        // A session's records share a partition (they share its key).
                        let partition = group[0].record.partition;
                        // Never unfenced: without a claim (which every assigned partition has),
                        // generation 0, which any claim by anyone supersedes.
                        save.fence = Some(PartitionFence {
                            partition,
                            generation: claims.get(&partition).copied().unwrap_or(0),
                        });
                        pending.push(Pending {
                            partition,
                            session: save.session.clone(),
                            state,
                            stored_bytes: save.session.state.as_str().len()
                                + save.settled.as_ref().map_or(0, |s| s.as_str().len()),
                            received: group.iter().map(|p| p.batch.received_at).collect(),
                        });
                        let sources = group.iter().map(|p| p.record.clone()).collect();
                        saves.push((save, sources));
                    }
                }
                // The session cannot be folded (its row or its state does not decode): its
                // records are given up on with it, so the sessions behind it go on.
                Retried::Failed(Failure::Permanent(reason, message)) => {
                    dead.extend(group.iter().map(|p| Dead {
                        record: p.record,
                        reason,
                        message: message.clone(),
                    }));
                }
                Retried::Failed(Failure::Transient(_) | Failure::Fenced(_))
                | Retried::ShuttingDown => {
                    break 'polls;
                }
            }
        }
        for d in dead {
            if !dead_letter(pipeline, d.record, d.reason, &d.message, shutdown).await {
                break 'polls;
            }
        }
        // The visitors the poll linked, in one write, before the sessions that name them. A
        // visitor that cannot be written takes the sessions naming it to the dead letters.
        let Some(unsaved) = store_visitors(pipeline, memory.take_linked(), shutdown).await else {
            break 'polls;
        };
        for (visitor, failure) in unsaved {
            let (named, kept) = std::mem::take(&mut saves).into_iter().partition(
                |(save, _): &(SessionSave, Vec<Record>)| save.session.visitor_id == Some(visitor),
            );
            saves = kept;
            pending.retain(|p| p.session.visitor_id != Some(visitor));
            for (_, sources) in named {
                let failure = Failure::Permanent(DeadReason::CorruptRow, failure.to_string());
                if !dead_letter_all(pipeline, &sources, failure, shutdown).await {
                    break 'polls;
                }
            }
        }
        // The previous save first: saves land in log order, and positions are committed only
        // once what they cover is stored.
        if let Some(previous) = in_flight.take()
            && !land(previous, &mut memory, &mut uncommitted, &mut fenced).await
        {
            return;
        }
        let positions = records.iter().map(Record::position);
        if saves.is_empty() {
            uncommitted.extend(positions);
        } else {
            let saved = saves
                .iter()
                .map(|(s, _)| (s.session.id, s.session.updated_at))
                .collect();
            let mut received = Vec::new();
            for p in pending {
                memory.hold(p.partition, p.session, p.state, p.stored_bytes);
                received.extend(p.received);
            }
            let (pipeline, shutdown) = (pipeline.clone(), shutdown.clone());
            in_flight = Some(InFlight {
                task: tokio::spawn(async move {
                    let unstored = store(&pipeline, saves, &shutdown).await;
                    // Observed as the write returns, not when the loop lands it after folding
                    // the next poll: the decisions are stored (and readable) from here.
                    if unstored.is_some() {
                        crate::telemetry::decided(&received, schemas::time::now());
                    }
                    unstored
                }),
                positions: positions.collect(),
                saved,
            });
        }
        // Positions are committed at most every COMMIT_INTERVAL, not after every poll: the
        // consumer reads on from its own position, and a crash before a commit only redelivers
        // batches the store already has, which are skipped by number.
        // Partitions given up: before the next poll hands them over, everything folded of them
        // is stored and committed, so their next owner neither re-folds it nor races a save of
        // ours still in flight, and what is held of their sessions is forgotten, since the next
        // owner changes them from now on. (Were the commit to fail, the next owner would re-fold
        // from the last commit: batches are skipped by number, so that is a repeat, not a
        // double effect.)
        if !revoked.is_empty() {
            if let Some(previous) = in_flight.take()
                && !land(previous, &mut memory, &mut uncommitted, &mut fenced).await
            {
                return;
            }
            memory.forget_partitions(&revoked);
            // A partition revoked and assigned again in one rebalance keeps its new claim.
            for partition in revoked
                .iter()
                .filter(|p| !consumer.partitions().contains(p))
            {
                claims.remove(partition);
            }
        }
        let commit_now = !revoked.is_empty() || last_commit.elapsed() >= COMMIT_INTERVAL;
        uncommitted.retain(|p| !fenced.contains(&p.partition));
        if !uncommitted.is_empty() && commit_now {
            commit(&mut *consumer, &uncommitted, shutdown).await;
            uncommitted.clear();
            last_commit = Instant::now();
        }
    }
    // Shutting down (SIGTERM): the save in flight is let finish and everything stored is
    // committed, so a restart re-reads nothing. What was polled but not yet stored is not
    // committed, and is read again after the restart.
    if let Some(previous) = in_flight.take()
        && !land(previous, &mut memory, &mut uncommitted, &mut fenced).await
    {
        return;
    }
    uncommitted.retain(|p| !fenced.contains(&p.partition));
    if !uncommitted.is_empty() {
        match consumer.commit(&uncommitted).await {
            Ok(()) => tracing::info!(
                records = uncommitted.len(),
                "processor: committed its position on shutdown"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "processor: committing on shutdown failed; the records will be read again")
            }
        }
    }
}

/// Waits for a save in flight; once it landed, its sessions are confirmed and its positions
/// may be committed. False if it did not land (shutdown came first, or it panicked).
async fn land(
    previous: InFlight,
    memory: &mut Memory,
    uncommitted: &mut Vec<log::Position>,
    fenced: &mut HashSet<u32>,
) -> bool {
    match previous.task.await {
        Ok(Some(unstored)) => {
            memory.discard(&unstored.given_up);
            memory.confirm(&previous.saved);
            // Fenced partitions are another processor's now: nothing of them is kept, and
            // their positions are the new owner's to commit.
            memory.forget_partitions(&unstored.fenced);
            fenced.extend(&unstored.fenced);
            uncommitted.extend(
                previous
                    .positions
                    .into_iter()
                    .filter(|p| !fenced.contains(&p.partition)),
            );
            true
        }
        // Shutting down: nothing more is stored or committed.
        Ok(None) => false,
        Err(e) => {
            tracing::error!(error = %e, "processor: a store write failed outright; the processor stops");
            false
        }
    }
}

/// The records of a poll grouped by session in log order (a session's records share a
/// partition, so their order within the poll is the log's). A record that does not decode, or
/// is of a newer schema than this build's, is put in `dead`: it can never be processed here.
fn by_session<'a>(records: &'a [Record], dead: &mut Vec<Dead<'a>>) -> Vec<Vec<Polled<'a>>> {
    let mut groups: Vec<Vec<Polled<'a>>> = Vec::new();
    let mut index: std::collections::HashMap<schemas::SessionId, usize> =
        std::collections::HashMap::new();
    let now = schemas::time::now();
    for record in records {
        match polled::read(&record.payload) {
            // Written by a newer ingest: its fields may mean what this build cannot tell, so
            // it is set aside, not misread.
            Ok(polled::ReadRecord { batch, .. })
                if batch.schema > schemas::collect::BATCH_RECORD_SCHEMA =>
            {
                dead.push(Dead {
                    record,
                    reason: DeadReason::UnreadableRecord,
                    message: format!(
                        "a batch record of schema {}, newer than this build's {}",
                        batch.schema,
                        schemas::collect::BATCH_RECORD_SCHEMA
                    ),
                })
            }
            Ok(polled::ReadRecord { batch, observed }) => {
                crate::telemetry::polled(batch.received_at, now);
                let at = *index.entry(batch.session_id).or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() - 1
                });
                groups[at].push(Polled {
                    record,
                    batch,
                    observed,
                });
            }
            Err(e) => dead.push(Dead {
                record,
                reason: DeadReason::UnreadableRecord,
                message: format!("not a batch record: {e}"),
            }),
        }
    }
    groups
}

/// The SDK batch a record carries, when it was not read with the record (see `polled`): by the
/// `kind` ingest read when the record says it, else from the batch itself.
fn read_batch(record: &BatchRecord) -> Result<Batch, serde_json::Error> {
    let text = record.observations.as_str().as_bytes();
    match &record.kind {
        Some(kind) => Batch::of_kind(Some(kind), text),
        None => Batch::from_slice(text),
    }
}

/// Publishes each save's events to the events log, then stores the saves in one write, retrying
/// while the log or the store is unavailable. A save whose events or row can never be written
/// has its records dead-lettered and the others still stored; the saves of partitions another
/// processor claimed since are dropped (see [`Unstored::fenced`]). What was not stored; `None` if
/// shutdown came first (nothing may be committed then).
async fn store(
    pipeline: &Pipeline,
    saves: Vec<(SessionSave, Vec<Record>)>,
    shutdown: &CancellationToken,
) -> Option<Unstored> {
    // Each session's events in order, the sessions' side by side: appends that wait together
    // share one flush of the log (one fsync on the embedded log, one produce batch on Kafka),
    // where one after another a poll of new visitors waited a flush each.
    // Only saves with events publish: most have none, and a future for every save made a
    // large allocation each poll (its pages faulted in afresh, 1% of a saturated ingest
    // benchmark's samples).
    let publishing: Vec<_> = saves
        .iter()
        .filter(|(save, _)| !save.events.is_empty())
        .map(|(save, _)| publish_retried(pipeline, &save.events, shutdown))
        .collect();
    let mut published = futures::stream::iter(publishing)
        .buffered(PUBLISH_CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter();
    let mut alive = Vec::with_capacity(saves.len());
    let mut sources = Vec::with_capacity(saves.len());
    let mut unstored = Unstored::default();
    for (save, records) in saves {
        let outcome = if save.events.is_empty() {
            Retried::Done(())
        } else {
            published
                .next()
                .expect("one outcome for each save with events, in order")
        };
        match outcome {
            Retried::Done(()) => {
                alive.push(save);
                sources.push(records);
            }
            Retried::Failed(e) => {
                if !dead_letter_all(pipeline, &records, e, shutdown).await {
                    return None;
                }
                unstored.given_up.push(save.session.id);
            }
            Retried::ShuttingDown => return None,
        }
    }
    while !alive.is_empty() {
        match retry(
            "storing decisions",
            shutdown,
            &mut (pipeline, &alive[..]),
            |(pipeline, saves)| Box::pin(save_sessions(pipeline, saves)),
        )
        .await
        {
            Retried::Done(()) => break,
            Retried::ShuttingDown => return None,
            // The rest are stored again without them.
            Retried::Failed(Failure::Fenced(partitions)) => {
                let of_them =
                    |s: &SessionSave| s.fence.is_some_and(|f| partitions.contains(&f.partition));
                let (kept, dropped): (Vec<_>, Vec<_>) = alive
                    .into_iter()
                    .zip(sources)
                    .partition(|(s, _)| !of_them(s));
                crate::telemetry::fenced(dropped.len(), &partitions);
                (alive, sources) = kept.into_iter().unzip();
                unstored.fenced.extend(partitions);
            }
            // One session's row cannot be written: each is stored alone, so only its records are
            // dead-lettered.
            Retried::Failed(_) => {
                for (save, records) in alive.iter().zip(&sources) {
                    match retry(
                        "storing a decision",
                        shutdown,
                        &mut (pipeline, std::slice::from_ref(save)),
                        |(pipeline, saves)| Box::pin(save_sessions(pipeline, saves)),
                    )
                    .await
                    {
                        Retried::Done(()) => {}
                        Retried::Failed(Failure::Fenced(partitions)) => {
                            crate::telemetry::fenced(1, &partitions);
                            unstored.fenced.extend(partitions);
                        }
                        Retried::Failed(e) => {
                            if !dead_letter_all(pipeline, records, e, shutdown).await {
                                return None;
                            }
                            unstored.given_up.push(save.session.id);
                        }
                        Retried::ShuttingDown => return None,
                    }
                }
                break;
            }
        }
    }
    unstored.fenced.sort_unstable();
    unstored.fenced.dedup();
    Some(unstored)
}

/// Claims `partitions` (just assigned) in the store, retrying while it is unavailable, and
/// records the generation of each in `claims`. False when shutting down, or if the store refuses
/// for good (the processor stops: it cannot save what it cannot fence).
async fn claim(
    pipeline: &Pipeline,
    partitions: &[u32],
    claims: &mut HashMap<u32, u64>,
    shutdown: &CancellationToken,
) -> bool {
    if partitions.is_empty() {
        return true;
    }
    let claimed = retry(
        "claiming partitions",
        shutdown,
        &mut (pipeline, partitions),
        |(pipeline, partitions)| {
            Box::pin(
                async move { Ok::<_, Failure>(pipeline.store.claim_partitions(partitions).await?) },
            )
        },
    )
    .await;
    match claimed {
        Retried::Done(fences) => {
            tracing::debug!(
                fences = %fences
                    .iter()
                    .map(|f| format!("{}@{}", f.partition, f.generation))
                    .collect::<Vec<_>>()
                    .join(","),
                "processor: claimed partitions (partition@generation)"
            );
            claims.extend(fences.into_iter().map(|f| (f.partition, f.generation)));
            true
        }
        Retried::Failed(e) => {
            tracing::error!(error = %e, "processor: cannot claim its partitions; nothing is scored");
            false
        }
        Retried::ShuttingDown => false,
    }
}

async fn save_sessions(pipeline: &Pipeline, saves: &[SessionSave]) -> Result<(), Failure> {
    Ok(pipeline.store.save_sessions(saves).await?)
}

/// Commits the positions, retrying while the log is unavailable. A permanent refusal (a
/// partition this consumer does not read: a bug) is logged; the next commit covers the same
/// positions.
async fn commit(
    consumer: &mut dyn LogConsumer,
    positions: &[log::Position],
    shutdown: &CancellationToken,
) {
    let committed = retry(
        "committing",
        shutdown,
        &mut (consumer, positions),
        |(consumer, positions)| Box::pin(consumer.commit(positions)),
    )
    .await;
    if let Retried::Failed(e) = committed {
        tracing::error!(error = %e, "processor: the log refused a commit");
    }
}

/// A session folded into the poll's save, kept in memory once the save is sent: the next fold
/// of it reads it from there.
struct Pending {
    /// The partition of the batches topic its records are in.
    partition: u32,
    session: SessionRecord,
    state: SessionState,
    /// The bytes of its stored state, both parts (what the memory's bound weighs).
    stored_bytes: usize,
    /// When ingest accepted each batch the save decides.
    received: Vec<schemas::time::Timestamp>,
}

/// What folding a session's records came to.
struct Folded<'a> {
    /// The session to store with its new decision; `None` if every record was already folded.
    save: Option<(SessionSave, SessionState)>,
    /// Records whose SDK batch does not decode: folded past, and dead-lettered.
    unreadable: Vec<Dead<'a>>,
}
/// Folds a session's new records (in log order) into it and makes one new decision, with the
/// events it caused. The caller publishes the events first and then stores the save (a crash
/// between the two republishes the same event ids on redelivery).
///
/// A stored session whose state does not decode fails permanently (`corrupt_row`) rather than
/// starting over from an empty state: a silently reset session would be decided on a fraction
/// of what it sent.
async fn fold<'a>(
    pipeline: &Pipeline,
    group: &[Polled<'a>],
    replayed: &[crate::ReplayedBatch],
    memory: &mut Memory,
) -> Result<Folded<'a>, Failure> {
    let (store, secret) = (&pipeline.store, &pipeline.secret);
    let started = Instant::now();
    let mut unreadable = Vec::new();
    let Some(first) = group.first().map(|p| &p.batch) else {
        return Ok(Folded {
            save: None,
            unreadable,
        });
    };
    let now = schemas::time::now();
    // The collect session, once read: a new session's first fold reads it to open the row, and
    // every fold reads it for the pings and `results`.
    let mut collect_read = None;
    // The save in flight has landed if it held the session (the loop sees to that), so the
    // session is what the store holds: cached, or read from its row.
    let (mut session, mut state) = match memory.take_stored(first.session_id) {
        Some(stored) => stored,
        None => {
            let mut session = match store
                .get_session(first.organization_id, first.environment, first.session_id)
                .await?
            {
                Some(s) => s,
                None => {
                    let collect = store.get_collect_session(first.session_id).await?;
                    let session = new_session(first, collect.as_ref());
                    collect_read = Some(collect);
                    session
                }
            };
            // A row from before `finalized` was stored says so only in its decision; rows
            // this build wrote say it in both, so the decision is not parsed for the
            // sessions held in memory.
            if events::is_final(session.latest_decision.as_ref()) {
                session.finalized = true;
            }
            let state = session
                .state
                .decode::<Option<SessionState>>()
                .map_err(|e| {
                    Failure::Permanent(
                        DeadReason::CorruptRow,
                        format!("session {}: its state does not decode: {e}", session.id),
                    )
                })?
                .unwrap_or_default();
            (session, state)
        }
    };
    let was_final = session.finalized;
    let mut linked = None;
    // Each interaction window's end, with when its batch arrived: held against the time since
    // the collect session opened, once that is read below.
    let mut windows = Vec::new();
    let mut changed = false;
    for polled in group {
        let batch = &polled.batch;
        // Numbers from 1 are the SDK's batches, delivered at least once; 0 marks server-made
        // records, whose effects are idempotent.
        if batch.seq > 0 && session.has_processed(batch.seq) {
            continue;
        }
        let mut probes_batch = false;
        // Numbers from 1 are the SDK's batches; 0 is a server-made record, read as one (a kind
        // this build does not know, from a newer ingest, does not read: it is set aside below).
        // Server-made records carry no number, so one delivered again (after a crash, or when a
        // partition moves to another processor) is recognised by changing nothing: it is
        // passed over, and makes no second decision.
        let server = (batch.seq == 0).then(|| batch.observations.decode::<ServerRecord>());
        match server {
            Some(Ok(ServerRecord::NetworkCheck { consistent, .. })) => {
                if state.context.network_check_consistent == Some(consistent) {
                    continue;
                }
                state.context.network_check_consistent = Some(consistent);
            }
            Some(Ok(ServerRecord::Results)) => {
                if state.final_requested {
                    continue;
                }
                state.final_requested = true;
                state.context.results_asked = true;
            }
            Some(Ok(ServerRecord::Idle { idle_since })) => {
                if state.final_requested {
                    continue;
                }
                // Sent by the idle sweep for the session as it stood then; a batch that arrived
                // since keeps the session open.
                if idle::still_idle(idle_since, session.updated_at) {
                    state.final_requested = true;
                } else {
                    continue;
                }
            }
            Some(Err(e)) => {
                // Folded past and dead-lettered by the caller, like an SDK batch that does not
                // decode (server-made records are never marked processed: they carry no number).
                unreadable.push(Dead {
                    record: polled.record,
                    reason: DeadReason::UnreadableRecord,
                    message: format!(
                        "session {}: not a server-made record this build knows: {e}",
                        batch.session_id
                    ),
                });
                continue;
            }
            // Cloned, not taken: a fold that fails is retried on the same records.
            None => match polled
                .observed
                .clone()
                .map_or_else(|| read_batch(batch), Ok)
            {
                Ok(observed) => {
                    probes_batch = matches!(observed, Batch::Probes(_));
                    if let Batch::Interactions(interactions) = &observed
                        && let Some([_, end]) = interactions.window_ms
                    {
                        windows.push((end, batch.received_at));
                    }
                    if let Some(replay) = replayed.iter().find(|r| r.seq == batch.seq)
                        && !state.context.replayed.iter().any(|r| r.seq == batch.seq)
                    {
                        state.context.replayed.push(replay.clone());
                    }
                    state.observations.record(observed);
                }
                Err(e) => {
                    // Folded past (marked processed, so a redelivery does not dead-letter it
                    // again) and dead-lettered by the caller.
                    unreadable.push(Dead {
                        record: polled.record,
                        reason: DeadReason::UnreadableRecord,
                        message: format!(
                            "session {} batch {}: not an SDK batch: {e}",
                            batch.session_id, batch.seq
                        ),
                    });
                    session.mark_processed(batch.seq);
                    continue;
                }
            },
        }
        if let Some(check) = &batch.request.web_bot_auth {
            state.context.record_web_bot_auth(check);
        }
        if state.context.request.ip.is_none() {
            state.context.network = pipeline
                .network
                .as_deref()
                .zip(batch.request.ip.parse().ok())
                .map(|(network, ip)| network.lookup(ip));
            state.context.request = crate::RequestContext::of(&batch.request);
        }
        if probes_batch
            && session.visitor_id.is_none()
            && let Some(probes) = &state.observations.probes
        {
            let (visitor, linked_by) = link_visitor(
                store,
                secret,
                batch,
                &session,
                probes,
                pipeline.retention,
                memory,
            )
            .await?;
            session.visitor_id = Some(visitor.id);
            linked = Some((visitor, linked_by, batch.received_at));
        }
        if batch.seq > 0 {
            session.mark_processed(batch.seq);
        }
        changed = true;
    }
    if !changed {
        return Ok(Folded {
            save: None,
            unreadable,
        });
    }
    let collect = match collect_read {
        Some(read) => read,
        None => store.get_collect_session(first.session_id).await?,
    };
    // The decision becomes final when the `results` record is folded, not when the collect
    // session says `results` was called: the record follows, in the session's order, every batch
    // sent before the call, so the final decision is made on all of them (and once), where the
    // collect session's mark would finalise on whatever had been folded so far.
    if let Some(collect) = collect {
        state.context.ping_arrivals = collect.pings.iter().filter_map(|p| p.arrived_at).collect();
        state.context.network_check_connected = collect.ws_identity.is_some();
        for (end, received_at) in windows {
            let elapsed = (received_at - collect.opened_at)
                .num_microseconds()
                .map_or(f64::MAX, |us| us as f64 / 1_000.0);
            state.context.time_claims.count(end, elapsed);
        }
        state.context.challenge = Some(collect.challenge).filter(|c| !c.is_empty());
        state.context.sdk_version = Some(collect.sdk_version);
    }

    state.context.vpn = crate::signals::vpn(&state.observations, &state.context);
    let mut decision = crate::evaluate(&state.observations, &state.context);
    if state.final_requested {
        decision = decision.finalize();
    }
    let id = DecisionId::generate();
    let document = decision.document(id, now, started.elapsed().as_secs_f64() * 1000.0);
    session.updated_at = now;
    session.finalized = state.final_requested;
    let (unsettled, settled) = state
        .parts()
        .map_err(|e| Failure::Permanent(DeadReason::UnreadableRecord, e.to_string()))?;
    session.state = unsettled;
    let decision_raw = document
        .to_raw()
        .map_err(|e| Failure::Permanent(DeadReason::UnreadableRecord, e.to_string()))?;
    session.latest_decision = Some(decision_raw.clone());
    let mut recorded = Vec::new();
    if let Some((visitor, linked_by, at)) = &linked {
        recorded.push(events::fingerprint_calculated(
            &session, visitor, *linked_by, *at,
        ));
    }
    if session.finalized && !was_final {
        recorded.push(events::result_persisted(&session, &document, now));
    }
    let record = DecisionRecord {
        session_id: first.session_id,
        id,
        evaluated_at: now,
        decision: decision_raw,
    };
    tracing::debug!(session = %first.session_id, records = group.len(), verdict = ?decision.verdict, status = ?decision.decision_status, events = recorded.len(), "processor: decided");
    Ok(Folded {
        save: Some((
            SessionSave {
                session,
                decision: Some(record),
                events: recorded,
                settled: Some(settled),
                // Set by the loop, which knows the partition's claim.
                fence: None,
            },
            state,
        )),
        unreadable,
    })
}

/// [`publish`], retried while the failure is transient.
async fn publish_retried(
    pipeline: &Pipeline,
    events: &[EventRecord],
    shutdown: &CancellationToken,
) -> Retried<(), Failure> {
    if events.is_empty() {
        return Retried::Done(());
    }
    retry(
        "publishing events",
        shutdown,
        &mut (pipeline, events),
        |(pipeline, events)| Box::pin(publish(pipeline, events)),
    )
    .await
}

/// Appends each event to `events.v1`, keyed by its organization.
async fn publish(pipeline: &Pipeline, recorded: &[EventRecord]) -> Result<(), Failure> {
    for event in recorded {
        let payload = serde_json::to_vec(&events::logged(event))
            .map_err(|e| Failure::Permanent(DeadReason::UnreadableRecord, e.to_string()))?;
        pipeline
            .log
            .append(
                &pipeline.events,
                event.organization_id.to_string().as_bytes(),
                &payload,
            )
            .await
            .map_err(|e| Failure::of_append("publishing an event", e))?;
    }
    Ok(())
}

/// The row of a session the store does not have yet, from its first batch and its collect
/// session (when that is still kept).
fn new_session(batch: &BatchRecord, collect: Option<&CollectSessionRecord>) -> SessionRecord {
    SessionRecord {
        id: batch.session_id,
        organization_id: batch.organization_id,
        environment: batch.environment,
        visitor_id: None,
        opened_at: collect.map_or(batch.received_at, |c| c.opened_at),
        updated_at: batch.received_at,
        page_url: collect.map(|c| c.page_url.clone()).unwrap_or_default(),
        ip: batch.request.ip.clone(),
        user_agent: batch.request.user_agent.clone(),
        processed_through: 0,
        processed_seqs: Vec::new(),
        state: RawJson::null(),
        latest_decision: None,
        finalized: false,
    }
}

/// Links the session to a visitor in the order of docs/architecture.md#visitors, updates and saves
/// the visitor, and returns it with how it was found.
async fn link_visitor(
    store: &Store,
    secret: &ServerSecret,
    batch: &BatchRecord,
    session: &SessionRecord,
    probes: &Probes,
    retention: Duration,
    memory: &mut Memory,
) -> Result<(VisitorRecord, LinkedBy), Failure> {
    let (org, env) = (batch.organization_id, batch.environment);
    let seen_at = batch.received_at;
    let live = |v: &VisitorRecord| v.expires_at > seen_at;
    let anchors = Anchors::of(probes);
    let traits = BrowserTraits::of(probes);
    let vector = component_vector(probes);
    let storage = probes.storage.as_ref();

    // 1. A token this server signed for this organization and environment.
    let mut found = None;
    let mut by_token = false;
    let mut linked_by = LinkedBy::NewVisitor;
    if let Some(token) = storage.and_then(|s| s.visitor_token.as_deref())
        && let Some(id) = secret.verify_visitor_token(org, env, token)
        && let Some(visitor) = match memory.linked_visitor(org, env, id) {
            Some(linked) => Some(linked.clone()),
            None => store.get_visitor(org, env, id).await?,
        }
        && live(&visitor)
    {
        found = Some(visitor);
        by_token = true;
        linked_by = LinkedBy::VisitorToken;
    }
    // 2. The same anchors, from a compatible browser.
    if found.is_none() {
        let candidates = store
            .find_visitor_by_anchors(org, env, &(&anchors).into(), ANCHOR_CANDIDATES)
            .await?;
        // This poll's visitors first: the newest, and perhaps not stored yet.
        found = memory
            .linked(org, env)
            .chain(&candidates)
            .find(|v| {
                live(v)
                    && anchors.matches(&Anchors::from(&v.anchors))
                    && traits.compatible_with_stored(&v.traits)
            })
            .cloned();
        if found.is_some() {
            linked_by = LinkedBy::Anchors;
        }
    }
    // 3. The nearest component vector above the threshold, among the newest visitors.
    if found.is_none() {
        let mut best: Option<(f64, VisitorRecord)> = None;
        for v in memory.linked(org, env) {
            let s = similarity(&vector, &v.components);
            if live(v) && s >= LINK_THRESHOLD && best.as_ref().is_none_or(|(b, _)| s > *b) {
                best = Some((s, v.clone()));
            }
        }
        let mut after = None;
        let mut scanned = 0;
        while scanned < VECTOR_SCAN {
            let page = store.list_visitors(org, env, after, 200).await?;
            if page.is_empty() {
                break;
            }
            for v in page {
                scanned += 1;
                after = Some(v.id);
                let s = similarity(&vector, &v.components);
                if live(&v) && s >= LINK_THRESHOLD && best.as_ref().is_none_or(|(b, _)| s > *b) {
                    best = Some((s, v));
                }
            }
        }
        found = best.map(|(_, v)| v);
        if found.is_some() {
            linked_by = LinkedBy::NearestVector;
        }
    }
    // A visitor this poll already linked continues from that version, not the stored one.
    // One read from the store is saved as its next revision (docs/architecture.md#fleet-writes).
    let found = found.map(|v| match memory.linked_visitor(org, env, v.id) {
        Some(linked) => linked.clone(),
        None => VisitorRecord {
            revision: v.revision + 1,
            ..v
        },
    });
    // Where this visit's browser still held the token; nothing when it had none (or a forged
    // one), so the flags show what the latest visit kept.
    let found_in = storage
        .filter(|_| by_token)
        .and_then(|s| s.token_found_in.as_deref())
        .unwrap_or_default();
    let held = |place: &str| found_in.iter().any(|p| p == place);
    let now_anchors: store::VisitorAnchors = (&anchors).into();
    let visit = Visit {
        session: session.id,
        seen_at,
        retention,
        request: VisitorRequest {
            user_agent: batch.request.user_agent.clone(),
            ip_address: batch.request.ip.clone(),
        },
        storage: VisitorStorage {
            cookies: held("cookies"),
            local_storage: held("local_storage"),
            indexed_db: held("indexed_db"),
            service_worker: held("service_worker"),
            window_name: held("window_name"),
        },
        anchors: (!now_anchors.digests().is_empty()).then(|| now_anchors.clone()),
        components: vector
            .iter()
            .any(|&v| v != crate::fingerprint::MISSING)
            .then(|| (vector.clone(), traits.stored())),
    };
    // 4. Someone new.
    let mut visitor = found.unwrap_or_else(|| VisitorRecord {
        id: VisitorId::generate(),
        organization_id: org,
        environment: env,
        first_seen_at: seen_at,
        last_seen_at: seen_at,
        seen_count: 0,
        expires_at: seen_at,
        latest_request: VisitorRequest::default(),
        storage: VisitorStorage::default(),
        anchors: now_anchors,
        components: vector,
        traits: traits.stored(),
        recent_sessions: Vec::new(),
        revision: 1,
    });
    visit.apply(&mut visitor);
    memory.link(visitor.clone(), visit);
    tracing::debug!(session = %session.id, visitor = %visitor.id, ?linked_by, seen_count = visitor.seen_count, "processor: linked a visitor");
    Ok((visitor, linked_by))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observations::{
        Automation, Browser, Integrity, Locale, Network, Rendering, Screen, WebBotAuth,
    };
    use schemas::session_view::{SessionView, WebBotAuthOutcome};

    /// The query API shows the processor's state through `schemas::session_view`: every member
    /// it shows must read from the state as this build writes it.
    #[test]
    fn the_state_reads_as_the_view_the_query_api_shows() {
        let now = schemas::time::now();
        let probes = Probes {
            collected_in_ms: Some(412.5),
            timed_out: Some(vec!["audio".into()]),
            automation: Some(Automation {
                webdriver: Some(true),
                user_agent: Some("Mozilla/5.0 HeadlessChrome".into()),
                languages: Some(vec!["en-GB".into()]),
                ..Automation::default()
            }),
            browser: Some(Browser {
                platform: Some("Win32".into()),
                max_touch_points: Some(2.0),
                ..Browser::default()
            }),
            rendering: Some(Rendering {
                webgl_renderer: Some("SwiftShader".into()),
                ..Rendering::default()
            }),
            screen: Some(Screen {
                width: Some(1920.0),
                height: Some(1080.0),
                pixel_ratio: Some(1.25),
                touch: Some(false),
                ..Screen::default()
            }),
            locale: Some(Locale {
                timezone: Some("Europe/London".into()),
                ..Locale::default()
            }),
            integrity: Some(Integrity {
                tampered_natives: Some(vec!["Function.prototype.toString".into()]),
                descriptor_anomalies: Some(vec!["navigator.webdriver".into()]),
                ..Integrity::default()
            }),
            network: Some(Network {
                ping_rtts_ms: Some(vec![12.5, 14.0]),
            }),
            ..Probes::default()
        };
        let mut state = SessionState::default();
        state
            .observations
            .record(Batch::Probes(Box::new(probes.clone())));
        state.context.request.header_names = vec!["host".into(), "user-agent".into()];
        state.context.ping_arrivals = vec![now];
        state.context.network_check_consistent = Some(false);
        state.context.web_bot_auth = WebBotAuth::Invalid;
        state.context.signature_agent = Some("https://agent.example".into());

        // Stored in two parts (`SessionSave::settled`), read back merged: the whole state.
        let (unsettled, settled) = state.parts().unwrap();
        assert!(
            !unsettled.as_str().contains("SwiftShader"),
            "the probes are apart"
        );
        let whole = store::merge_state(&unsettled, &settled).unwrap();
        assert_eq!(
            whole.to_value(),
            RawJson::encode(&state).unwrap().to_value(),
            "the parts merge into the state"
        );
        let view = SessionView::of(&whole);
        let shown = view.probes().expect("the probes");
        assert_eq!(shown.collected_in_ms, probes.collected_in_ms);
        assert_eq!(shown.timed_out, probes.timed_out);
        let automation = shown.automation.as_ref().unwrap();
        assert_eq!(automation.webdriver, Some(true));
        assert_eq!(
            automation.user_agent.as_deref(),
            Some("Mozilla/5.0 HeadlessChrome")
        );
        assert_eq!(automation.languages, Some(vec!["en-GB".to_owned()]));
        let browser = shown.browser.as_ref().unwrap();
        assert_eq!(
            (browser.platform.as_deref(), browser.max_touch_points),
            (Some("Win32"), Some(2.0))
        );
        assert_eq!(
            shown.rendering.as_ref().unwrap().webgl_renderer.as_deref(),
            Some("SwiftShader")
        );
        assert_eq!(
            shown.locale.as_ref().unwrap().timezone.as_deref(),
            Some("Europe/London")
        );
        let integrity = shown.integrity.as_ref().unwrap();
        assert_eq!(
            integrity.tampered_natives,
            probes.integrity.as_ref().unwrap().tampered_natives
        );
        assert_eq!(
            integrity.descriptor_anomalies,
            probes.integrity.as_ref().unwrap().descriptor_anomalies
        );
        assert_eq!(
            shown.network.as_ref().unwrap().ping_rtts_ms,
            Some(vec![12.5, 14.0])
        );
        // The screen is shown whole: exactly as the state holds it.
        assert_eq!(
            serde_json::to_value(shown.screen.as_ref().unwrap()).unwrap(),
            serde_json::to_value(probes.screen.as_ref().unwrap()).unwrap()
        );
        assert_eq!(
            shown.screen.as_ref().unwrap().size().as_deref(),
            Some("1920x1080")
        );

        let context = view.context().expect("the context");
        assert_eq!(
            context.request.as_ref().unwrap().header_names,
            Some(vec!["host".to_owned(), "user-agent".to_owned()])
        );
        assert_eq!(context.ping_arrivals, Some(vec![now]));
        assert_eq!(context.network_check_consistent, Some(false));
        assert_eq!(context.web_bot_auth, Some(WebBotAuthOutcome::Invalid));
        assert_eq!(
            context.signature_agent.as_deref(),
            Some("https://agent.example")
        );
        // Every outcome the processor writes has its name in the view.
        for outcome in [
            WebBotAuth::Verified,
            WebBotAuth::Invalid,
            WebBotAuth::Unverified,
            WebBotAuth::Absent,
        ] {
            let written = serde_json::to_value(outcome).unwrap();
            let read: WebBotAuthOutcome = serde_json::from_value(written.clone()).unwrap();
            assert_eq!(serde_json::to_value(read).unwrap(), written);
        }
    }
}
