//! The ScyllaDB backend (`scylla://host:9042[,host…]/keyspace`, docs/operations.md#scylladb),
//! the store of a fleet that outgrows one PostgreSQL: the tables of `schemas/cql/`, each query
//! answered from one partition.
//!
//! What is here: the URL ([`config`]), the session (TLS against the cluster's CA, credentials,
//! the local datacenter first, `LOCAL_QUORUM` reads and writes and `LOCAL_SERIAL` lightweight
//! transactions unless the URL says otherwise), the driver's errors as the port's kinds
//! ([`errors`]), and `vigil migrate` ([`migrations`]). The port's table groups are not
//! implemented on it yet, so [`crate::open`] refuses a `scylla://` store and says so.

pub mod config;
pub mod errors;
pub mod migrations;

use std::sync::Arc;
use std::time::Duration;

use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::policies::load_balancing::DefaultPolicy;

use self::config::ScyllaConfig;
use crate::{Result, StoreError};

/// How long a node may take to accept a connection, and a request to be answered, before the
/// attempt counts as failed (and `/readyz` says so).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A session to the cluster `config` names; in its keyspace when `in_keyspace`.
pub async fn connect(config: &ScyllaConfig, in_keyspace: bool) -> Result<Session> {
    let mut policy = DefaultPolicy::builder().token_aware(true);
    if let Some(dc) = &config.dc {
        policy = policy
            .prefer_datacenter(dc.clone())
            .permit_dc_failover(false);
    }
    let profile = ExecutionProfile::builder()
        .consistency(config.consistency)
        .serial_consistency(Some(config.serial_consistency))
        .request_timeout(Some(REQUEST_TIMEOUT))
        .load_balancing_policy(policy.build())
        .build();
    let mut builder = SessionBuilder::new()
        .known_nodes(&config.hosts)
        .connection_timeout(CONNECT_TIMEOUT)
        .default_execution_profile_handle(profile.into_handle())
        // Vigil reads no schema metadata: only its own keyspace's tables, by name.
        .fetch_schema_metadata(false);
    if let Some((user, password)) = &config.credentials {
        builder = builder.user(user, &password.0);
    }
    if let Some(ca) = &config.tls {
        builder = builder.tls_context(Some(tls(ca)?));
    }
    if in_keyspace {
        builder = builder.use_keyspace(&config.keyspace, false);
    }
    builder.build().await.map_err(errors::connect)
}

/// A TLS client that trusts the cluster's CA alone and verifies each node's name.
fn tls(ca: &std::path::Path) -> Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let unreadable = |e: &dyn std::fmt::Display| {
        StoreError::Invalid(format!(
            "ScyllaDB TLS: cannot read the CA certificate {}: {e}",
            ca.display()
        ))
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| unreadable(&e))? {
        roots
            .add(cert.map_err(|e| unreadable(&e))?)
            .map_err(|e| unreadable(&e))?;
    }
    if roots.is_empty() {
        return Err(unreadable(&"it holds no certificate"));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Invalid(format!("ScyllaDB TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
