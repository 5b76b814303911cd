//! Poison records never stall the pipeline (docs/architecture.md#conv-consumer-failures): a corrupt
//! stored session state, an unreadable log record and an event over the log's size each land on
//! `collect.dead.v1` with their reason and are counted in `vigil_processor_dead_letters_total`,
//! while another tenant's session behind them still gets its decision; a store outage is retried
//! and skips nothing.

use std::sync::Arc;
use std::time::Duration;

use schemas::collect::{BatchRecord, DEAD_TOPIC, DeadLetter, DeadReason};
use schemas::credential::Environment;
use serde_json::Value;
use store::{RawJson, SessionSave, Store};
use vigil_tests::collect::{CollectSession, logged, open_session};
use vigil_tests::faults::{FlakyStore, RefusingLog};
use vigil_tests::{TestServer, json};

fn probes() -> Value {
    json!({"kind": "probes", "automation": {"webdriver": true, "languages": []}})
}

/// Sends batch `seq` of `session` with `pk`, answered 202.
async fn send(s: &TestServer, session: &CollectSession, pk: &str, seq: u64, batch: &Value) {
    s.post(&format!("/v1/collect/sessions/{}/batches", session.id))
        .key(pk)
        .json(session.batch(seq, batch))
        .send()
        .await
        .ok(202);
}

/// The session as `store` holds it, in the test environment of `org`.
async fn stored(
    store: &Store,
    org: &str,
    session: &CollectSession,
) -> Option<store::SessionRecord> {
    let (org, id) = (org.parse().unwrap(), session.id.parse().unwrap());
    store.get_session(org, Environment::Test, id).await.unwrap()
}

/// Waits (10 s at most) until `store` holds a decision for the session with batch `seq`
/// folded in, and returns the stored session.
async fn decided(
    store: &Store,
    org: &str,
    session: &CollectSession,
    seq: u64,
) -> store::SessionRecord {
    for _ in 0..400 {
        if let Some(row) = stored(store, org, session).await
            && row.latest_decision.is_some()
            && row.has_processed(seq)
        {
            return row;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "session {} was not decided through batch {seq} within 10 s",
        session.id
    );
}

/// Waits (10 s at most) until the processor has seen `n` decisions of its own stored, so that
/// the save is no longer in flight and the session's next batch reads the stored row (the
/// servers here keep no state in memory). A read of the store alone can see the row a moment
/// before the processor knows it landed.
async fn processor_stored(s: &TestServer, n: f64) {
    for _ in 0..400 {
        if s.metric("vigil_processor_batch_to_decision_seconds_count")
            .await
            >= n
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the processor did not see {n} decisions stored within 10 s");
}

/// Waits (10 s at most) for `n` dead letters and returns them.
async fn dead_letters(s: &TestServer, n: usize) -> Vec<DeadLetter> {
    for _ in 0..100 {
        let letters = logged(s, DEAD_TOPIC).await;
        if letters.len() >= n {
            assert_eq!(
                letters.len(),
                n,
                "no more dead letters than poison records: {letters:?}"
            );
            return letters
                .into_iter()
                .map(|l| serde_json::from_value(l).expect("a dead letter"))
                .collect();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("fewer than {n} dead letters within 10 s");
}

async fn dead_count(s: &TestServer, reason: DeadReason) -> f64 {
    s.metric(&format!(
        "vigil_processor_dead_letters_total{{reason=\"{}\"}}",
        reason.as_str()
    ))
    .await
}

fn batch_of(letter: &DeadLetter) -> BatchRecord {
    serde_json::from_slice(&letter.payload().expect("the record is carried"))
        .expect("a batch record")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_stored_state_is_corrupt_is_dead_lettered_never_reset() {
    // No session kept in the processor's memory: each batch reads the stored row, as the first
    // batch after a restart (or after a partition moved to another processor) does.
    let s = TestServer::start_with(|a| a.processor_cache_mb = 0).await;
    let (pk, org) = (
        s.creds.keys.publishable_test.clone(),
        s.creds.org_id().to_owned(),
    );
    let a = open_session(&s, &pk).await;
    send(&s, &a, &pk, 1, &probes()).await;
    let mut row = decided(s.store(), &org, &a, 1).await;
    processor_stored(&s, 1.0).await;
    // Another writer (an older release, a damaged disk) leaves a state the processor cannot
    // read, and moves `updated_at` as any write does.
    let garbage = RawJson::encode(&json!(["not", "a", "session", "state"])).unwrap();
    row.state = garbage.clone();
    row.updated_at = schemas::time::now();
    s.store()
        .save_sessions(&[SessionSave {
            session: row,
            decision: None,
            events: Vec::new(),
            settled: None,
            fence: None,
        }])
        .await
        .unwrap();
    send(
        &s,
        &a,
        &pk,
        2,
        &json!({"kind": "probes", "automation": {"webdriver": false}}),
    )
    .await;

    let other = s.second_organization("second").await;
    let b = open_session(&s, &other.keys.publishable_test).await;
    send(&s, &b, &other.keys.publishable_test, 1, &probes()).await;

    let letters = dead_letters(&s, 1).await;
    assert_eq!(letters[0].reason, DeadReason::CorruptRow);
    assert_eq!(letters[0].topic, schemas::collect::BATCHES_TOPIC);
    assert!(
        letters[0].message.contains("state does not decode"),
        "{}",
        letters[0].message
    );
    let poisoned = batch_of(&letters[0]);
    assert_eq!(
        (poisoned.session_id.to_string(), poisoned.seq),
        (a.id.clone(), 2)
    );
    assert_eq!(
        poisoned.kind.as_deref(),
        Some("probes"),
        "ingest carries the batch's kind, so the processor does not read it again"
    );
    decided(s.store(), other.org_id(), &b, 1).await;
    assert_eq!(dead_count(&s, DeadReason::CorruptRow).await, 1.0);
    assert_eq!(dead_count(&s, DeadReason::UnreadableRecord).await, 0.0);
    // The state was not silently reset: the row still holds what was there, batch 2 not in it.
    let row = stored(s.store(), &org, &a).await.unwrap();
    assert_eq!(row.state, garbage);
    assert!(!row.has_processed(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_row_the_store_cannot_decode_is_dead_lettered() {
    let (s, flaky) = with_flaky_store().await;
    let (pk, org) = (
        s.creds.keys.publishable_test.clone(),
        s.creds.org_id().to_owned(),
    );
    let a = open_session(&s, &pk).await;
    send(&s, &a, &pk, 1, &probes()).await;
    decided(flaky.inner(), &org, &a, 1).await;
    processor_stored(&s, 1.0).await;
    flaky.corrupt_session(a.id.parse().unwrap());
    send(&s, &a, &pk, 2, &probes()).await;
    let other = s.second_organization("second").await;
    let b = open_session(&s, &other.keys.publishable_test).await;
    send(&s, &b, &other.keys.publishable_test, 1, &probes()).await;

    let letters = dead_letters(&s, 1).await;
    assert_eq!(letters[0].reason, DeadReason::CorruptRow);
    assert!(
        letters[0].message.contains("corrupt row in sessions"),
        "{}",
        letters[0].message
    );
    assert_eq!(batch_of(&letters[0]).seq, 2);
    decided(flaky.inner(), other.org_id(), &b, 1).await;
    assert_eq!(dead_count(&s, DeadReason::CorruptRow).await, 1.0);
}

/// A server whose store is a [`FlakyStore`], with it. No session kept in the processor's
/// memory, so each batch reads its stored row.
async fn with_flaky_store() -> (TestServer, Arc<FlakyStore>) {
    FlakyStore::serve(|a| a.processor_cache_mb = 0).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_records_are_dead_lettered_and_the_sessions_behind_them_decided() {
    let s = TestServer::start().await;
    let (pk, org) = (
        s.creds.keys.publishable_test.clone(),
        s.creds.org_id().to_owned(),
    );
    let other = s.second_organization("second").await;
    let b = open_session(&s, &other.keys.publishable_test).await;
    let log = s.running.as_ref().unwrap().log.clone();
    let batches = log::Topic::from_static(schemas::collect::BATCHES_TOPIC);
    // Keyed by the other tenant's session, so both sit in its partition, ahead of its batch.
    let garbage: &[u8] = b"\xff\x00 not a batch record";
    log.append(&batches, b.id.as_bytes(), garbage)
        .await
        .unwrap();
    // A well-formed record whose SDK batch is not one.
    let a = open_session(&s, &pk).await;
    let record = BatchRecord {
        schema: schemas::collect::BATCH_RECORD_SCHEMA,
        organization_id: org.parse().unwrap(),
        environment: Environment::Test,
        session_id: a.id.parse().unwrap(),
        seq: 1,
        received_at: schemas::time::now(),
        request: schemas::collect::BatchRequest {
            ip: "192.0.2.1".into(),
            user_agent: "test".into(),
            header_names: Vec::new(),
            url: "https://shop.example/".into(),
            web_bot_auth: None,
            user_agent_bytes: None,
            http_version: None,
            tls: None,
        },
        kind: None,
        observations: RawJson::encode(&42).unwrap(),
    };
    log.append(
        &batches,
        b.id.as_bytes(),
        &serde_json::to_vec(&record).unwrap(),
    )
    .await
    .unwrap();
    // A record from a newer ingest: set aside, not misread.
    let newer = BatchRecord {
        schema: schemas::collect::BATCH_RECORD_SCHEMA + 1,
        seq: 2,
        ..record.clone()
    };
    log.append(
        &batches,
        b.id.as_bytes(),
        &serde_json::to_vec(&newer).unwrap(),
    )
    .await
    .unwrap();
    send(&s, &b, &other.keys.publishable_test, 1, &probes()).await;

    decided(s.store(), other.org_id(), &b, 1).await;
    let letters = dead_letters(&s, 3).await;
    assert!(
        letters
            .iter()
            .any(|l| l.message.contains("newer than this build's")),
        "{letters:?}"
    );
    assert!(
        letters
            .iter()
            .all(|l| l.reason == DeadReason::UnreadableRecord),
        "{letters:?}"
    );
    let carried: Vec<Vec<u8>> = letters.iter().map(|l| l.payload().unwrap()).collect();
    assert!(
        carried.contains(&garbage.to_vec()),
        "the garbage is kept byte for byte"
    );
    assert!(
        letters
            .iter()
            .any(|l| batch_of_opt(l).is_some_and(|r| r == record))
    );
    assert!(letters.iter().all(|l| l.key == base64_of(b.id.as_bytes())));
    assert_eq!(dead_count(&s, DeadReason::UnreadableRecord).await, 3.0);
    assert!(s.metric("vigil_processor_records_folded_total").await >= 2.0);
}

fn batch_of_opt(letter: &DeadLetter) -> Option<BatchRecord> {
    serde_json::from_slice(&letter.payload()?).ok()
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_event_is_over_the_logs_size_is_dead_lettered() {
    let refusing = Arc::new(std::sync::Mutex::new(None::<Arc<RefusingLog>>));
    let hold = refusing.clone();
    let s = TestServer::start_wrapped(vigil::server::Wrap {
        log: Some(Box::new(move |log| {
            let (wrapped, layer) = RefusingLog::wrap(log, schemas::events::EVENTS_TOPIC);
            *hold.lock().unwrap() = Some(layer);
            wrapped
        })),
        ..Default::default()
    })
    .await;
    let refusing = refusing.lock().unwrap().clone().unwrap();
    let (pk, org) = (
        s.creds.keys.publishable_test.clone(),
        s.creds.org_id().to_owned(),
    );
    // The development organization's events are over the (smaller) limit of its topic.
    refusing.refuse(org.as_bytes());
    let a = open_session(&s, &pk).await;
    send(&s, &a, &pk, 1, &probes()).await;
    let other = s.second_organization("second").await;
    let b = open_session(&s, &other.keys.publishable_test).await;
    send(&s, &b, &other.keys.publishable_test, 1, &probes()).await;

    let letters = dead_letters(&s, 1).await;
    assert_eq!(letters[0].reason, DeadReason::OversizeEvent);
    assert_eq!(batch_of(&letters[0]).session_id.to_string(), a.id);
    decided(s.store(), other.org_id(), &b, 1).await;
    assert_eq!(dead_count(&s, DeadReason::OversizeEvent).await, 1.0);
    // The batch's effects were not stored without the event.
    let row = stored(s.store(), &org, &a).await;
    assert!(row.is_none(), "{row:?}");

    // Once the topic takes the session's events, its next batch is decided from what the
    // store holds: nothing of the dead-lettered batch, which stays for an operator to append
    // again (the processor's memory does not keep it either).
    refusing.allow(org.as_bytes());
    send(&s, &a, &pk, 2, &probes()).await;
    let row = decided(s.store(), &org, &a, 2).await;
    assert!(
        !row.has_processed(1),
        "the dead-lettered batch 1 is not in the stored session"
    );
    assert_eq!(dead_count(&s, DeadReason::OversizeEvent).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_is_retried_and_nothing_is_skipped() {
    let (s, flaky) = with_flaky_store().await;
    let (pk, org) = (
        s.creds.keys.publishable_test.clone(),
        s.creds.org_id().to_owned(),
    );
    // Reading a session fails three times, and so does storing the decisions.
    flaky.fail_next("get_session", 3);
    flaky.fail_next("save_sessions", 3);
    let a = open_session(&s, &pk).await;
    let b = open_session(&s, &pk).await;
    for seq in 1..=3 {
        send(&s, &a, &pk, seq, &probes()).await;
    }
    send(&s, &b, &pk, 1, &probes()).await;

    let row = decided(flaky.inner(), &org, &a, 3).await;
    assert!((1..=3).all(|seq| row.has_processed(seq)));
    decided(flaky.inner(), &org, &b, 1).await;
    assert_eq!(
        flaky.failed.load(std::sync::atomic::Ordering::SeqCst),
        6,
        "every fault was met"
    );
    // Each failure was retried where it happened, and counted.
    for operation in ["folding a session", "storing decisions"] {
        let name = format!("vigil_processor_retries_total{{operation=\"{operation}\"}}");
        assert_eq!(s.metric(&name).await, 3.0, "{operation}");
    }
    for reason in DeadReason::ALL {
        assert_eq!(dead_count(&s, reason).await, 0.0, "nothing dead-lettered");
    }
    assert!(logged(&s, DEAD_TOPIC).await.is_empty());
}
