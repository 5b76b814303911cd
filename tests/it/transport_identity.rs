//! Transport identity (docs/detection.md#transport-identity): a served Vigil terminating TLS
//! under a certificate of the test's own CA, reached by the real clients: headless Chromium
//! (trusting the certificate by its key), curl, Python's `requests` and Node's `fetch`. Each
//! client's JA4 is read back from the session it sent a batch in, with the connection's TLS
//! version, ALPN and HTTP version; a Chrome user agent over a library's TLS fires
//! `tls_client_mismatch`, Chromium itself never does. Behind a trusted proxy the JA4 comes from
//! `--client-fingerprint-header`, and from nobody else. And the time zone: Chromium started
//! with `TZ` in a zone the address's country does not use fires `timezone_mismatch`, and in the
//! country's own zone does not (the test's IP database places loopback in Japan).

use std::path::Path;
use std::process::Command;

use ipdata::testing::write_mmdb;
use serde_json::{Value, json};
use vigil_tests::TestServer;
use vigil_tests::analysts::probes;
use vigil_tests::browser::{ChromeDriver, PageServer, Profile, sdk_page, which};
use vigil_tests::collect::{CollectSession, final_detail, fired_in, open_session};
use vigil_tests::tls::TEST_CA;

const CHROME_UA: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36";

/// A Vigil terminating TLS with the test CA's certificate for `localhost`, whose IP database
/// places 127.0.0.0/8 in Tokyo; its `base` and `client` speak HTTPS, trusting the CA.
async fn served_over_tls(dir: &Path) -> TestServer {
    let (cert, key, ca) = (
        dir.join("server.pem"),
        dir.join("server-key.pem"),
        dir.join("ca.pem"),
    );
    std::fs::write(&cert, &TEST_CA.server).unwrap();
    std::fs::write(&key, &TEST_CA.key).unwrap();
    std::fs::write(&ca, &TEST_CA.ca).unwrap();
    let city = dir.join("GeoLite2-City.mmdb");
    write_mmdb(
        &city,
        "GeoLite2-City",
        6,
        json!([["127.0.0.0/8", {"country": {"iso_code": "JP"}, "location": {"time_zone": "Asia/Tokyo"}}]]),
    );
    let mut s = TestServer::start_with(move |a| {
        a.tls_cert = Some(cert.clone());
        a.tls_key = Some(key.clone());
        a.ip_database = vec![city.clone()];
        a.trusted_proxy = vec!["10.0.0.0/8".parse().unwrap()];
        a.client_fingerprint_header = Some("x-ja4".parse().unwrap());
    })
    .await;
    let port = s.base.rsplit(':').next().unwrap().to_owned();
    s.base = format!("https://localhost:{port}");
    s.client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(TEST_CA.ca.as_bytes()).unwrap())
        .no_proxy()
        .build()
        .unwrap();
    s
}

/// A session whose probes batch the command `send` makes posts (with a Chrome user agent, as a
/// script posing as the browser does) to the batch URL with the body written at the path it is
/// given, printing the status; its detail once decided. The command runs off the runtime, which
/// serves the server it calls.
async fn sent_by(s: &TestServer, send: impl FnOnce(&str, &Path) -> Command) -> Value {
    let pk = &s.creds.keys.publishable_test;
    let session: CollectSession = open_session(s, pk).await;
    let body = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(body.path(), session.batch(1, &probes()).to_string()).unwrap();
    let url = format!("{}/v1/collect/sessions/{}/batches", s.base, session.id);
    let mut command = send(&url, body.path());
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("the client runs");
    assert!(
        out.status.success(),
        "the client failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "202",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    session.results(s, pk).send().await.ok(200);
    final_detail(s, &session.id).await
}

/// A JA4's second part: the hash of its ciphers.
fn b_part(connection: &Value) -> &str {
    connection["ja4"]
        .as_str()
        .unwrap()
        .split('_')
        .nth(1)
        .unwrap()
}

fn ca_path(dir: &Path) -> String {
    dir.join("ca.pem").display().to_string()
}

/// What a client's session shows of its TLS, after asserting that it fingerprints as a
/// library, not the browser its user agent claims.
fn library(detail: &Value, client: &str) -> Value {
    let connection = &detail["connection_fingerprint"];
    let ja4 = connection["ja4"]
        .as_str()
        .unwrap_or_else(|| panic!("{client}: no JA4: {detail}"));
    eprintln!("{client}: ja4 {ja4}, ja4_r {}", connection["ja4_r"]);
    assert!(ja4.starts_with("t13d"), "{client}: {ja4}");
    assert_eq!(connection["tls_version"], "TLSv1.3", "{client}");
    assert!(
        fired_in(detail).contains(&"tls_client_mismatch"),
        "{client} posing as Chrome: {detail}"
    );
    connection.clone()
}

#[tokio::test]
async fn curl_requests_and_node_posing_as_chrome_show_their_own_tls() {
    let dir = tempfile::tempdir().unwrap();
    let s = served_over_tls(dir.path()).await;
    let ca = ca_path(dir.path());

    let curl = sent_by(&s, |url, body| {
        let mut command = Command::new("curl");
        command
            .args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--cacert",
                &ca,
            ])
            .args([
                "-H",
                &format!("authorization: Bearer {}", s.creds.keys.publishable_test),
            ])
            .args(["-H", "content-type: application/json", "-A", CHROME_UA])
            .arg("--data-binary")
            .arg(format!("@{}", body.display()))
            .arg(url);
        command
    })
    .await;
    let connection = library(&curl, "curl");
    // FoxIO's published curl over OpenSSL 3: its ciphers exactly; its extensions with or
    // without the padding OpenSSL adds to hellos of some lengths.
    let ja4 = connection["ja4"].as_str().unwrap();
    assert!(
        ja4.starts_with("t13d3112h2_e8f1e7e78f70_b26ce05bbdd6")
            || ja4.starts_with("t13d3111h2_e8f1e7e78f70_375ca2c5e164"),
        "{ja4}"
    );
    assert_eq!(connection["alpn"], "h2", "curl offers h2 and takes it");
    assert_eq!(connection["http_version"], "HTTP/2.0");

    let requests = sent_by(&s, |url, body| {
        let mut command = Command::new("python3");
        command
            .args(["-c", "import sys, requests\n\
                r = requests.post(sys.argv[1], data=open(sys.argv[2], 'rb').read(), verify=sys.argv[3],\n\
                    headers={'authorization': 'Bearer ' + sys.argv[4], 'content-type': 'application/json', 'user-agent': sys.argv[5]})\n\
                print(r.status_code)"])
            .arg(url)
            .arg(body)
            .args([&ca, &s.creds.keys.publishable_test, CHROME_UA]);
        command
    })
    .await;
    let connection = library(&requests, "requests");
    // FoxIO's published Python over OpenSSL: the same eighteen ciphers.
    assert_eq!(b_part(&connection), "85036bcba153", "{}", connection["ja4"]);
    assert_eq!(
        connection["http_version"], "HTTP/1.1",
        "requests speaks HTTP/1.1"
    );

    let node = sent_by(&s, |url, body| {
        let mut command = Command::new("node");
        command
            .env("NODE_EXTRA_CA_CERTS", &ca)
            .args(["-e", "const [url, body, key, ua] = process.argv.slice(1);\n\
                fetch(url, {method: 'POST', body: require('fs').readFileSync(body),\n\
                  headers: {authorization: 'Bearer ' + key, 'content-type': 'application/json', 'user-agent': ua}})\n\
                  .then(r => console.log(r.status), e => { console.error(e); process.exit(1); });"])
            .arg(url)
            .arg(body)
            .args([&s.creds.keys.publishable_test, CHROME_UA]);
        command
    })
    .await;
    let connection = library(&node, "node");
    // FoxIO's published Node (https.request, whose hello fetch's adds ALPN to): Node 17 to
    // 22.18 and 23, or 22.20 and 24 on.
    assert!(
        ["a33745022dd6", "b262b3658495"].contains(&b_part(&connection)),
        "{}",
        connection["ja4"]
    );

    // Three stacks, three fingerprints.
    let ja4s: std::collections::BTreeSet<&str> = [&curl, &requests, &node]
        .iter()
        .map(|d| d["connection_fingerprint"]["ja4"].as_str().unwrap())
        .collect();
    assert_eq!(ja4s.len(), 3, "{ja4s:?}");
}

#[tokio::test]
async fn a_trusted_proxys_fingerprint_header_is_believed_and_a_clients_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let s = served_over_tls(dir.path()).await;
    let pk = &s.creds.keys.publishable_test;
    // From 127.0.0.1, which is not among the trusted proxies: the header is the client's own
    // claim, and the listener's fingerprint stands.
    let session = open_session(&s, pk).await;
    s.post(&format!("/v1/collect/sessions/{}/batches", session.id))
        .key(pk)
        .header("x-ja4", "t13d1516h2_8daaf6152771_02713d6af862")
        .json(session.batch(1, &probes()))
        .send()
        .await
        .ok(202);
    session.results(&s, pk).send().await.ok(200);
    let detail = final_detail(&s, &session.id).await;
    let ja4 = detail["connection_fingerprint"]["ja4"].as_str().unwrap();
    assert_ne!(
        ja4, "t13d1516h2_8daaf6152771_02713d6af862",
        "the client's header is not believed"
    );
    assert!(
        detail["connection_fingerprint"]["ja4_r"].is_string(),
        "the listener's own"
    );

    // Behind a proxy that terminates TLS and is trusted: its header is the client's JA4, and
    // one of another shape is not believed.
    let proxied = TestServer::start_with(|a| {
        a.trusted_proxy = vec!["127.0.0.1/32".parse().unwrap()];
        a.client_fingerprint_header = Some("x-ja4".parse().unwrap());
    })
    .await;
    let pk = &proxied.creds.keys.publishable_test;
    // A proxy that appends rather than overwrites passes the client's value beside its own:
    // two values are neither believed.
    let chromium = "t13d1516h2_8daaf6152771_02713d6af862";
    let curl = "t13d3112h2_e8f1e7e78f70_b26ce05bbdd6";
    for (values, shown) in [
        (vec![chromium], json!(chromium)),
        (vec!["<script>"], Value::Null),
        (vec![chromium, curl], Value::Null),
    ] {
        let session = open_session(&proxied, pk).await;
        let mut batch = proxied
            .post(&format!("/v1/collect/sessions/{}/batches", session.id))
            .key(pk)
            .header("x-forwarded-for", "203.0.113.9")
            .header("x-forwarded-proto", "https");
        for value in &values {
            batch = batch.header("x-ja4", value);
        }
        batch.json(session.batch(1, &probes())).send().await.ok(202);
        session.results(&proxied, pk).send().await.ok(200);
        let detail = final_detail(&proxied, &session.id).await;
        let connection = &detail["connection_fingerprint"];
        assert_eq!(connection["ja4"], shown, "{values:?}");
        assert_eq!(
            connection["ja4_r"],
            Value::Null,
            "a proxy passes no raw form"
        );
        assert_eq!(connection["http_version"], "HTTP/1.1");
    }
}

/// A page on another origin loading the SDK from the TLS listener, in a headless Chromium
/// started in `zone` that trusts the test certificate by its key; the session's detail.
async fn chromium_visit(s: &TestServer, zone: &str) -> Value {
    let page = PageServer::start(sdk_page(&s.base, &s.creds.keys.publishable_test)).await;
    let driver = ChromeDriver::start_with_env(&[("TZ", zone)]).await;
    let profile = Profile::new();
    let trust = format!(
        "--ignore-certificate-errors-spki-list={}",
        TEST_CA.server_spki_sha256
    );
    let browser = driver.session_with(&profile, &[trust]).await;
    browser.open_shop(&format!("{}/checkout", page.base)).await;
    let loaded = browser.eval_async("window.__vigilLoad()").await;
    assert_eq!(loaded["ok"], true, "Vigil.load over TLS: {loaded}");
    let reported_zone = browser
        .eval_async("Promise.resolve(Intl.DateTimeFormat().resolvedOptions().timeZone)")
        .await;
    assert_eq!(reported_zone, zone, "Chromium took TZ");
    let result = browser.eval_async("window.__vigilResult()").await;
    assert_eq!(result["ok"], true, "agent.result(): {result}");
    browser.quit().await;
    final_detail(s, loaded["session_id"].as_str().unwrap()).await
}

#[tokio::test]
async fn chromium_shows_its_own_tls_and_its_zone_is_judged_against_the_addresss_country() {
    assert!(
        which("chromium").is_some(),
        "chromium is installed by scripts/test.sh"
    );
    let dir = tempfile::tempdir().unwrap();
    let s = served_over_tls(dir.path()).await;

    let at_home = chromium_visit(&s, "Asia/Tokyo").await;
    let connection = &at_home["connection_fingerprint"];
    let ja4 = connection["ja4"].as_str().expect("Chromium's JA4");
    eprintln!("chromium: ja4 {ja4}, ja4_r {}", connection["ja4_r"]);
    // FoxIO's published Chromium fingerprint is t13d1516h2_8daaf6152771_02713d6af862: its
    // cipher list (b) has stood since Chrome 83; its extensions (c) move with ALPS and ECH.
    let mut parts = ja4.split('_');
    let a = parts.next().unwrap();
    assert!(a.starts_with("t13d15") && a.ends_with("h2"), "{ja4}");
    assert_eq!(parts.next(), Some("8daaf6152771"), "{ja4}");
    assert_eq!(connection["tls_version"], "TLSv1.3");
    assert_eq!(connection["alpn"], "h2");
    assert_eq!(connection["http_version"], "HTTP/2.0");
    let signals = fired_in(&at_home);
    assert!(!signals.contains(&"tls_client_mismatch"), "{at_home}");
    assert_eq!(at_home["network"]["country"], "JP");
    assert!(!signals.contains(&"timezone_mismatch"), "{at_home}");

    let abroad = chromium_visit(&s, "America/New_York").await;
    assert_eq!(abroad["client_telemetry"]["timezone"], "America/New_York");
    let signals = fired_in(&abroad);
    assert!(signals.contains(&"timezone_mismatch"), "{abroad}");
    assert!(!signals.contains(&"tls_client_mismatch"), "{abroad}");
    assert_eq!(
        abroad["network"]["vpn"]["methods"]["timezone_mismatch"],
        true
    );
}
