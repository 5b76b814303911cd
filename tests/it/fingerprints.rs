//! Visitor fingerprints end to end over HTTP (docs/architecture.md#visitors): sessions go in
//! through the Collect API, the processor links them to visitors (signed token, then anchors, then
//! the nearest vector, else a new `vid_`), `results` hands the browser its visitor token, and the
//! customer backend reads `GET /v1/fingerprints` and `GET /v1/fingerprints/{visitorId}`.

use std::collections::BTreeSet;

use serde_json::Value;
use vigil_tests::collect::score_session;
use vigil_tests::{TestServer, json};

/// A scored session: its id, its visitor id, and the visitor token a second `results` call
/// returns once the session is linked.
struct Scored {
    sid: String,
    visitor_id: String,
    visitor_token: String,
}

/// Drives one session through the pipeline (as tests/it/pipeline.rs does), sending the
/// batches with `user_agent` as the HTTP user agent.
async fn scored_session(s: &TestServer, probes: Value, user_agent: &str) -> Scored {
    let linked =
        |a: &Value| a["decision"]["decision_status"] == "final" && a["visitor_id"].is_string();
    let (session, answer) = score_session(s, &probes, Some(user_agent), linked).await;
    let visitor_id = answer["visitor_id"].as_str().unwrap_or_default().to_owned();
    // Linked now, so `results` carries the token for the SDK to keep.
    let again = session
        .results(s, &s.creds.keys.publishable_test)
        .send()
        .await;
    let visitor_token = again.ok(200)["visitor_token"]
        .as_str()
        .expect("a linked session's results carry a visitor token")
        .to_owned();
    Scored {
        sid: session.id,
        visitor_id,
        visitor_token,
    }
}

const CHROME_120: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";
const CHROME_122: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/122.0.0.0 Safari/537.36";
const FIREFOX_MAC: &str =
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14.4; rv:128.0) Gecko/20100101 Firefox/128.0";

/// Probes of a browser: `hashes` are (webgl, parameters, audio), `width` the screen width.
fn probes(ua: &str, hashes: (&str, &str, &str), width: u32, storage: Value) -> Value {
    json!({
        "kind": "probes",
        "automation": {"webdriver": false, "user_agent": ua, "languages": ["en-GB", "en"], "plugins": [{"name": "PDF Viewer", "filename": "internal-pdf-viewer"}]},
        "browser": {"platform": "Win32", "hardware_concurrency": 8, "device_memory": 8, "max_touch_points": 0},
        "rendering": {"webgl_renderer": "ANGLE (NVIDIA GeForce RTX 3060)", "webgl_hash": hashes.0, "webgl_parameters_hash": hashes.1, "audio_hash": hashes.2, "canvas_hash": "c0ffee00aa"},
        "screen": {"width": width, "height": 1080, "color_depth": 24, "pixel_ratio": 1, "touch": false},
        "locale": {"timezone": "Europe/London", "timezone_offset_min": 0},
        "storage": storage
    })
}

const MACHINE: (&str, &str, &str) = ("aa11bb22cc33", "dd44ee55ff66", "0011223344");
/// The same browser after a driver update: every hash moved.
const UPDATED: (&str, &str, &str) = ("99ffee00aa", "88ddcc11bb", "77bbaa22cc");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visitors_link_by_token_then_anchors_and_are_read_by_the_backend() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_test;

    // A first visit: a new visitor.
    let first = scored_session(
        &s,
        probes(
            CHROME_120,
            MACHINE,
            1920,
            json!({"visitor_token": null, "token_found_in": []}),
        ),
        "browser-one/1.0",
    )
    .await;
    assert!(first.visitor_id.starts_with("vid_"));
    assert!(
        first
            .visitor_token
            .starts_with(&format!("vt1.{}.", first.visitor_id))
    );

    // The same browser comes back with its token, though everything else changed: the token
    // links it.
    let second = scored_session(
        &s,
        probes(
            CHROME_120,
            UPDATED,
            1280,
            json!({"visitor_token": first.visitor_token, "token_found_in": ["cookies", "indexed_db"]}),
        ),
        "browser-one/1.0",
    )
    .await;
    assert_eq!(second.visitor_id, first.visitor_id, "linked by the token");
    let v = s
        .get(&format!("/v1/fingerprints/{}", first.visitor_id))
        .key(sk)
        .send()
        .await;
    let v = v.ok(200).clone();
    assert_eq!(v["lifecycle"]["seen_count"], 2);
    assert_eq!(
        v["storage"],
        json!({"cookies": true, "local_storage": false, "indexed_db": true, "service_worker": false, "window_name": false})
    );

    // A forged token links nothing by itself; a fresh profile of that browser (the visitor's
    // latest anchors, a compatible browser a couple of versions on, no valid token) links by
    // anchors.
    let forged = format!("vt1.{}.AAAAAAAAAAAAAAAAAAAAAA", first.visitor_id);
    let third = scored_session(
        &s,
        probes(
            CHROME_122,
            UPDATED,
            1920,
            json!({"visitor_token": forged, "token_found_in": ["cookies"]}),
        ),
        "browser-one/1.1",
    )
    .await;
    assert_eq!(third.visitor_id, first.visitor_id, "linked by anchors");

    // Different anchors and a different vector: someone new.
    let other = scored_session(
        &s,
        probes(
            FIREFOX_MAC,
            ("123456abcdef", "fedcba654321", "5566778899"),
            2560,
            json!({}),
        ),
        "other-browser/2.0",
    )
    .await;
    assert_ne!(other.visitor_id, first.visitor_id, "a new visitor");

    // The detail: the shared members, the vector, and the linked sessions newest first.
    let detail = s
        .get(&format!("/v1/fingerprints/{}", first.visitor_id))
        .key(sk)
        .send()
        .await;
    let d = detail.ok(200).clone();
    assert_eq!(d["object"], "visitor_fingerprint");
    assert_eq!(d["id"], first.visitor_id.as_str());
    assert_eq!(d["lifecycle"]["seen_count"], 3);
    for k in ["first_seen_at", "last_seen_at", "expires_at"] {
        assert!(d["lifecycle"][k].is_string(), "{k}: {d}");
    }
    assert_eq!(d["latest_request"]["user_agent"], "browser-one/1.1");
    assert!(d["latest_request"]["ip_address"].is_string());
    assert_eq!(
        d["storage"],
        json!({"cookies": false, "local_storage": false, "indexed_db": false, "service_worker": false, "window_name": false}),
        "a forged token is not a token found"
    );
    assert_eq!(
        d["anchors"],
        json!({"webgl_hash": UPDATED.0, "parameters_hash": UPDATED.1, "audio_hash": UPDATED.2}),
        "the latest anchors"
    );
    let vector = d["components"]["vector"].as_array().unwrap();
    assert!(!vector.is_empty() && vector.iter().all(Value::is_number));
    let sessions = d["activity"]["sessions"].as_array().unwrap();
    let ids: Vec<&str> = sessions
        .iter()
        .map(|x| x["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec![third.sid.as_str(), second.sid.as_str(), first.sid.as_str()]
    );
    let item = &sessions[0];
    let keys = |v: &Value| {
        v.as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(
        keys(item),
        ["decision", "request", "score_breakdown", "session_id"]
            .map(String::from)
            .into()
    );
    assert_eq!(
        keys(&item["decision"]),
        [
            "evaluated_at",
            "evaluation_duration_ms",
            "event_id",
            "is_provisional",
            "manipulation",
            "phase",
            "risk_score",
            "verdict"
        ]
        .map(String::from)
        .into()
    );
    assert!(
        item["decision"]["event_id"]
            .as_str()
            .unwrap()
            .starts_with("evt_")
    );
    assert_eq!(item["decision"]["is_provisional"], false);
    assert_eq!(
        item["request"],
        json!({"url": "https://shop.example/", "user_agent": "browser-one/1.1", "ip_address": d["latest_request"]["ip_address"], "screen_size": "1920x1080", "is_touch_capable": false})
    );
    assert_eq!(
        item["score_breakdown"]["categories"]
            .as_object()
            .unwrap()
            .len(),
        5
    );

    // The list: shared members only, last seen first by default.
    let list = s.get("/v1/fingerprints").key(sk).send().await;
    let rows = list.ok(200).as_array().unwrap().clone();
    assert_eq!(list.body["pagination"]["has_more"], false);
    assert_eq!(list.body["pagination"]["limit"], 50);
    assert_eq!(
        rows.iter().map(|r| r["id"].clone()).collect::<Vec<_>>(),
        vec![json!(other.visitor_id), json!(first.visitor_id)]
    );
    assert_eq!(
        keys(&rows[0]),
        [
            "anchors",
            "id",
            "latest_request",
            "lifecycle",
            "object",
            "storage"
        ]
        .map(String::from)
        .into()
    );
    let order = |query: &str| {
        let s = &s;
        let query = query.to_owned();
        async move {
            s.get(&format!("/v1/fingerprints?{query}"))
                .key(sk)
                .send()
                .await
                .ok(200)
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["id"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        order("sort=seen_count").await,
        vec![first.visitor_id.clone(), other.visitor_id.clone()]
    );
    assert_eq!(
        order("sort=first_seen").await,
        vec![other.visitor_id.clone(), first.visitor_id.clone()]
    );
    assert_eq!(
        order(&format!("search={}", first.visitor_id)).await,
        vec![first.visitor_id.clone()]
    );
    assert_eq!(
        order("search=other-browser").await,
        vec![other.visitor_id.clone()],
        "a user-agent substring"
    );
    let ip = d["latest_request"]["ip_address"].as_str().unwrap();
    assert_eq!(order(&format!("search={ip}")).await.len(), 2, "an IP");
    assert!(order("search=nobody-has-this").await.is_empty());

    // Pagination in a sort order.
    let page = s
        .get("/v1/fingerprints?sort=seen_count&limit=1")
        .key(sk)
        .send()
        .await;
    assert_eq!(page.ok(200)[0]["id"], first.visitor_id.as_str());
    assert_eq!(page.body["pagination"]["has_more"], true);
    let cursor = page.body["pagination"]["next_cursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let next = s
        .get(&format!(
            "/v1/fingerprints?sort=seen_count&limit=1&cursor={cursor}"
        ))
        .key(sk)
        .send()
        .await;
    assert_eq!(next.ok(200)[0]["id"], other.visitor_id.as_str());
    assert_eq!(next.body["pagination"]["has_more"], false);

    // Validation.
    for bad in [
        "sort=last_seen_at",
        "limit=0",
        "limit=201",
        "limit=x",
        "cursor=nope",
        &format!("cursor={cursor}"), // a seen_count cursor in the default order
        "verdict=bot",
    ] {
        s.get(&format!("/v1/fingerprints?{bad}"))
            .key(sk)
            .send()
            .await
            .err(422, "request.validation_failed");
    }
    let r = s.get("/v1/fingerprints?sort=x").key(sk).send().await;
    assert_eq!(
        r.body["error"]["details"]["allowed_values"],
        json!(["seen_count", "first_seen"])
    );
    assert_eq!(order("limit=200").await.len(), 2);
    s.get("/v1/fingerprints/vid_bad")
        .key(sk)
        .send()
        .await
        .err(422, "request.validation_failed");
    s.get(&format!("/v1/fingerprints/{}", first.sid))
        .key(sk)
        .send()
        .await
        .err(422, "request.validation_failed");
    s.get("/v1/fingerprints/vid_01hzzzzzzzzzzzzzzzzzzzzzzz")
        .key(sk)
        .send()
        .await
        .err(404, "resource.not_found");

    // Isolation (docs/architecture.md#environments): the live key and another organization see
    // nothing.
    let live = &s.creds.keys.secret_live;
    assert!(
        s.get("/v1/fingerprints")
            .key(live)
            .send()
            .await
            .ok(200)
            .as_array()
            .unwrap()
            .is_empty()
    );
    s.get(&format!("/v1/fingerprints/{}", first.visitor_id))
        .key(live)
        .send()
        .await
        .err(404, "resource.not_found");
    let second_org = s.second_organization("second").await;
    s.get(&format!("/v1/fingerprints/{}", first.visitor_id))
        .key(&second_org.keys.secret_test)
        .send()
        .await
        .err(404, "resource.not_found");
    assert!(
        s.get("/v1/fingerprints")
            .key(&second_org.keys.secret_test)
            .send()
            .await
            .ok(200)
            .as_array()
            .unwrap()
            .is_empty()
    );

    // Scopes and key types (docs/architecture.md#scopes).
    let lister = s.create_key(sk, json!({"name": "lister", "type": "secret", "environment": "test", "scopes": ["fingerprints:list"]})).await;
    let lister = lister["revealed_key"].as_str().unwrap();
    s.get("/v1/fingerprints").key(lister).send().await.ok(200);
    s.get(&format!("/v1/fingerprints/{}", first.visitor_id))
        .key(lister)
        .send()
        .await
        .err(403, "auth.insufficient_scope");
    s.get("/v1/fingerprints")
        .key(&s.creds.keys.publishable_test)
        .send()
        .await
        .err(403, "auth.credential_type_not_allowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_altered_token_links_nothing() {
    let s = TestServer::start().await;
    let first = scored_session(
        &s,
        probes(CHROME_120, MACHINE, 1920, json!({})),
        "browser-one/1.0",
    )
    .await;
    // An altered MAC is not this server's token: with other anchors and vector, a new visitor.
    let mut token = first.visitor_token.clone();
    let last = token.pop().unwrap();
    token.push(if last == 'A' { 'B' } else { 'A' });
    let second = scored_session(
        &s,
        probes(
            FIREFOX_MAC,
            ("123456abcdef", "fedcba654321", "5566778899"),
            2560,
            json!({"visitor_token": token, "token_found_in": ["cookies"]}),
        ),
        "other-browser/2.0",
    )
    .await;
    assert_ne!(second.visitor_id, first.visitor_id);
}

/// Reads that do not lie (docs/architecture.md#lists): with more visitors than any in-memory
/// window, every order lists every visitor of the environment exactly once, in order, in full
/// pages, with `has_more` false only on the last. The visitors are written through the store
/// directly, for speed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_visitors_page_once_each_in_every_order() {
    use store::{VisitorOrder, VisitorRecord};
    const VISITORS: usize = 5_150;
    const LIMIT: usize = 200;
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_test;
    let org: schemas::ids::OrgId = s.creds.org_id().parse().unwrap();
    let env = schemas::credential::Environment::Test;
    let base = schemas::time::now() - chrono::TimeDelta::days(60);
    let mut written = Vec::with_capacity(VISITORS);
    for i in 0..VISITORS as i64 {
        let v = VisitorRecord {
            id: schemas::VisitorId::generate(),
            organization_id: org,
            environment: env,
            // Many ties in each order (the id breaks them), and orders that disagree.
            first_seen_at: base + chrono::TimeDelta::minutes(i % 97),
            last_seen_at: base + chrono::TimeDelta::hours(24 + (i * 31) % 1_000),
            seen_count: (i % 13) as u64,
            expires_at: base + chrono::TimeDelta::days(90),
            latest_request: store::VisitorRequest {
                user_agent: format!("bulk-agent/{i}"),
                ip_address: "203.0.113.9".into(),
            },
            storage: Default::default(),
            anchors: Default::default(),
            components: vec![f64::from(i as i32)],
            traits: Default::default(),
            recent_sessions: Vec::new(),
            revision: 0,
        };
        s.store().save_visitor(&v).await.unwrap();
        written.push(v);
    }
    for (order, sort) in [
        (VisitorOrder::LastSeen, ""),
        (VisitorOrder::SeenCount, "&sort=seen_count"),
        (VisitorOrder::FirstSeen, "&sort=first_seen"),
    ] {
        let mut expected = written.clone();
        expected.sort_by_key(|v| std::cmp::Reverse((order.value(v), v.id)));
        let expected: Vec<String> = expected.iter().map(|v| v.id.to_string()).collect();
        let pages = s
            .pages(sk, &format!("/v1/fingerprints?limit={LIMIT}{sort}"))
            .await;
        let (last, full) = pages.split_last().unwrap();
        assert!(
            full.iter().all(|p| p.len() == LIMIT) && !last.is_empty(),
            "{sort}: every page before the last is full"
        );
        let read: Vec<String> = pages
            .iter()
            .flatten()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(read.len(), VISITORS, "{sort}: every visitor, once");
        assert_eq!(read, expected, "{sort}: in order");
    }
}

/// The sizing figures of docs/operations.md#sizing-and-retention: one real scored session (its row, its kept
/// decisions and its events) and its visitor, copied under fresh ids N times into a fresh
/// embedded store, which is flushed; the directory's growth over N is what one takes on disk.
/// Ignored by default (a minute of writes): `cargo nextest run -p vigil-tests --test
/// fingerprints --run-ignored only footprint`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn footprint_of_a_session_and_a_visitor_on_disk() {
    use store::prelude::*;
    const N: usize = 10_000;
    let s = TestServer::start().await;
    let scored = scored_session(
        &s,
        probes(
            CHROME_120,
            MACHINE,
            1920,
            json!({"visitor_token": null, "token_found_in": []}),
        ),
        "footprint/1.0",
    )
    .await;
    let org: schemas::ids::OrgId = s.creds.org_id().parse().unwrap();
    let env = schemas::credential::Environment::Test;
    let sid: schemas::SessionId = scored.sid.parse().unwrap();
    let session = s.store().get_session(org, env, sid).await.unwrap().unwrap();
    let decisions = s.store().list_decisions(org, env, sid, 100).await.unwrap();
    let events: Vec<_> = s
        .store()
        .list_events(org, env, None, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.subject.id == scored.sid)
        .collect();
    let visitor = s
        .store()
        .get_visitor(org, env, scored.visitor_id.parse().unwrap())
        .await
        .unwrap()
        .unwrap();

    fn dir_size(dir: &std::path::Path) -> u64 {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| match e.metadata() {
                        Ok(m) if m.is_dir() => dir_size(&e.path()),
                        Ok(m) => m.len(),
                        Err(_) => 0,
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    async fn measure(write: impl AsyncFnOnce(&store::embedded::EmbeddedStore)) -> u64 {
        let dir = tempfile::tempdir().unwrap();
        let store = store::embedded::EmbeddedStore::open(dir.path()).unwrap();
        store.flush_tables().unwrap();
        let empty = dir_size(dir.path());
        write(&store).await;
        store.flush_tables().unwrap();
        dir_size(dir.path()) - empty
    }

    let sessions = measure(async |store| {
        // In polls of 100, as the processor saves them.
        for _ in 0..N / 100 {
            let saves: Vec<store::SessionSave> = (0..100)
                .map(|_| {
                    let id = schemas::SessionId::generate();
                    let mut session = store::SessionRecord {
                        id,
                        ..session.clone()
                    };
                    session.visitor_id = Some(schemas::VisitorId::generate());
                    store::SessionSave {
                        session,
                        decision: None,
                        events: events
                            .iter()
                            .map(|e| store::EventRecord {
                                id: schemas::EventId::generate(),
                                ..e.clone()
                            })
                            .collect(),
                        settled: None,
                        fence: None,
                    }
                })
                .collect();
            store.save_sessions(&saves).await.unwrap();
            for save in &saves {
                for d in &decisions {
                    let d = store::DecisionRecord {
                        session_id: save.session.id,
                        id: schemas::DecisionId::generate(),
                        ..d.clone()
                    };
                    store
                        .save_session(&save.session, Some(&d), &[])
                        .await
                        .unwrap();
                }
            }
        }
    })
    .await;
    let visitors = measure(async |store| {
        for i in 0..N {
            let mut v = store::VisitorRecord {
                id: schemas::VisitorId::generate(),
                ..visitor.clone()
            };
            // Anchors of their own, as distinct browsers have.
            v.anchors.webgl_hash = Some(format!("{i:012x}"));
            store.save_visitor(&v).await.unwrap();
        }
    })
    .await;
    eprintln!(
        "footprint: {} bytes per session (row {} B of JSON, {} decisions, {} events), {} bytes per visitor",
        sessions / N as u64,
        serde_json::to_vec(&session).unwrap().len(),
        decisions.len(),
        events.len(),
        visitors / N as u64,
    );
}

/// Sessions from one device arriving together are folded in one poll, before any of their
/// visitors is stored (a poll's visitors are saved in one write): each still links to the one
/// visitor the first made, counted once per session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_from_one_device_in_one_poll_share_one_visitor() {
    let s = TestServer::start().await;
    let device = || {
        probes(
            CHROME_120,
            MACHINE,
            1920,
            json!({"visitor_token": null, "token_found_in": []}),
        )
    };
    let together: Vec<_> = (0..8)
        .map(|_| scored_session(&s, device(), "browser-one/1.0"))
        .collect();
    let scored = futures::future::join_all(together).await;
    let visitors: BTreeSet<&str> = scored.iter().map(|x| x.visitor_id.as_str()).collect();
    assert_eq!(
        visitors.len(),
        1,
        "one visitor for one device: {visitors:?}"
    );
    let v = s
        .get(&format!("/v1/fingerprints/{}", scored[0].visitor_id))
        .key(&s.creds.keys.secret_test)
        .send()
        .await;
    assert_eq!(v.ok(200)["lifecycle"]["seen_count"], 8);
    let listed = s
        .get("/v1/fingerprints?limit=10")
        .key(&s.creds.keys.secret_test)
        .send()
        .await;
    assert_eq!(listed.ok(200).as_array().map(Vec::len), Some(1));
}
