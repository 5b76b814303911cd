//! Throwaway certificate authorities for tests of TLS to the engines: a CA and a certificate it
//! signs for `localhost` and 127.0.0.1, made once per test process with rcgen.

use std::sync::LazyLock;

/// A CA's certificate, and a server certificate it signed with that certificate's key, in PEM.
pub struct TestCa {
    pub ca: String,
    pub server: String,
    pub key: String,
    /// The server key's SubjectPublicKeyInfo hashed as Chromium's
    /// `--ignore-certificate-errors-spki-list` takes it (SHA-256, base64): a browser that
    /// trusts the test's certificate without a system store.
    pub server_spki_sha256: String,
}

fn make() -> TestCa {
    let ca_key = rcgen::KeyPair::generate().expect("a key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Vigil test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("the CA");
    let server_key = rcgen::KeyPair::generate().expect("a key");
    let server =
        rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("params")
            .signed_by(&server_key, &ca)
            .expect("the server certificate");
    use base64::Engine as _;
    use sha2::Digest as _;
    TestCa {
        ca: ca.pem(),
        server: server.pem(),
        server_spki_sha256: base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(
            rcgen::PublicKeyData::subject_public_key_info(&server_key),
        )),
        key: server_key.serialize_pem(),
    }
}

/// The CA the test servers' certificates come from.
pub static TEST_CA: LazyLock<TestCa> = LazyLock::new(make);

/// Another CA, which a client must refuse the test servers under.
pub static OTHER_CA: LazyLock<TestCa> = LazyLock::new(make);

/// A server terminating TLS itself, with a fresh self-signed certificate for `localhost`, and
/// a client config that trusts it (the directory holding the certificate goes with it).
pub async fn serving(
    configure: impl Fn(&mut vigil::config::ServeArgs) + Send + Sync + 'static,
) -> (
    crate::TestServer,
    tempfile::TempDir,
    std::sync::Arc<rustls::ClientConfig>,
) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    let s = crate::TestServer::start_with(move |a| {
        a.tls_cert = Some(cert_path.clone());
        a.tls_key = Some(key_path.clone());
        configure(a);
    })
    .await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.cert.der().clone()).unwrap();
    let client = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (s, dir, std::sync::Arc::new(client))
}
