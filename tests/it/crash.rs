//! Crashes lose nothing, on the real `vigil` executable over real HTTP: SIGKILL under collect
//! load, then a restart on the same data dir, leaves every acknowledged (202) batch folded into
//! a stored decision and no event recorded twice; a key answered 201 right before a SIGKILL
//! works after the restart; SIGTERM stops accepting, finishes a slow request in flight, and
//! leaves the processor's position committed, so the restart folds nothing again.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use p256::elliptic_curve::Generate;

use schemas::credential::Environment;
use serde_json::Value;
use vigil_tests::collect::{open_session_at, read_topic};
use vigil_tests::served::Served;
use vigil_tests::{http_client, json};

fn probes() -> Value {
    json!({"kind": "probes", "automation": {"webdriver": true, "languages": []}})
}

/// The value of a metric line (`name` with its labels) of the process's `/metrics`.
async fn metric(client: &reqwest::Client, base: &str, name: &str) -> Option<f64> {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
}

/// Waits (10 s at most) until the processor reports no lag on any partition of the batches
/// topic: everything appended was read.
async fn caught_up(client: &reqwest::Client, base: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let mut all = true;
        for p in 0..schemas::collect::BATCHES_PARTITIONS {
            let lag = metric(
                client,
                base,
                &format!("vigil_processor_lag{{partition=\"{p}\"}}"),
            )
            .await;
            all &= lag == Some(0.0);
        }
        if all {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    panic!("the processor did not catch up within 10 s:\n{metrics}");
}

/// The store and the log of a stopped server's data dir, opened in this process.
async fn open_data(dir: &Path) -> (store::Store, log::Log) {
    let store = store::open(&format!("embedded:{}", dir.join("store").display()))
        .await
        .expect("the store opens");
    let log = log::open(&format!("embedded:{}", dir.join("log").display()))
        .await
        .expect("the log opens");
    (store, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_collect_load_loses_no_acknowledged_batch_and_records_no_event_twice() {
    let mut s = Served::start(&[]);
    // Held here: the data dir outlives each process run on it.
    let temp = s.dir.take().unwrap();
    let dir = temp.path().to_path_buf();
    let org: schemas::OrgId = s.creds().org_id().parse().unwrap();
    let keys = [
        (Environment::Test, s.creds().keys.publishable_test.clone()),
        (Environment::Live, s.creds().keys.publishable_live.clone()),
    ];
    let client = http_client();
    let acked: Arc<Mutex<Vec<(Environment, String, u64)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = tokio::task::JoinSet::new();
    for worker in 0..4 {
        let (env, pk) = keys[worker % 2].clone();
        let (client, base) = (client.clone(), s.base.clone());
        let (acked, stop) = (acked.clone(), stop.clone());
        load.spawn(async move {
            // A new session every four batches, so the load spreads over the partitions.
            while !stop.load(Ordering::SeqCst) {
                let Some(session) = open_session_at(&client, &base, &pk).await else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                for seq in 1..=4 {
                    let sent = client
                        .post(format!("{base}/v1/collect/sessions/{}/batches", session.id))
                        .bearer_auth(&pk)
                        .json(&session.batch(seq, &probes()))
                        .send()
                        .await;
                    match sent {
                        Ok(r) if r.status() == 202 => {
                            acked.lock().unwrap().push((env, session.id.clone(), seq));
                        }
                        // Refused (rate-limited) or cut off by the kill: not acknowledged.
                        _ => break,
                    }
                }
            }
        });
    }
    let started = Instant::now();
    while acked.lock().unwrap().len() < 40 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the load did not get going"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Mid-load: requests are in flight, the processor is folding and saving.
    s.kill();
    stop.store(true, Ordering::SeqCst);
    while load.join_next().await.is_some() {}
    let acked = acked.lock().unwrap().clone();

    let mut s = Served::start_in(&dir);
    caught_up(&client, &s.base).await;
    assert!(s.terminate().success());
    drop(s);

    let (store, log) = open_data(&dir).await;
    let mut sessions = HashSet::new();
    for (env, sid, seq) in &acked {
        let row = store
            .get_session(org, *env, sid.parse().unwrap())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("acknowledged session {sid} has no stored session"));
        assert!(
            row.has_processed(*seq),
            "acknowledged batch {seq} of {sid} was lost"
        );
        assert!(row.latest_decision.is_some(), "{sid} has no decision");
        sessions.insert((*env, sid.clone()));
    }
    // The store: one event of each type per session, whatever was redelivered.
    let mut stored: HashMap<(String, String), HashSet<String>> = HashMap::new();
    for env in [Environment::Test, Environment::Live] {
        let mut after = None;
        loop {
            let page = store.list_events(org, env, after, 500).await.unwrap();
            let Some(last) = page.last() else { break };
            after = Some(last.id);
            for e in &page {
                stored
                    .entry((e.subject.id.clone(), e.event_type.as_str().to_owned()))
                    .or_default()
                    .insert(e.id.to_string());
            }
        }
    }
    assert!(!stored.is_empty());
    for ((session, kind), ids) in &stored {
        assert_eq!(ids.len(), 1, "{kind} of {session} recorded as {ids:?}");
    }
    for (_, sid) in &sessions {
        assert!(
            stored.contains_key(&(sid.clone(), "session.fingerprint.calculated".to_owned())),
            "{sid} was linked without its event"
        );
    }
    // `events.v1`: a redelivery may publish an event again, but always under the same id.
    let mut logged: HashMap<(String, String), HashSet<String>> = HashMap::new();
    for r in read_topic(&log, "crash-test-reader", schemas::events::EVENTS_TOPIC).await {
        let v: Value = serde_json::from_slice(&r.payload).unwrap();
        let event = &v["event"];
        logged
            .entry((
                event["data"]["session_id"].as_str().unwrap().to_owned(),
                event["type"].as_str().unwrap().to_owned(),
            ))
            .or_default()
            .insert(event["id"].as_str().unwrap().to_owned());
    }
    for (key, ids) in &logged {
        assert_eq!(ids.len(), 1, "{key:?} published as {ids:?}");
        assert_eq!(
            stored.get(key),
            Some(ids),
            "{key:?}: the log and the store agree"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_answered_201_survives_a_sigkill_right_after() {
    let mut s = Served::start(&[]);
    // Held here: the data dir outlives each process run on it.
    let temp = s.dir.take().unwrap();
    let dir = temp.path().to_path_buf();
    let client = http_client();
    let org = s.creds().org_id().to_owned();
    let r = client
        .post(format!("{}/v1/organizations/{org}/api-keys", s.base))
        .bearer_auth(&s.creds().keys.secret_live)
        .json(&json!({"name": "backend", "type": "secret", "environment": "test"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let created: Value = r.json().await.unwrap();
    s.kill();
    let key = created["data"]["revealed_key"].as_str().unwrap().to_owned();

    let s = Served::start_in(&dir);
    let r = client
        .get(format!("{}/v1/sessions", s.base))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_a_slow_request_and_commits_the_processors_position() {
    let mut s = Served::start(&[]);
    // Held here: the data dir outlives each process run on it.
    let temp = s.dir.take().unwrap();
    let dir = temp.path().to_path_buf();
    let client = http_client();
    let pk = s.creds().keys.publishable_test.clone();
    let sk = s.creds().keys.secret_test.clone();
    // A slow request: its headers and half its body now, the rest after the SIGTERM.
    let addr = s.base.trim_start_matches("http://").to_owned();
    let body = json!({"client_public_key": vigil_tests::collect::client_public_key(&p256::ecdh::EphemeralSecret::generate()), "sdk_version": "1.0.0", "page_url": "https://shop.example/"}).to_string();
    let (first, rest) = body.as_bytes().split_at(body.len() / 2);
    let mut slow = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        slow,
        "POST /v1/collect/sessions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {pk}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    slow.write_all(first).unwrap();

    let mut sent = 0;
    for _ in 0..3 {
        let session = open_session_at(&client, &s.base, &pk).await.unwrap();
        for seq in 1..=2 {
            let r = client
                .post(format!(
                    "{}/v1/collect/sessions/{}/batches",
                    s.base, session.id
                ))
                .bearer_auth(&pk)
                .json(&session.batch(seq, &probes()))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 202);
            sent += 1;
        }
    }
    // Every batch folded, and the SIGTERM at once: the last save may still be in flight, and
    // is finished and committed by the drain.
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&client, &s.base, "vigil_processor_records_folded_total").await
        != Some(sent as f64)
    {
        assert!(
            Instant::now() < deadline,
            "the batches were not folded within 10 s: {:?}",
            metric(&client, &s.base, "vigil_processor_records_folded_total").await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    s.signal_term();
    s.wait_for("shutting down");
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        std::net::TcpStream::connect(&addr).is_err(),
        "no new connection is accepted once SIGTERM arrived"
    );
    slow.write_all(rest).unwrap();
    let mut answer = String::new();
    slow.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    assert!(s.wait_exit().success());
    drop(s);

    // The processor's position is committed: its group has nothing left to read.
    let (store, log) = open_data(&dir).await;
    let left = read_topic(
        &log,
        processor::pipeline::GROUP,
        schemas::collect::BATCHES_TOPIC,
    )
    .await;
    assert!(
        left.is_empty(),
        "{} batches would be read again",
        left.len()
    );
    drop((store, log));
    // And a restart folds nothing again.
    let s = Served::start_in(&dir);
    caught_up(&client, &s.base).await;
    assert_eq!(
        metric(&client, &s.base, "vigil_processor_records_folded_total").await,
        Some(0.0)
    );
    let sessions: Value = client
        .get(format!("{}/v1/sessions", s.base))
        .bearer_auth(&sk)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(sessions["data"].as_array().unwrap().len(), 3);
}

/// A webhook delivery's first attempt failed (recorded, a retry due in 3 s), then SIGKILL:
/// after the restart the schedule resumes from the store, the retry carries the same
/// `webhook-id`, and the delivery completes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_retry_schedule_survives_a_sigkill() {
    let receiver = vigil_tests::receiver::Receiver::start().await;
    receiver.then(vigil_tests::receiver::Answer::status(500));
    let flags = ["--allow-private-webhooks", "--webhook-retry-schedule", "3s"];
    let mut s = Served::start(&flags);
    let temp = s.dir.take().unwrap();
    let client = http_client();
    let key = s.creds().keys.secret_test.clone();
    let endpoints = format!(
        "{}/v1/organizations/{}/webhooks/endpoints",
        s.base,
        s.creds().org_id()
    );
    let made: Value = client
        .post(&endpoints)
        .bearer_auth(&key)
        .json(&json!({"name": "r", "url": receiver.base, "event_types": ["webhook.test"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let endpoint = made["data"]["id"].as_str().unwrap().to_owned();
    let test: Value = client
        .post(format!("{endpoints}/{endpoint}/test"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let event = test["data"]["id"].as_str().unwrap().to_owned();
    receiver.wait_for(1, Duration::from_secs(10)).await;
    // The failed attempt is recorded (one attempt, pending) before the kill.
    let org = s.creds().org_id().to_owned();
    let listed = format!("/v1/organizations/{org}/events");
    let d = await_delivery(&client, &key, &format!("{}{listed}", s.base), &event, |d| {
        d["attempts"] == 1
    })
    .await;
    assert_eq!(d["status"], "pending", "{d}");
    s.kill();

    let s = Served::start_in_with(temp.path(), &flags);
    let got = receiver.wait_for(2, Duration::from_secs(15)).await;
    assert_eq!(got[0].header("webhook-id"), event);
    assert_eq!(
        got[1].header("webhook-id"),
        event,
        "the same webhook-id on the retry"
    );
    assert_eq!(got[1].answered, 204);
    let d = await_delivery(&client, &key, &format!("{}{listed}", s.base), &event, |d| {
        d["status"] == "succeeded"
    })
    .await;
    assert_eq!(d["attempts"], 2, "{d}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        receiver.received().len(),
        2,
        "delivered once after the restart"
    );
}

/// The first delivery of `event` as the events list at `url` shows it, once it satisfies
/// `done` (10 s at most).
async fn await_delivery(
    client: &reqwest::Client,
    key: &str,
    url: &str,
    event: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let listed: Value = client
            .get(url)
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let delivery = listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == event)
            .map_or(Value::Null, |e| e["webhook_deliveries"][0].clone());
        if done(&delivery) {
            return delivery;
        }
        assert!(
            Instant::now() < deadline,
            "the delivery did not get there: {delivery}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
