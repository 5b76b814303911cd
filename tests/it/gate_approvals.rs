//! Gate's approvals are scored by Vigil itself (docs/gate.md#the-consent-page): what an attacker
//! holding only a tool's tokens tries, refused. A script that fetches the consent page and posts
//! the form with a browser's headers forged; one that posts a handoff minted for another page,
//! or for a page view with nothing done on it, or one already spent; and a denial that loses
//! its race with an approval is not shown as a denial. The person's own approval in a real
//! browser is in `gate_flows` and `browser`.

use std::sync::{Arc, Mutex};

use store::{GateSessionStatus, Result, Store, StoreLayer};
use vigil_tests::collect::open_session_with_ticket;
use vigil_tests::gate::{
    fetch_page, patched_driver_approves, person_decides, relay_hands_off, script_decides,
};
use vigil_tests::receiver::{Answer, Receiver};
use vigil_tests::{TestServer, json};

const SERVICES: &str = "/v1/gate/services";

/// A server, and a published service `acme-cli` with a dashboard login at `receiver`.
async fn published(s: &TestServer, receiver: &Receiver) {
    s.post(SERVICES)
        .key(&s.creds.keys.secret_test)
        .json(json!({
            "id": "acme-cli", "name": "Acme CLI", "website": "https://acme.example",
            "description": "Deploys from your terminal.", "discoverable": true,
            "webhook_url": format!("{}/gate-hook", receiver.base),
            "dashboard_login_url": format!("{}/dashboard/login", receiver.base),
        }))
        .send()
        .await
        .ok(201);
}

async fn signup(s: &TestServer) -> serde_json::Value {
    s.post(&format!("{SERVICES}/acme-cli/signups"))
        .send()
        .await
        .ok(201)
        .clone()
}

/// The Gate session `id` as stored.
async fn stored(s: &TestServer, id: &str) -> store::GateSessionRecord {
    let id: schemas::ids::GateSessionId = id.parse().unwrap();
    s.store()
        .get_gate_session(id)
        .await
        .unwrap()
        .expect("the session")
}

/// The `gate.session.denied` events of the test environment, as a backend lists them.
async fn denied_events(s: &TestServer) -> Vec<serde_json::Value> {
    let events = s
        .get(&format!(
            "/v1/organizations/{}/events?type=gate.session.denied",
            s.creds.organization["id"].as_str().unwrap()
        ))
        .key(&s.creds.keys.secret_test)
        .send()
        .await;
    events.ok(200).as_array().unwrap().clone()
}

async fn status_of(s: &TestServer, id: &str) -> GateSessionStatus {
    stored(s, id).await.status
}

/// The attack the approval check closes: a script holding a signup's consent URL, or an agent
/// token (a leaked `.env`), fetches the page and posts Approve with every header a browser
/// would send, forged. Without the page's scored session it approves nothing, for a signup as
/// for a login, and the page tells a person why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_forging_a_browsers_headers_approves_nothing() {
    let s = TestServer::start_with(|a| a.allow_private_webhooks = true).await;
    let receiver = Receiver::start().await;
    receiver.answer(Answer::status(200).json(json!({})));
    published(&s, &receiver).await;

    let started = signup(&s).await;
    let consent = started["consent_url"].as_str().unwrap();
    let code = started["user_code"].as_str().unwrap();
    let refused = script_decides(consent, Some(code), "approve", None).await;
    assert_eq!(refused.status(), 403);
    let page = refused.text().await.unwrap();
    assert!(page.contains("This page needs JavaScript"), "{page}");
    assert_eq!(
        status_of(&s, started["id"].as_str().unwrap()).await,
        GateSessionStatus::Pending
    );
    assert!(
        receiver.received().is_empty(),
        "the service was asked nothing"
    );

    // A login started with an agent token alone is refused the same way.
    let agent = approved_agent_token(&s).await;
    let login = s
        .post("/v1/gate/login-sessions")
        .header("authorization", &format!("Bearer {agent}"))
        .json(json!({"service_id": "acme-cli"}))
        .send()
        .await;
    let login = login.ok(201).clone();
    let refused = script_decides(
        login["consent_url"].as_str().unwrap(),
        login["user_code"].as_str(),
        "approve",
        None,
    )
    .await;
    assert_eq!(refused.status(), 403, "no redirect with a login code");
    assert!(refused.headers().get("location").is_none());
    assert_eq!(
        status_of(&s, login["id"].as_str().unwrap()).await,
        GateSessionStatus::Pending
    );
    assert!(
        !receiver
            .received()
            .iter()
            .any(|r| r.path.starts_with("/dashboard")),
        "no dashboard was reached"
    );
}

/// A signup approved by a person in a real browser; its agent token.
async fn approved_agent_token(s: &TestServer) -> String {
    let started = signup(s).await;
    let shown = person_decides(&started, "approve").await;
    assert!(shown.contains("Approved"), "{shown}");
    // The approval records what Vigil made of the browser, as the page showed it.
    let id = started["id"].as_str().unwrap();
    let approval = stored(s, id)
        .await
        .approval
        .expect("the approval's judgement is recorded");
    assert!(
        shown.contains(&format!("(risk {} of 100)", approval.risk_score)),
        "{shown} / {approval:?}"
    );
    assert!(approval.interacted, "the person used the page");
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let delivered = s
        .get(&format!("/v1/gate/sessions/{id}"))
        .header(
            "authorization",
            &format!("Bearer {}", started["poll_token"].as_str().unwrap()),
        )
        .send()
        .await;
    delivered.ok(200)["env_vars"]["ACME_CLI_GATE_AGENT_TOKEN"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A script that goes further and makes a collect session itself, with the page's own
/// publishable key (and the code, which the tool that started the signup has): a handoff of a
/// session not opened with this consent page's ticket is refused, whatever page it claims; one
/// opened with the ticket but with nothing done on it (no probes, no input) is never a
/// person's; a handoff decides once; and a ticket opens one session, for its own Gate session,
/// with the `vigil` organization's key only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_check_approves_nothing() {
    let s = TestServer::start_with(|a| a.allow_private_webhooks = true).await;
    let receiver = Receiver::start().await;
    published(&s, &receiver).await;
    let started = signup(&s).await;
    let consent = started["consent_url"].as_str().unwrap();
    let code = started["user_code"].as_str().unwrap();
    let page = fetch_page(consent).await;
    assert!(page.key.starts_with("pk_test_"), "{}", page.key);

    // The page's key works only from this server's origin; a script claims it.
    let scripted_client = {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("origin", s.base.parse().unwrap());
        reqwest::Client::builder()
            .no_proxy()
            .default_headers(headers)
            .build()
            .unwrap()
    };
    // A handoff of a collect session opened on `page_url` (with a freshly rendered page's
    // ticket when `ticketed`), after `probes` and an empty interactions batch if asked.
    let handoff_on =
        |page_url: String, ticketed: bool, probes: Option<serde_json::Value>, empty_input: bool| {
            let (s, key, client) = (&s, page.key.clone(), scripted_client.clone());
            async move {
                let ticket = if ticketed {
                    Some(fetch_page(consent).await.ticket)
                } else {
                    None
                };
                let session =
                    open_session_with_ticket(&client, &s.base, &key, &page_url, ticket.as_deref())
                        .await
                        .expect("the page's key opens a collect session");
                if let Some(probes) = probes {
                    s.post(&format!("/v1/collect/sessions/{}/batches", session.id))
                        .key(&key)
                        .header("origin", &s.base)
                        .json(session.batch(1, &probes))
                        .send()
                        .await
                        .ok(202);
                }
                if empty_input {
                    // An interactions batch with no input in it.
                    s.post(&format!("/v1/collect/sessions/{}/batches", session.id))
                        .key(&key)
                        .header("origin", &s.base)
                        .json(session.batch(2, &json!({"kind": "interactions", "events": []})))
                        .send()
                        .await
                        .ok(202);
                }
                session
                    .results(s, &key)
                    .header("origin", &s.base)
                    .send()
                    .await
                    .ok(200)["handoff"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            }
        };

    // The page's key is refused to a browser on another site, which always sends its Origin.
    let elsewhere_browser = s
        .post("/v1/collect/sessions")
        .key(&page.key)
        .header("origin", "https://attacker.example")
        .json(json!({"client_public_key": "AAAA", "sdk_version": "1.1.1", "page_url": consent}))
        .send()
        .await;
    elsewhere_browser.err(403, "auth.origin_not_allowed");

    // Minted for another page: the shop's, say.
    let elsewhere = handoff_on("https://shop.example/".into(), false, None, false).await;
    let refused = script_decides(consent, Some(code), "approve", Some(&elsewhere)).await;
    assert_eq!(refused.status(), 403);
    assert!(
        refused.text().await.unwrap().contains("another page"),
        "the handoff names another page"
    );
    // Claiming this very page's URL proves nothing: `page_url` is the client's word.
    let claimed = handoff_on(consent.to_owned(), false, None, false).await;
    let refused = script_decides(consent, Some(code), "approve", Some(&claimed)).await;
    assert_eq!(refused.status(), 403);
    assert!(refused.text().await.unwrap().contains("another page"));

    // Opened with the page's ticket, by a script that sent nothing a browser sends.
    let empty = handoff_on(consent.to_owned(), true, None, false).await;
    let refused = script_decides(consent, Some(code), "approve", Some(&empty)).await;
    assert_eq!(refused.status(), 403);
    assert!(refused.text().await.unwrap().contains("check did not run"));

    // Opened with the ticket after replaying a real desktop Chrome's probes and a batch of
    // "input" with no event in it: no input reached the page's code field or its button, so it
    // is never a person's decision.
    let fixture: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../processor/tests/fixtures/desktop_chrome_human.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let replayed = handoff_on(
        consent.to_owned(),
        true,
        Some(fixture["batches"][0].clone()),
        true,
    )
    .await;
    // The replay is not judged automated (a person's probes, no automation marker), but nothing
    // was done on the page: another try is asked for, and nothing is decided.
    let answered = script_decides(consent, Some(code), "approve", Some(&replayed)).await;
    let status = answered.status().as_u16();
    let text = answered.text().await.unwrap();
    assert!(
        status == 200 && text.contains("One more step"),
        "{status}: {text}"
    );
    assert_eq!(
        status_of(&s, started["id"].as_str().unwrap()).await,
        GateSessionStatus::Pending
    );
    // A handoff decides once.
    let again = script_decides(consent, Some(code), "approve", Some(&replayed)).await;
    assert_eq!(again.status(), 403);
    assert!(again.text().await.unwrap().contains("used already"));
    // Not a handoff at all.
    let forged = script_decides(consent, Some(code), "approve", Some("vh1.k1.AAAA")).await;
    assert_eq!(forged.status(), 403);
    assert_eq!(
        status_of(&s, started["id"].as_str().unwrap()).await,
        GateSessionStatus::Pending
    );

    // A ticket opens one collect session.
    let ticket = fetch_page(consent).await.ticket;
    let open = |key: String, ticket: String| {
        let client = scripted_client.clone();
        let base = s.base.clone();
        async move {
            client
                .post(format!("{base}/v1/collect/sessions"))
                .bearer_auth(key)
                .json(&json!({
                    "client_public_key": vigil_tests::collect::client_public_key(&{
                        use p256::elliptic_curve::Generate;
                        p256::ecdh::EphemeralSecret::generate()
                    }),
                    "sdk_version": "1.4.0", "page_url": "https://elsewhere.example/",
                    "consent_ticket": ticket,
                }))
                .send()
                .await
                .unwrap()
        }
    };
    assert_eq!(open(page.key.clone(), ticket.clone()).await.status(), 201);
    let spent = open(page.key.clone(), ticket.clone()).await;
    assert_eq!(spent.status(), 422);
    let spent: serde_json::Value = spent.json().await.unwrap();
    assert_eq!(
        spent["error"]["details"]["fields"][0]["name"], "consent_ticket",
        "{spent}"
    );
    // A tenant's key cannot present one, even from its own pages.
    let tenant = open(
        s.creds.keys.publishable_test.clone(),
        fetch_page(consent).await.ticket,
    )
    .await;
    assert_eq!(tenant.status(), 422);
    // Nor is a made-up or altered one taken.
    let altered = format!("{}A", &ticket[..ticket.len() - 1]);
    assert_eq!(open(page.key.clone(), altered).await.status(), 422);
}

/// The user code: typed wrong, the page says so and counts; typed right, or not of a code's
/// form, it costs nothing; the tenth wrong code closes the session as denied, recorded in
/// `gate.session.denied`. Checked before anything is judged, so no browser is needed here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_user_codes_close_the_session_after_ten_tries() {
    let s = TestServer::start_with(|a| a.allow_private_webhooks = true).await;
    let receiver = Receiver::start().await;
    published(&s, &receiver).await;
    let started = signup(&s).await;
    let consent = started["consent_url"].as_str().unwrap();
    let id = started["id"].as_str().unwrap();
    let code = started["user_code"].as_str().unwrap();
    assert!(
        schemas::gate::normalize_user_code(code).is_some() && code.len() == 9,
        "{code}"
    );
    // The right code typed loosely is still the right code: it reaches the browser check.
    let loose = code.to_lowercase().replace('-', " ");
    let checked = script_decides(consent, Some(&loose), "approve", None).await;
    assert!(
        checked
            .text()
            .await
            .unwrap()
            .contains("This page needs JavaScript")
    );
    // Not a code at all: asked again, nothing counted.
    for malformed in [None, Some(""), Some("1234-5678")] {
        let asked = script_decides(consent, malformed, "approve", None).await;
        assert_eq!(asked.status(), 200);
        assert!(
            asked
                .text()
                .await
                .unwrap()
                .contains("Type the code your tool shows")
        );
    }
    let wrong = if code.starts_with('B') {
        "CCCC-CCCC"
    } else {
        "BBBB-BBBB"
    };
    // The right code above counted nothing: nine wrong ones say what is left, the tenth
    // closes.
    for left in (1..=9).rev() {
        let page = script_decides(consent, Some(wrong), "approve", None).await;
        assert_eq!(page.status(), 200);
        let text = page.text().await.unwrap();
        assert!(text.contains(&format!("({left} tr")), "{left}: {text}");
        assert_eq!(status_of(&s, id).await, GateSessionStatus::Pending);
    }
    let closed = script_decides(consent, Some(wrong), "approve", None).await;
    assert_eq!(closed.status(), 403);
    assert!(
        closed
            .text()
            .await
            .unwrap()
            .contains("Too many wrong codes")
    );
    let session = stored(&s, id).await;
    assert_eq!(session.status, GateSessionStatus::Denied);
    assert_eq!(
        session.denial.map(|d| d.reason),
        Some(store::GateDenialReason::UserCode)
    );
    // The link is no use now, whatever code comes with it.
    let late = vigil_tests::gate::script_client()
        .get(consent)
        .send()
        .await
        .unwrap();
    assert_eq!(late.status(), 409);
    assert!(late.text().await.unwrap().contains("Already decided"));
    let events = denied_events(&s).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["subject"]["id"], id);
    assert_eq!(events[0]["data"]["reason"], "user_code");
    assert_eq!(events[0]["data"]["judgement"], serde_json::Value::Null);
}

/// A consent page Vigil stays uncertain about gets two more tries, then its Gate session is
/// closed as denied: a replayed person's probes with no input on the page, three times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncertain_page_gets_two_more_tries_then_the_session_closes() {
    let s = TestServer::start_with(|a| a.allow_private_webhooks = true).await;
    let receiver = Receiver::start().await;
    published(&s, &receiver).await;
    let started = signup(&s).await;
    let consent = started["consent_url"].as_str().unwrap();
    let code = started["user_code"].as_str().unwrap();
    let id = started["id"].as_str().unwrap();
    let fixture: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../processor/tests/fixtures/desktop_chrome_human.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let client = {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("origin", s.base.parse().unwrap());
        reqwest::Client::builder()
            .no_proxy()
            .default_headers(headers)
            .build()
            .unwrap()
    };
    for attempt in 1..=3 {
        let page = fetch_page(consent).await;
        let session =
            open_session_with_ticket(&client, &s.base, &page.key, consent, Some(&page.ticket))
                .await
                .expect("a ticketed session");
        // A probes batch of its own each time: one sent again would be a replay, judged
        // automated at once (docs/detection.md#replayed-sessions).
        let mut probes = fixture["batches"][0].clone();
        probes["collected_in_ms"] = json!(300.0 + f64::from(attempt));
        for (seq, batch) in [
            (1, probes),
            (2, json!({"kind": "interactions", "events": []})),
        ] {
            s.post(&format!("/v1/collect/sessions/{}/batches", session.id))
                .key(&page.key)
                .header("origin", &s.base)
                .json(session.batch(seq, &batch))
                .send()
                .await
                .ok(202);
        }
        let handoff = session
            .results(&s, &page.key)
            .header("origin", &s.base)
            .send()
            .await
            .ok(200)["handoff"]
            .as_str()
            .unwrap()
            .to_owned();
        let answered = script_decides(consent, Some(code), "approve", Some(&handoff)).await;
        let status = answered.status().as_u16();
        let text = answered.text().await.unwrap();
        if attempt < 3 {
            assert!(
                status == 200 && text.contains("One more step"),
                "{attempt}: {text}"
            );
            assert_eq!(status_of(&s, id).await, GateSessionStatus::Pending);
        } else {
            assert!(
                status == 403 && text.contains("Not approved"),
                "{attempt}: {text}"
            );
        }
    }
    let session = stored(&s, id).await;
    assert_eq!(session.status, GateSessionStatus::Denied);
    let denial = session.denial.expect("the denial is recorded");
    assert_eq!(denial.reason, store::GateDenialReason::Uncertain);
    assert!(denial.judgement.is_some(), "with the last judgement");
    assert!(
        receiver.received().is_empty(),
        "the service was asked nothing"
    );
}

/// Makes an approval land just before the next `transition_gate_session`, as a second
/// browser's approval racing a denial would.
struct ApprovalFirst {
    store: Mutex<Option<Store>>,
    session: Mutex<Option<schemas::ids::GateSessionId>>,
}

impl StoreLayer for ApprovalFirst {
    async fn around<'a, T: Send + 'static>(
        &'a self,
        operation: &'static str,
        call: impl std::future::Future<Output = Result<T>> + Send + 'a,
    ) -> Result<T> {
        let armed = self.session.lock().unwrap().take();
        if let (Some(id), "transition_gate_session") = (armed, operation) {
            let store = self.store.lock().unwrap().clone().expect("the inner store");
            let mut approved = store.get_gate_session(id).await?.expect("the session");
            approved.status = GateSessionStatus::Approved;
            assert!(
                store
                    .transition_gate_session(&approved, GateSessionStatus::Pending, None)
                    .await?
            );
        } else if let Some(id) = armed {
            *self.session.lock().unwrap() = Some(id);
        }
        call.await
    }
}

/// Approve and Deny raced: the approval landed first, so the denial must not say "Denied"
/// (nothing was shared) while the tool receives its secrets. The page says what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_that_lost_the_race_to_an_approval_says_so() {
    let layer = Arc::new(ApprovalFirst {
        store: Mutex::new(None),
        session: Mutex::new(None),
    });
    let hold = Arc::clone(&layer);
    let s = TestServer::start_wrapped_with(
        vigil::server::Wrap {
            store: Some(Box::new(move |inner: Store| {
                *hold.store.lock().unwrap() = Some(Arc::clone(&inner));
                Arc::new(store::Layered::new(inner, hold)) as Store
            })),
            ..Default::default()
        },
        |a| a.allow_private_webhooks = true,
    )
    .await;
    let receiver = Receiver::start().await;
    published(&s, &receiver).await;
    let started = signup(&s).await;
    let id = started["id"].as_str().unwrap();
    *layer.session.lock().unwrap() = Some(id.parse().unwrap());
    let shown = person_decides(&started, "deny").await;
    assert_eq!(status_of(&s, id).await, GateSessionStatus::Approved);
    assert!(!shown.contains("Nothing was shared"), "{shown}");
    assert!(
        shown.contains("Not denied: this request was approved"),
        "{shown}"
    );
}

/// Approval laundering: a relay on another origin serves an unrelated page that runs Vigil's
/// SDK through the relay (with the consent page's key, and Vigil's origin forged in every
/// forwarded call), a person uses that page in a real Chromium, and the relay posts the
/// handoff it got, with the user code (it started the signup) and a browser's headers forged.
/// Without the consent page's ticket the session is another page's; with a ticket lifted from
/// the consent page, the person's input never reached the code field or the Approve button.
/// Neither approves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_on_another_origin_launders_no_approval() {
    let s = TestServer::start_with(|a| a.allow_private_webhooks = true).await;
    let receiver = Receiver::start().await;
    receiver.answer(Answer::status(200).json(json!({})));
    published(&s, &receiver).await;
    let started = signup(&s).await;
    let consent = started["consent_url"].as_str().unwrap();
    let code = started["user_code"].as_str().unwrap();
    let id = started["id"].as_str().unwrap();
    let page = fetch_page(consent).await;

    let handoff = relay_hands_off(&s.base, &page.key, None).await;
    let refused = script_decides(consent, Some(code), "approve", Some(&handoff)).await;
    assert_eq!(refused.status(), 403);
    let text = refused.text().await.unwrap();
    assert!(text.contains("another page"), "{text}");
    assert_eq!(status_of(&s, id).await, GateSessionStatus::Pending);

    let ticket = fetch_page(consent).await.ticket;
    let handoff = relay_hands_off(&s.base, &page.key, Some(&ticket)).await;
    let answered = script_decides(consent, Some(code), "approve", Some(&handoff)).await;
    let status = answered.status().as_u16();
    let text = answered.text().await.unwrap();
    assert!(
        status == 200 && text.contains("One more step"),
        "{status}: {text}"
    );
    let session = stored(&s, id).await;
    assert_eq!(session.status, GateSessionStatus::Pending);
    assert_eq!(session.uncertain_judgements, 1, "the try was counted");
    assert!(
        receiver.received().is_empty(),
        "the service was asked nothing"
    );
}

/// Drivers patched against DevTools detection, approving the consent page as careful operators
/// do with the three tweaks that once passed: positions rounded to whole pixels and keys only
/// read automated, and the session is closed at once (one judgement per session: the link
/// cannot be tried again with another tweak). The window at 0,0 is the known gap
/// (docs/detection.md): it is not approved without the code and the page's own input, which
/// its driver gives, so it is only pinned not to close the session as automated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patched_drivers_are_refused_on_the_consent_page_and_close_it() {
    let s = TestServer::start_with(|a| a.allow_private_webhooks = true).await;
    let receiver = Receiver::start().await;
    receiver.answer(Answer::status(200).json(json!({})));
    published(&s, &receiver).await;
    for (driver, input) in [
        ("rebrowser", "whole_pixels"),
        ("patchright", "whole_pixels"),
        ("rebrowser", "keyboard"),
        ("patchright", "keyboard"),
    ] {
        let started = signup(&s).await;
        let id = started["id"].as_str().unwrap();
        let shown = patched_driver_approves(&started, driver, input, None).await;
        assert!(
            shown.contains("A person must approve"),
            "{driver} {input}: {shown}"
        );
        let session = stored(&s, id).await;
        assert_eq!(
            session.status,
            GateSessionStatus::Denied,
            "{driver} {input}"
        );
        let denial = session.denial.expect("the denial is recorded");
        assert_eq!(denial.reason, store::GateDenialReason::Automated);
        let judged = denial.judgement.expect("with its judgement");
        assert!(
            judged.used_code_field && judged.used_approve_button,
            "{driver} {input}: its input reached the page's fields: {judged:?}"
        );
        // The same link again: closed.
        let again = vigil_tests::gate::script_client()
            .get(started["consent_url"].as_str().unwrap())
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 409, "{driver} {input}");
    }
    assert!(
        receiver.received().is_empty(),
        "the service was asked nothing"
    );
    let events = denied_events(&s).await;
    assert_eq!(events.len(), 4, "{events:?}");
    for event in &events {
        assert_eq!(event["data"]["reason"], "automated", "{event}");
        assert_eq!(event["data"]["judgement"]["automation_status"], "automated");
    }

    // The known gap: a careful driver in a window at 0,0 is not judged automated here either.
    let started = signup(&s).await;
    let id = started["id"].as_str().unwrap();
    let shown = patched_driver_approves(&started, "rebrowser", "careful", Some("0,0")).await;
    assert!(!shown.contains("A person must approve"), "{shown}");
    let session = stored(&s, id).await;
    assert_ne!(
        session.denial.map(|d| d.reason),
        Some(store::GateDenialReason::Automated)
    );
}
