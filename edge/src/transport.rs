//! Who is on the other end of a request and whether it arrived over TLS
//! (docs/architecture.md#tls-and-proxies): the peer address, or, when the peer is a trusted proxy,
//! the client it forwarded for and whether it saw TLS (`X-Forwarded-For`, `X-Forwarded-Proto`).
//! Headers from any other peer are ignored, so a client cannot claim TLS or someone else's address.

use std::net::{IpAddr, SocketAddr};

use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use ipnet::IpNet;

/// Marks, as a request extension, a request that arrived over a TLS connection the server
/// terminated itself; plain requests carry nothing.
#[derive(Debug, Clone, Copy)]
pub struct OverTls;

/// The TLS client of the connection a request came over, as the listener read its
/// ClientHello (a request extension on connections Vigil terminated TLS for).
#[derive(Debug, Clone)]
pub struct ListenerTls(pub std::sync::Arc<schemas::collect::TlsClient>);

/// The TLS client a request's batch record carries: from `header` when a trusted proxy
/// forwarded the request (the proxy terminated TLS, so the listener saw the proxy's hello, not
/// the client's), else from Vigil's own listener. A header value that is not a JA4's shape is
/// not believed, nor is a header sent more than once: a proxy that appends rather than
/// overwrites would pass the client's own value beside its own.
pub fn tls_client(
    headers: &axum::http::HeaderMap,
    listener: Option<&ListenerTls>,
    client: &ClientInfo,
    header: Option<&axum::http::HeaderName>,
) -> Option<schemas::collect::TlsClient> {
    if client.forwarded {
        let ja4 = header
            .and_then(|name| {
                let mut values = headers.get_all(name).iter();
                values.next().filter(|_| values.next().is_none())
            })
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| crate::client_hello::is_ja4(v))?;
        return Some(schemas::collect::TlsClient {
            ja4: Some(ja4.to_owned()),
            source: "header".to_owned(),
            ..Default::default()
        });
    }
    listener.map(|tls| tls.0.as_ref().clone())
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
    let listener_tls = parts.extensions.get::<OverTls>().is_some();
    let trusted = |ip: &IpAddr| trusted_proxies.iter().any(|net| net.contains(ip));
    if !trusted(&peer) {
        return ClientInfo {
            ip: peer,
            tls: listener_tls,
            forwarded: false,
        };
    }
    // Each proxy appends the address it was reached from, so the list is walked from the right,
    // skipping trusted proxies. The first entry that is not trusted is the client; so is the
    // first that does not parse as an address: everything to its left was written by the
    // client itself, or by a hop that wrote garbage, and is never believed.
    let forwarded = header_list(parts, "x-forwarded-for");
    let mut ip = peer;
    let mut hops = 0;
    for entry in forwarded.iter().rev() {
        hops += 1;
        match entry.parse::<IpAddr>() {
            Ok(addr) if trusted(&addr) => ip = addr,
            Ok(addr) => {
                ip = addr;
                break;
            }
            Err(_) => {
                // `ip:port` and `[v6]:port` name an address after all; anything else leaves
                // the client at the last trusted hop, which is all that can be vouched for.
                if let Ok(addr) = entry.parse::<SocketAddr>() {
                    ip = addr.ip();
                }
                break;
            }
        }
    }
    // The protocol is the one written by the same hop that wrote the client's address (the
    // proxy the client connected to). Proxies that overwrite rather than append leave one
    // value, written by the last trusted hop; values further left came from the client.
    let protos = header_list(parts, "x-forwarded-proto");
    let proto = match protos.len() {
        0 => None,
        n if hops >= 1 && hops <= n => Some(&protos[n - hops]),
        n => Some(&protos[n - 1]),
    };
    let proto_tls = proto.map(|p| p.eq_ignore_ascii_case("https"));
    ClientInfo {
        ip,
        tls: proto_tls.unwrap_or(listener_tls),
        forwarded: !forwarded.is_empty() || proto_tls.is_some(),
    }
}

/// A comma-separated header's entries, in order across repeated headers, trimmed.
fn header_list(parts: &Parts, name: &str) -> Vec<String> {
    parts
        .headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The rate-limit identity of a client address (docs/architecture.md#rate-limits): an IPv4 address
/// as it is, an IPv6 one by its /64, since one subscriber commonly holds a whole /64 and could
/// otherwise rotate through it to get a fresh bucket for every request. IPv4-mapped IPv6 addresses
/// count as IPv4.
/// Spelled where it is written: a bucket's name is made on every request.
pub fn address_bucket(ip: IpAddr) -> AddressBucket {
    AddressBucket(ip)
}

/// See [`address_bucket`].
pub struct AddressBucket(IpAddr);

impl std::fmt::Display for AddressBucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => v4.fmt(f),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => v4.fmt(f),
                None => {
                    let s = v6.segments();
                    write!(f, "{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
                }
            },
        }
    }
}

/// A wider identity of a client address, for quotas that one holder of many addresses must
/// not multiply: an IPv6 /48 (what one site is commonly given) rather than a /64.
pub fn network_bucket(ip: IpAddr) -> String {
    match ip {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}::/48", s[0], s[1], s[2])
        }
        _ => address_bucket(ip).to_string(),
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
    }

    #[test]
    fn the_tls_listener_mark_makes_the_client_tls_unless_a_trusted_proxy_says_otherwise() {
        let trusted: Vec<IpNet> = vec!["127.0.0.1/32".parse().unwrap()];
        let from_afar = [("x-forwarded-for", "203.0.113.9")];
        let mut over_tls = parts("127.0.0.1:1000", &from_afar);
        over_tls.extensions.insert(OverTls);
        let client = client_info(&over_tls, &trusted);
        assert!(client.tls && client.forwarded);
        assert!(!client.plain_from_afar());
        // No mark: a plain connection.
        let plain = client_info(&parts("127.0.0.1:1000", &from_afar), &trusted);
        assert!(!plain.tls);
        assert!(plain.plain_from_afar());
        // The proxy's own word wins over the listener's.
        let mut said_plain = parts(
            "127.0.0.1:1000",
            &[
                ("x-forwarded-for", "203.0.113.9"),
                ("x-forwarded-proto", "http"),
            ],
        );
        said_plain.extensions.insert(OverTls);
        assert!(!client_info(&said_plain, &trusted).tls);
    }

    fn ip_of(peer: &str, headers: &[(&str, &str)]) -> (String, bool) {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let info = client_info(&parts(peer, headers), &trusted);
        (info.ip.to_string(), info.tls)
    }

    #[test]
    fn forwarded_for_is_walked_from_the_right() {
        // A client cannot put itself anywhere but on the left: the right-most untrusted entry
        // is the one the trusted proxy wrote.
        let xff = [("x-forwarded-for", "6.6.6.6, 198.51.100.7, 10.0.0.9")];
        assert_eq!(ip_of("10.0.0.2:1", &xff).0, "198.51.100.7");
        // An unparsable entry stops the walk: what is left of it is never believed.
        let junk = [("x-forwarded-for", "6.6.6.6, bogus, 10.0.0.9")];
        assert_eq!(ip_of("10.0.0.2:1", &junk).0, "10.0.0.9");
        let with_port = [("x-forwarded-for", "6.6.6.6, 198.51.100.7:4431, 10.0.0.9")];
        assert_eq!(ip_of("10.0.0.2:1", &with_port).0, "198.51.100.7");
        let v6_port = [("x-forwarded-for", "[2001:db8::1]:443")];
        assert_eq!(ip_of("10.0.0.2:1", &v6_port).0, "2001:db8::1");
        // Repeated headers are one list, in order.
        let split = parts(
            "10.0.0.2:1",
            &[
                ("x-forwarded-for", "6.6.6.6"),
                ("x-forwarded-for", "198.51.100.8"),
            ],
        );
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        assert_eq!(client_info(&split, &trusted).ip.to_string(), "198.51.100.8");
    }

    #[test]
    fn the_protocol_is_the_one_the_trusted_hop_wrote() {
        // The client sent `https` first; the proxy it reached appended `http`.
        let spoofed = [
            ("x-forwarded-for", "198.51.100.7"),
            ("x-forwarded-proto", "https, http"),
        ];
        assert_eq!(
            ip_of("10.0.0.2:1", &spoofed),
            ("198.51.100.7".into(), false)
        );
        // Two trusted hops: the outer one saw TLS, the inner hop plain HTTP from it.
        let chain = [
            ("x-forwarded-for", "198.51.100.7, 10.0.0.9"),
            ("x-forwarded-proto", "https, http"),
        ];
        assert_eq!(ip_of("10.0.0.2:1", &chain), ("198.51.100.7".into(), true));
        // A proxy that overwrites leaves one value: its own.
        let single = [
            ("x-forwarded-for", "198.51.100.7, 10.0.0.9"),
            ("x-forwarded-proto", "https"),
        ];
        assert_eq!(ip_of("10.0.0.2:1", &single), ("198.51.100.7".into(), true));
    }

    #[test]
    fn ipv6_clients_share_a_bucket_per_64() {
        let a = address_bucket("2001:db8:1:2:aaaa::1".parse().unwrap()).to_string();
        let b = address_bucket("2001:db8:1:2:ffff:1:2:3".parse().unwrap()).to_string();
        let c = address_bucket("2001:db8:1:3::1".parse().unwrap()).to_string();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(
            address_bucket("::ffff:192.0.2.1".parse().unwrap()).to_string(),
            "192.0.2.1"
        );
        assert_eq!(
            address_bucket("192.0.2.1".parse().unwrap()).to_string(),
            "192.0.2.1"
        );
    }
}
