//! Who is on the other end of a request and whether it arrived over TLS (D16): the peer
//! address, or, when the peer is a trusted proxy, the client it forwarded for and whether it
//! saw TLS (`X-Forwarded-For`, `X-Forwarded-Proto`). Headers from any other peer are ignored,
//! so a client cannot claim TLS or someone else's address.

use std::net::{IpAddr, SocketAddr};

use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use ipnet::IpNet;

/// How the listener that accepted the connection speaks; set as a request extension by the
/// server for every connection it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    Plain,
    Tls,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientInfo {
    pub ip: IpAddr,
    pub tls: bool,
    /// A trusted proxy forwarded the request for a client (it sent forwarding headers).
    pub forwarded: bool,
}

impl ClientInfo {
    /// Whether the request reached us over plain HTTP from somewhere other than this host. A
    /// proxy that forwarded plain HTTP was reached from elsewhere, whatever address it names.
    pub fn plain_from_afar(&self) -> bool {
        !self.tls && (self.forwarded || !self.ip.is_loopback())
    }
}

pub fn client_info(parts: &Parts, trusted_proxies: &[IpNet]) -> ClientInfo {
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
        .unwrap_or(IpAddr::from([127, 0, 0, 1]));
    let listener_tls = parts.extensions.get::<Listener>() == Some(&Listener::Tls);
    let trusted = |ip: &IpAddr| trusted_proxies.iter().any(|net| net.contains(ip));
    if !trusted(&peer) {
        return ClientInfo {
            ip: peer,
            tls: listener_tls,
            forwarded: false,
        };
    }
    // The client is the right-most forwarded address that is not itself a trusted proxy.
    let forwarded: Vec<IpAddr> = parts
        .headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let ip = forwarded
        .iter()
        .rev()
        .find(|ip| !trusted(ip))
        .copied()
        .unwrap_or(peer);
    let proto_tls = parts
        .headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(',')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("https")
        });
    ClientInfo {
        ip,
        tls: proto_tls.unwrap_or(listener_tls),
        forwarded: !forwarded.is_empty() || proto_tls.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    fn parts(peer: &str, headers: &[(&str, &str)]) -> Parts {
        let mut b = Request::builder().uri("/");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let (mut parts, _) = b.body(()).unwrap().into_parts();
        parts
            .extensions
            .insert(ConnectInfo::<SocketAddr>(peer.parse().unwrap()));
        parts
    }

    #[test]
    fn forwarded_headers_count_only_from_trusted_proxies() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let spoofed = parts(
            "203.0.113.5:1000",
            &[
                ("x-forwarded-for", "127.0.0.1"),
                ("x-forwarded-proto", "https"),
            ],
        );
        assert_eq!(
            client_info(&spoofed, &trusted),
            ClientInfo {
                ip: "203.0.113.5".parse().unwrap(),
                tls: false,
                forwarded: false,
            }
        );

        let proxied = parts(
            "10.0.0.2:1000",
            &[
                ("x-forwarded-for", "198.51.100.7, 10.0.0.9"),
                ("x-forwarded-proto", "https"),
            ],
        );
        assert_eq!(
            client_info(&proxied, &trusted),
            ClientInfo {
                ip: "198.51.100.7".parse().unwrap(),
                tls: true,
                forwarded: true,
            }
        );
        assert!(!client_info(&proxied, &trusted).plain_from_afar());

        let local = parts("127.0.0.1:1000", &[]);
        assert!(!client_info(&local, &trusted).plain_from_afar());

        // A local proxy that saw plain HTTP and named no client still forwarded from afar.
        let local_trusted: Vec<IpNet> = vec!["127.0.0.1/32".parse().unwrap()];
        let plain_proxy = parts("127.0.0.1:1000", &[("x-forwarded-proto", "http")]);
        assert!(client_info(&plain_proxy, &local_trusted).plain_from_afar());

        // A local proxy that saw plain HTTP and named no client still forwarded from afar.
        let local_trusted: Vec<IpNet> = vec!["127.0.0.1/32".parse().unwrap()];
        let plain_proxy = parts("127.0.0.1:1000", &[("x-forwarded-proto", "http")]);
        assert!(client_info(&plain_proxy, &local_trusted).plain_from_afar());
    }
}
