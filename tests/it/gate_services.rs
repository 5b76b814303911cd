//! Gate services and the registry through the real interface (docs/architecture.md: #scopes,
//! #environments, #gate): create (the generated webhook secret shown once), read, list, update
//! (nested members replaced wholesale, a rename), delete (a soft disable that still counts), the
//! cap of five per organization, ids claimed over every organization, the allowlist (nested members
//! included), the built-in `vigil` service, scopes and environments; the registry's public shape
//! with a publishable and a secret key, from Node's fetch, Python's requests and curl.

use serde_json::Value;
use vigil_tests::{Resp, TestServer, json, run_client};

const SERVICES: &str = "/v1/gate/services";

async fn create(s: &TestServer, key: &str, body: Value) -> Resp {
    s.post(SERVICES).key(key).json(body).send().await
}

fn minimal(id: &str) -> Value {
    json!({"id": id, "name": "Acme CLI", "website": "https://acme.example"})
}

fn full(id: &str) -> Value {
    json!({
        "id": id,
        "name": "Acme CLI",
        "description": "Deploys from your terminal.",
        "website": "https://Acme.example/start?from=gate",
        "discoverable": true,
        "webhook_url": "https://93.184.216.34/gate",
        "dashboard_login_url": "https://93.184.216.34/login",
        "docs_url": "https://docs.acme.example",
        "env_vars": [
            {"name": "API key", "key": "ACME_API_KEY", "secret": true},
            {"name": "Region", "key": "ACME_REGION", "secret": false}
        ],
        "sdks": [
            {"label": "npm", "install": "npm i acme", "url": "https://npmjs.com/acme"},
            {"label": "pip", "install": "pip install acme", "url": "https://pypi.org/acme"},
            {"label": "cargo", "install": "cargo add acme", "url": "https://crates.io/acme"}
        ],
        "branding": {"logo_url": "https://acme.example/logo.png", "primary_color": "#0af",
                     "secondary_color": "#00AAFFCC", "ascii_art": "/\\_/\\"},
        "consent": {"terms_url": "https://acme.example/terms", "privacy_url": "https://acme.example/privacy"}
    })
}

fn field_names(r: &Resp) -> Vec<String> {
    r.err(422, "request.validation_failed")["details"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_is_created_read_listed_updated_and_disabled() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_test;
    // Members never set are left out (the interface types them as strings), but the login URL,
    // which may be null.
    let bare = create(&s, sk, minimal("acme-bare")).await.ok(201).clone();
    for absent in ["webhook_url", "docs_url"] {
        assert!(bare.get(absent).is_none(), "{absent}: {bare}");
    }
    assert_eq!(bare["branding"], json!({"verified": false}));
    assert_eq!(bare["consent"], json!({}));
    assert!(bare["dashboard_login_url"].is_null(), "{bare}");
    let made = create(&s, sk, full("acme-cli")).await;
    let made = made.ok(201).clone();
    assert_eq!(made["object"], "gate_service");
    assert_eq!(made["id"], "acme-cli");
    assert_eq!(made["status"], "active");
    assert_eq!(made["environment"], "test");
    assert_eq!(
        made["website"], "https://Acme.example/start?from=gate",
        "stored as given"
    );
    assert_eq!(made["branding"]["verified"], false);
    let secret = made["webhook_secret"].as_str().unwrap();
    assert!(
        secret.starts_with("whsec_") && secret.len() >= 32,
        "{secret}"
    );
    let labels: Vec<&str> = made["sdks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["npm", "pip", "cargo"], "sdks keep their order");

    // Reads show the secret's last four characters only.
    let read = s.get(&format!("{SERVICES}/acme-cli")).key(sk).send().await;
    let read = read.ok(200).clone();
    let masked = read["webhook_secret"].as_str().unwrap();
    assert_eq!(masked, format!("••••{}", &secret[secret.len() - 4..]));
    assert_eq!(read["env_vars"], made["env_vars"]);
    let listed = s.get(SERVICES).key(sk).send().await;
    assert_eq!(
        listed.ok(200).as_array().unwrap().len(),
        2,
        "acme-bare and acme-cli"
    );

    // A PATCH replaces each nested member it names wholesale, and leaves the others.
    let patched = s
        .patch(&format!("{SERVICES}/acme-cli"))
        .key(sk)
        .json(json!({"branding": {"primary_color": "#123"}, "sdks": [], "name": "Acme"}))
        .send()
        .await;
    let patched = patched.ok(200).clone();
    assert_eq!(
        patched["branding"],
        json!({"primary_color": "#123", "verified": false}),
        "the members it did not name are gone, and left out"
    );
    assert_eq!(patched["sdks"], json!([]));
    assert_eq!(patched["name"], "Acme");
    assert_eq!(patched["consent"], made["consent"]);
    assert_eq!(
        patched["webhook_secret"], masked,
        "the secret was not changed"
    );

    // The id is fixed at creation; a new secret is shown once, then masked.
    let renamed = s
        .patch(&format!("{SERVICES}/acme-cli"))
        .key(sk)
        .json(json!({"id": "acme-tool"}))
        .send()
        .await;
    assert_eq!(field_names(&renamed), ["id"]);
    let field = renamed.body["error"]["details"]["fields"][0].clone();
    assert_eq!(
        (field["expected"].clone(), field["received"].clone()),
        (json!("acme-cli"), json!("acme-tool"))
    );
    // Its own id, unchanged, is accepted with the rest of a PATCH (the resource sent back).
    let same = s
        .patch(&format!("{SERVICES}/acme-cli"))
        .key(sk)
        .json(json!({"id": "acme-cli", "description": "The Acme command line"}))
        .send()
        .await;
    let same = same.ok(200).clone();
    assert_eq!(
        (same["id"].clone(), same["description"].clone()),
        (json!("acme-cli"), json!("The Acme command line"))
    );
    let new_secret = "s".repeat(40);
    let replaced = s
        .patch(&format!("{SERVICES}/acme-cli"))
        .key(sk)
        .json(json!({"webhook_secret": new_secret}))
        .send()
        .await;
    assert_eq!(replaced.ok(200)["webhook_secret"], new_secret.as_str());
    let reread = s.get(&format!("{SERVICES}/acme-cli")).key(sk).send().await;
    assert_eq!(reread.ok(200)["webhook_secret"], "••••ssss");

    // Variables need the webhook their values come from.
    let unhooked = s
        .patch(&format!("{SERVICES}/acme-cli"))
        .key(sk)
        .json(json!({"webhook_url": null}))
        .send()
        .await;
    assert_eq!(field_names(&unhooked), ["webhook_url"]);

    // DELETE disables and answers the service.
    let gone = s
        .delete(&format!("{SERVICES}/acme-cli"))
        .key(sk)
        .send()
        .await;
    assert_eq!(gone.ok(200)["status"], "disabled");
    let still = s.get(&format!("{SERVICES}/acme-cli")).key(sk).send().await;
    assert_eq!(still.ok(200)["status"], "disabled");
}

/// Five services per environment, disabled ones counted: a test key creating and deleting
/// services never uses up the live cap (Gate state is separate per environment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_services_per_environment_disabled_ones_counted() {
    let s = TestServer::start().await;
    let (live, test) = (&s.creds.keys.secret_live, &s.creds.keys.secret_test);
    for i in 0..5 {
        create(&s, test, minimal(&format!("test-{i}")))
            .await
            .ok(201);
    }
    for i in 0..4 {
        s.delete(&format!("{SERVICES}/test-{i}"))
            .key(test)
            .send()
            .await
            .ok(200);
    }
    create(&s, test, minimal("test-5"))
        .await
        .err(409, "gate.service_limit_reached");
    for i in 0..5 {
        create(&s, live, minimal(&format!("live-{i}")))
            .await
            .ok(201);
    }
    s.delete(&format!("{SERVICES}/live-0"))
        .key(live)
        .send()
        .await
        .ok(200);
    create(&s, live, minimal("live-5"))
        .await
        .err(409, "gate.service_limit_reached");
    s.get(&format!("{SERVICES}/live-5"))
        .key(live)
        .send()
        .await
        .err(404, "resource.not_found");
    // Another organization has its own cap, but not the same ids, nor the same ids with `-`
    // and `_` alike (both name one variable in a developer's `.env`).
    let other = s.second_organization("second").await;
    for taken in ["live-1", "live_1"] {
        create(&s, &other.keys.secret_live, minimal(taken))
            .await
            .err(409, "resource.conflict");
    }
    create(&s, &other.keys.secret_live, minimal("other-svc"))
        .await
        .ok(201);
    // Each environment sees its own.
    let live_ids: Vec<Value> = s
        .get(SERVICES)
        .key(live)
        .send()
        .await
        .ok(200)
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].clone())
        .collect();
    assert_eq!(
        live_ids,
        ["live-0", "live-1", "live-2", "live-3", "live-4"].map(|id| json!(id))
    );
    s.get(&format!("{SERVICES}/test-4"))
        .key(live)
        .send()
        .await
        .err(404, "resource.not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_fields_and_the_allowlist_are_validated() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_test;
    for (id, why) in [
        ("gate", "is reserved"),
        ("vigil", "is reserved"),
        ("webhooks", "is reserved"),
        ("ab", "3 to 32"),
        ("-acme", "3 to 32"),
        ("Acme", "3 to 32"),
    ] {
        let r = create(&s, sk, minimal(id)).await;
        let error = r.err(422, "request.validation_failed");
        let field = &error["details"]["fields"][0];
        assert_eq!(field["name"], "id", "{id}");
        assert!(
            field["issue"].as_str().unwrap().contains(why),
            "{id}: {field}"
        );
    }
    let r = create(&s, sk, json!({"id": "no-site", "name": "x"})).await;
    assert_eq!(field_names(&r), ["website"]);

    let mut bad = full("acme-bad");
    bad["status"] = json!("disabled");
    bad["branding"]["verified"] = json!(true);
    bad["branding"]["primary_color"] = json!("blue");
    bad["branding"]["font"] = json!("serif");
    bad["consent"]["terms_url"] = json!("not a uri");
    bad["env_vars"][0]["key"] = json!("acme-key");
    bad["env_vars"][1]["extra"] = json!(1);
    bad["sdks"][1] = json!({"label": "pip"});
    bad["webhook_secret"] = json!("too short");
    bad["webhook_url"] = json!("http://93.184.216.34/gate");
    let r = create(&s, sk, bad).await;
    let mut names = field_names(&r);
    names.sort();
    assert_eq!(
        names,
        [
            "branding.font",
            "branding.primary_color",
            "branding.verified",
            "consent.terms_url",
            "env_vars[0].key",
            "env_vars[1].extra",
            "sdks[1].install",
            "sdks[1].url",
            "status",
            "webhook_secret",
            "webhook_url",
        ]
    );
    s.get(&format!("{SERVICES}/acme-bad"))
        .key(sk)
        .send()
        .await
        .err(404, "resource.not_found");

    // The agent token's variable is Gate's; a loopback webhook is refused by name too.
    let mut clash = minimal("acme-x");
    clash["webhook_url"] = json!("https://93.184.216.34/gate");
    clash["env_vars"] = json!([{"name": "t", "key": "ACME_X_GATE_AGENT_TOKEN", "secret": true}]);
    assert_eq!(
        field_names(&create(&s, sk, clash).await),
        ["env_vars[0].key"]
    );
    // A URL whose host is internal, or resolves nowhere, is refused in the same words for
    // either: the answer maps nothing of the server's network.
    let mut refusals = Vec::new();
    for (id, field, url) in [
        ("acme-y", "webhook_url", "https://localhost/gate"),
        (
            "acme-y",
            "webhook_url",
            "https://does-not-exist.invalid/gate",
        ),
        ("acme-z", "dashboard_login_url", "https://localhost/login"),
    ] {
        let mut inside = minimal(id);
        inside[field] = json!(url);
        let r = create(&s, sk, inside).await;
        assert_eq!(field_names(&r), [field], "{url}");
        let e = r.err(422, "request.validation_failed");
        refusals.push(
            e["details"]["fields"][0]["issue"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert!(
        refusals
            .iter()
            .all(|r| *r == refusals[0] && !r.contains("127.0.0.1")),
        "{refusals:?}"
    );

    // A PATCH takes the same allowlist.
    create(&s, sk, minimal("acme-ok")).await.ok(201);
    let r = s
        .patch(&format!("{SERVICES}/acme-ok"))
        .key(sk)
        .json(json!({"created_at": "2020-01-01T00:00:00Z", "discoverable": "yes"}))
        .send()
        .await;
    let mut names = field_names(&r);
    names.sort();
    assert_eq!(names, ["created_at", "discoverable"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_system_service_reads_and_cannot_be_changed_and_scopes_hold() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let vigil = s.get(&format!("{SERVICES}/vigil")).key(sk).send().await;
    let vigil = vigil.ok(200).clone();
    assert_eq!(vigil["discoverable"], true);
    assert_eq!(vigil["branding"]["verified"], true);
    s.patch(&format!("{SERVICES}/vigil"))
        .key(sk)
        .json(json!({"name": "mine"}))
        .send()
        .await
        .err(409, "resource.conflict");
    s.delete(&format!("{SERVICES}/vigil"))
        .key(sk)
        .send()
        .await
        .err(409, "resource.conflict");
    assert_eq!(s.get(SERVICES).key(sk).send().await.ok(200), &json!([]));

    let reader = s
        .create_key(
            sk,
            json!({"name": "reader", "environment": "live", "scopes": ["gate:services:read"]}),
        )
        .await;
    let reader = reader["revealed_key"].as_str().unwrap();
    s.get(SERVICES).key(reader).send().await.ok(200);
    create(&s, reader, minimal("acme-z"))
        .await
        .err(403, "auth.insufficient_scope");
    s.get(SERVICES)
        .key(&s.creds.keys.publishable_live)
        .send()
        .await
        .err(403, "auth.credential_type_not_allowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_shows_published_services_without_secrets() {
    let s = TestServer::start().await;
    let (sk, pk) = (&s.creds.keys.secret_test, &s.creds.keys.publishable_test);
    create(&s, sk, full("acme-cli")).await.ok(201);
    create(&s, sk, minimal("hidden-one")).await.ok(201);
    create(&s, sk, full("gone-one")).await.ok(201);
    s.delete(&format!("{SERVICES}/gone-one"))
        .key(sk)
        .send()
        .await
        .ok(200);
    let mut live = full("live-one");
    live["id"] = json!("live-one");
    create(&s, &s.creds.keys.secret_live, live).await.ok(201);

    for key in [pk, sk] {
        let listed = s.get("/v1/gate/registry").key(key).send().await;
        let ids: Vec<&str> = listed
            .ok(200)
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids,
            ["vigil", "acme-cli"],
            "published, in the key's environment"
        );
    }
    let entry = s.get("/v1/gate/registry/acme-cli").key(pk).send().await;
    let entry = entry.ok(200).clone();
    assert_eq!(entry["object"], "gate_registry_entry");
    assert_eq!(entry["agent_token_variable"], "ACME_CLI_GATE_AGENT_TOKEN");
    assert_eq!(entry["dashboard_login"], true);
    let text = entry.to_string();
    for private in [
        "webhook",
        "whsec_",
        "93.184.216.34",
        "organization",
        "status",
    ] {
        assert!(!text.contains(private), "{private} in {text}");
    }
    for unpublished in ["hidden-one", "gone-one", "live-one", "nowhere"] {
        s.get(&format!("/v1/gate/registry/{unpublished}"))
            .key(pk)
            .send()
            .await
            .err(404, "resource.not_found");
    }
    let paged = s.pages(pk, "/v1/gate/registry?limit=1").await;
    assert_eq!(paged.len(), 2);
    // The built-in service sets no logo, colours or art: left out, never null.
    let vigil = s.get("/v1/gate/registry/vigil").key(pk).send().await;
    let vigil = vigil.ok(200).clone();
    for (member, value) in vigil["branding"].as_object().unwrap() {
        assert!(!value.is_null(), "branding.{member} is null: {vigil}");
    }

    // Pages on other origins read it: preflights are answered without a key, answers name
    // the origin.
    let c = vigil_tests::http_client();
    let preflight = c
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/v1/gate/registry", s.base),
        )
        .header("origin", "https://shop.example")
        .header("access-control-request-method", "GET")
        .header("access-control-request-headers", "authorization")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 204);
    assert_eq!(
        preflight.headers()["access-control-allow-origin"],
        "https://shop.example"
    );
    let from_page = c
        .get(format!("{}/v1/gate/registry", s.base))
        .header("origin", "https://shop.example")
        .bearer_auth(pk)
        .send()
        .await
        .unwrap();
    assert_eq!(from_page.status(), 200);
    assert_eq!(
        from_page.headers()["access-control-allow-origin"],
        "https://shop.example"
    );

    // From Node's fetch, Python's requests and curl, as clients call it.
    let url = format!("{}/v1/gate/registry/acme-cli", s.base);
    let node = r#"
        const [url, key] = process.argv.slice(1);
        fetch(url, { headers: { authorization: `Bearer ${key}` } })
          .then(async (r) => { const b = await r.json(); console.log(r.status, b.data.id); })
          .catch((e) => { console.error(e); process.exit(1); });
    "#;
    assert_eq!(run_client("node", &["-e", node, &url, pk]), "200 acme-cli");
    let python = r#"
import sys, requests
url, key = sys.argv[1:]
r = requests.get(url, headers={"Authorization": "Bearer " + key})
print(r.status_code, r.json()["data"]["id"])
"#;
    assert_eq!(
        run_client("python3", &["-c", python, &url, sk]),
        "200 acme-cli"
    );
    let auth = format!("authorization: Bearer {pk}");
    let body: Value =
        serde_json::from_str(&run_client("curl", &["-s", "-H", &auth, &url])).unwrap();
    assert_eq!(body["data"]["name"], "Acme CLI");
}

/// What the consent page shows a person cannot mislead: no bidirectional or control characters
/// in a service's name, description or variables' names (U+202E turns the rest of a line
/// around), and no variable named as Gate names agent tokens, which would overwrite another
/// service's token in a developer's `.env`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shown_text_and_variable_names_cannot_mislead() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_test;
    let refused = |field: &'static str, body: Value| {
        let s = &s;
        async move {
            let answer = create(s, sk, body).await;
            let error = answer.err(422, "request.validation_failed");
            assert_eq!(error["details"]["fields"][0]["name"], field, "{error}");
        }
    };
    let mut reversed = minimal("acme-cli");
    reversed["name"] = json!("Acme \u{202e}ILC emca");
    refused("name", reversed).await;
    let mut bell = minimal("acme-cli");
    bell["description"] = json!("Deploys\u{7} quietly");
    refused("description", bell).await;
    let mut hidden = minimal("acme-cli");
    hidden["env_vars"] = json!([{"name": "Key\u{2066}", "key": "ACME_KEY", "secret": true}]);
    refused("env_vars[0].name", hidden).await;
    let mut token = minimal("acme-cli");
    token["env_vars"] = json!([{"name": "Token", "key": "OTHER_GATE_AGENT_TOKEN", "secret": true}]);
    refused("env_vars[0].key", token).await;
    // Lines in a description are fine.
    let mut lines = minimal("acme-cli");
    lines["description"] = json!("Deploys.\nFrom your terminal.");
    create(&s, sk, lines).await.ok(201);
}
