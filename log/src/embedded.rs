//! The embedded backend (`embedded:<dir>`): the log in a fjall database of its own directory,
//! every acknowledged append and commit fsynced before it returns.
//!
//! Layout, keyspaces with binary keys whose byte order is the log's order:
//! - `log_topics`: topic name → partition count (u32 BE);
//! - `<topic>#<partition>`, one per partition: `[offset u64 BE]` →
//!   `[key len u32 BE][key][payload]`. A partition has a keyspace of its own so that its keys
//!   only ever grow: each memtable flushes to a table that lies after every table before it,
//!   and the engine moves such tables down its levels without rewriting them. In one keyspace
//!   for all partitions, every flushed table overlapped the whole stored log, and compaction
//!   rewrote it again and again (7 bytes written by compaction per byte appended, measured);
//! - `log_committed`: `[len][group][len][topic][partition u32 BE]` → next offset to read (u64 BE).
//!   A member's first join writes offset 0 where its group has none, so retention knows the
//!   group reads there before it has committed anything;
//! - `log_committed_at`: the same keys → when that position was last committed (Unix
//!   milliseconds, u64 BE); a keyspace of its own so a build from before retention still
//!   reads `log_committed`;
//! - `log_marks`: `[len][topic][partition u32 BE][offset u64 BE]` → when the batch holding that
//!   record was appended and the marking interval then (Unix milliseconds and milliseconds,
//!   u64 BE each). The writer marks a partition's first append after open and then its first
//!   append at least an interval after the last mark (a minute, finer for a short retention).
//!   So every record from one mark up to the next was appended within the interval after the
//!   first mark's time, and retention tells old records apart without a time in each one.
//!
//! Names are at most 249 bytes (see `names`), so a one-byte length prefix keeps every key
//! unambiguous. A log written before the per-partition keyspaces (one `log_records` for all)
//! has its records moved into them when it is opened.
//!
//! Writes go through one writer thread (`writer`) that group-commits: everything queued while
//! the previous fsync ran is written as one batch and fsynced once. That thread is also the
//! only place offsets are assigned, so offsets are dense and a partition's records become
//! visible in offset order. fjall applies a batch to its memtables only after the fsync
//! returned, so a reader never sees a record that a crash could still lose.
//!
//! The log belongs to one process (fjall locks its directory), so a consumer group has one
//! member here, which reads every partition; a second member of the same group and topic is
//! refused while the first lives.

mod writer;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use schemas::disk::DiskReserve;
use tokio::sync::{mpsc, oneshot, watch};

use self::writer::{Op, Writer};
use crate::{
    Group, LogBackend, LogConsumer, LogError, Position, Rebalance, Record, Result, Topic,
    check_partition_count, check_partitions, check_record_size, partition_for, resume_offsets,
};

const TOPICS: &str = "log_topics";
/// The keyspace of every partition's records in logs written before the per-partition
/// keyspaces; emptied into those when such a log is opened.
const LEGACY_RECORDS: &str = "log_records";
/// Moved per batch when emptying [`LEGACY_RECORDS`], so the move holds little memory.
const LEGACY_MOVE_BATCH: usize = 1024;
const COMMITTED: &str = "log_committed";
const MARKS: &str = "log_marks";
const COMMITTED_AT: &str = "log_committed_at";
/// How long after the log was opened every group's position holds back what it has yet to
/// read, whether or not it has a member: the time the roles take to join again after a restart.
const REJOIN_GRACE: Duration = Duration::from_secs(600);
/// How far apart a partition's time marks are at most: records outlive the retention by up to
/// this much. A short retention marks finer (a hundredth of it, 10 ms at least).
const MARK_EVERY: Duration = Duration::from_secs(60);

/// The log in a local directory.
///
/// Dropping it stops the writer thread once the queued writes are done. Consumers share the
/// database but not the writer: one that outlives its log can still read, but not commit, and
/// keeps the directory locked until it is dropped too.
pub struct EmbeddedLog {
    shared: Arc<Shared>,
    writer: Writer,
}

/// What the log, its writer thread and its consumers share.
struct Shared {
    db: Database,
    topics: Keyspace,
    committed: Keyspace,
    committed_at: Keyspace,
    marks: Keyspace,
    /// Milliseconds between two time marks of a partition ([`MARK_EVERY`], or finer once a
    /// short retention was asked for).
    mark_every_ms: AtomicU64,
    /// Per partition, the offset below which retention already dropped every record: the next
    /// step starts there, not at the head of the partition, where the dropped records'
    /// tombstones lie until compaction removes them.
    expired_below: Mutex<HashMap<(Topic, u32), u64>>,
    /// When the log was opened (Unix milliseconds): see [`expire_step`] for what a group's
    /// position holds back, and for how long.
    opened_at_ms: u64,
    /// Every created topic; loaded at open, extended by the writer after a creation is durable.
    catalog: RwLock<HashMap<Topic, Arc<TopicState>>>,
    /// Batches are refused while the disk is nearly full, before fjall sees them (see
    /// `schemas::disk` for why).
    space: DiskReserve,
    /// The (group, topic) pairs a live member reads: one member each (see [`EmbeddedLog::member`]).
    members: Mutex<HashSet<(Group, Topic)>>,
}

struct TopicState {
    partitions: u32,
    /// Each partition's records, by offset.
    records: Vec<Keyspace>,
    /// Bumped by the writer after each batch that appended to the topic is durable; consumers
    /// wait on it instead of polling the disk.
    appended: watch::Sender<u64>,
}

impl TopicState {
    /// Opens (creating them if need be) the keyspaces of `topic`'s `partitions`.
    fn open(db: &Database, topic: &Topic, partitions: u32) -> Result<Arc<Self>> {
        // The partitions' memtables share the bound one memtable has, at 1 MiB each at least.
        let memtable = (schemas::disk::MEMTABLE_BYTES / u64::from(partitions)).max(1 << 20);
        let records = (0..partitions)
            .map(|p| {
                db.keyspace(&key::records_keyspace(topic, p), || {
                    KeyspaceCreateOptions::default().max_memtable_size(memtable)
                })
                .map_err(unavailable)
            })
            .collect::<Result<_>>()?;
        Ok(Arc::new(Self {
            partitions,
            records,
            appended: watch::Sender::new(0),
        }))
    }

    /// Up to `max` records from `partitions` (each from its `next` offset), visiting the
    /// partitions from index `start` on so that a busy partition cannot starve the others.
    fn read(&self, partitions: &[(u32, u64)], start: usize, max: usize) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        for i in 0..partitions.len() {
            let (partition, next) = partitions[(start + i) % partitions.len()];
            let records = self.records(partition)?;
            for guard in records.range(key::record(next)..).take(max - out.len()) {
                let (k, v) = guard.into_inner().map_err(unavailable)?;
                let offset = key::offset(&k).ok_or_else(|| corrupt("short record key"))?;
                let (rkey, payload) =
                    key::split_record_value(&v).ok_or_else(|| corrupt("short record value"))?;
                out.push(Record {
                    partition,
                    offset,
                    key: Bytes::copy_from_slice(rkey),
                    payload: Bytes::copy_from_slice(payload),
                });
            }
            if out.len() == max {
                break;
            }
        }
        Ok(out)
    }

    fn records(&self, partition: u32) -> Result<&Keyspace> {
        self.records
            .get(partition as usize)
            .ok_or_else(|| corrupt("a partition beyond the topic's count"))
    }

    /// The offset after the last stored record of `partition` (0 for an empty one): offsets
    /// are dense, so that is the partition's end.
    fn end(&self, partition: u32) -> Result<u64> {
        match self.records(partition)?.last_key_value() {
            None => Ok(0),
            Some(guard) => {
                let k = guard.key().map_err(unavailable)?;
                Ok(key::offset(&k).ok_or_else(|| corrupt("short record key"))? + 1)
            }
        }
    }
}

/// Key and value encodings (see the module doc).
mod key {
    use crate::{Group, Topic};

    fn push_name(k: &mut Vec<u8>, name: &str) {
        // Names are at most 249 bytes (checked when a `Topic` or `Group` is made).
        k.push(name.len() as u8);
        k.extend_from_slice(name.as_bytes());
    }

    pub fn topic(topic: &Topic) -> &[u8] {
        topic.as_str().as_bytes()
    }

    /// The keyspace of one partition's records: `<topic>#<partition>`. Topic names are at most
    /// 249 of `[A-Za-z0-9._-]` and partitions below 4,096, so this fits a keyspace name (255
    /// bytes of those and `#`), and no other keyspace has a `#`.
    pub fn records_keyspace(topic: &Topic, partition: u32) -> String {
        format!("{}#{partition}", topic.as_str())
    }

    /// A record's key in its partition's keyspace.
    pub fn record(offset: u64) -> [u8; 8] {
        offset.to_be_bytes()
    }

    /// The offset a record key names.
    pub fn offset(k: &[u8]) -> Option<u64> {
        Some(u64::from_be_bytes(k.try_into().ok()?))
    }

    /// A record's key in [`super::LEGACY_RECORDS`]: `[len][topic][partition u32 BE][offset u64 BE]`.
    pub fn legacy_record(k: &[u8]) -> Option<(&str, u32, u64)> {
        let (&len, rest) = k.split_first()?;
        let len = usize::from(len);
        if rest.len() != len + 12 {
            return None;
        }
        let topic = std::str::from_utf8(&rest[..len]).ok()?;
        let partition = u32::from_be_bytes(rest[len..len + 4].try_into().ok()?);
        Some((topic, partition, offset(&rest[len + 4..])?))
    }

    pub fn committed(group: &Group, topic: &Topic, partition: u32) -> Vec<u8> {
        let mut k = Vec::with_capacity(2 + group.as_str().len() + topic.as_str().len() + 4);
        push_name(&mut k, group.as_str());
        push_name(&mut k, topic.as_str());
        k.extend_from_slice(&partition.to_be_bytes());
        k
    }

    /// The prefix of one partition's time marks: `[len][topic][partition u32 BE]`.
    pub fn marks_of(topic: &Topic, partition: u32) -> Vec<u8> {
        let mut k = Vec::with_capacity(1 + topic.as_str().len() + 12);
        push_name(&mut k, topic.as_str());
        k.extend_from_slice(&partition.to_be_bytes());
        k
    }

    /// The time mark of the record at `offset`.
    pub fn mark(topic: &Topic, partition: u32, offset: u64) -> Vec<u8> {
        let mut k = marks_of(topic, partition);
        k.extend_from_slice(&offset.to_be_bytes());
        k
    }

    /// The offset a time mark's key names (its last eight bytes).
    pub fn mark_offset(k: &[u8]) -> Option<u64> {
        offset(k.get(k.len().checked_sub(8)?..)?)
    }

    /// The group, topic and partition a `log_committed` key is of.
    pub fn committed_slot(k: &[u8]) -> Option<(&[u8], &[u8], u32)> {
        let (&group_len, rest) = k.split_first()?;
        let (group, rest) = rest.split_at_checked(usize::from(group_len))?;
        let (&topic_len, rest) = rest.split_first()?;
        let len = usize::from(topic_len);
        if rest.len() != len + 4 {
            return None;
        }
        let partition = u32::from_be_bytes(rest[len..].try_into().ok()?);
        Some((group, &rest[..len], partition))
    }

    pub fn record_value(key: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(4 + key.len() + payload.len());
        // Keys are at most MAX_RECORD_BYTES, far below 4 GiB.
        v.extend_from_slice(&(key.len() as u32).to_be_bytes());
        v.extend_from_slice(key);
        v.extend_from_slice(payload);
        v
    }

    /// Splits a record value into key and payload.
    pub fn split_record_value(v: &[u8]) -> Option<(&[u8], &[u8])> {
        let len = u32::from_be_bytes(v.get(..4)?.try_into().ok()?) as usize;
        let rest = &v[4..];
        (len <= rest.len()).then(|| rest.split_at(len))
    }

    /// A time mark's value: when its record was appended and the marking interval then.
    pub fn mark_value(at_ms: u64, every_ms: u64) -> [u8; 16] {
        let mut v = [0; 16];
        v[..8].copy_from_slice(&at_ms.to_be_bytes());
        v[8..].copy_from_slice(&every_ms.to_be_bytes());
        v
    }

    pub fn decode_mark(v: &[u8]) -> Option<(u64, u64)> {
        Some((decode_u64(v.get(..8)?)?, decode_u64(v.get(8..)?)?))
    }

    pub fn decode_u32(v: &[u8]) -> Option<u32> {
        Some(u32::from_be_bytes(v.try_into().ok()?))
    }

    pub fn decode_u64(v: &[u8]) -> Option<u64> {
        Some(u64::from_be_bytes(v.try_into().ok()?))
    }
}

fn unavailable(e: fjall::Error) -> LogError {
    LogError::Unavailable(format!("embedded log: {e}"))
}

fn corrupt(what: &str) -> LogError {
    LogError::Corrupt(format!("embedded log: {what}"))
}

impl EmbeddedLog {
    /// Opens (or creates) the log in `dir`. Blocking: the caller runs it off the runtime.
    pub fn open(dir: &Path) -> Result<Self> {
        let db = Database::builder(dir)
            .max_journaling_size(schemas::disk::JOURNAL_BYTES)
            .worker_threads(schemas::disk::WORKER_THREADS)
            // Uncompressed: see `schemas::disk::JOURNAL_BYTES`.
            .journal_compression(fjall::CompressionType::None)
            .open()
            .map_err(|e| match e {
                // The embedded log has one reader per partition, in one process: a second
                // process (a second processor, say) cannot join it, and is told what to use.
                fjall::Error::Locked => LogError::Invalid(format!(
                    "the embedded log in {} is open in another process; it belongs to one \
                     process (its processor is the only consumer). Processes that share a log \
                     use Kafka: --log kafka://…",
                    dir.display()
                )),
                other => unavailable(other),
            })?;
        let keyspace = |name: &str| {
            db.keyspace(name, || {
                KeyspaceCreateOptions::default().max_memtable_size(schemas::disk::MEMTABLE_BYTES)
            })
            .map_err(unavailable)
        };
        let topics = keyspace(TOPICS)?;
        let committed = keyspace(COMMITTED)?;
        let marks = keyspace(MARKS)?;
        let committed_at = keyspace(COMMITTED_AT)?;

        let mut catalog = HashMap::new();
        for guard in topics.iter() {
            let (name, count) = guard.into_inner().map_err(unavailable)?;
            let name = std::str::from_utf8(&name)
                .ok()
                .and_then(|n| Topic::new(n).ok())
                .ok_or_else(|| corrupt("a topic name is not a legal name"))?;
            let count = key::decode_u32(&count)
                .ok_or_else(|| corrupt("a topic's partition count is not a u32"))?;
            let state = TopicState::open(&db, &name, count)?;
            catalog.insert(name, state);
        }
        if db.keyspace_exists(LEGACY_RECORDS) {
            move_legacy_records(&db, &catalog)?;
        }
        mark_unmarked(&db, &marks, &catalog)?;

        let shared = Arc::new(Shared {
            db,
            topics,
            committed,
            committed_at,
            marks,
            mark_every_ms: AtomicU64::new(MARK_EVERY.as_millis() as u64),
            expired_below: Mutex::default(),
            opened_at_ms: unix_millis(),
            catalog: RwLock::new(catalog),
            space: DiskReserve::new(dir),
            members: Mutex::new(HashSet::new()),
        });
        let writer = Writer::start(Arc::clone(&shared))?;
        Ok(Self { shared, writer })
    }

    /// A consumer of `partitions`, starting at the group's committed positions, with the
    /// partitions where the group has none.
    async fn reader(
        &self,
        group: &Group,
        topic: &Topic,
        partitions: &[u32],
    ) -> Result<(EmbeddedConsumer, Vec<u32>)> {
        let state = self.shared.topic(topic)?;
        let partitions = check_partitions(topic, state.partitions, partitions)?;
        let shared = Arc::clone(&self.shared);
        let (g, t, ps) = (group.clone(), topic.clone(), partitions.clone());
        let next = blocking(move || {
            ps.iter()
                .map(|&p| match shared.committed.get(key::committed(&g, &t, p)) {
                    Ok(Some(v)) => key::decode_u64(&v)
                        .map(Some)
                        .ok_or_else(|| corrupt("a committed offset is not a u64")),
                    Ok(None) => Ok(None),
                    Err(e) => Err(unavailable(e)),
                })
                .collect::<Result<Vec<Option<u64>>>>()
        })
        .await?;
        let uncommitted = partitions
            .iter()
            .zip(&next)
            .filter(|(_, next)| next.is_none())
            .map(|(p, _)| *p)
            .collect();
        let consumer = EmbeddedConsumer {
            _shared: Arc::clone(&self.shared),
            writer: self.writer.weak_sender(),
            group: group.clone(),
            topic: topic.clone(),
            appended: state.appended.subscribe(),
            state,
            partitions,
            next: next.into_iter().map(|n| n.unwrap_or(0)).collect(),
            start: 0,
            membership: None,
        };
        Ok((consumer, uncommitted))
    }

    /// Hands `op` to the writer thread and waits for its answer.
    async fn submit<T>(&self, op: impl FnOnce(oneshot::Sender<Result<T>>) -> Op) -> Result<T> {
        submit(self.writer.sender(), op).await
    }
}

/// Hands an op to the writer thread and waits for its answer (also used by consumers, which
/// hold only a weak handle on the writer).
async fn submit<T>(
    ops: &mpsc::Sender<Op>,
    op: impl FnOnce(oneshot::Sender<Result<T>>) -> Op,
) -> Result<T> {
    let (done, answer) = oneshot::channel();
    ops.send(op(done))
        .await
        .map_err(|_| LogError::Unavailable("embedded log writer has stopped".into()))?;
    answer
        .await
        .map_err(|_| LogError::Unavailable("embedded log writer has stopped".into()))?
}

impl Shared {
    fn topic(&self, topic: &Topic) -> Result<Arc<TopicState>> {
        self.catalog
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(topic)
            .cloned()
            .ok_or_else(|| LogError::UnknownTopic(topic.to_string()))
    }
}

/// Marks each partition that holds records but no time mark (written before retention) as of
/// now at its last record, so those records expire a retention from now rather than never. The
/// mark covers that one record (the writer marks the first append after open), which was
/// appended before now: its interval is 0.
fn mark_unmarked(
    db: &Database,
    marks: &Keyspace,
    catalog: &HashMap<Topic, Arc<TopicState>>,
) -> Result<()> {
    let now = unix_millis();
    let mut batch = db.batch().durability(Some(PersistMode::SyncData));
    let mut marked = 0;
    for (topic, state) in catalog {
        for partition in 0..state.partitions {
            let end = state.end(partition)?;
            if end == 0
                || marks
                    .prefix(key::marks_of(topic, partition))
                    .next()
                    .is_some()
            {
                continue;
            }
            batch.insert(
                marks,
                key::mark(topic, partition, end - 1),
                key::mark_value(now, 0),
            );
            marked += 1;
        }
    }
    if marked > 0 {
        batch.commit().map_err(unavailable)?;
        tracing::info!(
            partitions = marked,
            "embedded log: marked the partitions written before retention; their records expire a retention from now"
        );
    }
    Ok(())
}

/// Moves the records of a log written before the per-partition keyspaces into those, then
/// drops the old keyspace. Each batch is durable before the next is read, and a move cut short
/// by a crash starts over at the next open: a record written twice is the same record.
fn move_legacy_records(db: &Database, catalog: &HashMap<Topic, Arc<TopicState>>) -> Result<()> {
    let legacy = db
        .keyspace(LEGACY_RECORDS, KeyspaceCreateOptions::default)
        .map_err(unavailable)?;
    let mut moved = 0u64;
    let mut from: Option<Vec<u8>> = None;
    loop {
        let mut batch = db.batch().durability(Some(PersistMode::SyncData));
        let mut last = None;
        let mut count = 0;
        let range = match &from {
            Some(k) => legacy.range::<&[u8], _>((
                std::ops::Bound::Excluded(k.as_slice()),
                std::ops::Bound::Unbounded,
            )),
            None => legacy.iter(),
        };
        for guard in range.take(LEGACY_MOVE_BATCH) {
            let (k, v) = guard.into_inner().map_err(unavailable)?;
            let (topic, partition, offset) =
                key::legacy_record(&k).ok_or_else(|| corrupt("a legacy record key"))?;
            let state = Topic::new(topic)
                .ok()
                .and_then(|t| catalog.get(&t))
                .ok_or_else(|| corrupt("a legacy record of an unknown topic"))?;
            batch.insert(state.records(partition)?, key::record(offset), v);
            last = Some(k.to_vec());
            count += 1;
        }
        let Some(last) = last else { break };
        batch.commit().map_err(unavailable)?;
        moved += count;
        from = Some(last);
    }
    db.delete_keyspace(legacy).map_err(unavailable)?;
    tracing::info!(
        records = moved,
        "embedded log: moved its records into one keyspace per partition"
    );
    Ok(())
}

/// Runs blocking fjall work off the async runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| LogError::Unavailable(format!("embedded log: {e}")))?
}

#[async_trait]
impl LogBackend for EmbeddedLog {
    async fn ping(&self) -> Result<()> {
        // A database whose fsync once failed is poisoned and refuses writes; `persist` reports
        // that, where a read would not.
        let shared = Arc::clone(&self.shared);
        // A nearly full disk is reported too: appends are refused until space returns.
        blocking(move || {
            shared
                .db
                .persist(PersistMode::Buffer)
                .map_err(unavailable)?;
            shared.space.check().map_err(LogError::Unavailable)
        })
        .await?;
        self.writer.check_alive()
    }

    async fn create_topic(&self, topic: &Topic, partitions: u32) -> Result<u32> {
        check_partition_count(partitions)?;
        if let Ok(existing) = self.shared.topic(topic) {
            return Ok(existing.partitions);
        }
        let topic = topic.clone();
        self.submit(|done| Op::CreateTopic {
            topic,
            partitions,
            done,
        })
        .await
    }

    async fn partitions(&self, topic: &Topic) -> Result<u32> {
        Ok(self.shared.topic(topic)?.partitions)
    }

    async fn append(&self, topic: &Topic, key: &[u8], payload: &[u8]) -> Result<Position> {
        check_record_size(key, payload)?;
        let state = self.shared.topic(topic)?;
        let partition = partition_for(key, state.partitions);
        let value = key::record_value(key, payload);
        let offset = self
            .submit(|done| Op::Append {
                topic: topic.clone(),
                state,
                partition,
                value,
                done,
            })
            .await?;
        Ok(Position { partition, offset })
    }

    async fn end_offsets(&self, topic: &Topic) -> Result<Vec<u64>> {
        let state = self.shared.topic(topic)?;
        blocking(move || (0..state.partitions).map(|p| state.end(p)).collect()).await
    }

    async fn consumer(
        &self,
        group: &Group,
        topic: &Topic,
        partitions: &[u32],
    ) -> Result<Box<dyn LogConsumer>> {
        Ok(Box::new(self.reader(group, topic, partitions).await?.0))
    }

    /// The embedded log lives in one process, which has nobody to share partitions with: its
    /// member reads every partition. A second member of the same (group, topic) would read
    /// every record a second time and race the first on the group's position, so it is
    /// refused while the first lives (a second process cannot open the log at all).
    async fn member(&self, group: &Group, topic: &Topic) -> Result<Box<dyn LogConsumer>> {
        let count = self.shared.topic(topic)?.partitions;
        let key = (group.clone(), topic.clone());
        if !self
            .shared
            .members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone())
        {
            return Err(LogError::Invalid(format!(
                "group `{group}` already has a member reading `{topic}`: the embedded log has one \
                 consumer per group, which reads every partition. Replicas that share a topic's \
                 partitions use Kafka: --log kafka://…"
            )));
        }
        // Registered first, so that a failure below releases the place (the guard's drop).
        let membership = Membership {
            shared: Arc::clone(&self.shared),
            key,
            announced: false,
        };
        let all: Vec<u32> = (0..count).collect();
        let (mut consumer, uncommitted) = self.reader(group, topic, &all).await?;
        // A member's group reads its partitions from now on: where it has no position yet,
        // one at the beginning tells retention not to drop what it has yet to read.
        if !uncommitted.is_empty() {
            let entries = uncommitted
                .iter()
                .map(|&p| (key::committed(group, topic, p), 0))
                .collect();
            self.submit(|done| Op::Commit {
                entries,
                if_absent: true,
                done,
            })
            .await?;
        }
        consumer.membership = Some(membership);
        Ok(Box::new(consumer))
    }

    async fn expire(&self, retention: Duration, budget: usize) -> Result<bool> {
        if budget == 0 {
            return Err(LogError::Invalid("expire needs a budget above 0".into()));
        }
        // Marks fine enough for the retention asked for: a record outlives it by at most a
        // hundredth of it (a minute at most). The interval only ever shrinks, so the records
        // after a mark were appended within the interval that mark was written with.
        let every = (retention / 100).clamp(Duration::from_millis(10), MARK_EVERY);
        self.shared
            .mark_every_ms
            .fetch_min(every.as_millis() as u64, Ordering::Relaxed);
        let retention_ms = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
        let now = unix_millis();
        let cutoff = now.saturating_sub(retention_ms);
        let grace = retention.min(REJOIN_GRACE).as_millis() as u64;
        let rejoining = now.saturating_sub(self.shared.opened_at_ms) < grace;
        let shared = Arc::clone(&self.shared);
        blocking(move || expire_step(&shared, cutoff, rejoining, budget)).await
    }
}

/// Now, in Unix milliseconds (0 for a clock before 1970).
pub(crate) fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One step of retention ([`LogBackend::expire`]) over every partition in turn: the records
/// its time marks show were appended before `cutoff_ms` (Unix milliseconds), short of what a
/// group still about has yet to read there and of the partition's last record, are dropped
/// with the marks that covered only them, `budget` records at most, in one batch. The batch
/// is not fsynced: a drop that a crash loses is made again by a later step.
fn expire_step(shared: &Shared, cutoff_ms: u64, rejoining: bool, budget: usize) -> Result<bool> {
    // Tombstones are writes too: refused, like appends, while the disk is nearly full.
    shared.space.check().map_err(LogError::Unavailable)?;
    let mut topics: Vec<(Topic, Arc<TopicState>)> = shared
        .catalog
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|(t, s)| (t.clone(), Arc::clone(s)))
        .collect();
    topics.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    // Per (topic, partition), the least next offset a group still about will read there. A
    // group is about while it has a member (stuck or slow, it loses nothing; one that has not
    // committed yet holds from the start), or committed within the retention, or the log was
    // opened moments ago (`rejoining`: its members may not have joined again yet). A group gone
    // longer than that holds nothing back, as Kafka forgets the offsets of a group empty that
    // long: a group nobody runs any more cannot keep the log growing.
    let live: HashSet<(Vec<u8>, Vec<u8>)> = shared
        .members
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|(g, t)| (g.as_str().as_bytes().to_vec(), key::topic(t).to_vec()))
        .collect();
    let mut unread_from: HashMap<(Vec<u8>, u32), u64> = HashMap::new();
    let mut hold = |topic: &[u8], partition: u32, next: u64| {
        unread_from
            .entry((topic.to_vec(), partition))
            .and_modify(|n| *n = (*n).min(next))
            .or_insert(next);
    };
    let mut positioned = HashSet::new();
    for guard in shared.committed.iter() {
        let (k, v) = guard.into_inner().map_err(unavailable)?;
        let (group, topic, partition) =
            key::committed_slot(&k).ok_or_else(|| corrupt("a committed position's key"))?;
        let next = key::decode_u64(&v).ok_or_else(|| corrupt("a committed offset is not a u64"))?;
        let member = live.contains(&(group.to_vec(), topic.to_vec()));
        if member {
            positioned.insert((group.to_vec(), topic.to_vec(), partition));
        }
        let recent = || -> Result<bool> {
            Ok(match shared.committed_at.get(&k).map_err(unavailable)? {
                Some(at) => key::decode_u64(&at).is_some_and(|at| at >= cutoff_ms),
                None => false,
            })
        };
        if member || rejoining || recent()? {
            hold(topic, partition, next);
        }
    }
    for (group, topic_name) in &live {
        let Some((_, state)) = topics
            .iter()
            .find(|(t, _)| key::topic(t) == &topic_name[..])
        else {
            continue;
        };
        for partition in 0..state.partitions {
            if !positioned.contains(&(group.clone(), topic_name.clone(), partition)) {
                hold(topic_name, partition, 0);
            }
        }
    }
    let mut batch = shared.db.batch();
    let mut left = budget;
    let mut progress = Vec::new();
    let below = shared
        .expired_below
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    'topics: for (topic, state) in &topics {
        for partition in 0..state.partitions {
            // Read before the marks: records appended after it (and their marks) are left to
            // the next step, whether or not the marks read below include theirs.
            let end = state.end(partition)?;
            // The partition's marks up to the first one whose records may be younger than the
            // cutoff: records before that one are older (and all of them if every mark is old).
            let mut marks = Vec::new();
            let mut young_from = None;
            for guard in shared.marks.prefix(key::marks_of(topic, partition)) {
                let (k, v) = guard.into_inner().map_err(unavailable)?;
                let offset = key::mark_offset(&k).ok_or_else(|| corrupt("a time mark's key"))?;
                let (at, every) =
                    key::decode_mark(&v).ok_or_else(|| corrupt("a time mark's value"))?;
                if at.saturating_add(every) > cutoff_ms {
                    young_from = Some(offset);
                    break;
                }
                marks.push((offset, k));
            }
            if marks.is_empty() {
                continue;
            }
            let mut limit = young_from.unwrap_or(end).min(end);
            if let Some(&next) = unread_from.get(&(key::topic(topic).to_vec(), partition)) {
                limit = limit.min(next);
            }
            // The last record stays: after a restart the partition's offsets go on from it.
            limit = limit.min(end.saturating_sub(1));
            let records = state.records(partition)?;
            // Offsets are dense, so the records to drop are known without reading them: from
            // where the last step stopped or, the first time, from the partition's first record.
            let from = match below.get(&(topic.clone(), partition)) {
                Some(&from) => from,
                None => match records.first_key_value() {
                    Some(guard) => {
                        let k = guard.key().map_err(unavailable)?;
                        key::offset(&k).ok_or_else(|| corrupt("short record key"))?
                    }
                    None => end,
                },
            };
            if from >= limit {
                progress.push(((topic.clone(), partition), from));
                continue;
            }
            let dropped_to = limit.min(from.saturating_add(left as u64));
            for offset in from..dropped_to {
                batch.remove(records, key::record(offset));
            }
            left -= (dropped_to - from) as usize;
            // A mark goes once no record it covers (up to the next mark) remains.
            let covered_to: Vec<u64> = marks
                .iter()
                .skip(1)
                .map(|(offset, _)| *offset)
                .chain([young_from.unwrap_or(end)])
                .collect();
            for ((_, k), to) in marks.into_iter().zip(covered_to) {
                if to <= dropped_to {
                    batch.remove(&shared.marks, k);
                }
            }
            progress.push(((topic.clone(), partition), dropped_to));
            if left == 0 {
                break 'topics;
            }
        }
    }
    batch.commit().map_err(unavailable)?;
    shared
        .expired_below
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend(progress);
    Ok(left == 0)
}

/// A consumer of the embedded log.
struct EmbeddedConsumer {
    /// Held, not used: the database (and its directory) stays open while a consumer reads,
    /// even after the log itself was dropped.
    _shared: Arc<Shared>,
    /// Weak, so that live consumers do not keep the writer thread (and the directory) open
    /// after the log itself was dropped; their commits then fail as unavailable.
    writer: mpsc::WeakSender<Op>,
    group: Group,
    topic: Topic,
    /// The topic's partitions, read without the catalog.
    state: Arc<TopicState>,
    partitions: Vec<u32>,
    /// The next offset to read, per entry of `partitions`.
    next: Vec<u64>,
    appended: watch::Receiver<u64>,
    /// The entry of `partitions` the next read starts from; rotates every poll.
    start: usize,
    /// Set when the consumer is its group's member ([`EmbeddedLog::member`]).
    membership: Option<Membership>,
}

/// A member's place in `Shared::members`, given up when the member is dropped.
struct Membership {
    shared: Arc<Shared>,
    key: (Group, Topic),
    /// Whether the member was told of its partitions: once, as a first rebalance, so callers
    /// learn their partitions alike on both backends.
    announced: bool,
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.shared
            .members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.key);
    }
}

#[async_trait]
impl LogConsumer for EmbeddedConsumer {
    fn group(&self) -> &Group {
        &self.group
    }

    fn topic(&self) -> &Topic {
        &self.topic
    }

    fn partitions(&self) -> &[u32] {
        &self.partitions
    }

    fn take_rebalance(&mut self) -> Option<Rebalance> {
        let membership = self.membership.as_mut()?;
        if std::mem::replace(&mut membership.announced, true) {
            return None;
        }
        Some(Rebalance {
            assigned: self.partitions.clone(),
            revoked: Vec::new(),
        })
    }

    async fn poll(&mut self, max: usize, wait: Duration) -> Result<Vec<Record>> {
        if max == 0 {
            return Err(LogError::Invalid("poll needs max > 0".into()));
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Marked seen before reading: a batch that lands after the read then wakes the
            // wait below, and one that landed before it is in the read.
            self.appended.borrow_and_update();
            let state = Arc::clone(&self.state);
            let from: Vec<(u32, u64)> = self
                .partitions
                .iter()
                .copied()
                .zip(self.next.iter().copied())
                .collect();
            let start = self.start;
            let records = blocking(move || state.read(&from, start, max)).await?;
            if !records.is_empty() {
                // Only now, after the last await: a poll cancelled earlier has consumed nothing.
                for record in &records {
                    let i = self.index_of(record.partition)?;
                    self.next[i] = record.offset + 1;
                }
                self.start = (self.start + 1) % self.partitions.len();
                return Ok(records);
            }
            match tokio::time::timeout_at(deadline, self.appended.changed()).await {
                Ok(Ok(())) => continue,
                // The sender lives in the catalog, which this consumer keeps alive: unreachable,
                // but an empty answer is the right one if it ever happens.
                Ok(Err(_)) | Err(_) => return Ok(Vec::new()),
            }
        }
    }

    async fn commit(&mut self, processed: &[Position]) -> Result<()> {
        let entries: Vec<(Vec<u8>, u64)> =
            resume_offsets(&self.topic, &self.partitions, processed)?
                .into_iter()
                .map(|(p, next)| (key::committed(&self.group, &self.topic, p), next))
                .collect();
        if entries.is_empty() {
            return Ok(());
        }
        let writer = self
            .writer
            .upgrade()
            .ok_or_else(|| LogError::Unavailable("embedded log was closed".into()))?;
        submit(&writer, |done| Op::Commit {
            entries,
            if_absent: false,
            done,
        })
        .await
    }
}

impl EmbeddedConsumer {
    fn index_of(&self, partition: u32) -> Result<usize> {
        self.partitions
            .binary_search(&partition)
            .map_err(|_| LogError::UnknownPartition {
                topic: self.topic.to_string(),
                partition,
            })
    }
}
