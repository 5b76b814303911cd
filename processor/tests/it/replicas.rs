//! Two processors in one consumer group on Kafka (the run's Apache Kafka broker, which
//! scripts/test.sh starts, in a namespace of each test's own), sharing one store: as the second joins and the first leaves, partitions move between them, and in the
//! end every batch of every session is folded into its session, none lost to a stale save.
//! And the writes two processors can race (docs/architecture.md#fleet-writes): two sessions of
//! one visitor linked at once both count, and a processor stalled past its poll interval cannot
//! overwrite, once it wakes, what the processor that took its partition over saved.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use log::{Log, Topic};
use processor::pipeline::{Pipeline, run};
use schemas::collect::{BATCH_RECORD_SCHEMA, BatchRecord, BatchRequest};
use schemas::credential::Environment;
use schemas::raw::RawJson;
use schemas::{OrgId, SessionId};
use store::{Layered, Store, StoreError, StoreLayer, VisitorRecord};
use tokio_util::sync::CancellationToken;

const SESSIONS: usize = 16;
const PARTITIONS: u32 = 4;
/// Long enough for group joins (seconds each) and the folds after them.
const SETTLE: Duration = Duration::from_secs(90);

fn batch(org: OrgId, session: SessionId, seq: u64) -> Vec<u8> {
    let interactions = RawJson::encode(&serde_json::json!({"kind": "interactions"})).unwrap();
    batch_of(org, session, seq, interactions)
}

fn batch_of(org: OrgId, session: SessionId, seq: u64, observations: RawJson) -> Vec<u8> {
    let record = BatchRecord {
        schema: BATCH_RECORD_SCHEMA,
        organization_id: org,
        environment: Environment::Test,
        session_id: session,
        seq,
        received_at: schemas::time::now(),
        request: BatchRequest {
            ip: "192.0.2.1".into(),
            user_agent: "test".into(),
            header_names: Vec::new(),
            url: "https://example.test/".into(),
            web_bot_auth: None,
            user_agent_bytes: None,
            http_version: None,
            tls: None,
        },
        kind: None,
        observations,
    };
    serde_json::to_vec(&record).unwrap()
}

async fn send(log: &Log, batches: &Topic, org: OrgId, sessions: &[SessionId], seq: u64) {
    for &session in sessions {
        log.append(
            batches,
            session.to_string().as_bytes(),
            &batch(org, session, seq),
        )
        .await
        .unwrap();
    }
}

/// Waits until every session has folded its batches 1 to `seq`.
async fn folded_through(store: &Store, org: OrgId, sessions: &[SessionId], seq: u64) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let mut behind = Vec::new();
        for &id in sessions {
            let stored = store.get_session(org, Environment::Test, id).await.unwrap();
            if !stored.is_some_and(|s| (1..=seq).all(|n| s.has_processed(n))) {
                behind.push(id);
            }
        }
        if behind.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} sessions have not folded batches 1..={seq}: {behind:?}",
            behind.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A consumer group's surroundings: the broker with the processor's topics, the log both
/// processors use, and the store they share.
struct Fleet {
    log: Log,
    batches: Topic,
    store: Store,
    topics: processor::pipeline::Topics,
    _dir: tempfile::TempDir,
}

impl Fleet {
    /// `partitions` of the batches topic; `options`, the log URL's query beyond the group
    /// session's timings.
    async fn start(partitions: u32, options: &str) -> Fleet {
        let broker = std::env::var("VIGIL_TEST_KAFKA_URL").expect(
            "VIGIL_TEST_KAFKA_URL is not set: run the tests with scripts/test.sh, which starts a Kafka broker",
        );
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let namespace = format!("replicas-{}-{since_epoch}", std::process::id());
        // A short group session, so that a member that left is noticed in seconds.
        let log = log::open(&format!(
            "{broker}?namespace={namespace}&session.timeout.ms=6000&heartbeat.interval.ms=500{options}"
        ))
        .await
        .unwrap();
        let batches = Topic::from_static(schemas::collect::BATCHES_TOPIC);
        log.create_topic(&batches, partitions).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = store::open(&format!("embedded:{}", dir.path().display()))
            .await
            .unwrap();
        let topics = processor::pipeline::prepare_log(&log).await.unwrap();
        Fleet {
            log,
            batches,
            store,
            topics,
            _dir: dir,
        }
    }

    /// A processor of the group, on `store` (the shared one, or a layer over it).
    fn pipeline(&self, store: Store) -> Pipeline {
        Pipeline {
            store,
            log: self.log.clone(),
            batches: self.batches.clone(),
            events: self.topics.events.clone(),
            dead: self.topics.dead.clone(),
            secret: secrets::ServerSecret::from_bytes([7; 32]),
            idle_after: Duration::from_secs(3600),
            retention: Duration::from_secs(86_400),
            cache_bytes: 1 << 20,
            replay_memory: std::time::Duration::from_secs(24 * 3600),
            network: None,
        }
    }

    /// A session whose records go to `partition`.
    fn session_in(&self, partition: u32, partitions: u32) -> SessionId {
        loop {
            let id = SessionId::generate();
            if log::partition_for(id.to_string().as_bytes(), partitions) == partition {
                return id;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processors_share_the_batches_and_every_batch_is_folded() {
    let fleet = Fleet::start(PARTITIONS, "").await;
    let (log, batches, store) = (&fleet.log, &fleet.batches, &fleet.store);
    let pipeline = fleet.pipeline(store.clone());
    let org = OrgId::generate();
    let sessions: Vec<SessionId> = (0..SESSIONS).map(|_| SessionId::generate()).collect();

    let first = CancellationToken::new();
    let first_run = tokio::spawn(run(pipeline.clone(), first.clone()));
    send(log, batches, org, &sessions, 1).await;
    folded_through(store, org, &sessions, 1).await;

    // A second replica joins: partitions move from the first to it while batches arrive, a
    // round every half second for longer than the group takes to rebalance twice (the
    // revocation, then the assignment), so batches are folded before, during and after.
    let second = CancellationToken::new();
    let second_run = tokio::spawn(run(pipeline.clone(), second.clone()));
    const SHARED: u64 = 30;
    for seq in 2..=SHARED {
        send(log, batches, org, &sessions, seq).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    folded_through(store, org, &sessions, SHARED).await;

    // The first leaves: the second takes every partition over from the first's commits.
    first.cancel();
    first_run.await.unwrap();
    for seq in SHARED + 1..=SHARED + 10 {
        send(log, batches, org, &sessions, seq).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    folded_through(store, org, &sessions, SHARED + 10).await;

    second.cancel();
    second_run.await.unwrap();
}

/// A processor's view of the store in the fleet-write tests: it records the partitions the
/// processor claimed, holds its first `get_visitor` until the other processor's arrives too
/// (`meet`), and, once armed, holds its next `save_sessions` until released (`stall`).
#[derive(Default)]
struct Hold {
    claimed: std::sync::Mutex<Vec<u32>>,
    meet: Option<Arc<tokio::sync::Barrier>>,
    met: AtomicBool,
    met_alone: AtomicBool,
    stall_armed: AtomicBool,
    stalled: tokio::sync::Notify,
    release: tokio::sync::Notify,
    /// Set once the held save returned: whether the store refused it as fenced.
    held_save_fenced: std::sync::Mutex<Option<bool>>,
}

impl StoreLayer for Hold {
    async fn around<'a, T: Send + 'static>(
        &'a self,
        operation: &'static str,
        call: impl Future<Output = store::Result<T>> + Send + 'a,
    ) -> store::Result<T> {
        match operation {
            "get_visitor" if !self.met.swap(true, Ordering::SeqCst) => {
                if let Some(meet) = &self.meet {
                    let together = tokio::time::timeout(SETTLE, meet.wait()).await;
                    self.met_alone.store(together.is_err(), Ordering::SeqCst);
                }
                call.await
            }
            "save_sessions" if self.stall_armed.swap(false, Ordering::SeqCst) => {
                self.stalled.notify_one();
                self.release.notified().await;
                let result = call.await;
                *self.held_save_fenced.lock().unwrap() =
                    Some(matches!(result, Err(StoreError::Fenced { .. })));
                result
            }
            _ => call.await,
        }
    }
}

/// Waits until `hold`'s processor has claimed `partitions` partitions in all.
async fn claimed(hold: &Hold, partitions: usize) {
    let deadline = Instant::now() + SETTLE;
    while hold.claimed.lock().unwrap().len() < partitions {
        assert!(
            Instant::now() < deadline,
            "no claim of {partitions} partitions"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Records the partitions each claim names (the layer sees calls, not their arguments, so the
/// claim is observed through its answer).
struct Claims(Arc<Hold>);

impl StoreLayer for Claims {
    async fn around<'a, T: Send + 'static>(
        &'a self,
        operation: &'static str,
        call: impl Future<Output = store::Result<T>> + Send + 'a,
    ) -> store::Result<T> {
        let result = self.0.around(operation, call).await;
        if let Ok(answer) = &result
            && let Some(fences) =
                (answer as &dyn std::any::Any).downcast_ref::<Vec<store::PartitionFence>>()
        {
            let mut claimed = self.0.claimed.lock().unwrap();
            claimed.extend(fences.iter().map(|f| f.partition));
            claimed.sort_unstable();
            claimed.dedup();
        }
        result
    }
}

/// `store` seen through `hold`, its claims recorded.
fn held(store: &Store, hold: &Arc<Hold>) -> Store {
    Arc::new(Layered::new(store.clone(), Claims(Arc::clone(hold))))
}

/// A probes batch (a real browser's) presenting the signed visitor token of `visitor`.
fn probes_with_token(token: &str) -> RawJson {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/desktop_chrome_human.json"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut probes = doc["batches"][0].clone();
    probes["storage"]["visitor_token"] = token.into();
    probes["storage"]["token_found_in"] = serde_json::json!(["cookies"]);
    RawJson::encode(&probes).unwrap()
}

/// Two sessions of one visitor, on partitions of two processors, linked at the same moment
/// (each processor's read of the visitor is held until the other's arrives, so both read the
/// same revision): both visits count, and the visitor remembers both sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processors_linking_one_visitor_at_once_lose_no_visit() {
    const TWO: u32 = 2;
    let fleet = Fleet::start(TWO, "").await;
    let meet = Arc::new(tokio::sync::Barrier::new(2));
    let holds: Vec<Arc<Hold>> = (0..2)
        .map(|_| {
            Arc::new(Hold {
                meet: Some(meet.clone()),
                ..Hold::default()
            })
        })
        .collect();
    let org = OrgId::generate();
    let env = Environment::Test;
    let now = schemas::time::now();
    let known = VisitorRecord {
        id: schemas::VisitorId::generate(),
        organization_id: org,
        environment: env,
        first_seen_at: now - chrono::TimeDelta::days(2),
        last_seen_at: now - chrono::TimeDelta::days(1),
        seen_count: 5,
        expires_at: now + chrono::TimeDelta::days(30),
        latest_request: Default::default(),
        storage: Default::default(),
        anchors: Default::default(),
        components: Vec::new(),
        traits: Default::default(),
        recent_sessions: Vec::new(),
        revision: 1,
    };
    fleet.store.save_visitor(&known).await.unwrap();

    // The first processor takes both partitions; once the second claims one, each reads one.
    let first = CancellationToken::new();
    let first_run = tokio::spawn(run(
        fleet.pipeline(held(&fleet.store, &holds[0])),
        first.clone(),
    ));
    claimed(&holds[0], 2).await;
    let second = CancellationToken::new();
    let second_run = tokio::spawn(run(
        fleet.pipeline(held(&fleet.store, &holds[1])),
        second.clone(),
    ));
    claimed(&holds[1], 1).await;

    let token = secrets::ServerSecret::from_bytes([7; 32]).visitor_token(org, env, known.id);
    let sessions: Vec<SessionId> = (0..TWO).map(|p| fleet.session_in(p, TWO)).collect();
    for &session in &sessions {
        let record = batch_of(org, session, 1, probes_with_token(&token));
        fleet
            .log
            .append(&fleet.batches, session.to_string().as_bytes(), &record)
            .await
            .unwrap();
    }
    folded_through(&fleet.store, org, &sessions, 1).await;
    for hold in &holds {
        assert!(
            !hold.met_alone.load(Ordering::SeqCst),
            "each processor read the visitor while the other did"
        );
    }
    let visitor = fleet
        .store
        .get_visitor(org, env, known.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        visitor.seen_count,
        known.seen_count + 2,
        "both visits count"
    );
    for session in &sessions {
        assert!(
            visitor.recent_sessions.contains(session),
            "{session} is remembered"
        );
        let stored = fleet
            .store
            .get_session(org, env, *session)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            stored.visitor_id,
            Some(known.id),
            "{session} is linked to the visitor"
        );
    }
    assert_eq!(visitor.revision, known.revision + 2, "one save each");

    first.cancel();
    second.cancel();
    first_run.await.unwrap();
    second_run.await.unwrap();
}

/// A processor stalls (its save held) past its poll interval: the group gives its partition to
/// the other processor, which folds the session's batches again from the last commit and saves
/// them. When the stalled save reaches the store, it is refused as fenced, and the session
/// keeps every batch the new owner folded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_processors_late_save_is_refused() {
    // One partition, so the session is the first processor's until it stalls.
    let fleet = Fleet::start(1, "&max.poll.interval.ms=6000").await;
    let holds: Vec<Arc<Hold>> = (0..2).map(|_| Arc::new(Hold::default())).collect();
    let org = OrgId::generate();
    let session = vec![SessionId::generate()];

    let first = CancellationToken::new();
    let first_run = tokio::spawn(run(
        fleet.pipeline(held(&fleet.store, &holds[0])),
        first.clone(),
    ));
    claimed(&holds[0], 1).await;
    send(&fleet.log, &fleet.batches, org, &session, 1).await;
    folded_through(&fleet.store, org, &session, 1).await;
    let second = CancellationToken::new();
    let second_run = tokio::spawn(run(
        fleet.pipeline(held(&fleet.store, &holds[1])),
        second.clone(),
    ));
    // Let the first commit batch 1 and the second join (it is given nothing: one partition).
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Batch 2's save is held; batch 3, of the same session, makes the first wait for it
    // instead of polling, past max.poll.interval.ms.
    holds[0].stall_armed.store(true, Ordering::SeqCst);
    send(&fleet.log, &fleet.batches, org, &session, 2).await;
    tokio::time::timeout(SETTLE, holds[0].stalled.notified())
        .await
        .expect("the first processor saves batch 2");
    send(&fleet.log, &fleet.batches, org, &session, 3).await;

    // The second takes the partition over and folds 2 and 3 from the first's commit of 1.
    claimed(&holds[1], 1).await;
    folded_through(&fleet.store, org, &session, 3).await;

    // The stalled save lands late, and is refused.
    holds[0].release.notify_one();
    let deadline = Instant::now() + SETTLE;
    let fenced = loop {
        if let Some(fenced) = *holds[0].held_save_fenced.lock().unwrap() {
            break fenced;
        }
        assert!(Instant::now() < deadline, "the held save returns");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let stored = fleet
        .store
        .get_session(org, Environment::Test, session[0])
        .await
        .unwrap()
        .unwrap();
    assert!(
        (1..=3).all(|n| stored.has_processed(n)),
        "the new owner's save stands"
    );
    assert!(fenced, "the stalled processor's save is refused as fenced");

    first.cancel();
    second.cancel();
    first_run.await.unwrap();
    second_run.await.unwrap();
}
