//! Where Vigil may send requests on an organization's behalf (webhook deliveries, and Gate's
//! calls to a service; docs/architecture.md#webhooks): over
//! https, and never to loopback, private, link-local or cloud-metadata addresses. Without this,
//! an endpoint URL would make the server call into its own network (SSRF). The address rule is
//! checked on every address a name resolves to: at creation here, and again by the dispatcher
//! on the address it connects to, since DNS can change in between.
//! `--allow-private-webhooks` (local stacks and tests) lifts both rules.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use url::Url;

/// The longest endpoint URL accepted.
pub const MAX_URL_BYTES: usize = 2048;

/// Where outbound calls may go: private destinations only on a server started with
/// `--allow-private-webhooks`. The context of the bodies that name a destination.
#[derive(Debug, Clone, Copy)]
pub struct Destinations {
    pub allow_private: bool,
}

impl Destinations {
    /// [`check_url`] under these rules.
    pub fn url(raw: &str, rules: &Destinations) -> Result<Url, String> {
        check_url(raw, rules.allow_private)
    }
}

/// A URL's form: absolute, `https` (or `http` when private destinations are allowed), with a
/// host, and without credentials in it.
pub fn check_url(raw: &str, allow_private: bool) -> Result<Url, String> {
    if raw.len() > MAX_URL_BYTES {
        return Err(format!("must be at most {MAX_URL_BYTES} bytes"));
    }
    let url = Url::parse(raw).map_err(|e| format!("must be an absolute URL ({e})"))?;
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        "http" => return Err("must use https".into()),
        _ => return Err("must be an https URL".into()),
    }
    if url.host().is_none() {
        return Err("must name a host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry credentials".into());
    }
    if url.fragment().is_some() {
        return Err("must not have a fragment".into());
    }
    Ok(url)
}

/// What a tenant is told when a destination's host is refused: the same whether its name does
/// not resolve or resolves to an internal address, so the answer maps nothing of the server's
/// own network (which names exist inside it, and where they point). The detail is logged.
pub const REFUSED_HOST: &str = "must name a host that resolves to public addresses only (not loopback, private, \
     link-local or reserved ones)";

/// The addresses `url` resolves to, each one public (unless private destinations are allowed).
/// A name that does not resolve is refused too: nothing could be delivered to it.
pub async fn resolve_public(url: &Url, allow_private: bool) -> Result<Vec<SocketAddr>, String> {
    let host = url.host_str().ok_or("must name a host")?;
    let port = url.port_or_known_default().ok_or("must have a port")?;
    // `Url` keeps IPv6 literals in brackets; the resolver wants them bare.
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let refused = |detail: String| {
        tracing::info!(host, %detail, "outbound: a destination was refused");
        REFUSED_HOST.to_owned()
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| refused(format!("does not resolve: {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(refused("resolves to no address".into()));
    }
    if !allow_private && let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
        return Err(refused(format!("resolves to {}", bad.ip())));
    }
    Ok(addrs)
}

/// Whether `ip` is a public unicast address: not loopback, private, shared (carrier NAT),
/// link-local (where cloud metadata services live), documentation, benchmarking, multicast,
/// broadcast, unspecified or reserved.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

/// The IANA special-purpose registries (IPv4 and IPv6), as of 2025, less what they mark
/// globally reachable: everything else in them is refused.
fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b == 18 || b == 19))
        // The deprecated 6to4 relay anycast.
        || (a == 192 && b == 88 && c == 99)
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let segments = ip.segments();
    let [first, second, ..] = segments;
    let embedded = || Ipv4Addr::from_bits(ip.to_bits() as u32);
    // IPv4-compatible addresses (`::a.b.c.d`, deprecated) reach the IPv4 address they embed
    // on some stacks: judged as that address.
    if segments[..6] == [0; 6] && !ip.is_loopback() && !ip.is_unspecified() {
        return is_public_v4(embedded());
    }
    // IPv4-translated addresses (`::ffff:0:a.b.c.d`, SIIT) are that IPv4 address too.
    if segments[..6] == [0, 0, 0, 0, 0xffff, 0] {
        return is_public_v4(embedded());
    }
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || ip.is_unique_local()
        || ip.is_unicast_link_local()
        // Documentation.
        || (first == 0x2001 && second == 0x0db8)
        // Teredo and 6to4 tunnel to IPv4 addresses the rule cannot see.
        || (first == 0x2001 && second == 0x0000)
        || first == 0x2002
        // Site-local (deprecated, still routed inside some networks).
        || (first & 0xffc0) == 0xfec0
        // NAT64 prefixes (the well-known one and the local-use /48).
        || first == 0x0064
        // Discard-only.
        || (first == 0x0100 && segments[1..4] == [0, 0, 0])
        // IETF protocol assignments (2001::/23: TURN, benchmarking, ORCHID, AMT, ...).
        || (first == 0x2001 && second < 0x0200)
        // Documentation (RFC 9637), and segment routing's SIDs.
        || (first == 0x3fff && second < 0x1000)
        || first == 0x5f00)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_unicast_addresses_are_public() {
        for public in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700:4700::1111",
            "::8.8.8.8",
        ] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "198.18.0.1",
            "192.0.2.1",
            "240.0.0.1",
            "::1",
            "::",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "2001:db8::1",
            "64:ff9b::7f00:1",
            "::127.0.0.1",
            "::169.254.169.254",
            "2002:7f00:1::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "fec0::1",
            "::ffff:0:127.0.0.1",
            "::ffff:0:10.0.0.1",
            "192.88.99.1",
            "100::1",
            "2001:2::1",
            "2001:20::1",
            "3fff::1",
            "5f00::1",
            "64:ff9b:1::1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
    }

    #[test]
    fn urls_must_be_https_with_a_host_and_no_credentials() {
        assert!(check_url("https://hooks.example.com/vigil?x=1", false).is_ok());
        assert!(check_url("http://hooks.example.com/", true).is_ok());
        for (bad, allow) in [
            ("http://hooks.example.com/", false),
            ("ftp://hooks.example.com/", true),
            ("hooks.example.com/vigil", false),
            ("https://user:pw@hooks.example.com/", false),
            ("https://hooks.example.com/#frag", false),
            ("file:///etc/passwd", true),
        ] {
            assert!(check_url(bad, allow).is_err(), "{bad}");
        }
        let long = format!("https://h.example.com/{}", "a".repeat(MAX_URL_BYTES));
        assert!(check_url(&long, false).is_err());
    }

    #[tokio::test]
    async fn names_and_literals_that_land_on_private_addresses_are_refused() {
        for bad in [
            "https://localhost/",
            "https://127.0.0.1:8443/",
            "https://[::1]/",
            "https://169.254.169.254/latest",
        ] {
            let url = check_url(bad, false).unwrap();
            // The tenant learns nothing of where the name points.
            assert_eq!(
                resolve_public(&url, false).await,
                Err(REFUSED_HOST.to_owned()),
                "{bad}"
            );
            assert!(
                resolve_public(&url, true).await.is_ok(),
                "{bad} with the flag"
            );
        }
        let public = check_url("https://93.184.216.34/hook", false).unwrap();
        assert_eq!(
            resolve_public(&public, false).await.unwrap(),
            vec!["93.184.216.34:443".parse().unwrap()]
        );
        let nowhere = check_url("https://does-not-exist.invalid/", false).unwrap();
        assert_eq!(
            resolve_public(&nowhere, false).await,
            Err(REFUSED_HOST.to_owned()),
            "a name that does not resolve reads as one that resolves inside"
        );
    }
}
