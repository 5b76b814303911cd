//! Gate's signup and login flows over HTTP (docs/architecture.md#gate): a published service whose
//! webhook is a test receiver (it checks the signature with the service's `webhook_secret` and
//! answers the variables' values), a tool's calls with no key and its workflow tokens, the consent
//! page approved as a browser posts it (its cookie and form token), RFC 8628 polling, the
//! acknowledgement, agent-token verification and revocation, and the login code the service's
//! backend consumes once. Negative paths: unpublished services, a cross-site post, a denial,
//! polling too fast, wrong and reused tokens and codes, another environment's key.

use std::time::Duration;

use reqwest::header;
use vigil_tests::gate::{person_decides, script_client};
use vigil_tests::receiver::{Answer, Receiver, verify};
use vigil_tests::{TestServer, json};

const SERVICES: &str = "/v1/gate/services";

/// A server delivering to loopback, and a published service `acme-cli` whose webhook and
/// dashboard are the receiver; the service's webhook secret.
async fn published() -> (TestServer, Receiver, String) {
    let s = TestServer::start_with(|a| a.allow_private_webhooks = true).await;
    let receiver = Receiver::start().await;
    receiver
        .answer(Answer::status(200).json(json!({"env_vars": {"ACME_API_KEY": "acme-key-123"}})));
    let made = s
        .post(SERVICES)
        .key(&s.creds.keys.secret_test)
        .json(json!({
            "id": "acme-cli", "name": "Acme CLI", "website": "https://acme.example",
            "description": "Deploys from your terminal.", "discoverable": true,
            "webhook_url": format!("{}/gate-hook", receiver.base),
            "dashboard_login_url": format!("{}/dashboard/login", receiver.base),
            "env_vars": [{"name": "API key", "key": "ACME_API_KEY", "secret": true}],
            "consent": {"terms_url": "https://acme.example/terms", "privacy_url": "https://acme.example/privacy"},
            "branding": {"primary_color": "#0a7"}
        }))
        .send()
        .await;
    let secret = made.ok(201)["webhook_secret"].as_str().unwrap().to_owned();
    (s, receiver, secret)
}

/// The login code and Gate session of the last redirect to the dashboard the receiver saw.
fn dashboard_login(receiver: &Receiver) -> (String, String) {
    let hit = receiver
        .received()
        .into_iter()
        .rev()
        .find(|r| r.path.starts_with("/dashboard/login"))
        .expect("the browser was sent to the dashboard");
    let url = reqwest::Url::parse(&format!("http://dashboard{}", hit.path)).unwrap();
    let member = |name: &str| {
        url.query_pairs()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
            .unwrap_or_else(|| panic!("no {name} in {}", hit.path))
    };
    (member("code"), member("gate_session_id"))
}

async fn poll(s: &TestServer, id: &str, token: &str) -> vigil_tests::Resp {
    s.get(&format!("/v1/gate/sessions/{id}"))
        .header("authorization", &format!("Bearer {token}"))
        .send()
        .await
}

async fn start_signup(s: &TestServer, service: &str) -> vigil_tests::Resp {
    s.post(&format!("{SERVICES}/{service}/signups"))
        .send()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signup_then_a_login_end_to_end() {
    let (s, receiver, service_secret) = published().await;
    let sk = &s.creds.keys.secret_test;

    // The tool starts a signup without a key, naming itself.
    let started = s
        .post(&format!("{SERVICES}/acme-cli/signups"))
        .json(json!({"client_name": "acme-cli 1.4"}))
        .send()
        .await;
    let started = started.ok(201).clone();
    assert_eq!(started["object"], "gate_signup");
    assert_eq!(started["interval"], 5);
    assert_eq!(
        started["env_vars"],
        json!(["ACME_API_KEY", "ACME_CLI_GATE_AGENT_TOKEN"]),
        "the variables an approval delivers are named up front"
    );
    let id = started["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("gate_"), "{id}");
    let poll_token = started["poll_token"].as_str().unwrap().to_owned();
    assert!(poll_token.starts_with("gtpoll_"));
    let consent = started["consent_url"].as_str().unwrap().to_owned();
    assert_eq!(
        poll(&s, &id, &poll_token).await.ok(200)["status"],
        "pending"
    );

    // The consent page is a real page that cannot be framed.
    let page = script_client().get(&consent).send().await.unwrap();
    let csp = page.headers()[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(page.headers()[header::X_FRAME_OPTIONS], "DENY");
    let html = page.text().await.unwrap();
    for shown in [
        "Acme CLI",
        "ACME_API_KEY",
        "ACME_CLI_GATE_AGENT_TOKEN",
        "https://acme.example/terms",
        "Approve",
        "Deny",
    ] {
        assert!(html.contains(shown), "{shown} on the page");
    }
    let approved = person_decides(&started, "approve").await;
    assert!(approved.contains("Approved"), "{approved}");

    // The service's webhook was asked, signed with its secret.
    let hook = &receiver.received()[0];
    assert_eq!(hook.path, "/gate-hook");
    assert!(
        verify(&service_secret, hook),
        "signed with the service's webhook_secret"
    );
    let event = hook.json();
    assert_eq!(event["type"], "gate.session.approved");
    assert_eq!(event["data"]["gate_session_id"], id.as_str());
    assert_eq!(event["data"]["flow"], "signup");
    // What the approver was shown of Vigil's judgement is what the approval records.
    let approval = &event["data"]["approval"];
    assert_eq!(approval["automation_status"], "human", "{approval}");
    assert!(
        approved.contains(&format!(
            "Vigil judged this browser a person's (risk {} of 100)",
            approval["risk_score"]
        )),
        "{approved} / {approval}"
    );

    // The next poll, an interval later, delivers once.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let delivered = poll(&s, &id, &poll_token).await;
    let delivered = delivered.ok(200).clone();
    assert_eq!(delivered["status"], "approved");
    assert_eq!(delivered["env_vars"]["ACME_API_KEY"], "acme-key-123");
    let agent = delivered["env_vars"]["ACME_CLI_GATE_AGENT_TOKEN"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(agent.starts_with("agt_"), "{agent}");
    let account = delivered["gate_account_id"].as_str().unwrap().to_owned();
    let ack = delivered["ack_token"].as_str().unwrap().to_owned();

    // The organization's backend verifies the token; another environment's key does not see it.
    let verified = s
        .post("/v1/gate/agent-tokens/verify")
        .key(sk)
        .json(json!({"agent_token": agent}))
        .send()
        .await;
    let verified = verified.ok(200).clone();
    assert_eq!(verified["valid"], true);
    assert_eq!(verified["status"], "active");
    assert_eq!(verified["gate_account_id"], account.as_str());
    let live = s
        .post("/v1/gate/agent-tokens/verify")
        .key(&s.creds.keys.secret_live)
        .json(json!({"agent_token": agent}))
        .send()
        .await;
    assert_eq!(live.ok(200)["valid"], false);
    // A token without the `agt_` prefix is not a token verify reads: a validation failure.
    let unprefixed = s
        .post("/v1/gate/agent-tokens/verify")
        .key(sk)
        .json(json!({"agent_token": "nope"}))
        .send()
        .await;
    let field = unprefixed.err(422, "request.validation_failed")["details"]["fields"][0].clone();
    assert_eq!(
        (field["name"].clone(), field["received"].clone()),
        (json!("agent_token"), json!("nope"))
    );
    // One of the right form that is nobody's reads as invalid.
    let stranger = s
        .post("/v1/gate/agent-tokens/verify")
        .key(sk)
        .json(json!({"agent_token": format!("agt_{}", "0".repeat(43))}))
        .send()
        .await;
    assert_eq!(stranger.ok(200)["valid"], false);

    // Acknowledged, the delivery is gone.
    let wrong = s
        .post(&format!("/v1/gate/sessions/{id}/ack"))
        .json(json!({"ack_token": "ack_x"}))
        .send()
        .await;
    wrong.err(422, "request.validation_failed");
    let acked = s
        .post(&format!("/v1/gate/sessions/{id}/ack"))
        .json(json!({"ack_token": ack}))
        .send()
        .await;
    assert_eq!(acked.ok(200)["status"], "acknowledged");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = poll(&s, &id, &poll_token).await;
    let after = after.ok(200).clone();
    assert_eq!(after["status"], "acknowledged");
    assert!(
        after.get("env_vars").is_none() && after.get("ack_token").is_none(),
        "{after}"
    );

    // Login: the agent token starts it, a person approves, the dashboard gets a code.
    let login = s
        .post("/v1/gate/login-sessions")
        .header("authorization", &format!("Bearer {agent}"))
        .json(json!({"service_id": "acme-cli"}))
        .send()
        .await;
    let login = login.ok(201).clone();
    assert_eq!(login["object"], "gate_login_session");
    assert_eq!(login["status"], "pending");
    let login_consent = login["consent_url"].as_str().unwrap();
    // The login's page names the account as the person knows it: the tool that signed it up.
    let page = vigil_tests::gate::fetch_page(login_consent).await;
    assert!(
        page.html.contains("acme-cli 1.4, signed up on"),
        "the account named on the page"
    );
    person_decides(&login, "approve").await;
    let (code, gate_session) = dashboard_login(&receiver);
    assert_eq!(gate_session, login["id"].as_str().unwrap());
    assert!(
        code.len() == 8 && code.bytes().all(|b| b.is_ascii_digit()),
        "{code}"
    );
    // A code is bound to its login: with another Gate session it is unknown.
    s.post("/v1/gate/login-sessions/consume")
        .key(sk)
        .json(json!({"code": code, "gate_session_id": id}))
        .send()
        .await
        .err(401, "auth.invalid_credentials");
    // The code alone is looked up among the caller's live codes: not another environment's,
    // nor another service's.
    for (key, body) in [
        (&s.creds.keys.secret_live, json!({"code": code})),
        (sk, json!({"code": code, "service_id": "other-cli"})),
    ] {
        s.post("/v1/gate/login-sessions/consume")
            .key(key)
            .json(body)
            .send()
            .await
            .err(401, "auth.invalid_credentials");
    }
    let consumed = s
        .post("/v1/gate/login-sessions/consume")
        .key(sk)
        .json(json!({"code": code}))
        .send()
        .await;
    let consumed = consumed.ok(200).clone();
    assert_eq!(consumed["object"], "gate_dashboard_login");
    assert_eq!(consumed["gate_account_id"], account.as_str());
    assert_eq!(consumed["account_name"], "acme-cli 1.4");
    assert_eq!(consumed["service_id"], "acme-cli");
    // Once: neither form takes it again.
    for body in [
        json!({"code": code, "gate_session_id": gate_session}),
        json!({"code": code}),
    ] {
        s.post("/v1/gate/login-sessions/consume")
            .key(sk)
            .json(body)
            .send()
            .await
            .err(401, "auth.invalid_credentials");
    }

    // Revoked, the token starts nothing and verifies as revoked.
    let revoked = s
        .post("/v1/gate/agent-tokens/revoke")
        .key(sk)
        .json(json!({"agent_token": agent}))
        .send()
        .await;
    assert_eq!(revoked.ok(200)["revoked"], true);
    start_login(&s, &agent)
        .await
        .err(401, "auth.invalid_credentials");
    let verified = s
        .post("/v1/gate/agent-tokens/verify")
        .key(sk)
        .json(json!({"agent_token": agent}))
        .send()
        .await;
    assert_eq!(verified.ok(200)["status"], "revoked");

    // Both approvals are events of the organization.
    let events = s
        .get(&format!(
            "{}/events?type=gate.session.approved",
            s.org_path()
        ))
        .key(sk)
        .send()
        .await;
    assert_eq!(events.ok(200).as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_slow_down_denial_and_forged_approvals() {
    let (s, _receiver, _) = published().await;
    let sk = &s.creds.keys.secret_test;
    // Unpublished, unknown, reserved and malformed services have no signup.
    s.post(SERVICES)
        .key(sk)
        .json(
            json!({"id": "hidden-cli", "name": "Hidden", "website": "https://h.example",
                     "discoverable": false}),
        )
        .send()
        .await
        .ok(201);
    for id in ["hidden-cli", "nowhere", "vigil"] {
        start_signup(&s, id).await.err(404, "resource.not_found");
    }
    for id in ["Bad!", "ab"] {
        start_signup(&s, id)
            .await
            .err(422, "request.validation_failed");
    }

    let started = start_signup(&s, "acme-cli").await;
    let started = started.ok(201).clone();
    let id = started["id"].as_str().unwrap();
    let token = started["poll_token"].as_str().unwrap();
    poll(&s, id, token).await.ok(200);
    let fast = poll(&s, id, token).await;
    fast.err(429, "gate.slow_down");
    assert_eq!(
        fast.header("retry-after").as_deref(),
        Some("10"),
        "the interval grew by 5 s"
    );
    // Another session's poll token, or none, reads nothing.
    let other = start_signup(&s, "acme-cli").await;
    let other_token = other.ok(201)["poll_token"].as_str().unwrap().to_owned();
    poll(&s, id, &other_token)
        .await
        .err(401, "auth.invalid_credentials");
    s.get(&format!("/v1/gate/sessions/{id}"))
        .send()
        .await
        .err(401, "auth.missing_credentials");

    // A post from another site (no cookie, a foreign Origin) approves nothing.
    let consent = started["consent_url"].as_str().unwrap();
    let page = vigil_tests::gate::fetch_page(consent).await;
    let forged = script_client()
        .post(consent.split('?').next().unwrap())
        .header(header::ORIGIN, "https://evil.example")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!(
            "token={}&csrf={}&decision=approve",
            page.token, page.csrf
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);

    // Denied, the tool learns it and nothing is delivered.
    let denied_page = person_decides(&started, "deny").await;
    assert!(denied_page.contains("Denied"), "{denied_page}");
    tokio::time::sleep(Duration::from_secs(10)).await;
    let denied = poll(&s, id, token).await;
    let denied = denied.ok(200).clone();
    assert_eq!(denied["status"], "denied");
    assert!(denied.get("env_vars").is_none());
    // The page says the request was decided.
    assert_eq!(
        script_client().get(consent).send().await.unwrap().status(),
        409
    );

    // An unknown or malformed agent token starts no login.
    for bad in ["agt_nope", "sk_test_x"] {
        s.post("/v1/gate/login-sessions")
            .header("authorization", &format!("Bearer {bad}"))
            .json(json!({"service_id": "acme-cli"}))
            .send()
            .await
            .err(401, "auth.invalid_credentials");
    }
    let unknown = s
        .post("/v1/gate/login-sessions/consume")
        .key(sk)
        .json(json!({"code": "12345678", "gate_session_id": id}))
        .send()
        .await;
    unknown.err(401, "auth.invalid_credentials");
}

/// Time passing, done to the stored records: an expired agent token verifies as expired and
/// starts no login; an expired login code is not accepted; a well-formed ack token of another
/// session acknowledges nothing; a disabled service takes no signups; and the signup call is
/// limited per client address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_wrong_tokens_disabled_services_and_the_address_limit() {
    let (s, _receiver, _) = published().await;
    let sk = &s.creds.keys.secret_test;
    let started = start_signup(&s, "acme-cli").await;
    let started = started.ok(201).clone();
    let id = started["id"].as_str().unwrap().to_owned();
    let approved = person_decides(&started, "approve").await;
    assert!(approved.contains("Approved"), "{approved}");
    let delivered = poll(&s, &id, started["poll_token"].as_str().unwrap()).await;
    let delivered = delivered.ok(200).clone();
    let agent = delivered["env_vars"]["ACME_CLI_GATE_AGENT_TOKEN"]
        .as_str()
        .unwrap()
        .to_owned();

    // Another signup whose delivery window closed unacknowledged: a late acknowledgement is
    // refused (its account and token are withdrawn by retention).
    let late = start_signup(&s, "acme-cli").await.ok(201).clone();
    let approved = person_decides(&late, "approve").await;
    assert!(approved.contains("Approved"), "{approved}");
    let late_id: schemas::ids::GateSessionId = late["id"].as_str().unwrap().parse().unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let late_delivery = poll(
        &s,
        &late_id.to_string(),
        late["poll_token"].as_str().unwrap(),
    )
    .await;
    let late_ack = late_delivery.ok(200)["ack_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let store = s.store();
    let mut aged = store.get_gate_session(late_id).await.unwrap().unwrap();
    aged.expires_at = schemas::time::now() - chrono::TimeDelta::minutes(20);
    assert!(
        store
            .transition_gate_session(&aged, store::GateSessionStatus::Approved, None)
            .await
            .unwrap()
    );
    let refused = s
        .post(&format!("/v1/gate/sessions/{late_id}/ack"))
        .json(json!({"ack_token": late_ack}))
        .send()
        .await;
    let e = refused.err(401, "auth.invalid_credentials");
    assert!(e["message"].as_str().unwrap().contains("withdrawn"), "{e}");

    // A well-formed ack token that is not this session's.
    s.post(&format!("/v1/gate/sessions/{id}/ack"))
        .json(json!({"ack_token": schemas::gate::mint(schemas::gate::TokenKind::Ack)}))
        .send()
        .await
        .err(401, "auth.invalid_credentials");

    // A login whose code has run out.
    let login = s
        .post("/v1/gate/login-sessions")
        .header("authorization", &format!("Bearer {agent}"))
        .json(json!({"service_id": "acme-cli"}))
        .send()
        .await;
    let login = login.ok(201).clone();
    person_decides(&login, "approve").await;
    let (code, gate_session) = dashboard_login(&_receiver);
    let store = s.store();
    let login_id: schemas::ids::GateSessionId = login["id"].as_str().unwrap().parse().unwrap();
    let mut session = store.get_gate_session(login_id).await.unwrap().unwrap();
    session.code_expires_at = Some(schemas::time::now() - chrono::TimeDelta::seconds(1));
    assert!(
        store
            .transition_gate_session(&session, store::GateSessionStatus::Approved, None)
            .await
            .unwrap()
    );
    s.post("/v1/gate/login-sessions/consume")
        .key(sk)
        .json(json!({"code": code, "gate_session_id": gate_session}))
        .send()
        .await
        .err(401, "auth.invalid_credentials");

    // An agent token past its expiry.
    let secret = &s.running.as_ref().unwrap().secret;
    let mut token = store
        .get_agent_token(&secret.hash_token(&agent))
        .await
        .unwrap()
        .unwrap();
    token.expires_at = schemas::time::now() - chrono::TimeDelta::seconds(1);
    assert!(store.update_agent_token(&token).await.unwrap());
    let verified = s
        .post("/v1/gate/agent-tokens/verify")
        .key(sk)
        .json(json!({"agent_token": agent}))
        .send()
        .await;
    let verified = verified.ok(200).clone();
    assert_eq!(
        (verified["valid"].clone(), verified["status"].clone()),
        (json!(false), json!("expired"))
    );
    start_login(&s, &agent)
        .await
        .err(401, "auth.invalid_credentials");

    // A disabled service takes no signup.
    s.delete(&format!("{SERVICES}/acme-cli"))
        .key(sk)
        .send()
        .await
        .ok(200);
    start_signup(&s, "acme-cli")
        .await
        .err(404, "resource.not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signups_are_limited_per_client_address() {
    let s = TestServer::start_with(|a| a.anonymous_rate_limit = 3).await;
    for _ in 0..3 {
        start_signup(&s, "nowhere")
            .await
            .err(404, "resource.not_found");
    }
    start_signup(&s, "nowhere").await.err(429, "rate.limited");
}

/// Signs up to `acme-cli` and returns the delivered agent token.
async fn signed_up(s: &TestServer) -> String {
    let started = start_signup(s, "acme-cli").await;
    let started = started.ok(201).clone();
    let approved = person_decides(&started, "approve").await;
    assert!(approved.contains("Approved"), "{approved}");
    let id = started["id"].as_str().unwrap();
    let delivered = poll(s, id, started["poll_token"].as_str().unwrap()).await;
    delivered.ok(200)["env_vars"]["ACME_CLI_GATE_AGENT_TOKEN"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Starts a login to `acme-cli` with the agent token `agent`.
async fn start_login(s: &TestServer, agent: &str) -> vigil_tests::Resp {
    s.post("/v1/gate/login-sessions")
        .header("authorization", &format!("Bearer {agent}"))
        .json(json!({"service_id": "acme-cli"}))
        .send()
        .await
}

/// Gate's caps (docs/gate.md): ten login sessions an hour per agent token, 200 polls per Gate
/// session, and the login codes an organization may present per minute; and a revocation stops a
/// login that had already started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_hold_and_a_revocation_stops_a_login_under_way() {
    let (s, _receiver, _) = published().await;
    let sk = &s.creds.keys.secret_test;
    let agent = signed_up(&s).await;

    // A login started, then the token revoked: the approval and the code both fail.
    let login = start_login(&s, &agent).await;
    let consent = login.ok(201)["consent_url"].as_str().unwrap().to_owned();
    let revoked = s
        .post("/v1/gate/agent-tokens/revoke")
        .key(sk)
        .json(json!({"agent_token": agent}))
        .send()
        .await;
    revoked.ok(200);
    // Its consent page says so, and takes no decision.
    assert_eq!(
        script_client().get(&consent).send().await.unwrap().status(),
        410
    );

    // Ten logins an hour, the eleventh refused.
    let agent = signed_up(&s).await;
    let mut logins = Vec::new();
    for _ in 0..schemas::gate::LOGINS_PER_HOUR {
        let login = start_login(&s, &agent).await;
        logins.push(login.ok(201)["id"].as_str().unwrap().to_owned());
    }
    start_login(&s, &agent).await.err(429, "rate.limited");

    // A session past its polls.
    let started = start_signup(&s, "acme-cli").await;
    let started = started.ok(201).clone();
    let id: schemas::ids::GateSessionId = started["id"].as_str().unwrap().parse().unwrap();
    let store = s.store();
    let mut session = store.get_gate_session(id).await.unwrap().unwrap();
    session.polls = schemas::gate::MAX_POLLS;
    assert!(
        store
            .transition_gate_session(&session, store::GateSessionStatus::Pending, None)
            .await
            .unwrap()
    );
    poll(&s, &id.to_string(), started["poll_token"].as_str().unwrap())
        .await
        .err(429, "rate.limited");

    // Codes presented for one login past its allowance are refused before the comparison;
    // another login's allowance is untouched.
    let consume = |key: &str, session: &str| {
        s.post("/v1/gate/login-sessions/consume")
            .key(key)
            .json(json!({"code": "00000000", "gate_session_id": session}))
            .send()
    };
    for _ in 0..schemas::gate::CODE_ATTEMPTS_PER_LOGIN {
        consume(sk, &logins[0])
            .await
            .err(401, "auth.invalid_credentials");
    }
    consume(sk, &logins[0]).await.err(429, "rate.limited");
    consume(sk, &logins[1])
        .await
        .err(401, "auth.invalid_credentials");
    // Anything but a login of the caller's charges nothing: a signup's id (which anyone can
    // make), or a login seen with the other environment's key, is unknown however often it is
    // tried, so nobody can use up a login's attempts from outside.
    for _ in 0..2 * schemas::gate::CODE_ATTEMPTS_PER_LOGIN {
        consume(sk, &id.to_string())
            .await
            .err(401, "auth.invalid_credentials");
        consume(&s.creds.keys.secret_live, &logins[2])
            .await
            .err(401, "auth.invalid_credentials");
    }
    consume(sk, &logins[2])
        .await
        .err(401, "auth.invalid_credentials");
    // Codes presented alone past the environment's allowance are refused before the lookup,
    // whatever service they name (naming services adds no budget); the other environment's
    // allowance is its own.
    let lookup = |key: &str, service: Option<&str>| {
        let mut body = json!({"code": "00000001"});
        if let Some(service) = service {
            body["service_id"] = json!(service);
        }
        s.post("/v1/gate/login-sessions/consume")
            .key(key)
            .json(body)
            .send()
    };
    for _ in 0..schemas::gate::CODE_LOOKUPS_PER_ENVIRONMENT {
        lookup(sk, Some("acme-cli"))
            .await
            .err(401, "auth.invalid_credentials");
    }
    for service in [Some("acme-cli"), Some("other-cli"), None] {
        let refused = lookup(sk, service).await;
        refused.err(429, "rate.limited");
        assert!(refused.headers.contains_key("retry-after"));
    }
    lookup(&s.creds.keys.secret_live, None)
        .await
        .err(401, "auth.invalid_credentials");
}

/// A service may answer long values (a certificate, say): more than a webhook delivery keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_may_answer_long_values() {
    let (s, receiver, _) = published().await;
    let long = "k".repeat(10_000);
    receiver.answer(Answer::status(200).json(json!({"env_vars": {"ACME_API_KEY": long}})));
    let started = start_signup(&s, "acme-cli").await;
    let started = started.ok(201).clone();
    let approved = person_decides(&started, "approve").await;
    assert!(approved.contains("Approved"), "{approved}");
    let delivered = poll(
        &s,
        started["id"].as_str().unwrap(),
        started["poll_token"].as_str().unwrap(),
    )
    .await;
    assert_eq!(
        delivered.ok(200)["env_vars"]["ACME_API_KEY"]
            .as_str()
            .unwrap()
            .len(),
        10_000
    );
}

/// Signups need no key, and each is stored until a day after it expires, so the ones that
/// may be waiting are bounded: ten per client address in any 15 minutes (a session's
/// lifetime), and 500 per service from all addresses together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_signups_are_bounded_per_address_and_per_service() {
    let s = TestServer::start_with(|a| {
        a.trusted_proxy = vec!["127.0.0.0/8".parse().unwrap()];
        a.anonymous_rate_limit = 1_000;
    })
    .await;
    s.post(SERVICES)
        .key(&s.creds.keys.secret_test)
        .json(json!({"id": "acme-cli", "name": "Acme", "website": "https://acme.example", "discoverable": true}))
        .send()
        .await
        .ok(201);
    let signup_from = |address: String| {
        let s = &s;
        async move {
            s.post(&format!("{SERVICES}/acme-cli/signups"))
                .header("x-forwarded-for", &address)
                .send()
                .await
        }
    };
    for _ in 0..schemas::gate::SIGNUPS_PER_ADDRESS {
        signup_from("203.0.113.1".into()).await.ok(201);
    }
    let refused = signup_from("203.0.113.1".into()).await;
    let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    refused.err(429, "rate.limited");
    assert!(
        retry > 60,
        "a quarter hour's quota, not a minute's: {retry}"
    );
    // Another address has its own ten; the service, its 500 in all.
    let began = std::time::Instant::now();
    let mut started = schemas::gate::SIGNUPS_PER_ADDRESS;
    let mut address = 0;
    while started < schemas::gate::SIGNUPS_PER_SERVICE {
        address += 1;
        for _ in
            0..schemas::gate::SIGNUPS_PER_ADDRESS.min(schemas::gate::SIGNUPS_PER_SERVICE - started)
        {
            signup_from(format!("198.51.{}.{}", address / 250, address % 250))
                .await
                .ok(201);
            started += 1;
        }
    }
    // The quota refills over the quarter hour, a signup every 1.8 s: a loaded machine that
    // took a while to start the 500 finds that many back, and no more.
    let refilled = (began.elapsed().as_secs_f64() * f64::from(schemas::gate::SIGNUPS_PER_SERVICE)
        / schemas::gate::SESSION_TTL.as_secs_f64())
    .ceil() as usize
        + 1;
    let mut extra = 0;
    loop {
        let answer = signup_from(format!("192.0.2.{}", 200 + extra)).await;
        if answer.status == 429 {
            answer.err(429, "rate.limited");
            break;
        }
        answer.ok(201);
        extra += 1;
        assert!(
            extra <= refilled,
            "{extra} signups past the service's quota"
        );
    }
}

/// A service that changes its variables after a signup started cannot slip one past the
/// person or the tool: the signup answer named what it would deliver, and once that is no
/// longer what approving would share, the page says the request is out of date.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signup_is_out_of_date_once_its_service_changes_its_variables() {
    let (s, _receiver, _) = published().await;
    let started = start_signup(&s, "acme-cli").await;
    let started = started.ok(201).clone();
    let consent = started["consent_url"].as_str().unwrap();
    assert_eq!(
        script_client().get(consent).send().await.unwrap().status(),
        200
    );
    s.patch(&format!("{SERVICES}/acme-cli"))
        .key(&s.creds.keys.secret_test)
        .json(json!({"env_vars": [
            {"name": "API key", "key": "ACME_API_KEY", "secret": true},
            {"name": "Database", "key": "DATABASE_URL", "secret": true}
        ]}))
        .send()
        .await
        .ok(200);
    let page = script_client().get(consent).send().await.unwrap();
    assert_eq!(page.status(), 409);
    assert!(page.text().await.unwrap().contains("out of date"));
}
