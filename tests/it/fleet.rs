//! The fleet: every role its own OS process of the real `vigil` binary, sharing an Apache Kafka
//! broker (the run's, in a namespace of this test's own), Redis and PostgreSQL. Two ingest processes take collect traffic, two processors share the batches
//! topic's partitions through their consumer group, one process serves the query and admin
//! APIs, one dispatcher delivers webhooks. The test checks what only a fleet shows:
//! - sessions are spread over both processors;
//! - kill -9 of one processor mid-stream: the other takes over its partitions, and every
//!   acknowledged batch ends in a stored decision, each session in exactly one final decision
//!   and one `session.result.persisted` event (and one delivery of it);
//! - a real headless Chromium session, collected by an ingest process, has its handoff opened
//!   through the query process;
//! - a key revoked through the admin process is refused at once by both ingest processes;
//! - a Web Bot Auth signature verified by one ingest process reads invalid when replayed to the
//!   other (its nonce is spent in the shared store);
//! - a person's visit recorded through one ingest process and replayed, exactly and jittered, to
//!   the other reads automated (the replay record is PostgreSQL's, shared by both processors).

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::web_bot_auth;
use schemas::credential::Environment;
use serde_json::{Value, json};
use vigil_tests::browser::visit_and_hand_off;
use vigil_tests::collect::{CollectSession, open_session_at};
use vigil_tests::receiver::Receiver;
use vigil_tests::replay::{Replay, Replayer, record, replay};
use vigil_tests::served::Served;
use vigil_tests::{
    DevCredentials, http_client, postgres_database, redis_url, run_client, vigil_binary,
};

/// Runs a `vigil` command to completion and answers its standard output.
fn vigil(args: &[&str]) -> String {
    let out = Command::new(vigil_binary())
        .args(args)
        .output()
        .expect("vigil runs");
    assert!(
        out.status.success(),
        "vigil {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The sum of a metric's samples in a process's `/metrics` (0 when absent).
async fn metric(client: &reqwest::Client, base: &str, name: &str) -> f64 {
    let Ok(r) = client.get(format!("{base}/metrics")).send().await else {
        return 0.0;
    };
    let text = r.text().await.unwrap_or_default();
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Polls until `check` holds (up to `within`), panicking with `what` otherwise.
async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A batch of interaction observations, as the SDK sends once a second or so.
fn interactions(seq: u64) -> Value {
    json!({"kind": "interactions", "pointer": {"moves": 10 + seq, "clicks": 1}, "keys": {"count": 3}})
}

/// Sends batch `seq` of `session` to an ingest process; whether it was acknowledged (202).
async fn send_batch(
    client: &reqwest::Client,
    base: &str,
    pk: &str,
    session: &CollectSession,
    seq: u64,
) -> bool {
    let observations = if seq == 1 {
        json!({"kind": "probes", "automation": {"webdriver": false, "languages": ["en-US"]}})
    } else {
        interactions(seq)
    };
    let r = client
        .post(format!("{base}/v1/collect/sessions/{}/batches", session.id))
        .bearer_auth(pk)
        .json(&session.batch(seq, &observations))
        .send()
        .await
        .expect("the ingest process answers");
    if r.status() == 202 {
        return true;
    }
    eprintln!(
        "batch {seq} of {} refused: {} {}",
        session.id,
        r.status(),
        r.text().await.unwrap_or_default()
    );
    false
}

/// `POST …/results` as the SDK sends it: the session's decision becomes final.
async fn finish(client: &reqwest::Client, base: &str, pk: &str, session: &CollectSession) {
    let path = session.results_path();
    let r = client
        .post(format!("{base}{path}"))
        .bearer_auth(pk)
        .header(ingest::proof::HEADER, session.proof("POST", &path))
        .send()
        .await
        .expect("the ingest process answers");
    assert_eq!(r.status(), 200, "results of {}", session.id);
}

struct Fleet {
    ingest: [Served; 2],
    processors: Vec<Served>,
    api: Served,
    _dispatcher: Served,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_processes_shares_kafka_redis_and_postgres() {
    // A real broker, in a namespace of this test's own: the processes make their topics.
    let kafka = vigil_tests::kafka_broker("fleet");
    let store_url = postgres_database("fleet").await;
    let secret = "5e".repeat(32);
    // Group members that vanish are noticed within a few seconds, not librdkafka's default 45.
    let processor_kafka = format!("{kafka}&session.timeout.ms=6000&heartbeat.interval.ms=500");
    let redis = redis_url();
    let receiver = Receiver::start().await;

    let bootstrap: Value = serde_json::from_str(&vigil(&[
        "bootstrap",
        "--store",
        &store_url,
        "--server-secret",
        &secret,
        "--name",
        "Fleet",
        "--slug",
        "fleet",
    ]))
    .expect("bootstrap prints JSON");
    let creds: DevCredentials = serde_json::from_value(bootstrap).expect("bootstrap output");
    let (pk, sk) = (
        creds.keys.publishable_test.clone(),
        creds.keys.secret_test.clone(),
    );
    // The whole test's traffic comes from one address; it is not what this test is about.
    vigil(&[
        "keys",
        "set-rate-limit",
        "--store",
        &store_url,
        "--server-secret",
        &secret,
        "--key",
        &pk,
        "--limit",
        "100000",
    ]);

    let member = |roles: &str, bus: &str, extra: &[&str]| {
        let mut flags = vec![
            "--roles",
            roles,
            "--store",
            &store_url,
            "--log",
            bus,
            "--limiter",
            &redis,
            "--server-secret",
            &secret,
        ];
        flags.extend_from_slice(extra);
        Served::start(&flags)
    };
    // Both ingest processes trust one signing agent, behind one public address.
    let agents = tempfile::tempdir().unwrap();
    let keys = agents.path().join("agents.json");
    std::fs::write(
        &keys,
        format!(
            r#"{{"{}": {}}}"#,
            web_bot_auth::AGENT,
            web_bot_auth::DIRECTORY
        ),
    )
    .unwrap();
    let keys = keys.display().to_string();
    let signed_ingest = [
        "--web-bot-auth-keys",
        keys.as_str(),
        "--public-url",
        "https://fleet.test",
    ];
    let fleet = Fleet {
        ingest: [
            member("ingest", &kafka, &signed_ingest),
            member("ingest", &kafka, &signed_ingest),
        ],
        processors: vec![
            member("processor", &processor_kafka, &[]),
            member("processor", &processor_kafka, &[]),
        ],
        // Both check endpoint addresses: the admin API when one is registered.
        api: member("query,admin", &kafka, &["--allow-private-webhooks"]),
        _dispatcher: member("dispatcher", &kafka, &["--allow-private-webhooks"]),
    };
    let client = http_client();
    // As a load balancer does: traffic goes to a process once it says it is ready.
    let all: Vec<String> = fleet
        .ingest
        .iter()
        .chain(&fleet.processors)
        .chain([&fleet.api, &fleet._dispatcher])
        .map(|p| p.base.clone())
        .collect();
    eventually(Duration::from_secs(60), "every process is ready", || {
        let (client, all) = (client.clone(), all.clone());
        async move {
            for base in &all {
                let Ok(ready) = client.get(format!("{base}/readyz")).send().await else {
                    return false;
                };
                if ready.status() != 200 {
                    eprintln!(
                        "{base} is not ready: {}",
                        ready.text().await.unwrap_or_default()
                    );
                    return false;
                }
            }
            true
        }
    })
    .await;
    let api = fleet.api.base.clone();
    let org_path = format!("/v1/organizations/{}", creds.org_id());

    // The site's webhook endpoint, registered through the admin process.
    let made = client
        .post(format!("{api}{org_path}/webhooks/endpoints"))
        .bearer_auth(&sk)
        .json(
            &json!({"name": "shop backend", "url": format!("{}/vigil", receiver.base),
                      "event_types": ["session.result.persisted"]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), 201, "{}", made.text().await.unwrap());

    // ---- sessions spread over both processors ----
    let ingest: Vec<String> = fleet.ingest.iter().map(|s| s.base.clone()).collect();
    let mut sessions: Vec<(CollectSession, String)> = Vec::new();
    let mut acked: Vec<(String, u64)> = Vec::new();
    for i in 0..12 {
        let base = &ingest[i % 2];
        let session = open_session_at(&client, base, &pk)
            .await
            .expect("a session opens");
        for seq in 1..=2 {
            if send_batch(&client, base, &pk, &session, seq).await {
                acked.push((session.id.clone(), seq));
            }
        }
        sessions.push((session, base.clone()));
    }
    assert_eq!(acked.len(), 24, "every batch was acknowledged");
    let processors: Vec<String> = fleet.processors.iter().map(|p| p.base.clone()).collect();
    eventually(
        Duration::from_secs(60),
        "both processors fold records (their group split the partitions)",
        || async {
            let mut both = true;
            for base in &processors {
                both &= metric(&client, base, "vigil_processor_records_folded_total").await > 0.0;
            }
            both
        },
    )
    .await;
    let store = store::open(&store_url).await.expect("the fleet's store");
    let org: schemas::OrgId = creds.org_id().parse().unwrap();
    let processed = |acked: Vec<(String, u64)>| {
        let store = store.clone();
        async move {
            for (sid, seq) in &acked {
                let row = store
                    .get_session(org, Environment::Test, sid.parse().unwrap())
                    .await
                    .unwrap();
                if !row.is_some_and(|r| r.has_processed(*seq) && r.latest_decision.is_some()) {
                    return false;
                }
            }
            true
        }
    };
    eventually(
        Duration::from_secs(30),
        "the first batches are folded",
        || processed(acked.clone()),
    )
    .await;

    // ---- kill -9 one processor mid-stream; the other takes over ----
    let mut killed = fleet.processors;
    let survivor = killed.pop().unwrap();
    let folded_before = metric(
        &client,
        &survivor.base,
        "vigil_processor_records_folded_total",
    )
    .await;
    killed[0].kill();
    for (i, (session, base)) in sessions.iter().enumerate() {
        assert!(send_batch(&client, base, &pk, session, 3).await);
        acked.push((session.id.clone(), 3));
        if i % 2 == 0 {
            finish(&client, base, &pk, session).await;
        }
    }
    for i in 0..6 {
        let base = &ingest[i % 2];
        let session = open_session_at(&client, base, &pk)
            .await
            .expect("a session opens");
        for seq in 1..=3 {
            assert!(send_batch(&client, base, &pk, &session, seq).await);
            acked.push((session.id.clone(), seq));
        }
        finish(&client, base, &pk, &session).await;
        sessions.push((session, base.clone()));
    }
    for (session, base) in sessions.iter().skip(1).step_by(2).take(6) {
        finish(&client, base, &pk, session).await;
    }
    eventually(
        Duration::from_secs(90),
        "every acknowledged batch is folded after the kill",
        || processed(acked.clone()),
    )
    .await;
    assert!(
        metric(
            &client,
            &survivor.base,
            "vigil_processor_records_folded_total"
        )
        .await
            > folded_before,
        "the survivor folded what came after the kill"
    );
    let ids: Vec<String> = sessions.iter().map(|(s, _)| s.id.clone()).collect();
    eventually(
        Duration::from_secs(60),
        "every session's decision is final",
        || {
            let (store, ids) = (store.clone(), ids.clone());
            async move {
                for sid in &ids {
                    let row = store
                        .get_session(org, Environment::Test, sid.parse().unwrap())
                        .await
                        .unwrap();
                    if !row.is_some_and(|r| r.finalized) {
                        return false;
                    }
                }
                true
            }
        },
    )
    .await;
    for sid in &ids {
        let decisions = store
            .list_decisions(org, Environment::Test, sid.parse().unwrap(), 100)
            .await
            .unwrap();
        let finals = decisions
            .iter()
            .filter(|d| d.decision.to_value()["decision_status"] == "final")
            .count();
        if finals != 1 {
            let mut survivor = survivor;
            eprintln!("SURVIVOR LOG:\n{}", survivor.all_logs());
            eprintln!("KILLED LOG:\n{}", killed[0].all_logs());
            panic!("{sid} has {finals} final decisions: {decisions:?}");
        }
    }
    // One `session.result.persisted` per session, read through the query process.
    let events_of = |ids: Vec<String>| {
        let (client, api, sk, org_path) =
            (client.clone(), api.clone(), sk.clone(), org_path.clone());
        async move {
            let mut per_session: HashMap<String, HashSet<String>> = HashMap::new();
            let mut after: Option<String> = None;
            loop {
                let mut url =
                    format!("{api}{org_path}/events?type=session.result.persisted&limit=100");
                if let Some(a) = &after {
                    url.push_str(&format!("&starting_after={a}"));
                }
                let page: Value = client
                    .get(url)
                    .bearer_auth(&sk)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                let data = page["data"].as_array().cloned().unwrap_or_default();
                for e in &data {
                    per_session
                        .entry(
                            e["data"]["session_id"]
                                .as_str()
                                .unwrap_or_default()
                                .to_owned(),
                        )
                        .or_default()
                        .insert(e["id"].as_str().unwrap().to_owned());
                }
                if page["pagination"]["has_more"] != true || data.is_empty() {
                    break;
                }
                after = data
                    .last()
                    .and_then(|e| e["id"].as_str())
                    .map(str::to_owned);
            }
            ids.iter()
                .all(|sid| per_session.get(sid).is_some_and(|e| e.len() == 1))
                && per_session.values().all(|e| e.len() == 1)
        }
    };
    eventually(
        Duration::from_secs(30),
        "one session.result.persisted event per session",
        || events_of(ids.clone()),
    )
    .await;
    // The dispatcher delivered each of them once.
    let delivered = receiver.wait_for(ids.len(), Duration::from_secs(60)).await;
    let mut delivered_sessions: HashMap<String, usize> = HashMap::new();
    for d in &delivered {
        *delivered_sessions
            .entry(d.json()["data"]["session_id"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    for sid in &ids {
        assert_eq!(
            delivered_sessions.get(sid),
            Some(&1),
            "{sid} delivered once: {delivered_sessions:?}"
        );
    }

    // ---- a real browser; its handoff opens through the query process ----
    let (loaded, result) = visit_and_hand_off(&ingest[0], &pk).await;
    let handoff = result["handoff"].as_str().expect("a handoff");
    let opened = client
        .post(format!("{api}/v1/handoffs/open"))
        .bearer_auth(&sk)
        .json(&json!({ "handoff": handoff }))
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status(), 200);
    let opened: Value = opened.json().await.unwrap();
    assert_eq!(opened["data"]["session_id"], loaded["session_id"]);

    // The site's backend reads the session from the query process with its real clients:
    // Node's fetch, Python's requests and curl.
    let sid = loaded["session_id"].as_str().unwrap();
    let url = format!("{api}/v1/sessions/{sid}");
    // The handoff opens from the collect session; the processed session is stored when a
    // processor has folded its batches, which a loaded machine can take a moment to do.
    eventually(Duration::from_secs(20), "the session readable", || async {
        let r = client.get(&url).bearer_auth(&sk).send().await.unwrap();
        r.status() == 200
    })
    .await;
    let node = r#"
        const [url, key] = process.argv.slice(1);
        fetch(url, { headers: { authorization: `Bearer ${key}` } })
          .then(async (r) => { const b = await r.json(); console.log(r.status, b.data.id); })
          .catch((e) => { console.error(e); process.exit(1); });
    "#;
    let expected = format!("200 {sid}");
    assert_eq!(run_client("node", &["-e", node, &url, &sk]), expected);
    let python = r#"
import sys, requests
url, key = sys.argv[1:]
r = requests.get(url, headers={"Authorization": "Bearer " + key})
print(r.status_code, r.json()["data"]["id"])
"#;
    assert_eq!(run_client("python3", &["-c", python, &url, &sk]), expected);
    let auth = format!("authorization: Bearer {sk}");
    let body: Value =
        serde_json::from_str(&run_client("curl", &["-s", "-H", &auth, &url])).unwrap();
    assert_eq!(body["data"]["id"], sid);

    // ---- a key revoked through the admin process is refused by both ingest processes ----
    let made: Value = client
        .post(format!("{api}{org_path}/api-keys"))
        .bearer_auth(&creds.keys.secret_live)
        .json(&json!({"name": "doomed", "type": "publishable", "environment": "test"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let doomed = made["data"]["revealed_key"]
        .as_str()
        .or_else(|| made["revealed_key"].as_str())
        .unwrap_or_else(|| panic!("a new key: {made}"))
        .to_owned();
    let key_id = made["data"]["id"]
        .as_str()
        .or_else(|| made["id"].as_str())
        .unwrap()
        .to_owned();
    for base in &ingest {
        assert!(open_session_at(&client, base, &doomed).await.is_some());
    }
    let revoked = client
        .delete(format!("{api}{org_path}/api-keys/{key_id}"))
        .bearer_auth(&creds.keys.secret_live)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 200);
    for base in &ingest {
        let refused = client
            .post(format!("{base}/v1/collect/sessions"))
            .bearer_auth(&doomed)
            .json(&json!({"client_public_key": "x", "sdk_version": "1.0.0", "page_url": "https://shop.example/"}))
            .send()
            .await
            .unwrap();
        assert_eq!(
            refused.status(),
            401,
            "{base} refuses the revoked key at once"
        );
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["error"]["code"], "auth.invalid_credentials");
    }

    // ---- a signed request replayed to the other ingest process reads invalid ----
    let session = open_session_at(&client, &ingest[0], &pk)
        .await
        .expect("a session opens");
    let path = format!("/v1/collect/sessions/{}/batches", session.id);
    let signed = web_bot_auth::sign("fleet.test", &web_bot_auth::trusted(&path));
    for (seq, base) in [(1, &ingest[0]), (2, &ingest[1])] {
        let observations = if seq == 1 {
            json!({"kind": "probes", "automation": {"webdriver": false}})
        } else {
            interactions(seq)
        };
        let mut batch = client
            .post(format!("{base}{path}"))
            .bearer_auth(&pk)
            .json(&session.batch(seq, &observations));
        for (name, value) in &signed {
            batch = batch.header(*name, value);
        }
        assert_eq!(batch.send().await.unwrap().status(), 202, "batch {seq}");
    }
    finish(&client, &ingest[1], &pk, &session).await;
    let read = format!("{api}/v1/sessions/{}", session.id);
    eventually(
        Duration::from_secs(60),
        "the signed session is final",
        || {
            let (client, read, sk) = (client.clone(), read.clone(), sk.clone());
            async move {
                let r = client.get(&read).bearer_auth(&sk).send().await.unwrap();
                let body: Value = r.json().await.unwrap_or_default();
                body["data"]["decision"]["decision_status"] == "final"
            }
        },
    )
    .await;
    let body: Value = client
        .get(&read)
        .bearer_auth(&sk)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        body["data"]["web_bot_auth"]["status"], "invalid",
        "the replay to the second ingest process is caught: {body}"
    );

    // ---- a person's visit recorded through the first ingest process, replayed to the second:
    // the replay record is PostgreSQL's, shared by both processors ----
    let recording = record(&ingest[0], &pk).await;
    for how in [
        Replay::default(),
        Replay {
            jitter: Some(9),
            fresh_challenge: true,
            ..Replay::default()
        },
    ] {
        let id = replay(Replayer::Node, &ingest[1], &pk, &recording.path, &how).await;
        let read = format!("{api}/v1/sessions/{id}");
        eventually(
            Duration::from_secs(60),
            "the replayed session is final",
            || {
                let (client, read, sk) = (client.clone(), read.clone(), sk.clone());
                async move {
                    let r = client.get(&read).bearer_auth(&sk).send().await.unwrap();
                    let body: Value = r.json().await.unwrap_or_default();
                    body["data"]["decision"]["decision_status"] == "final"
                }
            },
        )
        .await;
        let body: Value = client
            .get(&read)
            .bearer_auth(&sk)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = &body["data"];
        let fired: Vec<&str> = session["signals_fired"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["signal"].as_str())
            .collect();
        assert_eq!(
            session["decision"]["automation_status"], "automated",
            "{how:?}: {session}"
        );
        assert!(fired.contains(&"replayed_payload"), "{how:?}: {fired:?}");
    }
    drop(survivor);
    drop(killed);
}
