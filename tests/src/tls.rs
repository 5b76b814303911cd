//! Throwaway certificate authorities for tests of TLS to the engines: a CA and a certificate it
//! signs for `localhost` and 127.0.0.1, made once per test process with rcgen.

use std::sync::LazyLock;

/// A CA's certificate, and a server certificate it signed with that certificate's key, in PEM.
pub struct TestCa {
    pub ca: String,
    pub server: String,
    pub key: String,
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
    TestCa {
        ca: ca.pem(),
        server: server.pem(),
        key: server_key.serialize_pem(),
    }
}

/// The CA the test servers' certificates come from.
pub static TEST_CA: LazyLock<TestCa> = LazyLock::new(make);

/// Another CA, which a client must refuse the test servers under.
pub static OTHER_CA: LazyLock<TestCa> = LazyLock::new(make);
