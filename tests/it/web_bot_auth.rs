//! Web Bot Auth (docs/architecture.md#collect-transport) through the real interface: an agent signs
//! its batch requests with an Ed25519 key (RFC 9421, `Signature-Agent`, tag `web-bot-auth`); ingest
//! checks the signature against the directories of the agents the operator trusts
//! (`--web-bot-auth-keys`), the log record carries the outcome, and the processor scores it: a
//! verified agent reads `verified_bot`, a forged or altered signature `bot`, an unknown key
//! `unverified`. A signature counts once (a replay reads invalid), only for this service's own
//! public authorities (never for the `Host` a client sends), and the trusted keys can be reloaded
//! while the service runs.

use std::time::Duration;

use indexmap::IndexMap;
use serde_json::Value;
use vigil_tests::collect::{CollectSession, logged_batches, open_session};
use vigil_tests::{TestServer, json};
use web_bot_auth::components::{
    CoveredComponent, DerivedComponent, HTTPField, HTTPFieldParameters, HTTPFieldParametersSet,
};
use web_bot_auth::keyring::Algorithm;
use web_bot_auth::message_signatures::{MessageSigner, UnsignedMessage};

/// RFC 9421's `test-key-ed25519` (appendix B.1.4): its public half as a key directory, its
/// private half to sign with, and its JWK thumbprint, which Web Bot Auth uses as `keyid`.
pub(crate) const DIRECTORY: &str =
    r#"{"keys":[{"kty":"OKP","crv":"Ed25519","x":"JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"}]}"#;
const PRIVATE_KEY: [u8; 32] = [
    0x9f, 0x83, 0x62, 0xf8, 0x7a, 0x48, 0x4a, 0x95, 0x4e, 0x6e, 0x74, 0x0c, 0x5b, 0x4c, 0x0e, 0x84,
    0x22, 0x91, 0x39, 0xa2, 0x0a, 0xa8, 0xab, 0x56, 0xff, 0x66, 0x58, 0x6f, 0x6a, 0x7d, 0x29, 0xc5,
];
const KEY_ID: &str = "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";
pub(crate) const AGENT: &str = "https://signature-agent.test";

/// A request being signed: the components it covers, then the two headers made for it.
struct Outgoing {
    components: IndexMap<CoveredComponent, String>,
    signature_input: String,
    signature: String,
}

impl UnsignedMessage for Outgoing {
    fn fetch_components_to_cover(&self) -> IndexMap<CoveredComponent, String> {
        self.components.clone()
    }
    fn register_header_contents(&mut self, input: String, signature: String) {
        self.signature_input = format!("sig1={input}");
        self.signature = format!("sig1={signature}");
    }
}

/// What the agent signs, and with which key.
pub(crate) struct Signing<'a> {
    key: [u8; 32],
    key_id: &'a str,
    /// The `Signature-Agent` member it sends and covers.
    agent: &'a str,
    /// The path it covers (the real one, or another to play an altered request).
    path: &'a str,
}

/// `Signature-Input`, `Signature` and `Signature-Agent` for `POST {authority}{path}`, with a
/// fresh nonce.
pub(crate) fn sign(authority: &str, signing: &Signing<'_>) -> [(&'static str, String); 3] {
    sign_with_nonce(authority, signing, &format!("n-{}", ulid::Ulid::generate()))
}

fn sign_with_nonce(
    authority: &str,
    signing: &Signing<'_>,
    nonce: &str,
) -> [(&'static str, String); 3] {
    let agent_header = format!("sig1=\"{}\"", signing.agent);
    let mut components = IndexMap::new();
    components.insert(
        CoveredComponent::Derived(DerivedComponent::Method { req: false }),
        "POST".to_owned(),
    );
    components.insert(
        CoveredComponent::Derived(DerivedComponent::Authority { req: false }),
        authority.to_owned(),
    );
    components.insert(
        CoveredComponent::Derived(DerivedComponent::Path { req: false }),
        signing.path.to_owned(),
    );
    components.insert(
        CoveredComponent::HTTP(HTTPField {
            name: "signature-agent".into(),
            parameters: HTTPFieldParametersSet(vec![HTTPFieldParameters::Key("sig1".into())]),
        }),
        format!("\"{}\"", signing.agent),
    );
    let mut outgoing = Outgoing {
        components,
        signature_input: String::new(),
        signature: String::new(),
    };
    MessageSigner {
        keyid: signing.key_id.into(),
        nonce: nonce.to_owned(),
        tag: "web-bot-auth".into(),
    }
    .generate_signature_headers_content(
        &mut outgoing,
        Duration::from_secs(60),
        Algorithm::Ed25519,
        &signing.key,
    )
    .expect("signing");
    [
        ("signature-input", outgoing.signature_input),
        ("signature", outgoing.signature),
        ("signature-agent", agent_header),
    ]
}

async fn server() -> (TestServer, tempfile::TempDir) {
    server_with(|_| {}).await
}

/// A keys file trusting [`AGENT`], `agents.json` in the returned directory.
fn agents_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("agents.json");
    std::fs::write(&keys, format!(r#"{{"{AGENT}": {DIRECTORY}}}"#)).unwrap();
    (dir, keys)
}

/// A server trusting [`AGENT`], with settings changed by `configure`; the keys file is
/// `agents.json` in the returned directory.
async fn server_with(
    configure: impl Fn(&mut vigil::config::ServeArgs) + Send + Sync + 'static,
) -> (TestServer, tempfile::TempDir) {
    let (dir, keys) = agents_file();
    let s = TestServer::start_with(move |a| {
        a.web_bot_auth_keys = Some(keys.clone());
        configure(a);
    })
    .await;
    (s, dir)
}

/// The signing agent of the tests: the RFC's key, its directory, its own path.
pub(crate) fn trusted<'a>(path: &'a str) -> Signing<'a> {
    Signing {
        key: PRIVATE_KEY,
        key_id: KEY_ID,
        agent: AGENT,
        path,
    }
}

/// Sends batch `seq` of `session` with `headers` (and `Host: host` when given), and returns
/// the Web Bot Auth outcome its log record carries.
async fn outcome(
    s: &TestServer,
    session: &CollectSession,
    seq: u64,
    headers: &[(&'static str, String)],
    host: Option<&str>,
) -> Value {
    let pk = &s.creds.keys.publishable_test;
    let mut batch = s
        .post(&format!("/v1/collect/sessions/{}/batches", session.id))
        .key(pk);
    for (name, value) in headers {
        batch = batch.header(name, value);
    }
    if let Some(host) = host {
        batch = batch.header("host", host);
    }
    let probes = json!({"kind": "interactions", "events": []});
    batch.json(session.batch(seq, &probes)).send().await.ok(202);
    let records = logged_batches(s).await;
    let record = records
        .iter()
        .find(|r| r["session_id"] == session.id.as_str() && r["seq"] == seq)
        .unwrap_or_else(|| panic!("batch {seq} of {} is not in the log", session.id));
    record["request"]["web_bot_auth"].clone()
}

fn batches_path(session: &CollectSession) -> String {
    format!("/v1/collect/sessions/{}/batches", session.id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signature_counts_once_and_one_without_a_nonce_not_at_all() {
    let (s, _dir) = server().await;
    let session = open_session(&s, &s.creds.keys.publishable_test).await;
    let authority = s.base.trim_start_matches("http://").to_owned();
    let path = batches_path(&session);
    let signed = sign(&authority, &trusted(&path));
    assert_eq!(
        outcome(&s, &session, 1, &signed, None).await["status"],
        "verified"
    );
    // The same signed request again, within the signature's minute: a replay.
    let replayed = outcome(&s, &session, 2, &signed, None).await;
    assert_eq!(replayed["status"], "invalid", "{replayed}");
    // The agent's next request, signed afresh, is its own again.
    let fresh = sign(&authority, &trusted(&path));
    assert_eq!(
        outcome(&s, &session, 3, &fresh, None).await["status"],
        "verified"
    );
    // An empty nonce cannot tell a request from its replay.
    let no_nonce = sign_with_nonce(&authority, &trusted(&path), "");
    assert_eq!(
        outcome(&s, &session, 4, &no_nonce, None).await["status"],
        "invalid"
    );
}

/// A nonce the store cannot spend (it is down) leaves the signature unverified, not forged: the
/// agent did nothing wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nonce_the_store_cannot_spend_leaves_the_signature_unverified() {
    let (_dir, keys) = agents_file();
    let (s, faults) =
        vigil_tests::faults::FlakyStore::serve(move |a| a.web_bot_auth_keys = Some(keys.clone()))
            .await;
    let session = open_session(&s, &s.creds.keys.publishable_test).await;
    let authority = s.base.trim_start_matches("http://").to_owned();
    let path = batches_path(&session);
    faults.fail_next("spend_nonce", 1);
    let signed = sign(&authority, &trusted(&path));
    assert_eq!(
        outcome(&s, &session, 1, &signed, None).await["status"],
        "unverified"
    );
    // Once the store answers again, the agent's next request verifies.
    let fresh = sign(&authority, &trusted(&path));
    assert_eq!(
        outcome(&s, &session, 2, &fresh, None).await["status"],
        "verified"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_signatures_made_for_our_public_authorities_count_whatever_the_host_header() {
    let (s, _dir) = server_with(|a| {
        a.public_url = vec![
            "https://vigil.example".into(),
            "https://api.vigil.example:8443/".into(),
        ]
    })
    .await;
    let session = open_session(&s, &s.creds.keys.publishable_test).await;
    let path = batches_path(&session);
    let listen = s.base.trim_start_matches("http://").to_owned();
    let cases: [(&str, Option<&str>, &str); 6] = [
        // Made for us and sent to us.
        ("vigil.example", Some("vigil.example"), "verified"),
        // Made for our second name.
        (
            "api.vigil.example:8443",
            Some("api.vigil.example:8443"),
            "verified",
        ),
        // Made for us, through a proxy that rewrote Host.
        ("vigil.example", None, "verified"),
        // Made for another site and re-hosted here, with that site's Host to match.
        ("shop.example", Some("shop.example"), "invalid"),
        // Our listen address is not a public authority.
        (listen.as_str(), None, "invalid"),
        // The default port is not part of the authority, so a signature naming it differs.
        ("vigil.example:443", Some("vigil.example:443"), "invalid"),
    ];
    for (seq, (signed_for, host, expected)) in (1..).zip(cases) {
        let headers = sign(signed_for, &trusted(&path));
        let got = outcome(&s, &session, seq, &headers, host).await;
        assert_eq!(
            got["status"], expected,
            "signed for {signed_for}, Host {host:?}: {got}"
        );
    }
}

/// A second agent's key, made for the test: its private half and its key directory.
fn second_agent() -> ([u8; 32], String, String) {
    use base64::Engine as _;
    let private = [42u8; 32];
    let public = ed25519_dalek::SigningKey::from_bytes(&private).verifying_key();
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(public.to_bytes());
    let jwk = web_bot_auth::keyring::Thumbprintable::OKP {
        crv: "Ed25519".into(),
        x: x.clone(),
    };
    let directory = format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","x":"{x}"}}]}}"#);
    (private, jwk.b64_thumbprint(), directory)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_keys_file_trusts_a_new_agent_and_a_broken_one_changes_nothing() {
    let (s, dir) = server_with(|a| a.web_bot_auth_refresh = Duration::from_millis(200)).await;
    let session = open_session(&s, &s.creds.keys.publishable_test).await;
    let authority = s.base.trim_start_matches("http://").to_owned();
    let path = batches_path(&session);
    let (private, key_id, directory) = second_agent();
    let newcomer = |path| Signing {
        key: private,
        key_id: &key_id,
        agent: "https://newcomer.test",
        path,
    };
    let mut seq = 1;
    let first = outcome(&s, &session, seq, &sign(&authority, &newcomer(&path)), None).await;
    assert_eq!(first["status"], "unverified", "{first}");

    let keys = dir.path().join("agents.json");
    std::fs::write(
        &keys,
        format!(r#"{{"{AGENT}": {DIRECTORY}, "https://newcomer.test": {directory}}}"#),
    )
    .unwrap();
    let mut reloaded = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        seq += 1;
        let got = outcome(&s, &session, seq, &sign(&authority, &newcomer(&path)), None).await;
        if got["status"] == "verified" {
            assert_eq!(got["signature_agent"], "https://newcomer.test");
            reloaded = true;
            break;
        }
    }
    assert!(reloaded, "the new agent was not trusted within 5 s");

    // A half-written file is not read: the agents stay trusted.
    std::fs::write(&keys, r#"{"https://newcomer.test": {"keys": ["#).unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    for signing in [newcomer(&path), trusted(&path)] {
        seq += 1;
        let got = outcome(&s, &session, seq, &sign(&authority, &signing), None).await;
        assert_eq!(got["status"], "verified", "{got}");
    }
}

/// Sends the probes batch of a fresh session, signed as `signing` says (unsigned when `None`),
/// calls `results`, and returns the session as `GET /v1/sessions/{id}` shows it once final.
async fn signed_session(s: &TestServer, signing: Option<Signing<'_>>) -> Value {
    let pk = &s.creds.keys.publishable_test;
    let session = open_session(s, pk).await;
    let sid = session.id.clone();
    let path = format!("/v1/collect/sessions/{sid}/batches");
    let authority = s.base.trim_start_matches("http://").to_owned();
    let probes = json!({"kind": "probes", "automation": {"webdriver": false}});
    let mut batch = s.post(&path).key(pk);
    if let Some(signing) = signing {
        let signing = Signing {
            path: if signing.path.is_empty() {
                &path
            } else {
                signing.path
            },
            ..signing
        };
        for (name, value) in sign(&authority, &signing) {
            batch = batch.header(name, &value);
        }
    }
    batch.json(session.batch(1, &probes)).send().await.ok(202);
    session.results(s, pk).send().await.ok(200);
    for _ in 0..200 {
        let r = s
            .get(&format!("/v1/sessions/{sid}"))
            .key(&s.creds.keys.secret_test)
            .send()
            .await;
        if r.status == 200 && r.body["data"]["decision"]["decision_status"] == "final" {
            return r.body["data"].clone();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{sid} was not decided final within 5 s");
}

fn fired(session: &Value) -> Vec<String> {
    session["signals_fired"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .filter_map(|s| s["signal"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_agents_signature_is_verified_and_scored_as_a_verified_bot() {
    let (s, _dir) = server().await;
    let session = signed_session(
        &s,
        Some(Signing {
            key: PRIVATE_KEY,
            key_id: KEY_ID,
            agent: AGENT,
            path: "",
        }),
    )
    .await;
    assert_eq!(
        session["web_bot_auth"],
        json!({"status": "verified", "signature_agent": AGENT}),
        "{session}"
    );
    assert!(fired(&session).contains(&"web_bot_auth_verified".to_owned()));
    assert_eq!(session["decision"]["verdict"], "verified_bot", "{session}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn altered_and_misattributed_signatures_are_invalid_and_scored_as_bots() {
    let (s, _dir) = server().await;
    // Signed for another path: the request was altered after signing (or replayed elsewhere).
    let altered = signed_session(
        &s,
        Some(Signing {
            key: PRIVATE_KEY,
            key_id: KEY_ID,
            agent: AGENT,
            path: "/v1/collect/sessions/sid_00000000000000000000000000/batches",
        }),
    )
    .await;
    // A valid signature by the trusted key, claiming to be another agent.
    let misattributed = signed_session(
        &s,
        Some(Signing {
            key: PRIVATE_KEY,
            key_id: KEY_ID,
            agent: "https://someone-else.test",
            path: "",
        }),
    )
    .await;
    for session in [&altered, &misattributed] {
        assert_eq!(session["web_bot_auth"]["status"], "invalid", "{session}");
        assert!(fired(session).contains(&"web_bot_auth_invalid".to_owned()));
        assert_eq!(session["decision"]["verdict"], "bot", "{session}");
    }
    assert_eq!(
        misattributed["web_bot_auth"]["signature_agent"], "sig1=\"https://someone-else.test\"",
        "an unproven claim is reported as sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_key_is_unverified_and_an_unsigned_request_has_no_outcome() {
    let (s, _dir) = server().await;
    let unknown = signed_session(
        &s,
        Some(Signing {
            key: [7; 32],
            key_id: "an-agent-nobody-trusts",
            agent: "https://unknown-agent.test",
            path: "",
        }),
    )
    .await;
    assert_eq!(unknown["web_bot_auth"]["status"], "unverified", "{unknown}");
    assert!(fired(&unknown).contains(&"web_bot_auth_unverified".to_owned()));
    assert_ne!(unknown["decision"]["verdict"], "verified_bot");

    let unsigned = signed_session(&s, None).await;
    assert_eq!(unsigned["web_bot_auth"]["status"], "absent", "{unsigned}");
    assert!(
        !fired(&unsigned)
            .iter()
            .any(|slug| slug.starts_with("web_bot_auth")),
        "{unsigned}"
    );
}
