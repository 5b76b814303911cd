//! One record of any layout read into [`IpFacts`]: the members every known layout names,
//! each optional, so a file of one layout leaves the others' members absent.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Deserialize;

use crate::{Asn, IpFacts};

/// The members of a record, by the names the layouts give them; anything else is skipped.
#[derive(Deserialize, Default)]
struct Record {
    /// GeoLite2/GeoIP2 ASN, DB-IP ASN Lite and `ip-location-db`'s ASN files.
    autonomous_system_number: Option<u32>,
    autonomous_system_organization: Option<String>,
    /// IPinfo Lite: `"AS15169"`.
    asn: Option<String>,
    as_name: Option<String>,
    /// GeoLite2/GeoIP2 and DB-IP: `{"iso_code": …, "names": …}`; IPinfo Lite: the country's
    /// name.
    country: Option<Country>,
    /// IPinfo Lite and `ip-location-db`.
    country_code: Option<String>,
    /// GeoLite2/GeoIP2 and DB-IP: `{"names": {"en": …}}`; `ip-location-db`: the name.
    city: Option<City>,
    /// GeoLite2/GeoIP2 City: `{"time_zone": …}`.
    location: Option<Location>,
    /// `ip-location-db`'s city files.
    timezone: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Country {
    Map {
        iso_code: Option<String>,
    },
    /// A name: the code, if any, is in `country_code`.
    Name(serde::de::IgnoredAny),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum City {
    Map {
        names: Option<BTreeMap<String, String>>,
    },
    Name(String),
}

#[derive(Deserialize)]
struct Location {
    time_zone: Option<String>,
}

/// The facts `reader` holds for `ip`: all absent when no network of the file holds it.
pub(crate) fn lookup<S: AsRef<[u8]>>(
    reader: &maxminddb::Reader<S>,
    ip: IpAddr,
) -> Result<IpFacts, maxminddb::MaxMindDbError> {
    let found = reader.lookup(ip)?;
    let record: Record = found.decode()?.unwrap_or_default();
    Ok(record.facts())
}

impl Record {
    fn facts(self) -> IpFacts {
        let asn = match (self.autonomous_system_number, self.asn.as_deref()) {
            (Some(number), _) => Some(Asn {
                number,
                organization: self.autonomous_system_organization,
            }),
            (None, Some(spelled)) => {
                spelled
                    .trim_start_matches("AS")
                    .parse()
                    .ok()
                    .map(|number| Asn {
                        number,
                        organization: self.as_name,
                    })
            }
            (None, None) => None,
        };
        let country = match self.country {
            Some(Country::Map { iso_code }) => iso_code,
            Some(Country::Name(_)) | None => self.country_code,
        }
        .map(|code| code.to_ascii_uppercase())
        .filter(|code| code.len() == 2 && code.bytes().all(|b| b.is_ascii_alphabetic()));
        let city = match self.city {
            Some(City::Map { names }) => names.and_then(|mut names| names.remove("en")),
            Some(City::Name(name)) => Some(name),
            None => None,
        }
        .filter(|name| !name.is_empty());
        let time_zone = self
            .location
            .and_then(|l| l.time_zone)
            .or(self.timezone)
            .filter(|zone| !zone.is_empty());
        IpFacts {
            asn,
            country,
            city,
            time_zone,
        }
    }
}
