//! What the contract check (scripts/schemathesis.sh) found, each kept as an ordinary test: the
//! server and its OpenAPI document disagreed, and these hold them together. The document's own
//! tests are in openapi.rs.

use serde_json::Value;
use vigil_tests::collect::open_session;
use vigil_tests::{TestServer, json};

fn document() -> Value {
    serde_json::to_value(vigil::server::openapi::document()).unwrap()
}

/// Every operation of the document, as (method, path, operation).
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut all = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            all.push((method.clone(), path.clone(), operation.clone()));
        }
    }
    all
}

/// Found: the id pattern allowed a first character of 8 to z, which the server refuses (a
/// ULID's first character holds 3 bits), and the refusal said the characters were outside the
/// alphabet, though every one was in it.
#[tokio::test]
async fn an_ids_first_character_above_7_is_refused_as_such_and_the_pattern_says_so() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_test;
    let r = s
        .get("/v1/sessions/sid_t0000000000000000000000000")
        .key(sk)
        .send()
        .await;
    let body = r.err(422, "request.validation_failed");
    let issue = body["details"]["fields"][0]["issue"].as_str().unwrap();
    assert!(
        issue.contains("first character after the prefix must be 0 to 7"),
        "{issue}"
    );
    // The largest id the pattern allows is one the server reads.
    s.get("/v1/sessions/sid_7zzzzzzzzzzzzzzzzzzzzzzzzz")
        .key(sk)
        .send()
        .await
        .err(404, "resource.not_found");
    let doc = document();
    assert_eq!(
        doc["components"]["schemas"]["SessionId"]["pattern"],
        "^sid_[0-7][0-9a-hjkmnp-tv-z]{25}$"
    );
}

/// Found: `details.fields[].received` was typed as an object, but it echoes whatever came (here
/// the name of a body's JSON type, a string).
#[tokio::test]
async fn received_is_any_json_value() {
    let s = TestServer::start().await;
    let r = s
        .post("/v1/gate/agent-tokens/verify")
        .key(&s.creds.keys.secret_test)
        .json(json!([null, null]))
        .send()
        .await;
    let body = r.err(422, "request.validation_failed");
    assert_eq!(body["details"]["fields"][0]["received"], "array");
    let received = &document()["components"]["schemas"]["FieldIssue"]["properties"]["received"];
    assert!(
        received.get("type").is_none(),
        "received takes any JSON value: {received}"
    );
}

/// Found: invalid path ids, unknown query parameters and cursors answer 422, which most
/// routes did not document (lists documented a 400 `request.invalid_parameter`, a code that
/// does not exist). Every operation is called here with a malformed id in each path parameter
/// and an unknown query parameter, with the key its security names, and what it answers must
/// be among its documented statuses. Found too: many `details.fields[]` entries lacked
/// `expected` and `received`; every one read here has all four members.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_every_route_answers_a_malformed_call_is_documented() {
    let s = TestServer::start().await;
    let doc = document();
    assert!(!doc.to_string().contains("invalid_parameter"));
    let (mut called, mut field_issues) = (0, 0);
    for (method, path, operation) in operations(&doc) {
        let schemes: Vec<&str> = operation["security"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r.as_object())
            .flat_map(|r| r.keys().map(String::as_str))
            .collect();
        // The publishable key where a route takes one: a secret key on a browser route is
        // revoked on the spot.
        let key = if schemes.contains(&"publishable_key") {
            Some(&s.creds.keys.publishable_test)
        } else if schemes.contains(&"secret_key") {
            Some(&s.creds.keys.secret_test)
        } else {
            None
        };
        let concrete = path
            .split('/')
            .map(|part| if part.starts_with('{') { "nope" } else { part })
            .collect::<Vec<_>>()
            .join("/");
        let method_ = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let mut call = s.call(method_, &format!("{concrete}?unknown_parameter=1"));
        if let Some(key) = key {
            call = call.key(key);
        }
        if method != "get" && method != "delete" {
            call = call.json(json!({}));
        }
        let answer = call.send().await;
        let responses = &operation["responses"];
        let status = answer.status.to_string();
        let range = format!("{}XX", &status[..1]);
        assert!(
            responses.get(&status).is_some() || responses.get(&range).is_some(),
            "{method} {concrete} answered {status}, which it does not document: {}",
            answer.body
        );
        // Every field issue carries all four members the error envelope names, null where
        // nothing applies (a missing member received nothing).
        for field in answer.body["error"]["details"]["fields"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let mut members: Vec<&str> = field
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            members.sort_unstable();
            assert_eq!(
                members,
                ["expected", "issue", "name", "received"],
                "{method} {concrete}: {field}"
            );
            field_issues += 1;
        }
        called += 1;
    }
    assert!(called >= 48, "{called} operations called");
    assert!(field_issues >= 30, "{field_issues} field issues read");
}

/// Found by a fuzz: routes that take no key (a signup, the WebSocket) answered an
/// `Authorization` header anyway, with a 401 they did not document. Each such route, sent a key
/// that is none, and then a publishable key's twin that is unknown, answers a documented status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_sent_to_a_route_that_takes_none_is_answered_as_documented() {
    let s = TestServer::start().await;
    let doc = document();
    let mut keyless = 0;
    for (method, path, operation) in operations(&doc) {
        let takes_none = operation["security"].as_array().is_some_and(|reqs| {
            reqs.iter()
                .all(|r| r.as_object().is_some_and(|r| r.is_empty()))
        });
        if !takes_none {
            continue;
        }
        let concrete = path.replace("{serviceId}", "vigil");
        let method_ = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        for key in ["not-a-key", "pk_test_00000000000000000000000000000000"] {
            let answer = s.call(method_.clone(), &concrete).key(key).send().await;
            assert_eq!(answer.status, 401, "{method} {concrete}: {}", answer.body);
            assert!(
                operation["responses"].get("401").is_some(),
                "{method} {concrete} answers 401, which it does not document"
            );
        }
        keyless += 1;
    }
    assert!(keyless >= 3, "{keyless} routes that take no key");
}

/// Found: bodies with members the server refuses (`"extra": 1` is a 422 "is not a writable
/// field") were documented as open objects; and Gate's login-code exchange was documented as
/// any object, a service's creation without its required members.
#[tokio::test]
async fn request_bodies_are_closed_and_name_their_required_members() {
    let s = TestServer::start().await;
    let r = s
        .post("/v1/gate/agent-tokens/verify")
        .key(&s.creds.keys.secret_test)
        .json(json!({"agent_token": "agt_x", "extra": 1}))
        .send()
        .await;
    r.err(422, "request.validation_failed");
    assert!(r.field_names().contains(&"extra".to_owned()));

    let doc = document();
    let schemas = &doc["components"]["schemas"];
    for (method, path, operation) in operations(&doc) {
        let Some(body) =
            operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].as_str()
        else {
            continue;
        };
        let name = body.trim_start_matches("#/components/schemas/");
        assert_eq!(
            schemas[name]["additionalProperties"], false,
            "{method} {path}: {name} is open"
        );
    }
    assert_eq!(schemas["ConsumeBody"]["required"], json!(["code"]));
    assert_eq!(
        schemas["NewService"]["required"],
        json!(["id", "name", "website"])
    );
    // Nested bodies are closed too.
    assert_eq!(schemas["GateEnvVar"]["additionalProperties"], false);
    assert_eq!(schemas["BrandingBody"]["additionalProperties"], false);

    // What the document now says is what the server does.
    let consume = s
        .post("/v1/gate/login-sessions/consume")
        .key(&s.creds.keys.secret_test)
        .json(json!({}))
        .send()
        .await;
    consume.err(422, "request.validation_failed");
    assert_eq!(consume.field_names(), ["code"]);
    let service = s
        .post("/v1/gate/services")
        .key(&s.creds.keys.secret_test)
        .json(json!({"id": "acme-x"}))
        .send()
        .await;
    service.err(422, "request.validation_failed");
    assert_eq!(service.field_names(), ["name", "website"]);
}

/// Found: a batch number written `1.0` (what a client with only doubles sends, and what JSON
/// Schema's `integer` takes) was refused as not an integer.
#[tokio::test]
async fn a_batch_number_written_as_a_whole_double_is_that_number() {
    let s = TestServer::start().await;
    let pk = &s.creds.keys.publishable_test;
    let session = open_session(&s, pk).await;
    let mut body = session.batch(1, &json!({"kind": "probes", "collected_in_ms": 1.0}));
    body["seq"] = json!(1.0);
    let path = format!("/v1/collect/sessions/{}/batches", session.id);
    let r = s.post(&path).key(pk).json(body).send().await;
    assert_eq!(r.ok(202)["seq"], 1);
    let mut half = session.batch(2, &json!({"kind": "probes", "collected_in_ms": 1.0}));
    half["seq"] = json!(2.5);
    let r = s.post(&path).key(pk).json(half).send().await;
    r.err(422, "request.validation_failed");
    assert_eq!(r.field_names(), ["seq"]);
}

/// Found: an export's schema route took `verdict=null` (and any `after`) without a word, though
/// the export itself refuses them: the two now read their query alike.
#[tokio::test]
async fn an_exports_schema_route_refuses_what_its_export_refuses() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_test;
    for path in [
        "/v1/sessions/export/schema?verdict=null",
        "/v1/sessions/export/schema?after=nope",
        "/v1/fingerprints/export/schema?after=nope",
    ] {
        let r = s.get(path).key(sk).send().await;
        r.err(422, "request.validation_failed");
    }
    let events = format!("{}/events/export/schema?after=nope", s.org_path());
    s.get(&events)
        .key(sk)
        .send()
        .await
        .err(422, "request.validation_failed");
    let fine = s
        .get("/v1/sessions/export/schema?verdict=bot")
        .key(sk)
        .send()
        .await;
    assert_eq!(fine.status, 200);
}

/// Found: a proven call without its `Vigil-Session-Proof` header, on a session that does not
/// exist, answered 404: the missing header is now refused first, whatever the session.
#[tokio::test]
async fn a_call_without_its_proof_is_refused_before_its_session_is_looked_up() {
    let s = TestServer::start().await;
    let pk = &s.creds.keys.publishable_test;
    let unknown = "sid_01m8b7336nkz18pth0mzq1zy77";
    for r in [
        s.post("/v1/collect/network-checks")
            .key(pk)
            .json(json!({"session_id": unknown}))
            .send()
            .await,
        s.post(&format!("/v1/collect/sessions/{unknown}/results"))
            .key(pk)
            .send()
            .await,
        s.get("/v1/collect/pings/png_01m8b7336nkz18pth0mzq1zy77")
            .key(pk)
            .send()
            .await,
    ] {
        let body = r.err(401, "collect.session_proof_invalid");
        assert_eq!(body["details"]["header_name"], "Vigil-Session-Proof");
    }
    // A header that is not of the proof's form is refused as early.
    let r = s
        .post(&format!("/v1/collect/sessions/{unknown}/results"))
        .key(pk)
        .header("vigil-session-proof", "x")
        .send()
        .await;
    r.err(401, "collect.session_proof_invalid");
    // And the document says so, beside the key's own refusals.
    let doc = document();
    for (path, method) in [
        ("/v1/collect/network-checks", "post"),
        ("/v1/collect/sessions/{sessionId}/results", "post"),
        ("/v1/collect/pings/{pingId}", "get"),
    ] {
        let described = doc["paths"][path][method]["responses"]["401"]["description"]
            .as_str()
            .unwrap();
        assert!(
            described.contains("collect.session_proof_invalid") && described.contains("auth."),
            "{method} {path}: {described}"
        );
    }
}

fn record(
    answers: &mut Vec<Answered>,
    method: &'static str,
    path: &'static str,
    r: &vigil_tests::Resp,
) {
    answers.push(Answered {
        method,
        path,
        status: r.status,
        body: r.body.clone(),
    });
}

/// One real answer and where the document describes it.
struct Answered {
    method: &'static str,
    /// The document's path template.
    path: &'static str,
    status: u16,
    body: Value,
}

/// The fuzzer meets few real resources (no scored session, no delivery): here every kind of
/// resource exists, filled as a real deployment fills it, and each answer is validated against
/// its response schema by Python's `jsonschema` (JSON Schema 2020-12, which OpenAPI 3.1 uses).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_answers_of_every_resource_match_the_document() {
    use vigil_tests::collect::score_session;
    use vigil_tests::receiver::Receiver;
    let s = TestServer::start_with(|a| a.allow_private_webhooks = true).await;
    let sk = &s.creds.keys.secret_test;
    let pk = &s.creds.keys.publishable_test;
    let org = s.org_path();
    let mut answers: Vec<Answered> = Vec::new();

    // A scored, linked, final session: the handoff, the list, the detail, the fingerprint.
    let probes = json!({"kind": "probes", "collected_in_ms": 12.0,
        "automation": {"webdriver": true, "user_agent": "Mozilla/5.0", "languages": ["en"]},
        "screen": {"width": 1920.0, "height": 1080.0, "touch": false},
        "network": {"ping_rtts_ms": [1.0, 2.0]}});
    let (session, opened) = score_session(&s, &probes, Some("Mozilla/5.0"), |d| {
        d["decision"]["decision_status"] == "final" && !d["visitor_id"].is_null()
    })
    .await;
    answers.push(Answered {
        method: "post",
        path: "/v1/handoffs/open",
        status: 200,
        body: json!({"data": opened, "meta": {"request_id": "req_x"}}),
    });
    let r = s.get("/v1/sessions").key(sk).send().await;
    record(&mut answers, "get", "/v1/sessions", &r);
    let r = s
        .get(&format!("/v1/sessions/{}", session.id))
        .key(sk)
        .send()
        .await;
    record(&mut answers, "get", "/v1/sessions/{sessionId}", &r);
    let visitor = opened["visitor_id"].as_str().unwrap().to_owned();
    let r = s.get("/v1/fingerprints").key(sk).send().await;
    record(&mut answers, "get", "/v1/fingerprints", &r);
    let r = s
        .get(&format!("/v1/fingerprints/{visitor}"))
        .key(sk)
        .send()
        .await;
    record(&mut answers, "get", "/v1/fingerprints/{visitorId}", &r);

    // The Collect API's own answers.
    let collect = open_session(&s, pk).await;
    answers.push(Answered {
        method: "post",
        path: "/v1/collect/sessions",
        status: 201,
        body: json!({"data": collect.opened, "meta": {"request_id": "req_x"}}),
    });
    let r = collect.ping(&s, pk, &collect.pings[0]).await;
    record(&mut answers, "get", "/v1/collect/pings/{pingId}", &r);
    let r = collect.results(&s, pk).send().await;
    record(
        &mut answers,
        "post",
        "/v1/collect/sessions/{sessionId}/results",
        &r,
    );

    // An endpoint, a test event delivered to it, the events with their deliveries.
    let receiver = Receiver::start().await;
    let r = s
        .post(&format!("{org}/webhooks/endpoints"))
        .key(sk)
        .json(
            json!({"name": "receiver", "url": format!("{}/hook", receiver.base),
                     "event_types": ["webhook.test"]}),
        )
        .send()
        .await;
    record(
        &mut answers,
        "post",
        "/v1/organizations/{organizationId}/webhooks/endpoints",
        &r,
    );
    let endpoint = r.ok(201)["id"].as_str().unwrap().to_owned();
    let r = s
        .post(&format!("{org}/webhooks/endpoints/{endpoint}/test"))
        .key(sk)
        .send()
        .await;
    record(
        &mut answers,
        "post",
        "/v1/organizations/{organizationId}/webhooks/endpoints/{endpointId}/test",
        &r,
    );
    let mut delivered = Value::Null;
    for _ in 0..400 {
        let r = s.get(&format!("{org}/events")).key(sk).send().await;
        let done = r.ok(200).as_array().unwrap().iter().any(|e| {
            e["webhook_deliveries"]
                .as_array()
                .is_some_and(|ds| ds.iter().any(|d| d["status"] == "succeeded"))
        });
        if done {
            delivered = r.body.clone();
            record(
                &mut answers,
                "get",
                "/v1/organizations/{organizationId}/events",
                &r,
            );
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(!delivered.is_null(), "the test event was delivered");
    let r = s
        .get(&format!("{org}/webhooks/endpoints"))
        .key(sk)
        .send()
        .await;
    record(
        &mut answers,
        "get",
        "/v1/organizations/{organizationId}/webhooks/endpoints",
        &r,
    );

    // A Gate service with every member, its registry entry, a signup and its poll.
    let r = s
        .post("/v1/gate/services")
        .key(sk)
        .json(json!({
            "id": "contract", "name": "Contract", "website": "https://contract.example",
            "discoverable": true, "description": "For the contract test.",
            "webhook_url": format!("{}/gate", receiver.base),
            "env_vars": [{"name": "API key", "key": "CONTRACT_API_KEY", "secret": true}],
            "docs_url": "https://contract.example/docs",
            "sdks": [{"label": "Node", "install": "npm i @contract/cli",
                      "url": "https://www.npmjs.com/package/@contract/cli"}],
            "branding": {"logo_url": "https://contract.example/logo.png", "primary_color": "#123456"},
            "consent": {"terms_url": "https://contract.example/terms?lang=en#use"}
        }))
        .send()
        .await;
    record(&mut answers, "post", "/v1/gate/services", &r);
    r.ok(201);
    let r = s.get("/v1/gate/services/contract").key(sk).send().await;
    record(&mut answers, "get", "/v1/gate/services/{serviceId}", &r);
    let r = s.get("/v1/gate/registry").key(pk).send().await;
    record(&mut answers, "get", "/v1/gate/registry", &r);
    let r = s.get("/v1/gate/registry/contract").key(pk).send().await;
    record(&mut answers, "get", "/v1/gate/registry/{serviceId}", &r);
    let r = s
        .post("/v1/gate/services/contract/signups")
        .json(json!({"client_name": "contract test"}))
        .send()
        .await;
    record(
        &mut answers,
        "post",
        "/v1/gate/services/{serviceId}/signups",
        &r,
    );
    let signup = r.ok(201).clone();
    let r = s
        .get(&format!(
            "/v1/gate/sessions/{}",
            signup["id"].as_str().unwrap()
        ))
        .key(signup["poll_token"].as_str().unwrap())
        .send()
        .await;
    record(&mut answers, "get", "/v1/gate/sessions/{gateSessionId}", &r);

    // The organization and its keys.
    let r = s.get(&org).key(sk).send().await;
    record(
        &mut answers,
        "get",
        "/v1/organizations/{organizationId}",
        &r,
    );
    let r = s.get(&format!("{org}/api-keys")).key(sk).send().await;
    record(
        &mut answers,
        "get",
        "/v1/organizations/{organizationId}/api-keys",
        &r,
    );

    for a in &answers {
        assert!(
            a.status < 300,
            "{} {}: {} {}",
            a.method,
            a.path,
            a.status,
            a.body
        );
    }
    let checked = serde_json::to_string(&json!({
        "doc": document(),
        "answers": answers.iter().map(|a| json!({
            "method": a.method, "path": a.path, "status": a.status.to_string(), "body": a.body,
        })).collect::<Vec<_>>(),
    }))
    .unwrap();
    let file = std::env::temp_dir().join(format!("vigil-contract-{}.json", std::process::id()));
    std::fs::write(&file, checked).unwrap();
    let out = vigil_tests::run_client("python3", &["-c", VALIDATE, file.to_str().unwrap()]);
    std::fs::remove_file(&file).ok();
    assert_eq!(out, format!("{} answers valid", answers.len()));
}

/// Validates each answer against its response schema (the document's components beside it, so
/// `#/components/...` resolves); prints every failure, or the count.
const VALIDATE: &str = r#"
import json, sys
from jsonschema import Draft202012Validator
given = json.load(open(sys.argv[1]))
doc, failures = given["doc"], []
for a in given["answers"]:
    response = doc["paths"][a["path"]][a["method"]]["responses"][a["status"]]
    schema = dict(response["content"]["application/json"]["schema"], components=doc["components"])
    for e in Draft202012Validator(schema).iter_errors(a["body"]):
        failures.append(f'{a["method"]} {a["path"]} {a["status"]}: {"/".join(map(str, e.absolute_path))}: {e.message}')
if failures:
    print("\n".join(failures)); sys.exit(1)
print(f'{len(given["answers"])} answers valid')
"#;

/// Found: `details.fields[]` often lacked `expected`; it is now there wherever the rule says
/// what it wants, and for an unknown query parameter it names the route's own.
#[tokio::test]
async fn a_field_issue_says_what_was_expected() {
    let s = TestServer::start().await;
    let r = s
        .post("/v1/collect/sessions")
        .key(&s.creds.keys.publishable_test)
        .json(json!({"client_public_key": "***", "sdk_version": "", "page_url": "ftp://x"}))
        .send()
        .await;
    r.err(422, "request.validation_failed");
    let fields = &r.body["error"]["details"]["fields"];
    let expected = |name: &str| {
        fields
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .map(|f| f["expected"].clone())
            .unwrap_or_else(|| panic!("no issue for {name}: {fields}"))
    };
    assert_eq!(expected("client_public_key"), "base64url without padding");
    assert_eq!(expected("sdk_version"), "1 to 32 characters");
    assert_eq!(expected("page_url"), "matching `^https?://`");
    let r = s
        .get("/v1/sessions?colour=red")
        .key(&s.creds.keys.secret_test)
        .send()
        .await;
    r.err(422, "request.validation_failed");
    let issue = &r.body["error"]["details"]["fields"][0];
    assert_eq!(issue["name"], "colour");
    assert!(
        issue["expected"].as_str().unwrap().starts_with("one of: "),
        "{issue}"
    );
}

/// Found: a signup without a body, which the server takes (the tool's name is optional), was
/// documented as needing one.
#[tokio::test]
async fn a_signup_may_carry_no_body_and_the_document_says_so() {
    let s = TestServer::start().await;
    s.post("/v1/gate/services")
        .key(&s.creds.keys.secret_test)
        .json(
            json!({"id": "bodiless", "name": "Bodiless", "website": "https://b.example",
                     "discoverable": true}),
        )
        .send()
        .await
        .ok(201);
    let r = s.post("/v1/gate/services/bodiless/signups").send().await;
    assert_eq!(r.ok(201)["status"], "pending");
    let body = &document()["paths"]["/v1/gate/services/{serviceId}/signups"]["post"]["requestBody"];
    assert_ne!(body["required"], true, "{body}");
    // Sent, it is an object: a JSON null is not a signup's body.
    assert_eq!(
        body["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/SignupBody"
    );
}
