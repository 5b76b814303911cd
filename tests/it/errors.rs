//! The error envelope for every failure the transport can produce (docs/architecture.md#errors):
//! unknown routes, wrong methods, malformed JSON, wrong Content-Type, oversize bodies; and request
//! ids.

use vigil_tests::{TestServer, json};

#[tokio::test]
async fn transport_failures_answer_in_the_envelope() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    s.get("/v1/nothing-here")
        .key(sk)
        .send()
        .await
        .err(404, "request.route_not_found");
    s.get("/nothing")
        .send()
        .await
        .err(404, "request.route_not_found");
    s.call(reqwest::Method::PUT, &s.org_path())
        .key(sk)
        .send()
        .await
        .err(405, "request.method_not_allowed");
    s.delete("/v1/organizations")
        .key(sk)
        .send()
        .await
        .err(405, "request.method_not_allowed");

    let post = || s.post("/v1/organizations").key(sk);
    post()
        .raw_body("application/json", "{not json")
        .send()
        .await
        .err(400, "request.malformed");
    // JSON of the wrong shape is a validation failure; 400 is for bodies that do not parse.
    let array = post().raw_body("application/json", "[1,2]").send().await;
    assert_eq!(
        array.err(422, "request.validation_failed")["details"]["fields"][0],
        serde_json::json!({"name": "", "issue": "must be a JSON object",
                           "expected": "object", "received": "array"})
    );
    post()
        .raw_body("application/json", "")
        .send()
        .await
        .err(400, "request.malformed");
    let r = post()
        .raw_body("text/plain", r#"{"name":"a","slug":"a"}"#)
        .send()
        .await;
    assert_eq!(
        r.err(415, "request.unsupported_media_type")["details"]["header_name"],
        "Content-Type"
    );
    post()
        .send()
        .await
        .err(415, "request.unsupported_media_type");
    let huge = format!(r#"{{"name":"{}","slug":"big"}}"#, "n".repeat(70 * 1024));
    post()
        .raw_body("application/json", huge)
        .send()
        .await
        .err(413, "request.too_large");
    // None of those wrote anything.
    let r = s
        .post("/v1/organizations")
        .key(sk)
        .json(json!({"name": "A", "slug": "a"}))
        .send()
        .await;
    r.ok(201);
    s.post("/v1/organizations")
        .key(sk)
        .json(json!({"name": "A", "slug": "big"}))
        .send()
        .await
        .ok(201);
    post()
        .raw_body(
            "application/json; charset=utf-8",
            r#"{"name":"C","slug":"c"}"#,
        )
        .send()
        .await
        .ok(201);

    let r = s
        .get(&format!("/v1/organizations/{}", "org_bad"))
        .key(sk)
        .send()
        .await;
    let e = r.err(422, "request.validation_failed");
    assert_eq!(e["details"]["fields"][0]["name"], "organizationId");
    assert_eq!(e["details"]["parameter_set"], "path");
}

#[tokio::test]
async fn every_response_names_its_request() {
    let s = TestServer::start().await;
    let r = s
        .get(&s.org_path())
        .key(&s.creds.keys.secret_live)
        .send()
        .await;
    let rid = r.ok(200)["id"].clone();
    assert!(rid.is_string());
    let header = r.header("x-request-id").unwrap();
    assert_eq!(r.body["meta"]["request_id"], header);
    let other = s
        .get(&s.org_path())
        .key(&s.creds.keys.secret_live)
        .send()
        .await;
    assert_ne!(
        other.header("x-request-id").unwrap(),
        header,
        "ids are per request"
    );
    let probe = s.get("/healthz").send().await;
    assert_eq!(probe.status, 200);
    assert!(probe.header("x-request-id").unwrap().starts_with("req_"));
}

#[tokio::test]
async fn probes_and_metrics() {
    let s = TestServer::start().await;
    assert_eq!(s.get("/healthz").send().await.body["status"], "ok");
    let ready = s.get("/readyz").send().await;
    assert_eq!(ready.status, 200);
    assert_eq!(ready.body["store"], "ok");
    s.get(&s.org_path())
        .key(&s.creds.keys.secret_live)
        .send()
        .await
        .ok(200);
    s.get("/v1/unknown").send().await;
    let text = s
        .get("/metrics")
        .send()
        .await
        .body
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text.contains(r#"vigil_http_requests_total{method="GET",route="/v1/organizations/{organizationId}",status="200"} 1"#), "{text}");
    assert!(text.contains(r#"route="unmatched",status="404""#), "{text}");
    assert!(
        text.contains("vigil_http_request_duration_seconds_bucket"),
        "{text}"
    );
    let docs = s.get("/docs/errors").send().await;
    assert_eq!(docs.status, 200);
    assert!(
        docs.body
            .as_str()
            .unwrap()
            .contains("## auth.scope_removed")
    );
}

#[tokio::test]
async fn wrong_methods_on_api_routes_are_counted_and_invented_methods_mint_no_series() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let r = s
        .call(reqwest::Method::PUT, &s.org_path())
        .key(sk)
        .send()
        .await;
    r.err(405, "request.method_not_allowed");
    assert_eq!(
        r.header("x-ratelimit-remaining").as_deref(),
        Some("599"),
        "counted like any answer"
    );
    let invented = reqwest::Method::from_bytes(b"FOO1").unwrap();
    s.call(invented, "/healthz").send().await;
    let text = s
        .get("/metrics")
        .send()
        .await
        .body
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!text.contains("FOO1"), "{text}");
    assert!(text.contains(r#"method="OTHER""#), "{text}");
}

#[tokio::test]
async fn allowed_values_name_the_one_enum_that_failed() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let path = format!("{}/api-keys", s.org_path());
    let one = s
        .post(&path)
        .key(sk)
        .json(json!({"name": "k", "type": "root", "environment": "live"}))
        .send()
        .await;
    let e = one.err(422, "request.validation_failed");
    assert_eq!(
        e["details"]["allowed_values"],
        json!(["publishable", "secret"])
    );
    assert_eq!(
        e["details"]["fields"][0]["expected"],
        "one of: publishable, secret"
    );
    let two = s
        .post(&path)
        .key(sk)
        .json(json!({"name": "k", "type": "root", "environment": "prod"}))
        .send()
        .await;
    let e = two.err(422, "request.validation_failed");
    assert!(
        e["details"].get("allowed_values").is_none(),
        "ambiguous with two enums: {e}"
    );
    assert_eq!(e["details"]["fields"][1]["expected"], "one of: live, test");
    // A credential put where an id belongs is not echoed back in full.
    let r = s.get(&format!("{path}/{sk}")).key(sk).send().await;
    let received = r.err(422, "request.validation_failed")["details"]["fields"][0]["received"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!received.contains(&sk[12..]), "{received}");
    // Names need only be one character long, as the interface says.
    s.post("/v1/organizations")
        .key(sk)
        .json(json!({"name": " ", "slug": "blank-name"}))
        .send()
        .await
        .ok(201);
}
