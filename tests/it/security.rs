//! Security hardening, black-box over real HTTP: what real clients and attackers do to the
//! surface. Secret keys survive real server-side clients (Node's fetch, Python's requests,
//! curl) and are revoked only on browser routes; the environment model; publishable keys
//! limited per client address; unpredictable ids; a handoff opens once; idempotent replays
//! re-check the caller; the demo is no oracle; floods without credentials stay cheap. Each part
//! below names the section of docs/architecture.md it checks.

use std::collections::HashSet;

use reqwest::Method;
use schemas::credential::Environment;
use vigil_tests::collect::{open_session, score_session};
use vigil_tests::{TestServer, json, run_client};

// ---- Secret keys are revoked on browser routes only (docs/architecture.md#exposed-keys) ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_server_side_clients_keep_their_secret_keys() {
    let s = TestServer::start().await;
    let url = format!("{}{}", s.base, s.org_path());
    let sk = s.creds.keys.secret_live.clone();
    // Node's built-in fetch sends `sec-fetch-mode: cors`, `accept-language: *` and
    // `user-agent: node` on every call. Each client calls three times, with an `Origin` header
    // on the last, as a server-side framework forwarding a page's request would.
    let node = r#"
        const [url, key] = process.argv.slice(1);
        (async () => {
          const statuses = [];
          for (const origin of [null, null, 'https://shop.example']) {
            const headers = { authorization: `Bearer ${key}` };
            if (origin) headers.origin = origin;
            const r = await fetch(url, { headers });
            statuses.push(r.status);
          }
          console.log(statuses.join(','));
        })().catch((e) => { console.error(e); process.exit(1); });
    "#;
    assert_eq!(run_client("node", &["-e", node, &url, &sk]), "200,200,200");
    let python = r#"
import sys, requests
url, key = sys.argv[1:]
statuses = []
for origin in [None, None, "https://shop.example"]:
    headers = {"Authorization": "Bearer " + key}
    if origin:
        headers["Origin"] = origin
    statuses.append(str(requests.get(url, headers=headers).status_code))
print(",".join(statuses))
"#;
    assert_eq!(
        run_client("python3", &["-c", python, &url, &sk]),
        "200,200,200"
    );
    let curl = |extra: &[&str]| {
        let auth = format!("authorization: Bearer {sk}");
        let mut args = vec!["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", &auth];
        args.extend_from_slice(extra);
        args.push(&url);
        run_client("curl", &args)
    };
    assert_eq!(curl(&[]), "200");
    assert_eq!(
        curl(&[
            "-H",
            "origin: https://shop.example",
            "-H",
            "sec-fetch-mode: navigate"
        ]),
        "200"
    );
    // Exactly Node 20 fetch's headers, once more through the test kit's client.
    let r = s
        .get(&s.org_path())
        .key(&sk)
        .header("accept", "*/*")
        .header("accept-language", "*")
        .header("sec-fetch-mode", "cors")
        .header("user-agent", "node")
        .header("accept-encoding", "gzip, deflate")
        .send()
        .await;
    r.ok(200);
    assert_eq!(s.metric("vigil_secret_keys_exposed_total").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_key_on_a_browser_route_is_revoked_at_once() {
    let s = TestServer::start().await;
    let key = s
        .create_key(
            &s.creds.keys.secret_test,
            json!({"name": "pasted into a page"}),
        )
        .await;
    let sk = key["revealed_key"].as_str().unwrap().to_owned();
    // No browser headers at all: the route is the evidence.
    s.post("/v1/collect/sessions")
        .key(&sk)
        .json(json!({}))
        .send()
        .await
        .err(401, "auth.key_exposed");
    s.get(&s.org_path())
        .key(&sk)
        .send()
        .await
        .err(401, "auth.invalid_credentials");
    let read = s
        .get(&format!(
            "{}/api-keys/{}",
            s.org_path(),
            key["id"].as_str().unwrap()
        ))
        .key(&s.creds.keys.secret_test)
        .send()
        .await;
    assert_eq!(read.ok(200)["status"], "revoked");
    assert_eq!(s.metric("vigil_secret_keys_exposed_total").await, 1.0);
    // Every browser route, the network check's WebSocket included.
    for (method, path) in [
        (
            Method::GET,
            "/v1/collect/pings/png_00000000000000000000000000",
        ),
        (Method::POST, "/v1/collect/network-checks"),
        (Method::GET, "/v1/collect/ws"),
    ] {
        let key = s
            .create_key(&s.creds.keys.secret_test, json!({"name": "another"}))
            .await;
        s.call(method, path)
            .key(key["revealed_key"].as_str().unwrap())
            .send()
            .await
            .err(401, "auth.key_exposed");
    }
}

// ---- The environment model (docs/architecture.md#environments) ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_key_manages_both_environments_and_a_test_key_only_its_own() {
    let s = TestServer::start().await;
    let keys = format!("{}/api-keys", s.org_path());
    let live = s.creds.keys.secret_live.clone();
    let test = s.creds.keys.secret_test.clone();

    // Defaults: a secret key of the caller's environment with the caller's scopes.
    let made = s.create_key(&live, json!({"name": "defaults"})).await;
    assert_eq!(made["type"], "secret");
    assert_eq!(made["environment"], "live");
    assert!(
        made["revealed_key"]
            .as_str()
            .unwrap()
            .starts_with("sk_live_")
    );
    let all_scopes = made["scopes"].clone();
    assert_eq!(all_scopes.as_array().unwrap().len(), 14, "{made}");
    let by_test = s.create_key(&test, json!({"name": "test default"})).await;
    assert_eq!(by_test["environment"], "test");

    // A live key creates, reads, updates and revokes a test key.
    let leaked = s
        .create_key(&live, json!({"name": "ci", "environment": "test"}))
        .await;
    assert_eq!(leaked["environment"], "test");
    let leaked_id = leaked["id"].as_str().unwrap().to_owned();
    let leaked_sk = leaked["revealed_key"].as_str().unwrap().to_owned();
    let one = format!("{keys}/{leaked_id}");
    assert_eq!(
        s.get(&one).key(&live).send().await.ok(200)["id"],
        leaked_id.as_str()
    );
    s.patch(&one)
        .key(&live)
        .json(json!({"name": "ci (leaked)"}))
        .send()
        .await
        .ok(200);
    // Lists show both environments, and `?environment=` filters.
    let listed = s.get(&format!("{keys}?limit=200")).key(&live).send().await;
    let envs: HashSet<&str> = listed
        .ok(200)
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["environment"].as_str().unwrap())
        .collect();
    assert_eq!(envs, HashSet::from(["live", "test"]));
    for env in ["live", "test"] {
        let only = s
            .get(&format!("{keys}?environment={env}&limit=200"))
            .key(&live)
            .send()
            .await;
        assert!(
            only.ok(200)
                .as_array()
                .unwrap()
                .iter()
                .all(|k| k["environment"] == env)
        );
    }
    s.get(&format!("{keys}?environment=staging"))
        .key(&live)
        .send()
        .await
        .err(422, "request.validation_failed");
    // The owner revokes the leaked test key with the live one.
    assert_eq!(
        s.delete(&one).key(&live).send().await.ok(200)["status"],
        "revoked"
    );
    s.get(&s.org_path())
        .key(&leaked_sk)
        .send()
        .await
        .err(401, "auth.invalid_credentials");
    let rotated = s
        .post(&format!(
            "{keys}/{}/rotations",
            by_test["id"].as_str().unwrap()
        ))
        .key(&live)
        .send()
        .await;
    assert_eq!(rotated.ok(201)["environment"], "test");

    // A test key: its own environment only, and no change to the organization.
    let only_test = s.get(&format!("{keys}?limit=200")).key(&test).send().await;
    assert!(
        only_test
            .ok(200)
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k["environment"] == "test")
    );
    s.get(&format!("{keys}?environment=live"))
        .key(&test)
        .send()
        .await
        .err(403, "auth.environment_not_allowed");
    s.get(&format!("{keys}/{}", made["id"].as_str().unwrap()))
        .key(&test)
        .send()
        .await
        .err(404, "resource.not_found");
    s.delete(&format!("{keys}/{}", made["id"].as_str().unwrap()))
        .key(&test)
        .send()
        .await
        .err(404, "resource.not_found");
    s.post(&keys)
        .key(&test)
        .json(json!({"name": "escalate", "environment": "live"}))
        .send()
        .await
        .err(403, "auth.environment_not_allowed");
    s.patch(&s.org_path())
        .key(&test)
        .json(json!({"status": "suspended"}))
        .send()
        .await
        .err(403, "auth.environment_not_allowed");
    s.post("/v1/organizations")
        .key(&test)
        .json(json!({"name": "Other", "slug": "other-by-test"}))
        .send()
        .await
        .err(403, "auth.environment_not_allowed");
    let org = s.get(&s.org_path()).key(&live).send().await;
    assert_eq!(
        org.ok(200)["status"],
        "active",
        "the test key suspended nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omitted_scopes_grant_what_the_caller_holds_and_never_more() {
    let s = TestServer::start().await;
    let keys = format!("{}/api-keys", s.org_path());
    let narrow = s
        .create_key(
            &s.creds.keys.secret_live,
            json!({"name": "narrow", "scopes": ["api_keys:manage", "sessions:read"]}),
        )
        .await;
    let narrow_sk = narrow["revealed_key"].as_str().unwrap();
    let child = s.create_key(narrow_sk, json!({"name": "child"})).await;
    assert_eq!(child["scopes"], narrow["scopes"], "{child}");
    assert_eq!(child["scopes"].as_array().unwrap().len(), 2);
    s.post(&keys)
        .key(narrow_sk)
        .json(json!({"name": "wider", "scopes": ["organizations:update"]}))
        .send()
        .await
        .err(403, "auth.insufficient_scope");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_organizations_live_keys_can_handle_an_incident() {
    let s = TestServer::start().await;
    let keys = format!("{}/api-keys", s.org_path());
    let live = s.creds.keys.secret_live.clone();
    let test = s.creds.keys.secret_test.clone();
    let leaked = s
        .create_key(&live, json!({"name": "leaked", "environment": "test"}))
        .await;
    let spare = s.create_key(&live, json!({"name": "spare"})).await;
    s.patch(&s.org_path())
        .key(&live)
        .json(json!({"status": "suspended"}))
        .send()
        .await
        .ok(200);
    // Live: list, read, revoke, rotate.
    s.get(&keys).key(&live).send().await.ok(200);
    let one = format!("{keys}/{}", leaked["id"].as_str().unwrap());
    s.get(&one).key(&live).send().await.ok(200);
    assert_eq!(
        s.delete(&one).key(&live).send().await.ok(200)["status"],
        "revoked"
    );
    s.post(&format!(
        "{keys}/{}/rotations",
        spare["id"].as_str().unwrap()
    ))
    .key(&live)
    .send()
    .await
    .ok(201);
    // Not creating keys, and not the test key.
    s.post(&keys)
        .key(&live)
        .json(json!({"name": "new"}))
        .send()
        .await
        .err(403, "organization.suspended");
    s.get(&keys)
        .key(&test)
        .send()
        .await
        .err(403, "organization.suspended");
    s.patch(&s.org_path())
        .key(&live)
        .json(json!({"status": "active"}))
        .send()
        .await
        .ok(200);
}

// ---- Publishable keys are limited per client address (docs/architecture.md#rate-limits) ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_use_up_another_addresss_publishable_budget() {
    let s =
        TestServer::start_with(|a| a.trusted_proxy = vec!["127.0.0.1/32".parse().unwrap()]).await;
    let pk = s.creds.keys.publishable_test.clone();
    let id = s
        .get(&format!("{}/api-keys?environment=test", s.org_path()))
        .key(&s.creds.keys.secret_live)
        .send()
        .await
        .ok(200)
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["type"] == "publishable")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    s.edit_key(Environment::Test, &id, |k| k.rate_limit_override = Some(3))
        .await;
    let from = |addr: &'static str| {
        s.post("/v1/collect/sessions")
            .key(&pk)
            .header("x-forwarded-for", addr)
            .json(json!({}))
    };
    // The scraper at one address spends its budget and is refused.
    for left in [2, 1, 0] {
        let r = from("198.51.100.1").send().await;
        assert_ne!(r.status, 429, "{}", r.body);
        assert_eq!(
            r.header("x-ratelimit-remaining").as_deref(),
            Some(&*left.to_string())
        );
    }
    let refused = from("198.51.100.1").send().await;
    refused.err(429, "rate.limited");
    assert!(refused.header("retry-after").is_some());
    // A visitor at another address is unaffected, and so is one in another /64.
    let other = from("198.51.100.2").send().await;
    assert_ne!(other.status, 429);
    assert_eq!(other.header("x-ratelimit-remaining").as_deref(), Some("2"));
    // IPv6 counts by /64: two addresses of one /64 share a bucket.
    for _ in 0..3 {
        assert_ne!(from("2001:db8:1:2::1").send().await.status, 429);
    }
    from("2001:db8:1:2:ffff::9")
        .send()
        .await
        .err(429, "rate.limited");
    assert_ne!(from("2001:db8:1:3::1").send().await.status, 429);
    // A secret key keeps one bucket, wherever its calls come from.
    let sk_id = s
        .create_key(&s.creds.keys.secret_test, json!({"name": "backend"}))
        .await;
    s.edit_key(Environment::Test, sk_id["id"].as_str().unwrap(), |k| {
        k.rate_limit_override = Some(2)
    })
    .await;
    let sk = sk_id["revealed_key"].as_str().unwrap();
    for addr in ["198.51.100.5", "198.51.100.6"] {
        s.get(&s.org_path())
            .key(sk)
            .header("x-forwarded-for", addr)
            .send()
            .await
            .ok(200);
    }
    s.get(&s.org_path())
        .key(sk)
        .header("x-forwarded-for", "198.51.100.7")
        .send()
        .await
        .err(429, "rate.limited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cannot_pick_its_address_past_a_trusted_proxy() {
    let s = TestServer::start_with(|a| {
        a.trusted_proxy = vec!["127.0.0.1/32".parse().unwrap()];
        a.anonymous_rate_limit = 2;
    })
    .await;
    // The client prepends addresses of its own choosing; the proxy appended the real one, so
    // every request counts against 203.0.113.9.
    for spoof in ["1.1.1.1", "2.2.2.2"] {
        let r = s
            .get("/v1/sessions")
            .header("x-forwarded-for", &format!("{spoof}, 203.0.113.9"))
            .send()
            .await;
        r.err(401, "auth.missing_credentials");
    }
    s.get("/v1/sessions")
        .header("x-forwarded-for", "3.3.3.3, 203.0.113.9")
        .send()
        .await
        .err(429, "rate.limited");
    // An `ip:port` entry names its address; it is not skipped to reach the spoofed one.
    s.get("/v1/sessions")
        .header("x-forwarded-for", "3.3.3.3, 203.0.113.9:5555")
        .send()
        .await
        .err(429, "rate.limited");
}

// ---- Unguessable identifiers (docs/architecture.md#ids-and-credentials) ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_made_together_share_no_random_part() {
    let s = TestServer::start().await;
    let keys = format!("{}/api-keys", s.org_path());
    let calls = (0..40).map(|i| {
        s.post(&keys)
            .key(&s.creds.keys.secret_test)
            .json(json!({"name": format!("k{i}")}))
            .send()
    });
    let answers = futures::future::join_all(calls).await;
    let mut ids: Vec<String> = Vec::new();
    for r in &answers {
        ids.push(r.ok(201)["id"].as_str().unwrap().to_owned());
        ids.push(r.header("x-request-id").unwrap());
    }
    for _ in 0..10 {
        let session = open_session(&s, &s.creds.keys.publishable_test).await;
        ids.push(session.id.clone());
    }
    // The 80 bits after the 48-bit time prefix, from the 26 base32 characters of each id.
    let random_parts: Vec<u128> = ids
        .iter()
        .map(|id| {
            let ulid = ulid::Ulid::from_string(&id[id.find('_').unwrap() + 1..].to_uppercase())
                .unwrap_or_else(|e| panic!("{id}: {e}"));
            ulid.random()
        })
        .collect();
    let distinct: HashSet<u128> = random_parts.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "no two ids share a random part");
    let mut sorted = random_parts.clone();
    sorted.sort();
    for pair in sorted.windows(2) {
        assert!(
            pair[1] - pair[0] > 1_000_000,
            "random parts are far apart, not an increment: {pair:?}"
        );
    }
}

// ---- A handoff opens once (docs/architecture.md#collect-transport) ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_opens_once() {
    let s = TestServer::start().await;
    let (session, _) = score_session(
        &s,
        &json!({"kind": "probes", "automation": {"webdriver": true}}),
        None,
        |a| a["decision"]["decision_status"] == "final",
    )
    .await;
    let sid = session.id.clone();
    let sk = &s.creds.keys.secret_test;
    let mint = || async {
        session
            .results(&s, &s.creds.keys.publishable_test)
            .send()
            .await
            .ok(200)["handoff"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let handoff = mint().await;
    let open = |idempotency: Option<&'static str>| {
        let mut call = s
            .post("/v1/handoffs/open")
            .key(sk)
            .json(json!({"handoff": handoff}));
        if let Some(k) = idempotency {
            call = call.header("idempotency-key", k);
        }
        call.send()
    };
    let first = open(Some("open-1")).await;
    assert_eq!(first.ok(200)["session_id"], sid.as_str());
    assert_eq!(first.body["data"]["decision"]["verdict"], "bot");
    // The same open retried (a dropped connection) gets the same answer.
    let retried = open(Some("open-1")).await;
    assert_eq!(
        retried.header("idempotent-replayed").as_deref(),
        Some("true")
    );
    assert_eq!(retried.ok(200), first.ok(200));
    // Any other open is refused, with when it was first opened.
    for again in [open(None).await, open(Some("open-2")).await] {
        let e = again.err(409, "handoff.already_opened");
        let at = e["details"]["first_opened_at"].as_str().unwrap();
        assert!(at.ends_with('Z') && at.len() == 24, "{at}");
    }
    // Another organization's key cannot burn it (it reads as absent), nor another environment's.
    let other = s.second_organization("other-org").await;
    let fresh = mint().await;
    for key in [&other.keys.secret_test, &s.creds.keys.secret_live] {
        s.post("/v1/handoffs/open")
            .key(key)
            .json(json!({"handoff": fresh}))
            .send()
            .await
            .err(404, "resource.not_found");
    }
    // Opened together by many clients, one wins.
    let racing = (0..6).map(|_| {
        s.post("/v1/handoffs/open")
            .key(sk)
            .json(json!({"handoff": fresh}))
            .send()
    });
    let statuses: Vec<u16> = futures::future::join_all(racing)
        .await
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 409).count(),
        5,
        "{statuses:?}"
    );
}

// ---- Replays re-check the caller (docs/architecture.md#idempotency) ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_is_answered_only_to_a_caller_that_could_still_ask() {
    let s = TestServer::start().await;
    let keys = format!("{}/api-keys", s.org_path());
    let live = s.creds.keys.secret_live.clone();
    let create_with = |key: String| {
        s.post(&keys)
            .key(&key)
            .header("idempotency-key", "mint-once")
            .json(json!({"name": "minted"}))
            .send()
    };

    // A revoked key's retry is a 401, not the stored secret.
    let revoked = s.create_key(&live, json!({"name": "soon revoked"})).await;
    let revoked_sk = revoked["revealed_key"].as_str().unwrap().to_owned();
    let first = create_with(revoked_sk.clone()).await;
    let secret = first.ok(201)["revealed_key"].as_str().unwrap().to_owned();
    s.delete(&format!("{keys}/{}", revoked["id"].as_str().unwrap()))
        .key(&live)
        .send()
        .await
        .ok(200);
    let retry = create_with(revoked_sk).await;
    retry.err(401, "auth.invalid_credentials");
    assert!(!retry.text.contains(&secret));

    // A key that lost the route's scope gets a 403, not the stored secret.
    let narrowed = s.create_key(&live, json!({"name": "soon narrowed"})).await;
    let narrowed_sk = narrowed["revealed_key"].as_str().unwrap().to_owned();
    let first = create_with(narrowed_sk.clone()).await;
    let secret = first.ok(201)["revealed_key"].as_str().unwrap().to_owned();
    s.patch(&format!("{keys}/{}", narrowed["id"].as_str().unwrap()))
        .key(&live)
        .json(json!({"scopes": ["sessions:read"]}))
        .send()
        .await
        .ok(200);
    let retry = create_with(narrowed_sk.clone()).await;
    let e = retry.err(403, "auth.insufficient_scope");
    assert_eq!(e["details"]["allowed_values"], json!(["api_keys:manage"]));
    assert!(!retry.text.contains(&secret));
    // While the key still could, the replay is the stored answer.
    let kept = s.create_key(&live, json!({"name": "kept"})).await;
    let kept_sk = kept["revealed_key"].as_str().unwrap().to_owned();
    let first = create_with(kept_sk.clone()).await;
    let again = create_with(kept_sk).await;
    assert_eq!(again.header("idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(again.ok(201)["revealed_key"], first.ok(201)["revealed_key"]);
}

// ---- The demo is no oracle (docs/architecture.md#demo-page) ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_opens_only_the_development_organizations_test_handoffs() {
    let s = TestServer::start().await;
    // A live handoff of the development organization is not the demo's to open.
    let live = open_session(&s, &s.creds.keys.publishable_live).await;
    let handoff = live
        .results(&s, &s.creds.keys.publishable_live)
        .send()
        .await
        .ok(200)["handoff"]
        .clone();
    s.post("/demo/decision")
        .json(json!({"handoff": handoff}))
        .send()
        .await
        .err(404, "resource.not_found");
    // Nor another organization's.
    let other = s.second_organization("demo-other").await;
    let theirs = open_session(&s, &other.keys.publishable_test).await;
    let handoff = theirs
        .results(&s, &other.keys.publishable_test)
        .send()
        .await
        .ok(200)["handoff"]
        .clone();
    s.post("/demo/decision")
        .json(json!({"handoff": handoff}))
        .send()
        .await
        .err(404, "resource.not_found");

    let off = TestServer::start_with(|a| a.demo = false).await;
    off.get("/demo")
        .send()
        .await
        .err(404, "request.route_not_found");
    off.post("/demo/decision")
        .json(json!({"handoff": "vh1.k1.x"}))
        .send()
        .await
        .err(404, "request.route_not_found");
}

// ---- Floods without credentials (docs/architecture.md#connections) ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflights_and_unknown_routes_are_charged_to_the_address() {
    let s = TestServer::start_with(|a| a.anonymous_rate_limit = 4).await;
    let preflight = || {
        s.call(Method::OPTIONS, "/v1/collect/sessions")
            .header("origin", "https://shop.example")
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization, content-type",
            )
            .send()
    };
    for left in ["3", "2"] {
        let r = preflight().await;
        assert_eq!(r.status, 204);
        assert_eq!(
            r.header("access-control-allow-origin").as_deref(),
            Some("https://shop.example")
        );
        assert_eq!(r.header("x-ratelimit-remaining").as_deref(), Some(left));
    }
    let r = s.get("/v1/no-such-route").send().await;
    r.err(404, "request.route_not_found");
    assert_eq!(r.header("x-ratelimit-remaining").as_deref(), Some("1"));
    s.call(Method::OPTIONS, "/v1/sessions")
        .send()
        .await
        .err(405, "request.method_not_allowed");
    s.get("/wp-login.php").send().await.err(429, "rate.limited");
    let refused = preflight().await;
    refused.err(429, "rate.limited");
    // A key's own bucket is untouched by the address's.
    s.get(&s.org_path())
        .key(&s.creds.keys.secret_test)
        .send()
        .await
        .ok(200);
    // Probes stay free: they are how an operator sees the flood.
    assert_eq!(s.get("/healthz").send().await.status, 200);
}
