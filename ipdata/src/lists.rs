//! The operator's plain-text lists beside the databases: the hosting and cloud ASNs (shipped
//! with Vigil, replaceable), and address lists (the Tor Project's exit list, a relay's egress
//! ranges). Each is read whole when it opens, and a line that does not parse fails the file with
//! its number, so a list is never half in service.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;

use crate::OpenError;

/// The list shipped with Vigil, used when the operator gives none.
const SHIPPED_HOSTING_ASNS: &str = include_str!("../data/hosting-asns.csv");

/// Reads every file of `paths` as text, or fails naming the first that cannot be read.
fn read_all(paths: &[PathBuf]) -> Result<Vec<(&Path, String)>, OpenError> {
    paths
        .iter()
        .map(|path| {
            std::fs::read_to_string(path)
                .map(|text| (path.as_path(), text))
                .map_err(|e| OpenError {
                    path: path.clone(),
                    reason: e.to_string(),
                })
        })
        .collect()
}

/// The lines of a list that say something: trimmed, with blank lines and `#` comments left out,
/// each with its number from 1.
fn meaningful(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(index, line)| (index + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
}

fn bad_line(path: &Path, number: usize, why: &str) -> OpenError {
    OpenError {
        path: path.to_owned(),
        reason: format!("line {number}: {why}"),
    }
}

/// Hosting and cloud networks by ASN, with each provider's name.
#[derive(Debug, Default)]
pub struct HostingAsns {
    providers: HashMap<u32, String>,
}

impl HostingAsns {
    /// The list shipped with Vigil (`ipdata/data/hosting-asns.csv`).
    pub fn shipped() -> Self {
        Self::parse(
            Path::new("hosting-asns.csv (shipped)"),
            SHIPPED_HOSTING_ASNS,
        )
        .expect("the shipped hosting list parses (a unit test reads it)")
    }

    /// `asn,provider[,source]` lines; a header line `asn,…` is skipped. An ASN may be written
    /// `AS16509`.
    fn parse(path: &Path, text: &str) -> Result<Self, OpenError> {
        let mut providers = HashMap::new();
        for (number, line) in meaningful(text) {
            let mut fields = line.split(',').map(str::trim);
            let asn = fields.next().unwrap_or_default();
            if asn.eq_ignore_ascii_case("asn") {
                continue;
            }
            let digits = asn
                .strip_prefix("AS")
                .or_else(|| asn.strip_prefix("as"))
                .unwrap_or(asn);
            let asn: u32 = digits
                .parse()
                .map_err(|_| bad_line(path, number, &format!("{asn:?} is not an ASN")))?;
            let provider = fields.next().filter(|p| !p.is_empty()).ok_or_else(|| {
                bad_line(
                    path,
                    number,
                    "the provider's name is missing (asn,provider,source)",
                )
            })?;
            providers.insert(asn, provider.to_owned());
        }
        Ok(HostingAsns { providers })
    }

    /// The provider whose network `asn` is, if it is a hosting one.
    pub fn provider(&self, asn: u32) -> Option<&str> {
        self.providers.get(&asn).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.providers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.providers.is_empty()
    }
}

impl crate::Source for HostingAsns {
    const WHAT: &'static str = "hosting ASN list";

    /// The operator's files, merged; none: the shipped list.
    fn open(paths: &[PathBuf]) -> Result<Self, OpenError> {
        if paths.is_empty() {
            return Ok(Self::shipped());
        }
        let mut merged = HostingAsns::default();
        for (path, text) in read_all(paths)? {
            merged.providers.extend(Self::parse(path, &text)?.providers);
        }
        Ok(merged)
    }

    fn describe(&self) -> String {
        format!("{} ASNs", self.len())
    }
}

/// A set of addresses and networks, looked up in logarithmic time: each family's ranges sorted
/// and merged, searched by their start.
#[derive(Debug, Default)]
pub struct AddressList {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl AddressList {
    /// One address or network a line: `203.0.113.7`, `2001:db8::/32`, or a CSV row whose first
    /// field is one (Apple's `egress-ip-ranges.csv`). The Tor Project's exit lists are read in
    /// both formats: the bulk list (one address a line) and `exit-addresses` (`ExitAddress
    /// <address> <time>` among `ExitNode`, `Published` and `LastStatus` lines).
    fn parse(path: &Path, text: &str, into: &mut Ranges) -> Result<(), OpenError> {
        for (number, line) in meaningful(text) {
            let mut words = line.split_whitespace();
            let entry = match words.next() {
                Some("ExitAddress") => words.next().unwrap_or_default(),
                Some("ExitNode" | "Published" | "LastStatus") => continue,
                _ => line.split(',').next().unwrap_or_default().trim(),
            };
            let network = match entry.parse::<IpNet>() {
                Ok(network) => network.trunc(),
                Err(_) => match entry.parse::<IpAddr>() {
                    Ok(address) => IpNet::from(address),
                    Err(_) => {
                        return Err(bad_line(
                            path,
                            number,
                            &format!("{entry:?} is not an address or a network"),
                        ));
                    }
                },
            };
            into.push(network);
        }
        Ok(())
    }

    /// Whether `ip` is in the list (an IPv4-mapped IPv6 address as its IPv4 one).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match ip.to_canonical() {
            IpAddr::V4(v4) => holds(&self.v4, u32::from(v4)),
            IpAddr::V6(v6) => holds(&self.v6, u128::from(v6)),
        }
    }

    /// How many merged ranges it holds.
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether `sorted` (merged, disjoint inclusive ranges) holds `at`.
fn holds<T: Ord + Copy>(sorted: &[(T, T)], at: T) -> bool {
    // The last range starting at or before `at`.
    let after = sorted.partition_point(|(start, _)| *start <= at);
    after > 0 && sorted[after - 1].1 >= at
}

/// Ranges gathered before they are sorted and merged.
#[derive(Default)]
struct Ranges {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl Ranges {
    fn push(&mut self, network: IpNet) {
        match network {
            IpNet::V4(n) => self
                .v4
                .push((u32::from(n.network()), u32::from(n.broadcast()))),
            IpNet::V6(n) => self
                .v6
                .push((u128::from(n.network()), u128::from(n.broadcast()))),
        }
    }

    fn merged(self) -> AddressList {
        AddressList {
            v4: merge(self.v4),
            v6: merge(self.v6),
        }
    }
}

/// Sorts inclusive ranges and joins those that overlap or touch.
fn merge<T: Ord + Copy + num_like::Successor>(mut ranges: Vec<(T, T)>) -> Vec<(T, T)> {
    ranges.sort_unstable();
    let mut merged: Vec<(T, T)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if last.1.successor().is_none_or(|next| start <= next) => {
                last.1 = last.1.max(end);
            }
            _ => merged.push((start, end)),
        }
    }
    merged
}

mod num_like {
    /// The next value, if there is one: ranges that touch are joined.
    pub trait Successor: Sized {
        fn successor(self) -> Option<Self>;
    }
    impl Successor for u32 {
        fn successor(self) -> Option<Self> {
            self.checked_add(1)
        }
    }
    impl Successor for u128 {
        fn successor(self) -> Option<Self> {
            self.checked_add(1)
        }
    }
}

impl crate::Source for AddressList {
    const WHAT: &'static str = "address list";

    fn open(paths: &[PathBuf]) -> Result<Self, OpenError> {
        let mut ranges = Ranges::default();
        for (path, text) in read_all(paths)? {
            Self::parse(path, &text, &mut ranges)?;
        }
        Ok(ranges.merged())
    }

    fn describe(&self) -> String {
        format!("{} ranges", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(text: &str) -> AddressList {
        let mut ranges = Ranges::default();
        AddressList::parse(Path::new("t"), text, &mut ranges).unwrap();
        ranges.merged()
    }

    #[test]
    fn the_shipped_hosting_list_parses_and_names_the_big_clouds() {
        let shipped = HostingAsns::shipped();
        assert!(shipped.len() >= 30);
        assert_eq!(shipped.provider(16509), Some("Amazon Web Services"));
        assert_eq!(shipped.provider(14061), Some("DigitalOcean"));
        assert_eq!(shipped.provider(7922), None, "Comcast is not a host");
    }

    #[test]
    fn a_hosting_line_without_a_number_names_its_line() {
        let error = HostingAsns::parse(Path::new("mine.csv"), "asn,provider\n\nAS1,One\nx,Two\n")
            .unwrap_err();
        assert_eq!(error.to_string(), "mine.csv: line 4: \"x\" is not an ASN");
    }

    #[test]
    fn addresses_and_networks_of_both_families_are_found_and_their_neighbours_are_not() {
        let list = list(
            "# a comment\n198.51.100.7\n203.0.113.0/25\n203.0.113.128/25\n2001:db8::/48\n\
             192.0.2.0/24,GB,GB-EN,London,\n",
        );
        assert_eq!(list.len(), 4, "the two /25 halves are merged");
        for inside in [
            "198.51.100.7",
            "203.0.113.0",
            "203.0.113.255",
            "2001:db8:0:ffff::1",
            "192.0.2.9",
            "::ffff:198.51.100.7",
        ] {
            assert!(list.contains(inside.parse().unwrap()), "{inside}");
        }
        for outside in [
            "198.51.100.6",
            "198.51.100.8",
            "203.0.114.0",
            "2001:db8:1::1",
            "0.0.0.0",
            "255.255.255.255",
        ] {
            assert!(!list.contains(outside.parse().unwrap()), "{outside}");
        }
    }

    #[test]
    fn the_tor_projects_exit_addresses_format_is_read() {
        let list = list(
            "ExitNode 0011BD2485AD45D984EC4159C88FC066E5E3300E\nPublished 2026-12-07 10:00:00\n\
             LastStatus 2026-12-07 11:00:00\nExitAddress 185.220.101.1 2026-12-07 11:05:00\n",
        );
        assert!(list.contains("185.220.101.1".parse().unwrap()));
        assert_eq!(list.len(), 1);
    }

    #[test]
    fn a_line_that_is_no_address_fails_the_list_with_its_number() {
        let mut ranges = Ranges::default();
        let error =
            AddressList::parse(Path::new("tor.txt"), "1.2.3.4\nexit.example\n", &mut ranges)
                .unwrap_err();
        assert_eq!(
            error.to_string(),
            "tor.txt: line 2: \"exit.example\" is not an address or a network"
        );
    }
}
