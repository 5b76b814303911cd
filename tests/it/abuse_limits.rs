//! The limits that keep one tenant, or one client with a site's public key, from using up the
//! shared server (issue 55), each through the real interface: the `User-Agent` kept to 512
//! bytes and request headers to 32 KiB on every listener; exports capped per organization and
//! environment, bounded by bytes, and stopped by their key's revocation; API keys and webhook
//! endpoints capped in the store's own step; `Cache-Control: no-store` on every answer the
//! OpenAPI document says may carry a token or a secret; one rule for display names; `q=0`.

use std::time::{Duration, Instant};

use p256::elliptic_curve::Generate;
use serde_json::{Value, json};
use vigil_tests::analysts::probes;
use vigil_tests::collect::{client_public_key, logged_batches, open_session, score_session};
use vigil_tests::{Resp, TestServer};

/// A secret key of the development organization's test environment, made for one test.
async fn secret_test_key(s: &TestServer, name: &str) -> (String, String) {
    let key = s
        .create_key(
            &s.creds.keys.secret_test,
            json!({"name": name, "type": "secret", "environment": "test"}),
        )
        .await;
    (
        key["id"].as_str().unwrap().to_owned(),
        key["revealed_key"].as_str().unwrap().to_owned(),
    )
}

/// `count` events of the test environment, each with about `bytes` of data, written straight to
/// the store (an export reads them as it reads any).
async fn seed_events(s: &TestServer, count: usize, bytes: usize) {
    let org: schemas::OrgId = s.creds.org_id().parse().unwrap();
    let padding = "e".repeat(bytes);
    let now = schemas::time::now();
    let events: Vec<store::EventRecord> = (0..count)
        .map(|i| store::EventRecord {
            id: schemas::EventId::generate(),
            organization_id: org,
            environment: schemas::credential::Environment::Test,
            event_type: schemas::events::EventType::WebhookTest,
            subject: schemas::events::EventSubject {
                kind: "webhook_endpoint".into(),
                id: format!("we_{i:032x}"),
            },
            data: json!({ "padding": padding }),
            created_at: now,
        })
        .collect();
    for chunk in events.chunks(100) {
        s.store().record_events(chunk).await.unwrap();
    }
}

fn events_export(s: &TestServer) -> String {
    format!("{}{}/events/export", s.base, s.org_path())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_user_agent_is_kept_to_512_bytes_with_its_length_noted() {
    let s = TestServer::start().await;
    // 20,000 bytes, under the cap on headers, with a two-byte character across byte 512.
    let long = format!("{}é{}", "M".repeat(511), "x".repeat(20_000 - 513));
    assert_eq!(long.len(), 20_000);
    let final_decision = |a: &Value| a["decision"]["decision_status"] == "final";
    let (cut, _) = score_session(&s, &probes(), Some(&long), final_decision).await;
    let (whole, _) = score_session(&s, &probes(), Some("Browser/1.0"), final_decision).await;
    let records = logged_batches(&s).await;
    let first_batch = |id: &str| {
        records
            .iter()
            .find(|r| r["session_id"] == id && r["seq"] == 1)
            .cloned()
            .expect("the session's first batch is logged")
    };
    let request = first_batch(&cut.id)["request"].clone();
    assert_eq!(request["user_agent"], "M".repeat(511), "cut on a boundary");
    assert_eq!(request["user_agent_bytes"], 20_000, "the length received");
    let request = first_batch(&whole.id)["request"].clone();
    assert_eq!(request["user_agent"], "Browser/1.0");
    assert!(
        request.get("user_agent_bytes").is_none(),
        "a whole one is not marked: {request}"
    );
    // What the session keeps, and what an export carries, is the cut one.
    let stored = s
        .get(&format!("/v1/sessions/{}", cut.id))
        .key(&s.creds.keys.secret_test)
        .send()
        .await;
    let shown = stored.ok(200).to_string();
    assert!(shown.contains(&"M".repeat(511)), "{shown}");
    assert!(!shown.contains("xxxx"), "nothing past the cut is kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_headers_over_32_kib_are_refused_with_431_in_the_envelope() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_test;
    s.get(&s.org_path())
        .key(sk)
        .header("x-padding", &"a".repeat(31 * 1024))
        .send()
        .await
        .ok(200);
    let e = s
        .get(&s.org_path())
        .key(sk)
        .header("x-padding", &"a".repeat(40 * 1024))
        .send()
        .await;
    let refused = e.err(431, "request.headers_too_large").clone();
    assert_eq!(refused["retryable"], false);
    // Many headers count together, on any route (a batch route with a site's public key here).
    let session = open_session(&s, &s.creds.keys.publishable_test).await;
    let mut call = s
        .post(&format!("/v1/collect/sessions/{}/batches", session.id))
        .key(&s.creds.keys.publishable_test);
    for i in 0..10 {
        call = call.header(&format!("x-part-{i}"), &"b".repeat(4 * 1024));
    }
    call.json(session.batch(1, &probes()))
        .send()
        .await
        .err(431, "request.headers_too_large");
    assert!(
        logged_batches(&s)
            .await
            .iter()
            .all(|r| r["session_id"] != session.id),
        "nothing of a refused request reaches the log"
    );
    // Far beyond, the connection is refused before its head is read whole (a bare 431 or a
    // reset), and the server goes on serving.
    let huge = s
        .client
        .get(format!("{}/healthz", s.base))
        .header("user-agent", "u".repeat(400 * 1024))
        .send()
        .await;
    if let Ok(answer) = huge {
        assert_eq!(answer.status().as_u16(), 431);
    }
    s.get("/healthz").send().await;
    assert_eq!(s.get("/healthz").send().await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_http1_and_http2_answer_431_the_same() {
    let (s, _dir, tls) = vigil_tests::tls::serving(|_| {}).await;
    let port = s.base.rsplit(':').next().unwrap();
    let url = format!("https://localhost:{port}{}", s.org_path());
    for http1_only in [true, false] {
        let mut tls = (*tls).clone();
        if !http1_only {
            tls.alpn_protocols = vec![b"h2".to_vec()];
        }
        let builder = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .no_proxy();
        let client = if http1_only {
            builder.http1_only()
        } else {
            builder
        }
        .build()
        .unwrap();
        let answer = client
            .get(&url)
            .bearer_auth(&s.creds.keys.secret_test)
            .header("x-padding", "a".repeat(40 * 1024))
            .send()
            .await
            .unwrap();
        let version = answer.version();
        assert_eq!(answer.status().as_u16(), 431, "{version:?}");
        let body: Value = answer.json().await.unwrap();
        assert_eq!(
            body["error"]["code"], "request.headers_too_large",
            "{version:?}"
        );
        if !http1_only {
            assert_eq!(version, reqwest::Version::HTTP_2);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_at_once_are_capped_per_organization_and_environment_not_per_key() {
    let s = TestServer::start().await;
    // More than the sockets' buffers hold, so an export nobody reads stays running.
    seed_events(&s, 1_000, 20_000).await;
    let mut keys = Vec::new();
    for i in 0..3 {
        keys.push(secret_test_key(&s, &format!("exporter {i}")).await.1);
    }
    let start = |key: String| {
        let url = format!("{}?format=ndjson", events_export(&s));
        let client = s.client.clone();
        async move { client.get(url).bearer_auth(key).send().await.unwrap() }
    };
    let first = start(keys[0].clone()).await;
    let second = start(keys[1].clone()).await;
    assert_eq!(
        (first.status().as_u16(), second.status().as_u16()),
        (200, 200)
    );
    // A third key of the same organization and environment is one export too many.
    let third = start(keys[2].clone()).await;
    assert_eq!(third.status(), 429);
    assert!(third.headers().contains_key("retry-after"));
    let e: Value = third.json().await.unwrap();
    assert_eq!(e["error"]["code"], "rate.limited");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("this organization"),
        "{e}"
    );
    // The other environment has its own.
    let live = s
        .client
        .get(format!("{}?format=ndjson", events_export(&s)))
        .bearer_auth(&s.creds.keys.secret_live)
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), 200);
    // One export given up frees its place.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let again = start(keys[2].clone()).await;
        if again.status() == 200 {
            break;
        }
        assert_eq!(again.status(), 429);
        assert!(Instant::now() < deadline, "the place was never freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exports_record_batches_are_bounded_by_bytes_not_rows() {
    let s = TestServer::start().await;
    // 600 rows of about 16 KiB: under one page of the 65,536 rows asked for, ten of bytes.
    seed_events(&s, 600, 16 * 1024).await;
    let answer = s
        .client
        .get(format!("{}?batch_size=65536", events_export(&s)))
        .bearer_auth(&s.creds.keys.secret_test)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let bytes = answer.bytes().await.unwrap();
    let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .expect("an Arrow stream");
    let rows: Vec<usize> = reader.map(|b| b.expect("a batch").num_rows()).collect();
    assert_eq!(rows.iter().sum::<usize>(), 600, "{rows:?}");
    // A page is about 1 MiB whatever `batch_size` asks: 64 rows of 16 KiB, once the first page
    // has been measured. Before that, the first page and the one read ahead of it are 256 rows.
    assert!(rows.len() >= 4, "{rows:?}");
    assert!(rows[..2].iter().all(|n| *n <= 256), "{rows:?}");
    assert!(rows[2..].iter().all(|n| *n <= 80), "{rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_key_ends_its_exports_in_flight_within_two_seconds() {
    let s = TestServer::start().await;
    // About 40 MB: far more than the sockets' buffers and a page in flight hold.
    seed_events(&s, 2_000, 20_000).await;
    let (id, key) = secret_test_key(&s, "analyst").await;
    let answer = s
        .client
        .get(format!("{}?format=ndjson", events_export(&s)))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let mut answer = answer;
    let mut before = 0;
    while before == 0 {
        before += answer.chunk().await.unwrap().expect("a first chunk").len();
    }
    s.delete(&format!("{}/api-keys/{id}", s.org_path()))
        .key(&s.creds.keys.secret_test)
        .send()
        .await
        .ok(200);
    let revoked = Instant::now();
    let (mut after, mut broken) = (0, false);
    loop {
        match answer.chunk().await {
            Ok(Some(chunk)) => after += chunk.len(),
            Ok(None) => break,
            Err(_) => {
                broken = true;
                break;
            }
        }
    }
    let took = revoked.elapsed();
    assert!(
        broken,
        "the body ends as a broken download, not a complete one"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(
        before + after < 20_000_000,
        "{} bytes of about 40 MB went out, {after} after the revocation",
        before + after
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_in_use_are_capped_at_100_per_organization() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    s.unlimit(sk).await;
    let keys = format!("{}/api-keys", s.org_path());
    let create = |env: &'static str| {
        s.post(&keys)
            .key(sk)
            .json(json!({"name": "minted", "type": "secret", "environment": env}))
            .send()
    };
    // The development organization has its four; 94 more, over both environments, make 98.
    let mut made = Vec::new();
    for i in 0..94 {
        let env = if i % 2 == 0 { "live" } else { "test" };
        made.push(create(env).await.ok(201)["id"].as_str().unwrap().to_owned());
    }
    // Five at once for the last two places.
    let racing = futures::future::join_all((0..5).map(|_| create("test"))).await;
    let statuses: Vec<u16> = racing.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        2,
        "{statuses:?}"
    );
    for refused in racing.iter().filter(|r| r.status != 201) {
        refused.err(409, "organization.api_key_limit_reached");
    }
    let listed = s.pages(sk, &format!("{keys}?limit=200")).await.concat();
    assert_eq!(listed.len(), 100, "a refused create wrote nothing");
    // A rotation takes its old key's place; a revocation frees one.
    s.post(&format!("{keys}/{}/rotations", made[0]))
        .key(sk)
        .send()
        .await
        .ok(201);
    create("live")
        .await
        .err(409, "organization.api_key_limit_reached");
    s.delete(&format!("{keys}/{}", made[1]))
        .key(sk)
        .send()
        .await
        .ok(200);
    create("live").await.ok(201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_endpoint_caps_hold_for_parallel_creates_and_for_enabling() {
    let s = TestServer::start_with(|a| a.allow_private_webhooks = true).await;
    let sk = &s.creds.keys.secret_live;
    s.unlimit(sk).await;
    let endpoints = format!("{}/webhooks/endpoints", s.org_path());
    let create = || {
        s.post(&endpoints)
            .key(sk)
            .json(json!({"name": "hooks", "url": "http://127.0.0.1:9/hook", "event_types": ["webhook.test"]}))
            .send()
    };
    // Forty at once: twenty become active, the rest are refused.
    let racing = futures::future::join_all((0..40).map(|_| create())).await;
    let made: Vec<String> = racing
        .iter()
        .filter(|r| r.status == 201)
        .map(|r| r.body["data"]["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(made.len(), 20);
    for refused in racing.iter().filter(|r| r.status != 201) {
        refused.err(409, "webhook.endpoint_limit_reached");
    }
    let active = |listed: &[Value]| listed.iter().filter(|e| e["status"] == "active").count();
    assert_eq!(
        active(
            &s.pages(sk, &format!("{endpoints}?limit=200"))
                .await
                .concat()
        ),
        20
    );
    // A disabled endpoint frees its place; enabling it again past the cap is refused.
    let disabled = &made[0];
    s.delete(&format!("{endpoints}/{disabled}"))
        .key(sk)
        .send()
        .await
        .ok(200);
    create().await.ok(201);
    s.patch(&format!("{endpoints}/{disabled}"))
        .key(sk)
        .json(json!({"status": "active"}))
        .send()
        .await
        .err(409, "webhook.endpoint_limit_reached");
    let listed = s
        .pages(sk, &format!("{endpoints}?limit=200"))
        .await
        .concat();
    assert_eq!(active(&listed), 20, "the refused PATCH wrote nothing");
    assert_eq!(listed.len(), 21);
    // Disabled endpoints count toward a cap of 100 in all: one more disabled for room, then 79
    // more made and disabled.
    s.delete(&format!("{endpoints}/{}", made[1]))
        .key(sk)
        .send()
        .await
        .ok(200);
    for _ in 0..79 {
        let id = create().await.ok(201)["id"].as_str().unwrap().to_owned();
        s.delete(&format!("{endpoints}/{id}"))
            .key(sk)
            .send()
            .await
            .ok(200);
    }
    let e = create().await;
    let message = e.err(409, "webhook.endpoint_limit_reached")["message"].clone();
    assert!(message.as_str().unwrap().contains("100"), "{message}");
    assert_eq!(
        s.pages(sk, &format!("{endpoints}?limit=200"))
            .await
            .concat()
            .len(),
        100
    );
}

/// Whether a member's name says it carries a token or a secret.
fn secret_like(member: &str) -> bool {
    member.ends_with("token")
        || member.ends_with("secret")
        || matches!(member, "revealed_key" | "handoff" | "consent_url")
}

/// The member names of `schema` and everything it holds, references followed.
fn member_names(doc: &Value, schema: &Value, depth: usize, names: &mut Vec<String>) {
    if depth > 8 {
        return;
    }
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.rsplit('/').next().unwrap();
        return member_names(doc, &doc["components"]["schemas"][name], depth + 1, names);
    }
    if let Some(properties) = schema["properties"].as_object() {
        for (name, member) in properties {
            names.push(name.clone());
            member_names(doc, member, depth + 1, names);
        }
    }
    for combined in ["allOf", "oneOf", "anyOf"] {
        for part in schema[combined].as_array().into_iter().flatten() {
            member_names(doc, part, depth + 1, names);
        }
    }
    if schema.get("items").is_some() {
        member_names(doc, &schema["items"], depth + 1, names);
    }
}

/// The operations whose success answers, by the served OpenAPI document, may carry a token or a
/// secret: (method, path).
fn secret_bearing_operations(doc: &Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (path, operations) in doc["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            let Some(responses) = operation["responses"].as_object() else {
                continue;
            };
            let mut names = Vec::new();
            for (status, response) in responses {
                if !status.starts_with('2') {
                    continue;
                }
                for content in response["content"].as_object().into_iter().flatten() {
                    member_names(doc, &content.1["schema"], 0, &mut names);
                }
            }
            if names.iter().any(|n| secret_like(n)) {
                found.push((method.to_uppercase(), path.clone()));
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_that_may_carry_a_token_or_secret_is_never_cached() {
    let s = TestServer::start_with(|a| a.allow_private_webhooks = true).await;
    let doc = s.get("/v1/openapi.json").send().await.body.clone();
    let operations = secret_bearing_operations(&doc);
    for expected in [
        ("POST", "/v1/collect/sessions"),
        ("POST", "/v1/collect/sessions/{sessionId}/results"),
        ("POST", "/v1/gate/login-sessions"),
        ("POST", "/v1/gate/services/{serviceId}/signups"),
        ("GET", "/v1/gate/sessions/{gateSessionId}"),
        ("POST", "/v1/gate/services"),
        ("POST", "/v1/organizations/{organizationId}/api-keys"),
        (
            "POST",
            "/v1/organizations/{organizationId}/api-keys/{keyId}/rotations",
        ),
        (
            "POST",
            "/v1/organizations/{organizationId}/webhooks/endpoints",
        ),
    ] {
        assert!(
            operations
                .iter()
                .any(|(m, p)| (m.as_str(), p.as_str()) == expected),
            "the walk finds {expected:?} in {operations:?}"
        );
    }
    // Every one, called as any client may call it (whatever it answers, success or refusal),
    // says no-store.
    let fake = |name: &str| match name {
        "organizationId" => s.creds.org_id().to_owned(),
        "keyId" => schemas::ids::KeyId::generate().to_string(),
        "sessionId" => schemas::SessionId::generate().to_string(),
        "endpointId" => schemas::ids::WebhookEndpointId::generate().to_string(),
        "serviceId" => "acme-cli".to_owned(),
        _ => "unknown".to_owned(),
    };
    for (method, path) in &operations {
        let mut concrete = path.clone();
        while let Some(open) = concrete.find('{') {
            let close = concrete[open..].find('}').unwrap() + open;
            let value = fake(&concrete[open + 1..close]);
            concrete.replace_range(open..=close, &value);
        }
        let key = if path.starts_with("/v1/collect/") {
            &s.creds.keys.publishable_test
        } else {
            &s.creds.keys.secret_test
        };
        let mut call = s
            .call(method.parse().unwrap(), &concrete)
            .key(key)
            .header("origin", "https://example.com");
        if matches!(method.as_str(), "POST" | "PATCH") {
            call = call.json(json!({}));
        }
        let answer = call.send().await;
        assert_eq!(
            answer.header("cache-control").as_deref(),
            Some("no-store"),
            "{method} {path} answered {} without no-store",
            answer.status
        );
    }
    // And the answers that do carry one: a collect session's token, a handoff.
    let final_decision = |a: &Value| a["decision"]["decision_status"] == "final";
    let (session, _) = score_session(&s, &probes(), None, final_decision).await;
    let opened = s
        .post("/v1/collect/sessions")
        .key(&s.creds.keys.publishable_test)
        .json(json!({
            "client_public_key": client_public_key(&p256::ecdh::EphemeralSecret::generate()),
            "page_url": "https://shop.example/",
            "sdk_version": "1.0.0",
        }))
        .send()
        .await;
    never_cached(&opened);
    let results = session
        .results(&s, &s.creds.keys.publishable_test)
        .send()
        .await;
    never_cached(&results);
}

fn never_cached(r: &Resp) {
    assert_eq!(
        r.header("cache-control").as_deref(),
        Some("no-store"),
        "{} {}",
        r.status,
        r.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn display_names_refuse_control_and_bidirectional_characters() {
    let s = TestServer::start_with(|a| a.allow_private_webhooks = true).await;
    let (live, test) = (&s.creds.keys.secret_live, &s.creds.keys.secret_test);
    let keys = format!("{}/api-keys", s.org_path());
    let endpoints = format!("{}/webhooks/endpoints", s.org_path());
    let key_id = s
        .create_key(
            live,
            json!({"name": "fine", "type": "secret", "environment": "live"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let endpoint = s
        .post(&endpoints)
        .key(live)
        .json(json!({"name": "fine", "url": "http://127.0.0.1:9/hook", "event_types": ["webhook.test"]}))
        .send()
        .await;
    let endpoint_id = endpoint.ok(201)["id"].as_str().unwrap().to_owned();
    let service = |name: &str, label: &str| {
        json!({"id": "acme-cli", "name": name, "website": "https://acme.example", "discoverable": true,
               "sdks": [{"label": label, "install": "npm i acme", "url": "https://acme.example/sdk"}]})
    };
    s.post("/v1/gate/services")
        .key(test)
        .json(service("Acme", "Node"))
        .send()
        .await
        .ok(201);
    for shown_otherwise in [
        "invoice\u{202e}fdp.exe",
        "a\u{2066}b\u{2069}",
        "x\u{200f}",
        "\u{061c}y",
        "tab\there",
        "nul\u{0}",
        "c1\u{85}",
    ] {
        let slug = format!("acme-{}", schemas::OrgId::generate().ulid()).to_lowercase();
        let sdks = json!([{"label": shown_otherwise, "install": "npm i acme", "url": "https://acme.example/sdk"}]);
        let named = json!({ "name": shown_otherwise });
        let writes = [
            (
                "POST",
                "/v1/organizations".to_owned(),
                live,
                json!({"name": shown_otherwise, "slug": slug}),
                "name",
            ),
            ("PATCH", s.org_path(), live, named.clone(), "name"),
            (
                "POST",
                keys.clone(),
                live,
                json!({"name": shown_otherwise, "type": "secret", "environment": "live"}),
                "name",
            ),
            (
                "PATCH",
                format!("{keys}/{key_id}"),
                live,
                named.clone(),
                "name",
            ),
            (
                "POST",
                endpoints.clone(),
                live,
                json!({"name": shown_otherwise, "url": "http://127.0.0.1:9/hook", "event_types": ["webhook.test"]}),
                "name",
            ),
            (
                "PATCH",
                format!("{endpoints}/{endpoint_id}"),
                live,
                named.clone(),
                "name",
            ),
            (
                "PATCH",
                "/v1/gate/services/acme-cli".to_owned(),
                test,
                named.clone(),
                "name",
            ),
            (
                "PATCH",
                "/v1/gate/services/acme-cli".to_owned(),
                test,
                json!({ "sdks": sdks }),
                "sdks[0].label",
            ),
            (
                "POST",
                "/v1/gate/services/acme-cli/signups".to_owned(),
                test,
                json!({ "client_name": shown_otherwise }),
                "client_name",
            ),
        ];
        let mut cases = Vec::new();
        for (method, path, key, body, field) in writes {
            let mut call = s.call(method.parse().unwrap(), &path).json(body);
            // A signup is the tool's, which has no key.
            if field != "client_name" {
                call = call.key(key);
            }
            cases.push((call.send().await, field));
        }
        for (answer, field) in cases {
            let e = answer.err(422, "request.validation_failed");
            let fields = e["details"]["fields"].as_array().unwrap();
            assert!(
                fields.iter().any(|f| f["name"] == field
                    && f["issue"]
                        .as_str()
                        .unwrap()
                        .contains("bidirectional formatting")),
                "{shown_otherwise:?}: {e}"
            );
        }
    }
    // Nothing refused was written.
    let names: Vec<Value> = s
        .pages(live, &format!("{keys}?limit=200"))
        .await
        .concat()
        .iter()
        .map(|k| k["name"].clone())
        .chain(
            s.pages(live, &format!("{endpoints}?limit=200"))
                .await
                .concat()
                .iter()
                .map(|e| e["name"].clone()),
        )
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.as_str().unwrap().contains('\u{202e}')),
        "{names:?}"
    );
    let read = s.get(&s.org_path()).key(live).send().await;
    assert_eq!(read.ok(200)["name"], s.creds.organization["name"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accept_weighting_a_format_zero_does_not_get_it() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_test;
    let export = |accept: &'static str| {
        s.get("/v1/sessions/export")
            .key(sk)
            .header("accept", accept)
            .send()
    };
    let ndjson = export("application/vnd.apache.arrow.stream;q=0, application/x-ndjson").await;
    assert_eq!(ndjson.status, 200);
    assert_eq!(
        ndjson.header("content-type").as_deref(),
        Some("application/x-ndjson")
    );
    let weighted = export("application/x-ndjson;q=0.4, */*;q=0.8").await;
    assert_eq!(
        weighted.header("content-type").as_deref(),
        Some("application/vnd.apache.arrow.stream")
    );
    export("*/*;q=0").await.err(406, "request.not_acceptable");
    export("application/x-ndjson;q=0, */*;q=0")
        .await
        .err(406, "request.not_acceptable");
    // The events export's refusal of a bad `after` names its ids' prefix.
    let bad = s
        .get(&format!("{}/events/export?after=evt_nope", s.org_path()))
        .key(sk)
        .send()
        .await;
    let e = bad.err(422, "request.validation_failed");
    assert!(e.to_string().contains("(wevt_)"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_listen_serves_the_metrics_apart_from_the_api() {
    let mut served = vigil_tests::served::Served::start(&["--metrics-listen", "127.0.0.1:0"]);
    let line = served.wait_for("serving /metrics apart from the API");
    let metrics = line
        .split("addr=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .expect("the metrics address in the log")
        .to_owned();
    let client = vigil_tests::http_client();
    let get = |url: String| {
        let client = client.clone();
        async move { client.get(url).send().await.unwrap() }
    };
    assert_eq!(get(format!("{}/healthz", served.base)).await.status(), 200);
    let answer = get(format!("http://{metrics}/metrics")).await;
    assert_eq!(answer.status(), 200);
    let text = answer.text().await.unwrap();
    assert!(text.contains("vigil_http_requests_total"), "{text}");
    // The API's listener no longer serves them, and the metrics' serves nothing else.
    for url in [
        format!("{}/metrics", served.base),
        format!("http://{metrics}/healthz"),
        format!("http://{metrics}/v1/organizations"),
    ] {
        let answer = get(url.clone()).await;
        assert_eq!(answer.status(), 404, "{url}");
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["error"]["code"], "request.route_not_found", "{url}");
    }
    served.terminate();
}
