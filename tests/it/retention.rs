//! Retention (docs/architecture.md#retention) end to end: with `--retention` of seconds, a session
//! (with its decisions), its event and a visitor that stop being written are dropped by the
//! background sweep, after which the API answers 404 for them and no list shows them; rows written
//! again stay. With `--log-retention` of a second, the embedded log drops the batches the processor
//! has read, and batches sent after still get their decisions.

use std::time::Duration;

use schemas::credential::Environment;
use schemas::decision::Verdict;
use schemas::events::{EventSubject, EventType};
use store::{DecisionRecord, EventRecord, RawJson, SessionRecord, VisitorRecord};
use vigil_tests::collect::{logged_batches, open_session};
use vigil_tests::{TestServer, json};

const RETENTION: Duration = Duration::from_secs(3);

fn session(org: schemas::ids::OrgId, verdict: Verdict) -> SessionRecord {
    let now = schemas::time::now();
    SessionRecord {
        id: schemas::SessionId::generate(),
        organization_id: org,
        environment: Environment::Test,
        visitor_id: None,
        opened_at: now,
        updated_at: now,
        page_url: "https://shop.example/".into(),
        ip: "203.0.113.7".into(),
        user_agent: "retention/1.0".into(),
        processed_through: 1,
        processed_seqs: Vec::new(),
        state: RawJson::null(),
        latest_decision: Some(vigil_tests::collect::stored_decision(verdict)),
        finalized: true,
    }
}

fn visitor(org: schemas::ids::OrgId) -> VisitorRecord {
    let now = schemas::time::now();
    VisitorRecord {
        id: schemas::VisitorId::generate(),
        organization_id: org,
        environment: Environment::Test,
        first_seen_at: now,
        last_seen_at: now,
        seen_count: 1,
        expires_at: now + chrono::TimeDelta::from_std(RETENTION).unwrap(),
        latest_request: Default::default(),
        storage: Default::default(),
        anchors: Default::default(),
        components: vec![1.0],
        traits: Default::default(),
        recent_sessions: Vec::new(),
        revision: 0,
    }
}

fn ids(list: &serde_json::Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_past_the_retention_are_purged_and_read_404() {
    let s = TestServer::start_with(|a| a.retention = RETENTION).await;
    let sk = &s.creds.keys.secret_test;
    let org: schemas::ids::OrgId = s.creds.org_id().parse().unwrap();
    let store = s.store();

    let old = session(org, Verdict::Bot);
    let decision = DecisionRecord {
        session_id: old.id,
        id: schemas::DecisionId::generate(),
        evaluated_at: old.updated_at,
        decision: old.latest_decision.clone().unwrap(),
    };
    let event = EventRecord {
        id: schemas::EventId::generate(),
        organization_id: org,
        environment: Environment::Test,
        event_type: EventType::SessionResultPersisted,
        subject: EventSubject {
            kind: "session".into(),
            id: old.id.to_string(),
        },
        data: json!({}),
        created_at: old.updated_at,
    };
    store
        .save_session(&old, Some(&decision), std::slice::from_ref(&event))
        .await
        .unwrap();
    let gone = visitor(org);
    store.save_visitor(&gone).await.unwrap();
    let mut kept_session = session(org, Verdict::Bot);
    store.save_session(&kept_session, None, &[]).await.unwrap();
    let mut kept_visitor = visitor(org);
    store.save_visitor(&kept_visitor).await.unwrap();

    // Readable while within the retention.
    s.get(&format!("/v1/sessions/{}", old.id))
        .key(sk)
        .send()
        .await
        .ok(200);
    s.get(&format!("/v1/fingerprints/{}", gone.id))
        .key(sk)
        .send()
        .await
        .ok(200);

    // Keep two rows alive by writing them again, until the others are purged (at most 20 s).
    let mut purged = false;
    for _ in 0..80 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = schemas::time::now();
        kept_session.updated_at = now;
        store.save_session(&kept_session, None, &[]).await.unwrap();
        kept_visitor.last_seen_at = now;
        kept_visitor.revision += 1;
        store.save_visitor(&kept_visitor).await.unwrap();
        if s.get(&format!("/v1/sessions/{}", old.id))
            .key(sk)
            .send()
            .await
            .status
            == 404
        {
            purged = true;
            break;
        }
    }
    assert!(
        purged,
        "the session was not purged within 20 s of a 3 s retention"
    );
    // The visitor's step runs with the session's; give a pass more for it.
    let mut visitor_gone = false;
    for _ in 0..20 {
        if s.get(&format!("/v1/fingerprints/{}", gone.id))
            .key(sk)
            .send()
            .await
            .status
            == 404
        {
            visitor_gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(visitor_gone, "the visitor was not purged");
    s.get(&format!("/v1/sessions/{}", old.id))
        .key(sk)
        .send()
        .await
        .err(404, "resource.not_found");

    for path in ["/v1/sessions", "/v1/sessions?verdict=bot"] {
        let list = s.get(path).key(sk).send().await;
        let listed = ids(list.ok(200));
        assert!(!listed.contains(&old.id.to_string()), "{path}: {listed:?}");
        assert!(
            listed.contains(&kept_session.id.to_string()),
            "{path}: {listed:?}"
        );
    }
    for sort in ["", "?sort=seen_count", "?sort=first_seen"] {
        let list = s
            .get(&format!("/v1/fingerprints{sort}"))
            .key(sk)
            .send()
            .await;
        let listed = ids(list.ok(200));
        assert_eq!(
            listed,
            vec![kept_visitor.id.to_string()],
            "/v1/fingerprints{sort}"
        );
    }
    assert_eq!(
        store
            .get_event(org, Environment::Test, event.id)
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .list_decisions(org, Environment::Test, old.id, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        s.metric("vigil_retention_steps_total{of=\"store\",outcome=\"done\"}")
            .await
            >= 1.0,
        "the sweep's passes are counted"
    );
    s.get(&format!("/v1/sessions/{}", kept_session.id))
        .key(sk)
        .send()
        .await
        .ok(200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_log_drops_batches_the_processor_read_past_the_log_retention() {
    let s = TestServer::start_with(|a| a.log_retention = Duration::from_secs(1)).await;
    let (pk, org) = (
        s.creds.keys.publishable_test.clone(),
        s.creds.org_id().parse().unwrap(),
    );
    let session = open_session(&s, &pk).await;
    let probes = json!({"kind": "probes", "automation": {"webdriver": false}});
    let send = |seq: u64| {
        let (s, session, pk, probes) = (&s, &session, &pk, &probes);
        async move {
            s.post(&format!("/v1/collect/sessions/{}/batches", session.id))
                .key(pk)
                .json(session.batch(seq, probes))
                .send()
                .await
                .ok(202);
        }
    };
    let decided = |seq: u64| {
        let (s, session) = (&s, &session);
        async move {
            for _ in 0..400 {
                let row = s
                    .store()
                    .get_session(org, Environment::Test, session.id.parse().unwrap())
                    .await
                    .unwrap();
                if row.is_some_and(|r| r.has_processed(seq)) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            panic!("batch {seq} was not decided within 10 s");
        }
    };
    for seq in 1..=3 {
        send(seq).await;
    }
    decided(3).await;

    // Read and committed by the processor, past the log's retention: all but the partition's
    // last record go (at most 10 s).
    let of_session = |records: Vec<serde_json::Value>| {
        records
            .into_iter()
            .filter(|r| r["session_id"] == session.id.as_str())
            .count()
    };
    let mut kept = usize::MAX;
    for _ in 0..50 {
        kept = of_session(logged_batches(&s).await);
        if kept <= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        kept, 1,
        "the session's older batches are dropped from the log"
    );
    assert!(
        s.metric("vigil_retention_steps_total{of=\"log\",outcome=\"done\"}")
            .await
            >= 1.0,
        "the log's sweep is counted"
    );
    // The partition's offsets go on: a later batch is read and decided.
    send(4).await;
    decided(4).await;
}
