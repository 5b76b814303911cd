//! Gate's approvals are scored by Vigil itself (docs/gate.md#the-consent-page): what an attacker
//! holding only a tool's tokens tries, refused. A script that fetches the consent page and posts
//! the form with a browser's headers forged; one that posts a handoff minted for another page,
//! or for a page view with nothing done on it, or one already spent; and a denial that loses
//! its race with an approval is not shown as a denial. The person's own approval in a real
//! browser is in `gate_flows` and `browser`.

use std::sync::{Arc, Mutex};

use store::{GateSessionStatus, Result, Store, StoreLayer};
use vigil_tests::collect::open_session_on;
use vigil_tests::gate::{fetch_page, person_decides, script_decides};
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

async fn status_of(s: &TestServer, id: &str) -> GateSessionStatus {
    let id: schemas::ids::GateSessionId = id.parse().unwrap();
    s.store()
        .get_gate_session(id)
        .await
        .unwrap()
        .expect("the session")
        .status
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
    let refused = script_decides(consent, "approve", None).await;
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
    let refused = script_decides(login["consent_url"].as_str().unwrap(), "approve", None).await;
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
    let shown = person_decides(started["consent_url"].as_str().unwrap(), "approve").await;
    assert!(shown.contains("Approved"), "{shown}");
    // The approval records what Vigil made of the browser, as the page showed it.
    let id: schemas::ids::GateSessionId = started["id"].as_str().unwrap().parse().unwrap();
    let approval = s
        .store()
        .get_gate_session(id)
        .await
        .unwrap()
        .unwrap()
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
/// publishable key: a handoff minted for another page is refused; one for the consent page with
/// nothing done on it (no probes, no input) is never a person's; and a handoff decides once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_check_approves_nothing() {
    let s = TestServer::start_with(|a| a.allow_private_webhooks = true).await;
    let receiver = Receiver::start().await;
    published(&s, &receiver).await;
    let started = signup(&s).await;
    let consent = started["consent_url"].as_str().unwrap();
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
    let handoff_on = |page_url: String, probes: Option<serde_json::Value>, empty_input: bool| {
        let (s, key, client) = (&s, page.key.clone(), scripted_client.clone());
        async move {
            let session = open_session_on(&client, &s.base, &key, &page_url)
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
    let elsewhere = handoff_on("https://shop.example/".into(), None, false).await;
    let refused = script_decides(consent, "approve", Some(&elsewhere)).await;
    assert_eq!(refused.status(), 403);
    assert!(
        refused.text().await.unwrap().contains("another page"),
        "the handoff names another page"
    );

    // Minted for this very page, by a script that sent nothing a browser sends.
    let empty = handoff_on(consent.to_owned(), None, false).await;
    let refused = script_decides(consent, "approve", Some(&empty)).await;
    assert_eq!(refused.status(), 403);
    assert!(refused.text().await.unwrap().contains("check did not run"));

    // Minted after replaying a real desktop Chrome's probes and a batch of "input" with no
    // event in it: no input reached the page, so it is never a person's decision.
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
        Some(fixture["batches"][0].clone()),
        true,
    )
    .await;
    // The replay is not judged automated (a person's probes, no automation marker), but nothing
    // was done on the page: one more deliberate click is asked for, and nothing is decided.
    let answered = script_decides(consent, "approve", Some(&replayed)).await;
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
    let again = script_decides(consent, "approve", Some(&replayed)).await;
    assert_eq!(again.status(), 403);
    assert!(again.text().await.unwrap().contains("used already"));
    // Not a handoff at all.
    let forged = script_decides(consent, "approve", Some("vh1.k1.AAAA")).await;
    assert_eq!(forged.status(), 403);
    assert_eq!(
        status_of(&s, started["id"].as_str().unwrap()).await,
        GateSessionStatus::Pending
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
    let shown = person_decides(started["consent_url"].as_str().unwrap(), "deny").await;
    assert_eq!(status_of(&s, id).await, GateSessionStatus::Approved);
    assert!(!shown.contains("Nothing was shared"), "{shown}");
    assert!(
        shown.contains("Not denied: this request was approved"),
        "{shown}"
    );
}
