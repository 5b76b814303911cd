//! Credentials over HTTP (docs/architecture.md: #errors, #tls-and-proxies, #exposed-keys): missing,
//! malformed, unknown and wrong-type keys, publishable-key origins, live keys only over TLS, and
//! secret keys exposed to a browser.

use std::time::Duration;

use vigil_tests::{TestServer, json};

#[tokio::test]
async fn missing_malformed_and_unknown_credentials_are_refused() {
    let s = TestServer::start().await;
    let r = s.get(&s.org_path()).send().await;
    assert_eq!(
        r.err(401, "auth.missing_credentials")["details"]["header_name"],
        "Authorization"
    );
    assert_eq!(
        r.header("x-ratelimit-limit").as_deref(),
        Some("100000"),
        "without a key, the client address's bucket"
    );
    s.get(&s.org_path())
        .header("authorization", "Basic Zm9vOmJhcg==")
        .send()
        .await
        .err(401, "auth.invalid_credentials");
    s.get(&s.org_path())
        .header("authorization", "Bearer")
        .send()
        .await
        .err(401, "auth.invalid_credentials");
    s.get(&s.org_path())
        .key("sk_live_short")
        .send()
        .await
        .err(401, "auth.invalid_credentials");
    // Well-formed (valid checksum) but never issued.
    let forged = schemas::credential::Credential::generate(
        schemas::credential::KeyType::Secret,
        schemas::credential::Environment::Live,
    );
    s.get(&s.org_path())
        .key(forged.expose())
        .send()
        .await
        .err(401, "auth.invalid_credentials");
    // The bearer scheme is case-insensitive.
    s.get(&s.org_path())
        .header(
            "authorization",
            &format!("bearer {}", s.creds.keys.secret_live),
        )
        .send()
        .await
        .ok(200);
}

#[tokio::test]
async fn publishable_keys_are_refused_on_secret_routes_and_checked_for_origin() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let r = s
        .get(&s.org_path())
        .key(&s.creds.keys.publishable_test)
        .send()
        .await;
    assert_eq!(
        r.err(403, "auth.credential_type_not_allowed")["details"]["allowed_values"],
        json!(["sk_live_", "sk_test_"])
    );
    assert_eq!(
        r.header("x-ratelimit-limit").as_deref(),
        Some("120"),
        "errors carry the key's rate-limit headers"
    );

    let pk = s.create_key(sk, json!({"name": "shop", "type": "publishable", "environment": "live", "allowed_origins": ["https://shop.example"]})).await;
    let pk = pk["revealed_key"].as_str().unwrap();
    let r = s
        .get(&s.org_path())
        .key(pk)
        .header("origin", "https://evil.example")
        .send()
        .await;
    assert_eq!(
        r.err(403, "auth.origin_not_allowed")["details"]["header_name"],
        "Origin"
    );
    s.get(&s.org_path())
        .key(pk)
        .send()
        .await
        .err(403, "auth.origin_not_allowed");
    // From its own origin the key passes the credential layer and meets the route's type rule.
    s.get(&s.org_path())
        .key(pk)
        .header("origin", "https://shop.example")
        .send()
        .await
        .err(403, "auth.credential_type_not_allowed");
}

#[tokio::test]
async fn request_headers_never_revoke_a_secret_key() {
    // Server-side clients send what browsers send: Node's fetch `sec-fetch-mode: cors`, proxies
    // a forwarded `Origin` (docs/architecture.md#exposed-keys). Only a browser route is evidence
    // (tests/it/security.rs).
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    for (header, value) in [
        ("origin", "https://app.example"),
        ("sec-fetch-mode", "cors"),
        ("sec-fetch-mode", "navigate"),
        ("sec-fetch-mode", "no-cors"),
    ] {
        s.get(&s.org_path())
            .key(sk)
            .header(header, value)
            .send()
            .await
            .ok(200);
    }
    s.get(&s.org_path()).key(sk).send().await.ok(200);
    assert_eq!(s.metric("vigil_secret_keys_exposed_total").await, 0.0);
}

#[tokio::test]
async fn live_keys_need_tls_when_they_come_from_afar() {
    let s =
        TestServer::start_with(|a| a.trusted_proxy = vec!["127.0.0.1/32".parse().unwrap()]).await;
    let live = &s.creds.keys.secret_live;
    let test = &s.creds.keys.secret_test;
    // Through the trusted proxy, from another host, over plain HTTP.
    let plain = |key: &str| {
        s.get(&s.org_path())
            .key(key)
            .header("x-forwarded-for", "203.0.113.9")
            .header("x-forwarded-proto", "http")
    };
    let r = plain(live).send().await;
    r.err(403, "auth.tls_required");
    assert!(r.header("x-ratelimit-remaining").is_some());
    plain(test).send().await.ok(200);
    // The proxy terminated TLS.
    s.get(&s.org_path())
        .key(live)
        .header("x-forwarded-for", "203.0.113.9")
        .header("x-forwarded-proto", "https")
        .send()
        .await
        .ok(200);
    // Directly from this host.
    s.get(&s.org_path()).key(live).send().await.ok(200);

    // Forwarding headers from an untrusted peer are ignored: they cannot claim TLS.
    let untrusted = TestServer::start().await;
    untrusted
        .get(&untrusted.org_path())
        .key(&untrusted.creds.keys.secret_live)
        .header("x-forwarded-for", "203.0.113.9")
        .header("x-forwarded-proto", "http")
        .send()
        .await
        .ok(200);
}

#[tokio::test]
async fn vigil_terminates_tls_itself() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cert_path = dir.path().join("cert.pem");
    let key_path = dir.path().join("key.pem");
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    let (c, k) = (cert_path.clone(), key_path.clone());
    // Behind a trusted local proxy that names a distant client and no protocol, the listener
    // alone says whether the request came over TLS: a live key is refused over plain HTTP from
    // afar (`live_keys_need_tls_when_they_come_from_afar`) and served here.
    let s = TestServer::start_with(move |a| {
        a.tls_cert = Some(c.clone());
        a.tls_key = Some(k.clone());
        a.trusted_proxy = vec!["127.0.0.1/32".parse().unwrap()];
    })
    .await;

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.cert.der().clone()).unwrap();
    let tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let port = s.base.rsplit(':').next().unwrap();
    let url = format!("https://localhost:{port}{}", s.org_path());
    // HTTP/1.1, and whatever ALPN settles on by default; each client sends twice over its one
    // connection, so a later request of a connection is marked as its first was.
    for http1_only in [true, false] {
        let builder = reqwest::Client::builder()
            .tls_backend_preconfigured(tls.clone())
            .no_proxy();
        let client = if http1_only {
            builder.http1_only()
        } else {
            builder
        }
        .build()
        .unwrap();
        for _ in 0..2 {
            let r = client
                .get(&url)
                .bearer_auth(&s.creds.keys.secret_live)
                .header("x-forwarded-for", "203.0.113.9")
                .timeout(Duration::from_secs(10))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "over {:?}", r.version());
            let body: serde_json::Value = r.json().await.unwrap();
            assert_eq!(body["data"]["slug"], "development");
        }
    }
}

#[tokio::test]
async fn a_trusted_proxy_that_saw_plain_http_is_from_afar_even_without_a_client_address() {
    let s =
        TestServer::start_with(|a| a.trusted_proxy = vec!["127.0.0.1/32".parse().unwrap()]).await;
    let r = s
        .get(&s.org_path())
        .key(&s.creds.keys.secret_live)
        .header("x-forwarded-proto", "http")
        .send()
        .await;
    r.err(403, "auth.tls_required");
    s.get(&s.org_path())
        .key(&s.creds.keys.secret_live)
        .header("x-forwarded-proto", "https")
        .send()
        .await
        .ok(200);
}
