//! Webhook endpoints through the real interface (docs/architecture.md: #scopes, #environments,
//! #webhooks): create (the signing secret shown once), list, get, update and delete (which
//! disables), per environment of the key; the URL rules (https, no loopback, private, link-local or
//! metadata address, by literal or by name) and `--allow-private-webhooks`; the interface's errors
//! and scopes.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;
use vigil_tests::{TestServer, json};

/// A public address literal: accepted without resolving a name, so the test needs no DNS.
const PUBLIC_URL: &str = "https://93.184.216.34/hooks/vigil";

fn endpoints(s: &TestServer) -> String {
    format!("{}/webhooks/endpoints", s.org_path())
}

/// A test secret key that may read the organization but change nothing.
async fn reader_key(s: &TestServer) -> String {
    let made = s
        .create_key(
            &s.creds.keys.secret_live,
            json!({"name": "reader", "environment": "test", "scopes": ["organizations:read"]}),
        )
        .await;
    made["revealed_key"].as_str().unwrap().to_owned()
}

async fn create(s: &TestServer, key: &str, body: Value) -> vigil_tests::Resp {
    s.post(&endpoints(s)).key(key).json(body).send().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_is_created_read_listed_updated_and_disabled() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_test;
    let r = create(
        &s,
        sk,
        json!({"name": "orders", "url": PUBLIC_URL, "event_types": ["session.result.persisted"]}),
    )
    .await;
    let made = r.ok(201).clone();
    let id = made["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("we_") && id.len() == 35, "{id}");
    assert_eq!(made["object"], "webhook_endpoint");
    assert_eq!(made["status"], "active");
    assert_eq!(made["url"], PUBLIC_URL);
    assert_eq!(made["event_types"], json!(["session.result.persisted"]));
    let secret = made["signing_secret"].as_str().unwrap().to_owned();
    let raw = STANDARD
        .decode(secret.strip_prefix("whsec_").expect("whsec_ prefix"))
        .unwrap();
    assert_eq!(raw.len(), 32, "whsec_ then the base64 of 32 random bytes");

    // Reads never show the secret again, only its last four characters.
    let read = s
        .get(&format!("{}/{id}", endpoints(&s)))
        .key(sk)
        .send()
        .await;
    let shown = read.ok(200)["signing_secret"].as_str().unwrap().to_owned();
    assert_eq!(shown, format!("whsec_••••{}", &secret[secret.len() - 4..]));
    assert!(!read.body.to_string().contains(&secret));

    // Newest first across pages.
    let mut ids = vec![id.clone()];
    for name in ["second", "third"] {
        let r = create(
            &s,
            sk,
            json!({"name": name, "url": PUBLIC_URL, "event_types": ["webhook.test"]}),
        )
        .await;
        ids.push(r.ok(201)["id"].as_str().unwrap().to_owned());
    }
    let pages = s.pages(sk, &format!("{}?limit=2", endpoints(&s))).await;
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), vec![2, 1]);
    let listed: Vec<&str> = pages
        .iter()
        .flatten()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        ids.iter().rev().map(String::as_str).collect::<Vec<_>>()
    );

    // Updates replace what they name.
    let r = s
        .patch(&format!("{}/{id}", endpoints(&s)))
        .key(sk)
        .json(json!({"name": "orders v2", "event_types": ["session.result.persisted", "session.fingerprint.calculated"]}))
        .send()
        .await;
    let updated = r.ok(200);
    assert_eq!(updated["name"], "orders v2");
    assert_eq!(updated["event_types"].as_array().unwrap().len(), 2);
    assert_eq!(updated["url"], PUBLIC_URL);

    // DELETE disables and answers the endpoint; it stays readable, and can be set active again.
    let r = s
        .delete(&format!("{}/{id}", endpoints(&s)))
        .key(sk)
        .send()
        .await;
    assert_eq!(r.ok(200)["status"], "disabled");
    let read = s
        .get(&format!("{}/{id}", endpoints(&s)))
        .key(sk)
        .send()
        .await;
    assert_eq!(read.ok(200)["status"], "disabled");
    let r = s
        .patch(&format!("{}/{id}", endpoints(&s)))
        .key(sk)
        .json(json!({"status": "active"}))
        .send()
        .await;
    assert_eq!(r.ok(200)["status"], "active");

    // The other environment and other organizations do not see it.
    s.get(&format!("{}/{id}", endpoints(&s)))
        .key(&s.creds.keys.secret_live)
        .send()
        .await
        .err(404, "resource.not_found");
    let live = s
        .get(&endpoints(&s))
        .key(&s.creds.keys.secret_live)
        .send()
        .await;
    assert_eq!(live.ok(200), &json!([]));
    let other = s.second_organization("webhooks-elsewhere").await;
    s.get(&format!(
        "/v1/organizations/{}/webhooks/endpoints/{id}",
        other.org_id()
    ))
    .key(sk)
    .send()
    .await
    .err(404, "resource.not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_urls_must_be_https_and_public() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_test;
    for url in [
        "http://93.184.216.34/hooks",
        "https://localhost/hooks",
        "https://127.0.0.1:8443/hooks",
        "https://10.0.0.7/hooks",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/hooks",
        "https://user:pw@93.184.216.34/hooks",
        "ftp://93.184.216.34/hooks",
        "not a url",
        "https://does-not-exist.invalid/hooks",
    ] {
        let r = create(
            &s,
            sk,
            json!({"name": "x", "url": url, "event_types": ["webhook.test"]}),
        )
        .await;
        let e = r.err(422, "request.validation_failed");
        assert_eq!(e["details"]["fields"][0]["name"], "url", "{url}: {e}");
    }
    // A refused host's answer maps nothing of the server's network: the same words whether
    // the name resolves to an internal address or to none.
    let issues: Vec<String> = [
        "https://localhost/hooks",
        "https://does-not-exist.invalid/hooks",
    ]
    .into_iter()
    .map(|url| {
        let s = &s;
        async move {
            let r = create(
                s,
                sk,
                json!({"name": "x", "url": url, "event_types": ["webhook.test"]}),
            )
            .await;
            r.err(422, "request.validation_failed")["details"]["fields"][0]["issue"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    })
    .collect::<futures::future::JoinAll<_>>()
    .await;
    assert_eq!(issues[0], issues[1]);
    assert!(!issues[0].contains("127.0.0.1"), "{}", issues[0]);
    // An update is held to the same rules.
    let made = create(
        &s,
        sk,
        json!({"name": "x", "url": PUBLIC_URL, "event_types": ["webhook.test"]}),
    )
    .await;
    let id = made.ok(201)["id"].as_str().unwrap().to_owned();
    let r = s
        .patch(&format!("{}/{id}", endpoints(&s)))
        .key(sk)
        .json(json!({"url": "https://localhost/"}))
        .send()
        .await;
    r.err(422, "request.validation_failed");
    assert_eq!(
        s.get(&format!("{}/{id}", endpoints(&s)))
            .key(sk)
            .send()
            .await
            .ok(200)["url"],
        PUBLIC_URL
    );

    // With --allow-private-webhooks, a local receiver over plain http is fine.
    let local = TestServer::start_with(|a| a.allow_private_webhooks = true).await;
    let r = create(
        &local,
        &local.creds.keys.secret_test,
        json!({"name": "local", "url": "http://127.0.0.1:9/hooks", "event_types": ["webhook.test"]}),
    )
    .await;
    assert_eq!(r.ok(201)["url"], "http://127.0.0.1:9/hooks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_and_missing_scopes_are_refused() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_test;
    let r = create(&s, sk, json!({})).await;
    let e = r.err(422, "request.validation_failed");
    let named: Vec<&str> = e["details"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    for field in ["name", "url", "event_types"] {
        assert!(named.contains(&field), "{field} in {e}");
    }
    for (body, field) in [
        (
            json!({"name": "x", "url": PUBLIC_URL, "event_types": ["session.created"]}),
            "event_types[0]",
        ),
        (
            json!({"name": "x", "url": PUBLIC_URL, "event_types": []}),
            "event_types",
        ),
        (
            json!({"name": "x", "url": PUBLIC_URL, "event_types": ["webhook.test", "webhook.test"]}),
            "event_types",
        ),
        (
            json!({"name": "", "url": PUBLIC_URL, "event_types": ["webhook.test"]}),
            "name",
        ),
        (
            json!({"name": "x", "url": PUBLIC_URL, "event_types": ["webhook.test"], "signing_secret": "whsec_x"}),
            "signing_secret",
        ),
        (
            json!({"name": "x", "url": PUBLIC_URL, "event_types": ["webhook.test"], "color": "red"}),
            "color",
        ),
    ] {
        let r = create(&s, sk, body.clone()).await;
        let e = r.err(422, "request.validation_failed");
        assert_eq!(e["details"]["fields"][0]["name"], field, "{body}: {e}");
    }
    let r = create(
        &s,
        sk,
        json!({"name": "x", "url": PUBLIC_URL, "event_types": ["nope"]}),
    )
    .await;
    assert_eq!(
        r.err(422, "request.validation_failed")["details"]["allowed_values"],
        json!(schemas::events::EventType::ALL)
    );
    s.get(&format!("{}/we_00", endpoints(&s)))
        .key(sk)
        .send()
        .await
        .err(422, "request.validation_failed");
    s.get(&format!("{}/we_{}", endpoints(&s), "0".repeat(32)))
        .key(sk)
        .send()
        .await
        .err(404, "resource.not_found");

    // Reads need organizations:read, writes organizations:update.
    let reader = reader_key(&s).await;
    s.get(&endpoints(&s)).key(&reader).send().await.ok(200);
    create(
        &s,
        &reader,
        json!({"name": "x", "url": PUBLIC_URL, "event_types": ["webhook.test"]}),
    )
    .await
    .err(403, "auth.insufficient_scope");
    let narrow = s
        .create_key(
            &s.creds.keys.secret_live,
            json!({"name": "sessions", "environment": "test", "scopes": ["sessions:list"]}),
        )
        .await;
    let narrow = narrow["revealed_key"].as_str().unwrap();
    s.get(&endpoints(&s))
        .key(narrow)
        .send()
        .await
        .err(403, "auth.insufficient_scope");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_secret_is_shown_once_and_the_old_one_is_kept_for_the_grace() {
    let s =
        TestServer::start_with(|a| a.rotation_grace = std::time::Duration::from_secs(600)).await;
    let sk = &s.creds.keys.secret_test;
    let made = create(
        &s,
        sk,
        json!({"name": "x", "url": PUBLIC_URL, "event_types": ["webhook.test"]}),
    )
    .await;
    let made = made.ok(201).clone();
    let (id, first) = (
        made["id"].as_str().unwrap().to_owned(),
        made["signing_secret"].as_str().unwrap().to_owned(),
    );
    let org: schemas::OrgId = s.creds.org_id().parse().unwrap();
    let endpoint_id: schemas::ids::WebhookEndpointId = id.parse().unwrap();
    let env = schemas::credential::Environment::Test;
    let before = s
        .store()
        .get_webhook_endpoint(org, env, endpoint_id)
        .await
        .unwrap()
        .unwrap();

    let r = s
        .post(&format!("{}/{id}/rotations", endpoints(&s)))
        .key(sk)
        .send()
        .await;
    let second = r.ok(200)["signing_secret"].as_str().unwrap().to_owned();
    assert!(second.starts_with("whsec_") && second != first);
    let read = s
        .get(&format!("{}/{id}", endpoints(&s)))
        .key(sk)
        .send()
        .await;
    assert_eq!(
        read.ok(200)["signing_secret"],
        format!("whsec_••••{}", &second[second.len() - 4..])
    );

    // The replaced secret is kept, sealed, until the grace ends.
    let after = s
        .store()
        .get_webhook_endpoint(org, env, endpoint_id)
        .await
        .unwrap()
        .unwrap();
    let previous = after.previous_secret.expect("the previous secret is kept");
    assert_eq!(previous.sealed, before.sealed_secret);
    assert_ne!(after.sealed_secret, before.sealed_secret);
    let left = previous.until - schemas::time::now();
    assert!(
        left.num_seconds() > 590 && left.num_seconds() <= 600,
        "{left}"
    );

    // Another rotation replaces the overlap: only the newest two secrets ever sign.
    s.post(&format!("{}/{id}/rotations", endpoints(&s)))
        .key(sk)
        .send()
        .await
        .ok(200);
    let again = s
        .store()
        .get_webhook_endpoint(org, env, endpoint_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.previous_secret.unwrap().sealed, after.sealed_secret);

    // Rotation is a write: a reader cannot.
    let reader = reader_key(&s).await;
    s.post(&format!("{}/{id}/rotations", endpoints(&s)))
        .key(&reader)
        .send()
        .await
        .err(403, "auth.insufficient_scope");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_event_is_published_recorded_and_listed_for_its_endpoint() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_test;
    let made = create(
        &s,
        sk,
        json!({"name": "x", "url": PUBLIC_URL, "event_types": ["webhook.test"]}),
    )
    .await;
    let id = made.ok(201)["id"].as_str().unwrap().to_owned();

    let r = s
        .post(&format!("{}/{id}/test", endpoints(&s)))
        .key(sk)
        .send()
        .await;
    let event = r.ok(201).clone();
    assert_eq!(event["object"], "event");
    assert_eq!(event["type"], "webhook.test");
    assert_eq!(
        event["subject"],
        json!({"type": "webhook_endpoint", "id": id})
    );
    assert_eq!(event["data"]["endpoint_id"], id.as_str());
    assert_eq!(event["webhook_deliveries"], json!([]));
    let event_id = event["id"].as_str().unwrap();

    // Listed by the events API, in this environment only.
    let listed = s
        .get(&format!("{}/events?type=webhook.test", s.org_path()))
        .key(sk)
        .send()
        .await;
    assert_eq!(listed.ok(200)[0]["id"], event_id);
    let live = s
        .get(&format!("{}/events?type=webhook.test", s.org_path()))
        .key(&s.creds.keys.secret_live)
        .send()
        .await;
    assert_eq!(live.ok(200), &json!([]));

    // And on events.v1 for the dispatcher, with its tenancy.
    let logged = vigil_tests::collect::logged_events(&s).await;
    let record = logged
        .iter()
        .find(|r| r["event"]["id"] == event_id)
        .expect("the test event is on events.v1");
    assert_eq!(record["environment"], "test");
    assert_eq!(record["organization_id"], s.creds.org_id());
    assert_eq!(record["event"]["type"], "webhook.test");

    // Another environment's endpoint id is not found; a reader may not send tests.
    s.post(&format!("{}/{id}/test", endpoints(&s)))
        .key(&s.creds.keys.secret_live)
        .send()
        .await
        .err(404, "resource.not_found");
    let reader = reader_key(&s).await;
    s.post(&format!("{}/{id}/test", endpoints(&s)))
        .key(&reader)
        .send()
        .await
        .err(403, "auth.insufficient_scope");
}

/// The endpoint routes as customer backends call them: Node's `fetch` registers one, Python's
/// `requests` lists it, curl sends it a test event, which arrives at the receiver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_fetch_python_requests_and_curl_manage_an_endpoint() {
    use vigil_tests::run_client;
    let s = TestServer::start_with(|a| a.allow_private_webhooks = true).await;
    let receiver = vigil_tests::receiver::Receiver::start().await;
    let sk = s.creds.keys.secret_test.clone();
    let url = format!("{}{}", s.base, endpoints(&s));
    let node = r#"
        const [url, key, target] = process.argv.slice(1);
        fetch(url, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
                     body: JSON.stringify({ name: "node", url: target, event_types: ["webhook.test"] }) })
          .then(async (r) => { const b = await r.json(); console.log(r.status, b.data.id, b.data.signing_secret.slice(0, 6)); })
          .catch((e) => { console.error(e); process.exit(1); });
    "#;
    let made = run_client("node", &["-e", node, &url, &sk, &receiver.base]);
    let parts: Vec<&str> = made.split(' ').collect();
    assert_eq!((parts[0], parts[2]), ("201", "whsec_"), "{made}");
    let id = parts[1].to_owned();
    let python = r#"
import sys, requests
url, key = sys.argv[1:]
r = requests.get(url, headers={"Authorization": "Bearer " + key})
e = r.json()["data"][0]
print(r.status_code, e["id"], e["signing_secret"][:10])
"#;
    assert_eq!(
        run_client("python3", &["-c", python, &url, &sk]),
        format!("{} {id} whsec_••••", 200)
    );
    let auth = format!("authorization: Bearer {sk}");
    let tested = run_client(
        "curl",
        &["-s", "-X", "POST", "-H", &auth, &format!("{url}/{id}/test")],
    );
    let tested: Value = serde_json::from_str(&tested).unwrap();
    assert_eq!(tested["data"]["type"], "webhook.test");
    let got = receiver
        .wait_for(1, std::time::Duration::from_secs(10))
        .await;
    assert_eq!(
        got[0].header("webhook-id"),
        tested["data"]["id"].as_str().unwrap()
    );
}

/// Every event is sent to every endpoint, so an organization has at most 20 active ones per
/// environment; a disabled one frees its place, and the other environment has its own 20.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_are_capped_per_environment() {
    let s = TestServer::start().await;
    let (test, live) = (&s.creds.keys.secret_test, &s.creds.keys.secret_live);
    let body = |i: usize| json!({"name": format!("hook {i}"), "url": PUBLIC_URL, "event_types": ["webhook.test"]});
    let mut first = String::new();
    for i in 0..20 {
        let made = create(&s, test, body(i)).await;
        let id = made.ok(201)["id"].as_str().unwrap().to_owned();
        if i == 0 {
            first = id;
        }
    }
    let refused = create(&s, test, body(20)).await;
    let e = refused.err(409, "webhook.endpoint_limit_reached");
    assert!(
        e["docs_url"]
            .as_str()
            .unwrap()
            .ends_with("#webhook.endpoint_limit_reached"),
        "{e}"
    );
    create(&s, live, body(0)).await.ok(201);
    s.delete(&format!("{}/{first}", endpoints(&s)))
        .key(test)
        .send()
        .await
        .ok(200);
    create(&s, test, body(21)).await.ok(201);
}
