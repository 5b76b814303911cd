//! The scoring pipeline end to end over HTTP, without a browser: batches go in through the
//! Collect API, the processor consumes them from the log and stores decisions, and the site's
//! backend reads the decision by opening the handoff. (tests/it/browser.rs does the same
//! from a real headless Chromium.)

use serde_json::Value;
use vigil_tests::collect::{CollectSession, score_session};
use vigil_tests::{TestServer, json};

async fn scored_session(s: &TestServer, probes: Value) -> (CollectSession, Value) {
    let (session, answer) = score_session(s, &probes, None, |a| {
        a["decision"]["decision_status"] == "final"
    })
    .await;
    (session, answer["decision"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webdriver_session_is_decided_automated_with_its_evidence() {
    let s = TestServer::start().await;
    let probes = json!({
        "kind": "probes",
        "automation": {"webdriver": true, "user_agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/156.0.0.0 Safari/537.36", "languages": [], "plugins": [], "mime_types": [], "window_outer": [0, 0]},
        "rendering": {"webgl_vendor": "Google Inc. (Google)", "webgl_renderer": "ANGLE (Google, Vulkan 1.3.0 (SwiftShader Device (Subzero)), SwiftShader driver)"}
    });
    let (_, decision) = scored_session(&s, probes).await;
    assert_eq!(decision["automation_status"], "automated", "{decision}");
    assert_eq!(decision["verdict"], "bot");
    assert!(decision["risk_score"].as_u64().unwrap() >= 80);
    let highlights = decision["highlights"].as_array().unwrap();
    assert!(!highlights.is_empty() && highlights.len() <= 5);
    assert!(
        highlights
            .iter()
            .any(|h| h["evidence"]["signal"] == "webdriver"),
        "{decision}"
    );
    assert!(decision["event_id"].as_str().unwrap().starts_with("evt_"));
    assert_eq!(decision["is_provisional"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_desktop_browser_is_not_called_a_bot() {
    let s = TestServer::start().await;
    let ua = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0.0.0 Safari/537.36";
    let probes = json!({
        "kind": "probes",
        "automation": {"webdriver": false, "user_agent": ua, "languages": ["en-GB", "en"], "language": "en-GB", "has_chrome_object": true, "product_sub": "20030107", "eval_length": 33, "error_stack_engine": "v8",
            "plugins": [{"name": "PDF Viewer", "filename": "internal-pdf-viewer"}], "mime_types": ["application/pdf"], "plugins_consistent": true, "window_outer": [1280, 800], "window_inner": [1280, 697], "connection_rtt": 50,
            "notification_permission": "default", "permissions_notifications": "prompt"},
        "browser": {"user_agent_data": {"brands": [{"brand": "Chromium", "version": "156"}, {"brand": "Google Chrome", "version": "156"}], "mobile": false, "platform": "Windows"}, "platform": "Win32", "worker_user_agent": ua, "worker_platform": "Win32", "vendor": "Google Inc.", "hardware_concurrency": 8},
        "rendering": {"webgl_vendor": "Google Inc. (NVIDIA)", "webgl_renderer": "ANGLE (NVIDIA, NVIDIA GeForce RTX 3060 Direct3D11 vs_5_0 ps_5_0, D3D11)"},
        "screen": {"width": 1920, "height": 1080, "avail_width": 1920, "avail_height": 1040, "color_depth": 24, "pixel_ratio": 1, "touch": false},
        "locale": {"timezone": "Europe/London", "timezone_offset_min": 0, "intl_locale": "en-GB"}
    });
    let (_, decision) = scored_session(&s, probes).await;
    assert_ne!(decision["verdict"], "bot", "{decision}");
    assert_ne!(decision["automation_status"], "automated", "{decision}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_customer_backend_lists_and_reads_sessions() {
    let s = TestServer::start().await;
    let bot = json!({"kind": "probes", "automation": {"webdriver": true, "languages": []}});
    let bot_sid = scored_session(&s, bot.clone()).await.0.id;
    let second_sid = scored_session(&s, bot).await.0.id;
    let sk = &s.creds.keys.secret_test;

    let list = s.get("/v1/sessions").key(sk).send().await;
    let rows = list.ok(200).as_array().unwrap().clone();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["id"], second_sid.as_str(), "newest first");
    assert_eq!(rows[0]["object"], "session");
    assert_eq!(rows[0]["latest_decision"]["verdict"], "bot");
    assert!(
        rows[0]["latest_decision"]["event_id"]
            .as_str()
            .unwrap()
            .starts_with("evt_")
    );
    assert_eq!(list.body["pagination"]["has_more"], false);

    let page = s.get("/v1/sessions?limit=1").key(sk).send().await;
    assert_eq!(page.ok(200).as_array().unwrap().len(), 1);
    assert_eq!(page.body["pagination"]["has_more"], true);
    let cursor = page.body["pagination"]["next_cursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let next = s
        .get(&format!("/v1/sessions?limit=1&cursor={cursor}"))
        .key(sk)
        .send()
        .await;
    assert_eq!(next.ok(200)[0]["id"], bot_sid.as_str());

    assert_eq!(
        s.get("/v1/sessions?verdict=human")
            .key(sk)
            .send()
            .await
            .ok(200)
            .as_array()
            .unwrap()
            .len(),
        0
    );
    assert_eq!(
        s.get(&format!("/v1/sessions?search={bot_sid}"))
            .key(sk)
            .send()
            .await
            .ok(200)
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        s.get("/v1/sessions?search=shop.example")
            .key(sk)
            .send()
            .await
            .ok(200)
            .as_array()
            .unwrap()
            .len(),
        2
    );
    for bad in [
        "verdict=robot",
        "limit=0",
        "limit=500",
        "cursor=nope",
        "sort=x",
    ] {
        s.get(&format!("/v1/sessions?{bad}"))
            .key(sk)
            .send()
            .await
            .err(422, "request.validation_failed");
    }
    let r = s.get("/v1/sessions?verdict=robot").key(sk).send().await;
    assert_eq!(
        r.body["error"]["details"]["allowed_values"],
        json!(["human", "bot", "verified_bot", "suspicious"])
    );

    let detail = s
        .get(&format!("/v1/sessions/{bot_sid}"))
        .key(sk)
        .send()
        .await;
    let d = detail.ok(200).clone();
    let members = vigil_tests::data_member_order(&detail.text);
    let order = [
        "decision",
        "highlights",
        "automation",
        "web_bot_auth",
        "network",
        "runtime_integrity",
        "visitor_fingerprint",
        "connection_fingerprint",
        "signals_fired",
        "client_telemetry",
    ];
    let positions: Vec<usize> = order
        .iter()
        .map(|m| {
            members
                .iter()
                .position(|k| k.as_str() == *m)
                .unwrap_or_else(|| panic!("{m} missing"))
        })
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "members in the interface's order: {members:?}"
    );
    assert_eq!(d["decision"]["automation_status"], "automated");
    assert_eq!(d["decision"]["decision_status"], "final");
    assert!(d["highlights"].as_array().unwrap().len() <= 5);
    assert!(
        d["signals_fired"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["signal"].is_string())
    );
    assert_eq!(d["automation"]["webdriver"], true);

    // Isolation: the live key and another organization see nothing.
    assert_eq!(
        s.get("/v1/sessions")
            .key(&s.creds.keys.secret_live)
            .send()
            .await
            .ok(200)
            .as_array()
            .unwrap()
            .len(),
        0
    );
    s.get(&format!("/v1/sessions/{bot_sid}"))
        .key(&s.creds.keys.secret_live)
        .send()
        .await
        .err(404, "resource.not_found");
    let other = s.second_organization("second").await;
    s.get(&format!("/v1/sessions/{bot_sid}"))
        .key(&other.keys.secret_test)
        .send()
        .await
        .err(404, "resource.not_found");
    // Scopes and key types (docs/architecture.md#scopes).
    let lister = s.create_key(sk, json!({"name": "lister", "type": "secret", "environment": "test", "scopes": ["sessions:list"]})).await;
    let lister = lister["revealed_key"].as_str().unwrap();
    s.get("/v1/sessions").key(lister).send().await.ok(200);
    s.get(&format!("/v1/sessions/{bot_sid}"))
        .key(lister)
        .send()
        .await
        .err(403, "auth.insufficient_scope");
    s.get("/v1/sessions")
        .key(&s.creds.keys.publishable_test)
        .send()
        .await
        .err(403, "auth.credential_type_not_allowed");
    s.get("/v1/sessions/sid_bad")
        .key(sk)
        .send()
        .await
        .err(422, "request.validation_failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_page_shows_a_decision_opened_server_side() {
    let s = TestServer::start().await;
    let page = s.get("/demo").send().await;
    assert_eq!(page.status, 200);
    assert!(page.text.contains(&s.creds.keys.publishable_test));
    assert!(page.text.contains("/sdk/v1/vigil.js"));
    for secret in [&s.creds.keys.secret_test, &s.creds.keys.secret_live] {
        assert!(
            !page.text.contains(secret.as_str()),
            "no secret key reaches the browser"
        );
    }

    let (session, _) = scored_session(
        &s,
        json!({"kind": "probes", "automation": {"webdriver": true}}),
    )
    .await;
    let pk = &s.creds.keys.publishable_test;
    let handoff = session.results(&s, pk).send().await.ok(200)["handoff"].clone();
    let shown = s
        .post("/demo/decision")
        .json(json!({"handoff": handoff}))
        .send()
        .await;
    let shown = shown.ok(200);
    assert_eq!(shown["session_id"], session.id.as_str());
    assert_eq!(shown["decision"]["verdict"], "bot");
    s.post("/demo/decision")
        .json(json!({"handoff": "vh1.k1.bad"}))
        .send()
        .await
        .err(422, "request.validation_failed");
}

/// `verdict=` reads its own index (docs/architecture.md#lists): with the wanted verdict scattered
/// among many sessions of another, every page before the last is full and `has_more` is true
/// exactly while more follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verdict_filtered_session_pages_are_full_until_the_last() {
    use schemas::decision::Verdict;
    use store::{RawJson, SessionRecord};
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_test;
    let org: schemas::ids::OrgId = s.creds.org_id().parse().unwrap();
    let env = schemas::credential::Environment::Test;
    let mut ids: Vec<schemas::SessionId> =
        (0..2_400).map(|_| schemas::SessionId::generate()).collect();
    ids.sort();
    let mut humans = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        // One human in 24: far sparser than a page per scan budget.
        let verdict = if i % 24 == 0 {
            Verdict::Human
        } else {
            Verdict::Bot
        };
        let now = schemas::time::now();
        let session = SessionRecord {
            id: *id,
            organization_id: org,
            environment: env,
            visitor_id: None,
            opened_at: now,
            updated_at: now,
            page_url: "https://shop.example/".into(),
            ip: "203.0.113.7".into(),
            user_agent: "bulk/1.0".into(),
            processed_through: 0,
            processed_seqs: Vec::new(),
            state: RawJson::null(),
            latest_decision: Some(vigil_tests::collect::stored_decision(verdict)),
            finalized: true,
        };
        s.store().save_session(&session, None, &[]).await.unwrap();
        if verdict == Verdict::Human {
            humans.push(id.to_string());
        }
    }
    humans.reverse(); // newest first
    for limit in [7, 50, 100] {
        let pages = s
            .pages(sk, &format!("/v1/sessions?verdict=human&limit={limit}"))
            .await;
        let (last, full) = pages.split_last().unwrap();
        assert!(
            full.iter().all(|p| p.len() == limit) && !last.is_empty(),
            "limit {limit}: every page before the last is full"
        );
        let rows: Vec<&Value> = pages.iter().flatten().collect();
        assert!(
            rows.iter()
                .all(|r| r["latest_decision"]["verdict"] == "human")
        );
        let read: Vec<String> = rows
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            read, humans,
            "limit {limit}: every human session once, newest first"
        );
    }
}
