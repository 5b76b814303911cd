//! The ScyllaDB store URL (docs/operations.md#scylladb):
//! `scylla://[user:password@]host:9042[,host:9042…]/keyspace?dc=&consistency=&user=&password=&tls=&ca=&replication_factor=`,
//! parsed into what the driver's session needs. A bad URL is refused with the parameter it
//! got wrong; the password is kept out of every `Debug` and message.

use std::fmt;
use std::path::PathBuf;

use scylla::statement::{Consistency, SerialConsistency};

use crate::{Result, StoreError};

/// The port a host without one is reached on.
const DEFAULT_PORT: u16 = 9042;

/// A parsed `scylla://` URL.
#[derive(Clone, PartialEq)]
pub struct ScyllaConfig {
    /// `host:port` of each contact point; the driver discovers the rest of the cluster.
    pub hosts: Vec<String>,
    pub keyspace: String,
    /// The local datacenter: requests go to its nodes first, and `LOCAL_*` consistencies count
    /// its replicas only.
    pub dc: Option<String>,
    /// Of every read and write (default `LOCAL_QUORUM`).
    pub consistency: Consistency,
    /// Of every lightweight transaction's Paxos round: `LOCAL_SERIAL` unless the consistency is
    /// a cluster-wide one, then `SERIAL`.
    pub serial_consistency: SerialConsistency,
    pub credentials: Option<(String, Password)>,
    /// TLS to every node, verified against `ca` (the cluster's CA, PEM).
    pub tls: Option<PathBuf>,
    /// How `vigil migrate` creates the keyspace when it does not exist: this many replicas,
    /// in `dc` when one is named (`NetworkTopologyStrategy`), else `SimpleStrategy`.
    pub replication_factor: u32,
}

/// A password, shown as `***` in every `Debug`.
#[derive(Clone, PartialEq)]
pub struct Password(pub String);

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Debug for ScyllaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScyllaConfig")
            .field("hosts", &self.hosts)
            .field("keyspace", &self.keyspace)
            .field("dc", &self.dc)
            .field("consistency", &self.consistency)
            .field("serial_consistency", &self.serial_consistency)
            .field("user", &self.credentials.as_ref().map(|(user, _)| user))
            .field("tls", &self.tls)
            .field("replication_factor", &self.replication_factor)
            .finish()
    }
}

/// A refusal of `url`, which it shows only up to its parameters: a password may hold any
/// character (`@`, `&`), so no redaction of the query can be trusted to find all of it.
fn invalid(url: &str, why: impl fmt::Display) -> StoreError {
    let location = url.split('?').next().unwrap_or_default();
    // Any `@` may end a password written before the host, with a `?` of its own in it.
    let shown = if url.contains('@') {
        "scylla://…"
    } else {
        location
    };
    StoreError::Invalid(format!("bad ScyllaDB URL `{shown}`: {why}"))
}

impl ScyllaConfig {
    pub fn parse(url: &str) -> Result<Self> {
        let rest = url
            .strip_prefix("scylla://")
            .ok_or_else(|| invalid(url, "it must start with scylla://"))?;
        let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
        // Any `@` may end a password written before the hosts, whatever came before it (a raw
        // `/` or `?` in the password splits the URL elsewhere): then no part of the URL is
        // quoted in a refusal, and a raw `&` in a query's password likewise makes its tail read
        // as a parameter, so a name or value is quoted only when the URL carries no password.
        let secretive = url.contains('@')
            || url::form_urlencoded::parse(query.as_bytes()).any(|(name, _)| name == "password");
        let echo = |value: &str| {
            if secretive {
                "…".to_owned()
            } else {
                value.to_owned()
            }
        };
        // `user:password@` before the hosts, as PostgreSQL's and Kafka's URLs take them: the
        // last `@` ends it, so an `@` in the password may stay as it is; a `/` or `?` in it is
        // written %2F or %3F.
        let (userinfo, location) = match location.rsplit_once('@') {
            Some((userinfo, location)) => (Some(userinfo), location),
            None => (None, location),
        };
        let (hosts, keyspace) = location
            .split_once('/')
            .ok_or_else(|| invalid(url, "it names no keyspace (scylla://host:9042/keyspace)"))?;
        let hosts = hosts
            .split(',')
            .map(|host| contact_point(url, host, &echo(host)))
            .collect::<Result<Vec<_>>>()?;
        if !is_keyspace_name(keyspace) {
            return Err(invalid(
                url,
                format!(
                    "`{}` is not a keyspace name (a letter, then letters, digits or _, \
                     at most 48)",
                    echo(keyspace)
                ),
            ));
        }
        let mut config = ScyllaConfig {
            hosts,
            keyspace: keyspace.to_owned(),
            dc: None,
            consistency: Consistency::LocalQuorum,
            serial_consistency: SerialConsistency::LocalSerial,
            credentials: None,
            tls: None,
            replication_factor: 1,
        };
        let (mut user, mut password, mut tls, mut ca) = (None, None, false, None);
        if let Some(userinfo) = userinfo {
            let decoded = |part: &str| {
                percent_encoding::percent_decode_str(part)
                    .decode_utf8()
                    .map(std::borrow::Cow::into_owned)
                    .map_err(|_| invalid(url, "the user or password before the host is not UTF-8"))
            };
            let (name, secret) = userinfo
                .split_once(':')
                .ok_or_else(|| invalid(url, "user:password@ before the host needs both"))?;
            if name.is_empty() {
                return Err(invalid(url, "user:password@ before the host needs both"));
            }
            user = Some(decoded(name)?);
            password = Some(Password(decoded(secret)?));
        }
        let before_host = userinfo.is_some();
        for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
            let value = value.into_owned();
            match &*name {
                "dc" if !value.is_empty() => config.dc = Some(value),
                "consistency" => config.consistency = consistency(url, &value, &echo(&value))?,
                "user" | "password" if before_host => {
                    return Err(invalid(
                        url,
                        "the user and password go before the host or in the query, not both",
                    ));
                }
                "user" => user = Some(value),
                "password" => password = Some(Password(value)),
                "tls" => {
                    tls = match value.as_str() {
                        "true" | "1" => true,
                        "false" | "0" => false,
                        other => {
                            return Err(invalid(
                                url,
                                format!("tls={}: true or false", echo(other)),
                            ));
                        }
                    }
                }
                "ca" if !value.is_empty() => ca = Some(PathBuf::from(value)),
                "replication_factor" => {
                    config.replication_factor = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=9).contains(n))
                        .ok_or_else(|| {
                            invalid(url, format!("replication_factor={}: 1 to 9", echo(&value)))
                        })?;
                }
                other => {
                    let named = if secretive {
                        String::new()
                    } else {
                        format!(" `{other}`")
                    };
                    return Err(invalid(
                        url,
                        format!(
                            "unknown parameter{named} (dc, consistency, user, password, tls, ca, \
                             replication_factor; write a `&` in a password as %26)"
                        ),
                    ));
                }
            }
        }
        config.credentials = match (user, password) {
            (Some(user), Some(password)) => Some((user, password)),
            (None, None) => None,
            _ => return Err(invalid(url, "user and password go together")),
        };
        config.tls = match (tls, ca) {
            (true, Some(ca)) => Some(ca),
            (true, None) => {
                return Err(invalid(
                    url,
                    "tls=true needs ca=<the cluster's CA certificate, PEM>",
                ));
            }
            (false, Some(_)) => return Err(invalid(url, "ca= is for tls=true")),
            (false, None) => None,
        };
        if matches!(
            config.consistency,
            Consistency::Quorum | Consistency::All | Consistency::EachQuorum
        ) {
            config.serial_consistency = SerialConsistency::Serial;
        }
        Ok(config)
    }
}

/// `host[:port]`, or `[v6]:port`, with the default port when none is given.
/// `shown` is `host` as a refusal may quote it.
fn contact_point(url: &str, host: &str, shown: &str) -> Result<String> {
    if host.is_empty() {
        return Err(invalid(url, "an empty host"));
    }
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) if !port.contains(']') => (name, Some(port)),
        _ => (host, None),
    };
    let port = match port {
        Some(port) => port
            .parse::<u16>()
            .map_err(|_| invalid(url, format!("`{shown}`: the port is not a number")))?,
        None => DEFAULT_PORT,
    };
    if name.is_empty() {
        return Err(invalid(url, format!("`{shown}` has no host name")));
    }
    Ok(format!("{name}:{port}"))
}

/// CQL's rule for an unquoted keyspace name.
fn is_keyspace_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 48
}

/// `value` as a consistency; `shown` is how a refusal shows it.
fn consistency(url: &str, value: &str, shown: &str) -> Result<Consistency> {
    Ok(match value.to_ascii_lowercase().as_str() {
        "one" => Consistency::One,
        "two" => Consistency::Two,
        "three" => Consistency::Three,
        "quorum" => Consistency::Quorum,
        "all" => Consistency::All,
        "local_quorum" => Consistency::LocalQuorum,
        "each_quorum" => Consistency::EachQuorum,
        "local_one" => Consistency::LocalOne,
        _ => {
            return Err(invalid(
                url,
                format!(
                    "consistency={shown}: one of one, two, three, quorum, all, local_quorum, \
                     each_quorum, local_one"
                ),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(url: &str) -> String {
        match ScyllaConfig::parse(url) {
            Err(StoreError::Invalid(why)) => why,
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn a_bare_url_gets_the_defaults() {
        let c = ScyllaConfig::parse("scylla://scylla/vigil").unwrap();
        assert_eq!(c.hosts, ["scylla:9042"]);
        assert_eq!(c.keyspace, "vigil");
        assert_eq!(c.consistency, Consistency::LocalQuorum);
        assert_eq!(c.serial_consistency, SerialConsistency::LocalSerial);
        assert_eq!((c.dc, c.credentials, c.tls), (None, None, None));
        assert_eq!(c.replication_factor, 1);
    }

    #[test]
    fn every_parameter_is_read() {
        let c = ScyllaConfig::parse(
            "scylla://10.0.0.1:19042,10.0.0.2,[::1]:9043/fraud_1?dc=eu-west&consistency=QUORUM\
             &user=vigil&password=s%3Dcret&tls=true&ca=/etc/vigil/ca.pem&replication_factor=3",
        )
        .unwrap();
        assert_eq!(c.hosts, ["10.0.0.1:19042", "10.0.0.2:9042", "[::1]:9043"]);
        assert_eq!(c.keyspace, "fraud_1");
        assert_eq!(c.dc.as_deref(), Some("eu-west"));
        assert_eq!(c.consistency, Consistency::Quorum);
        assert_eq!(c.serial_consistency, SerialConsistency::Serial);
        let (user, password) = c.credentials.clone().unwrap();
        assert_eq!((user.as_str(), password.0.as_str()), ("vigil", "s=cret"));
        assert_eq!(c.tls, Some(PathBuf::from("/etc/vigil/ca.pem")));
        assert_eq!(c.replication_factor, 3);
        let shown = format!("{c:?}");
        assert!(!shown.contains("cret"), "{shown}");
    }

    #[test]
    fn the_user_and_password_may_go_before_the_host() {
        let c =
            ScyllaConfig::parse("scylla://vigil:s%3Dc@ret@10.0.0.1,10.0.0.2:19042/fraud").unwrap();
        assert_eq!(c.hosts, ["10.0.0.1:9042", "10.0.0.2:19042"]);
        let (user, password) = c.credentials.clone().unwrap();
        assert_eq!((user.as_str(), password.0.as_str()), ("vigil", "s=c@ret"));
        let shown = format!("{c:?}");
        assert!(!shown.contains("ret"), "{shown}");
        assert_eq!(
            ScyllaConfig::parse("scylla://vigil:s%3Dc%40ret@10.0.0.1,10.0.0.2:19042/fraud")
                .unwrap()
                .credentials,
            c.credentials
        );
    }

    #[test]
    fn a_bad_url_names_what_is_wrong_and_never_the_password() {
        for (url, says) in [
            ("postgres://h/db", "scylla://"),
            ("scylla://host", "no keyspace"),
            ("scylla://host/1bad", "not a keyspace name"),
            ("scylla://host/ks-dash", "not a keyspace name"),
            ("scylla://host:port/ks", "not a number"),
            ("scylla://,host/ks", "empty host"),
            ("scylla://u:hunter2@host/ks?user=u", "not both"),
            ("scylla://u:hunter2@host/ks?password=hunter2", "not both"),
            ("scylla://hunter2@host/ks", "needs both"),
            ("scylla://:hunter2@host/ks", "needs both"),
            (
                "scylla://u:hunter2@host/ks?colour=red",
                "unknown parameter (",
            ),
            ("scylla://u:hun?ter2@host/ks", "scylla://…"),
            // A raw `/` before a raw `?` in a password written before the host.
            ("scylla://u:hu/nter2?x@h/ks", "not a number"),
            ("scylla://u:12/hunter2?pw@h/ks", "unknown parameter ("),
            (
                "scylla://u:12/hunter-2?pw@h/ks",
                "`…` is not a keyspace name",
            ),
            ("scylla://u:1/ks?hunter2@h/ks", "unknown parameter ("),
            ("scylla://host/ks?consistency=most", "consistency=most"),
            ("scylla://host/ks?user=u", "together"),
            ("scylla://host/ks?password=hunter2", "together"),
            ("scylla://host/ks?tls=yes", "tls=yes"),
            ("scylla://host/ks?tls=true", "needs ca="),
            ("scylla://host/ks?ca=/x.pem", "for tls=true"),
            ("scylla://host/ks?replication_factor=0", "1 to 9"),
            ("scylla://host/ks?colour=red", "unknown parameter `colour`"),
            (
                "scylla://host/ks?password=hunter2&colour=red",
                "unknown parameter (",
            ),
            // Passwords holding what a URL separates on.
            ("scylla://host/ks?user=u&password=hun@ter2&tls=yes", "tls=…"),
            ("scylla://host/ks?user=u&password=hun&tls=ter2", "tls=…"),
            (
                "scylla://host/ks?user=u&password=hun&ter2",
                "unknown parameter (",
            ),
        ] {
            let why = refused(url);
            assert!(why.contains(says), "{url}: {why}");
            for secret in ["hunter2", "hun", "ter2"] {
                assert!(!why.contains(secret), "{url}: {why}");
            }
        }
    }
}
