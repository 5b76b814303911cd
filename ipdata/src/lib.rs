//! What the operator's IP databases say about a client address: its autonomous system, its
//! country, and its city and time zone where a database has them. The serving roles do not read
//! it yet; a session's `network` member will carry what it answers.
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

mod record;
mod watched;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

pub use watched::Watched;

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
#[error("IP database {path}: {reason}")]
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
