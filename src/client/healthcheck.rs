//! `vigil healthcheck` (docs/operations.md#run-it-with-docker-compose): asks a `vigil serve`
//! process on this host whether it is ready (`/readyz`) and exits 0 when it is, 1 otherwise;
//! a container's healthcheck, since a slim image has no curl.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::config::HealthcheckArgs;

pub async fn run(args: HealthcheckArgs) -> anyhow::Result<()> {
    let url = match &args.url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => local_url(args.listen, args.tls_cert.is_some()),
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .user_agent(concat!("vigil-healthcheck/", env!("CARGO_PKG_VERSION")))
        .timeout(Duration::from_secs(args.timeout.max(1)))
        // The process probed is this host's own, serving the certificate it was given, whose
        // names need not include the loopback address dialled here; only readiness is read.
        .danger_accept_invalid_certs(args.url.is_none())
        // A readiness answer is the probed process's own, never another's it points to.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .context("building the HTTP client")?;
    let response = client
        .get(format!("{url}/readyz"))
        .send()
        .await
        .with_context(|| format!("reaching {url}/readyz"))?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if !status.is_success() {
        bail!("{url}/readyz answered {status}: {}", body.trim());
    }
    Ok(())
}

/// The address a process listening on `listen` answers at from this host: an unspecified
/// address (`0.0.0.0`, `::`, as in a container) is reached on loopback.
fn local_url(listen: SocketAddr, tls: bool) -> String {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://{}", SocketAddr::new(ip, listen.port()))
}

#[cfg(test)]
mod tests {
    use super::local_url;

    #[test]
    fn an_unspecified_listen_address_is_probed_on_loopback() {
        let url = |listen: &str, tls| local_url(listen.parse().unwrap(), tls);
        assert_eq!(url("0.0.0.0:8080", false), "http://127.0.0.1:8080");
        assert_eq!(url("[::]:9000", true), "https://[::1]:9000");
        assert_eq!(url("10.0.0.5:8081", false), "http://10.0.0.5:8081");
    }
}
