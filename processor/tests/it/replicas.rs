//! Two processors in one consumer group on Kafka (librdkafka's mock cluster), sharing one
//! store: as the second joins and the first leaves, partitions move between them, and in the
//! end every batch of every session is folded into its session, none lost to a stale save.

use std::time::{Duration, Instant};

use bus::kafka::mock::MockKafka;
use bus::{Log, Topic};
use processor::pipeline::{Pipeline, run};
use schemas::collect::{BATCH_RECORD_SCHEMA, BatchRecord, BatchRequest};
use schemas::credential::Environment;
use schemas::raw::RawJson;
use schemas::{OrgId, SessionId};
use store::Store;
use tokio_util::sync::CancellationToken;

const SESSIONS: usize = 16;
const PARTITIONS: u32 = 4;
/// Long enough for group joins on the mock cluster (seconds each) and the folds after them.
const SETTLE: Duration = Duration::from_secs(90);

fn batch(org: OrgId, session: SessionId, seq: u64) -> Vec<u8> {
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
        },
        observations: RawJson::encode(&serde_json::json!({"kind": "interactions"})).unwrap(),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processors_share_the_batches_and_every_batch_is_folded() {
    let cluster = MockKafka::start(1).unwrap();
    let batches = Topic::from_static(schemas::collect::BATCHES_TOPIC);
    cluster.create_topic(&batches, PARTITIONS).unwrap();
    cluster
        .create_topic(
            &Topic::from_static(schemas::events::EVENTS_TOPIC),
            schemas::events::EVENTS_PARTITIONS,
        )
        .unwrap();
    cluster
        .create_topic(
            &Topic::from_static(schemas::collect::DEAD_TOPIC),
            schemas::collect::DEAD_PARTITIONS,
        )
        .unwrap();
    // A short group session: the mock cluster waits up to it for the members of a group that
    // changed.
    let log = bus::open(&format!(
        "{}?session.timeout.ms=6000&heartbeat.interval.ms=500",
        cluster.url()
    ))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = store::open(&format!("embedded:{}", dir.path().display()))
        .await
        .unwrap();
    let topics = processor::pipeline::prepare_log(&log).await.unwrap();
    let pipeline = Pipeline {
        store: store.clone(),
        log: log.clone(),
        batches: batches.clone(),
        events: topics.events,
        dead: topics.dead,
        secret: secrets::ServerSecret::from_bytes([7; 32]),
        idle_after: Duration::from_secs(3600),
        retention: Duration::from_secs(86_400),
        cache_bytes: 1 << 20,
    };
    let org = OrgId::generate();
    let sessions: Vec<SessionId> = (0..SESSIONS).map(|_| SessionId::generate()).collect();

    let first = CancellationToken::new();
    let first_run = tokio::spawn(run(pipeline.clone(), first.clone()));
    send(&log, &batches, org, &sessions, 1).await;
    folded_through(&store, org, &sessions, 1).await;

    // A second replica joins: partitions move from the first to it while batches arrive, a
    // round every half second for longer than the mock cluster takes to rebalance twice (the
    // revocation, then the assignment), so batches are folded before, during and after.
    let second = CancellationToken::new();
    let second_run = tokio::spawn(run(pipeline.clone(), second.clone()));
    const SHARED: u64 = 30;
    for seq in 2..=SHARED {
        send(&log, &batches, org, &sessions, seq).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    folded_through(&store, org, &sessions, SHARED).await;

    // The first leaves: the second takes every partition over from the first's commits.
    first.cancel();
    first_run.await.unwrap();
    for seq in SHARED + 1..=SHARED + 10 {
        send(&log, &batches, org, &sessions, seq).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    folded_through(&store, org, &sessions, SHARED + 10).await;

    second.cancel();
    second_run.await.unwrap();
    drop(pipeline);
    drop(log);
    drop(cluster);
}
