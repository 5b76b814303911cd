//! What the operator's IP data says about a client address (docs/detection.md#network-identity):
//! its autonomous system, its country, and its city and time zone where a database has them
//! ([`IpDatabases`]); whether the network is a hosting provider's, from a shipped list the operator
//! can replace ([`HostingAsns`]); and whether the address is a Tor exit or a relay's egress, from
//! the operator's lists ([`AddressList`]). [`NetworkData`] holds them all for the processor, which
//! keeps what they say in a session's state; the query API shows it as the session's `network`.
//!
//! The databases are MaxMind DB files, each read whole into memory with the `maxminddb` crate.
//! Not memory-mapped: a mapped file that an operator rewrites in place (`cp` over it) changes
//! under the reader, and one truncated crashes the process on its next lookup (SIGBUS), so
//! a file's bytes are copied once, when it opens, and the resident memory is the files' size. The layouts operators already have are all read: GeoLite2 and
//! GeoIP2 (ASN, Country, City), DB-IP Lite (the same layout), IPinfo Lite (`asn`, `as_name`,
//! `country_code`) and the `ip-location-db` files (`country_code`, `city`, `timezone`). Each
//! file names its own type in its metadata, which is logged when it opens; a record's members
//! are read by name, whichever layout holds them. With several files, the first that answers a
//! member gives it. With none, every member is absent: Vigil never guesses.
//!
//! A file that is missing or does not parse at start is an error that names it. [`Watched`]
//! reopens the set when a file changes on disk or when asked (SIGHUP), without a request ever
//! waiting: a set that fails to open keeps the last good one in service, and the failure is
//! logged.

mod lists;
mod record;
#[cfg(feature = "test-support")]
pub mod testing;
mod watched;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use schemas::network::{AsnFacts, NetworkFacts};

pub use lists::{AddressList, HostingAsns};
pub use watched::Watched;

/// A source of facts read from the operator's files and reopened whole when they change
/// ([`Watched`]).
pub trait Source: Sized + Send + Sync + 'static {
    /// What the logs call it.
    const WHAT: &'static str;
    /// Opens every file of `paths`, or fails naming the first that cannot be read.
    fn open(paths: &[PathBuf]) -> Result<Self, OpenError>;
    /// What it holds, for the logs.
    fn describe(&self) -> String;
}

/// What the databases say about one address; every member absent when none knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpFacts {
    pub asn: Option<Asn>,
    /// ISO 3166-1 alpha-2, upper case.
    pub country: Option<String>,
    /// The city's English name.
    pub city: Option<String>,
    /// The IANA time zone of the address's location.
    pub time_zone: Option<String>,
}

/// An autonomous system: its number, and its organization where the database names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asn {
    pub number: u32,
    pub organization: Option<String>,
}

impl IpFacts {
    /// Fills what `self` lacks from `other`: the first database to answer a member keeps it.
    fn fill_from(&mut self, other: IpFacts) {
        if self.asn.is_none() {
            self.asn = other.asn;
        }
        if self.country.is_none() {
            self.country = other.country;
        }
        if self.city.is_none() {
            self.city = other.city;
        }
        if self.time_zone.is_none() {
            self.time_zone = other.time_zone;
        }
    }

    fn is_complete(&self) -> bool {
        self.asn.is_some()
            && self.country.is_some()
            && self.city.is_some()
            && self.time_zone.is_some()
    }
}

/// Why a database could not be opened: the file and the reason, for the operator.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct OpenError {
    pub path: PathBuf,
    pub reason: String,
}

/// One open database file.
struct Database {
    path: PathBuf,
    /// The type its metadata names (`GeoLite2-ASN`, `DBIP-City-Lite`, `ipinfo lite`…).
    kind: String,
    reader: maxminddb::Reader<Vec<u8>>,
}

impl Database {
    fn open(path: &Path) -> Result<Self, OpenError> {
        let failed = |reason: String| OpenError {
            path: path.to_owned(),
            reason,
        };
        let reader = maxminddb::Reader::open_readfile(path).map_err(|e| failed(e.to_string()))?;
        let kind = reader.metadata().database_type.clone();
        Ok(Database {
            path: path.to_owned(),
            kind,
            reader,
        })
    }

    /// The facts this file holds for `ip`; a record that does not decode is logged and read as
    /// absent, so one damaged record never fails a request.
    fn lookup(&self, ip: IpAddr) -> IpFacts {
        match record::lookup(&self.reader, ip) {
            Ok(facts) => facts,
            Err(error) => {
                tracing::warn!(
                    path = %self.path.display(),
                    kind = %self.kind,
                    %ip,
                    %error,
                    "an IP database record does not decode; read as absent"
                );
                IpFacts::default()
            }
        }
    }
}

impl Source for IpDatabases {
    const WHAT: &'static str = "IP databases";

    fn open(paths: &[PathBuf]) -> Result<Self, OpenError> {
        IpDatabases::open(paths)
    }

    fn describe(&self) -> String {
        self.kinds().join(", ")
    }
}

/// The operator's databases, in the order given.
#[derive(Default)]
pub struct IpDatabases {
    databases: Vec<Database>,
}

impl IpDatabases {
    /// Opens every file of `paths`, or fails naming the first that cannot be read.
    pub fn open(paths: &[PathBuf]) -> Result<Self, OpenError> {
        let mut databases = Vec::with_capacity(paths.len());
        for path in paths {
            let database = Database::open(path)?;
            tracing::info!(
                path = %database.path.display(),
                kind = %database.kind,
                "IP database opened"
            );
            databases.push(database);
        }
        Ok(IpDatabases { databases })
    }

    /// Whether any database is open: without one, every lookup answers nothing.
    pub fn is_empty(&self) -> bool {
        self.databases.is_empty()
    }

    /// The types the open files name, in order, for `/readyz` and the start-up log.
    pub fn kinds(&self) -> Vec<&str> {
        self.databases.iter().map(|d| d.kind.as_str()).collect()
    }

    /// What the databases say about `ip`.
    pub fn lookup(&self, ip: IpAddr) -> IpFacts {
        let mut facts = IpFacts::default();
        for database in &self.databases {
            facts.fill_from(database.lookup(ip));
            if facts.is_complete() {
                break;
            }
        }
        facts
    }
}

/// Where the operator's IP data comes from (`vigil serve`'s `--ip-database`, `--hosting-asns`,
/// `--tor-exit-list` and `--relay-list`).
#[derive(Debug, Clone, Default)]
pub struct NetworkPaths {
    pub ip_databases: Vec<PathBuf>,
    /// None: the list shipped with Vigil.
    pub hosting_asns: Option<PathBuf>,
    pub tor_exit_list: Option<PathBuf>,
    pub relay_list: Option<PathBuf>,
}

/// Everything the operator's IP data says, each source reopened when its file changes.
pub struct NetworkData {
    databases: Arc<Watched<IpDatabases>>,
    hosting: Arc<Watched<HostingAsns>>,
    tor_exits: Option<Arc<Watched<AddressList>>>,
    relays: Option<Arc<Watched<AddressList>>>,
}

impl NetworkData {
    /// Opens every source `paths` names, or fails naming the first file that cannot be read:
    /// a start-up error.
    pub fn open(paths: &NetworkPaths) -> Result<Self, OpenError> {
        let list = |path: &Option<PathBuf>| {
            path.as_ref()
                .map(|p| Watched::<AddressList>::open(vec![p.clone()]))
                .transpose()
        };
        Ok(NetworkData {
            databases: Watched::open(paths.ip_databases.clone())?,
            hosting: Watched::open(paths.hosting_asns.iter().cloned().collect())?,
            tor_exits: list(&paths.tor_exit_list)?,
            relays: list(&paths.relay_list)?,
        })
    }

    /// Whether any database or address list is configured: without one, a lookup says nothing
    /// (the hosting list needs a database's ASN).
    pub fn is_configured(&self) -> bool {
        !self.databases.load().is_empty() || self.tor_exits.is_some() || self.relays.is_some()
    }

    /// What the sources in service say about `ip`.
    pub fn lookup(&self, ip: IpAddr) -> NetworkFacts {
        let ip = ip.to_canonical();
        let IpFacts {
            asn,
            country,
            city,
            time_zone,
        } = self.databases.lookup(ip);
        let provider = asn
            .as_ref()
            .map(|asn| self.hosting.load().provider(asn.number).map(str::to_owned));
        NetworkFacts {
            asn: asn.map(|asn| AsnFacts {
                number: asn.number,
                organization: asn.organization,
            }),
            country,
            city,
            ip_timezone: time_zone,
            hosting: provider.as_ref().map(Option::is_some),
            hosting_provider: provider.flatten(),
            tor_exit: self.tor_exits.as_ref().map(|list| list.load().contains(ip)),
            relay: self.relays.as_ref().map(|list| list.load().contains(ip)),
        }
    }

    /// Watches every source's files (every `every`, and at each SIGHUP), as [`Watched::watch`]
    /// does. Must be called within the runtime.
    pub fn watch(&self, every: Duration) {
        self.databases.watch(every);
        self.hosting.watch(every);
        for list in [&self.tor_exits, &self.relays].into_iter().flatten() {
            list.watch(every);
        }
    }
}
