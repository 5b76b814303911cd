//! TLS to PostgreSQL (docs/operations.md#connecting-to-managed-engines), with libpq's `sslmode`
//! and `sslrootcert` in the store URL, through rustls:
//! - `disable`: plaintext (the default, as before);
//! - `prefer`: TLS if the server offers it, unverified, else plaintext, as libpq;
//! - `require`: TLS or no connection; verified against `sslrootcert` when one is given (as
//!   libpq), else encrypted only;
//! - `verify-ca`: TLS, the chain verified against `sslrootcert`;
//! - `verify-full`: TLS, the chain and the host name verified.
//!
//! `sslrootcert` is a PEM file, or `system` for the machine's roots. tokio-postgres reads
//! neither `verify-*` nor `sslrootcert`, so both are taken out of the URL here and applied to
//! the connector.

use std::sync::Arc;

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::{Result, StoreError};

/// What the URL asks of the connection's TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// A store URL's connection settings and its TLS connector.
pub struct Connection {
    pub config: tokio_postgres::Config,
    pub tls: MakeRustlsConnect,
    pub mode: Mode,
}

fn invalid(url: &str, why: impl std::fmt::Display) -> StoreError {
    StoreError::Invalid(format!(
        "bad PostgreSQL URL `{}`: {why}",
        schemas::redact::redact_url(url)
    ))
}

/// The URL without `sslmode` and `sslrootcert`, and their values.
fn split_tls_params(url: &str) -> (String, Option<String>, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None, None);
    };
    let (mut mode, mut root, mut kept) = (None, None, Vec::new());
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decoded = || {
            url::form_urlencoded::parse(format!("v={value}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        };
        match name {
            "sslmode" => mode = Some(decoded()),
            "sslrootcert" => root = Some(decoded()),
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (url, mode, root)
}

/// Parses a store URL into its settings and the connector its `sslmode` asks for.
pub fn connection(url: &str) -> Result<Connection> {
    let (rest, mode, root) = split_tls_params(url);
    let mode = match mode.as_deref() {
        None | Some("disable") => Mode::Disable,
        Some("prefer" | "allow") => Mode::Prefer,
        Some("require") => Mode::Require,
        Some("verify-ca") => Mode::VerifyCa,
        Some("verify-full") => Mode::VerifyFull,
        Some(other) => {
            return Err(invalid(
                url,
                format!("sslmode={other}: one of disable, prefer, require, verify-ca, verify-full"),
            ));
        }
    };
    let mut config: tokio_postgres::Config = rest.parse().map_err(|e| invalid(url, e))?;
    config.ssl_mode(match mode {
        Mode::Disable => SslMode::Disable,
        Mode::Prefer => SslMode::Prefer,
        Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
    });
    let roots = match (&root, mode) {
        (Some(root), _) => Some(roots(url, root)?),
        (None, Mode::VerifyCa | Mode::VerifyFull) => {
            return Err(invalid(
                url,
                "sslmode=verify-ca and verify-full need sslrootcert=<the server's CA, PEM> \
                 (or sslrootcert=system)",
            ));
        }
        (None, _) => None,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(url, e))?;
    let client = match (mode, roots) {
        (Mode::VerifyFull, Some(roots)) => builder.with_root_certificates(roots),
        // libpq's `require` with a root certificate is `verify-ca`.
        (Mode::VerifyCa | Mode::Require, Some(roots)) => {
            let chain = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            )
            .build()
            .map_err(|e| invalid(url, e))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly { chain }))
        }
        // Encrypted, not verified: what `prefer` and `require` without a root ask for.
        _ => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified { provider })),
    }
    .with_no_client_auth();
    Ok(Connection {
        config,
        tls: MakeRustlsConnect::new(client),
        mode,
    })
}

fn roots(url: &str, root: &str) -> Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    if root == "system" {
        let found = rustls_native_certs::load_native_certs();
        for cert in found.certs {
            let _ = roots.add(cert);
        }
    } else {
        use rustls::pki_types::pem::PemObject;
        let unreadable =
            |e: &dyn std::fmt::Display| invalid(url, format!("sslrootcert {root}: {e}"));
        for cert in CertificateDer::pem_file_iter(root).map_err(|e| unreadable(&e))? {
            roots
                .add(cert.map_err(|e| unreadable(&e))?)
                .map_err(|e| unreadable(&e))?;
        }
    }
    if roots.is_empty() {
        return Err(invalid(
            url,
            format!("sslrootcert {root} holds no certificate"),
        ));
    }
    Ok(roots)
}

/// `verify-ca`: the chain to a trusted root is checked, the host name is not.
#[derive(Debug)]
struct ChainOnly {
    chain: Arc<rustls::client::WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error};
        match self
            .chain
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.chain.supported_verify_schemes()
    }
}

/// `prefer`, and `require` without a root: the certificate is not checked, the handshake's
/// signatures are (so the session is bound to the key the server showed).
#[derive(Debug)]
struct Unverified {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_and_sslrootcert_are_taken_out_of_the_url() {
        let (url, mode, root) = split_tls_params(
            "postgres://u:p@h:5432/db?application_name=vigil&sslmode=verify-full&sslrootcert=%2Fca.pem",
        );
        assert_eq!(url, "postgres://u:p@h:5432/db?application_name=vigil");
        assert_eq!(mode.as_deref(), Some("verify-full"));
        assert_eq!(root.as_deref(), Some("/ca.pem"));
        assert_eq!(
            split_tls_params("postgres://h/db"),
            ("postgres://h/db".to_owned(), None, None)
        );
    }

    #[test]
    fn modes_are_read_and_a_bad_one_is_refused_without_the_password() {
        let mode = |url: &str| connection(url).map(|c| c.mode);
        assert_eq!(mode("postgres://h/db").unwrap(), Mode::Disable);
        assert_eq!(
            mode("postgres://h/db?sslmode=require").unwrap(),
            Mode::Require
        );
        assert_eq!(
            mode("postgres://h/db?sslmode=prefer").unwrap(),
            Mode::Prefer
        );
        for (url, says) in [
            ("postgres://u:hunter2@h/db?sslmode=maybe", "sslmode=maybe"),
            (
                "postgres://u:hunter2@h/db?sslmode=verify-full",
                "need sslrootcert",
            ),
            (
                "postgres://u:hunter2@h/db?sslmode=verify-ca&sslrootcert=/nonexistent.pem",
                "sslrootcert /nonexistent.pem",
            ),
        ] {
            match connection(url) {
                Err(StoreError::Invalid(why)) => {
                    assert!(why.contains(says), "{url}: {why}");
                    assert!(!why.contains("hunter2"), "{why}");
                }
                other => panic!("{url}: {:?}", other.map(|c| c.mode)),
            }
        }
    }
}
