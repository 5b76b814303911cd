//! Network identity (docs/detection.md#network-identity): a served Vigil given IP databases that
//! the test writes itself (`ipdata::testing`), a Tor exit list and a
//! relay list, scoring sessions whose addresses come through a trusted proxy's
//! `X-Forwarded-For`. Each session's `network` member and signals are read back over the API
//! and the sessions export; a list changed on disk is read again; a file that cannot be read
//! stops the start. (What the signals make of a verdict is the golden test's: these sessions
//! come from a script, which other signals already judge.)

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ipdata::testing::write_mmdb;
use serde_json::{Value, json};
use vigil_tests::TestServer;
use vigil_tests::analysts::probes;
use vigil_tests::collect::{final_detail, fired_in, open_session};

/// The test's IP data: a GeoLite2 ASN and City pair placing a British broadband address, a
/// Google address (a hosting network by the shipped list) and an Apple relay's address, a Tor
/// exit list of one address, and a relay list of Apple's range.
struct IpData {
    databases: Vec<PathBuf>,
    tor_exits: PathBuf,
    relays: PathBuf,
}

const BRITISH_BROADBAND: &str = "81.2.69.142";
const GOOGLE: &str = "8.8.8.8";
const TOR_EXIT: &str = "185.220.101.1";
const LATER_TOR_EXIT: &str = "185.220.101.2";
const APPLE_RELAY: &str = "172.224.226.7";
const UNKNOWN: &str = "192.0.2.10";

fn ip_data(dir: &Path) -> IpData {
    let asn = dir.join("GeoLite2-ASN.mmdb");
    write_mmdb(
        &asn,
        "GeoLite2-ASN",
        6,
        json!([
            ["8.8.8.0/24", {"autonomous_system_number": 15169, "autonomous_system_organization": "GOOGLE"}],
            ["81.2.69.0/24", {"autonomous_system_number": 20712, "autonomous_system_organization": "Andrews & Arnold Ltd"}],
            ["172.224.224.0/19", {"autonomous_system_number": 36183, "autonomous_system_organization": "Akamai Technologies, Inc."}],
        ]),
    );
    let city = dir.join("GeoLite2-City.mmdb");
    write_mmdb(
        &city,
        "GeoLite2-City",
        6,
        json!([
            ["81.2.69.0/24", {
                "city": {"names": {"en": "London"}},
                "country": {"iso_code": "GB"},
                "location": {"time_zone": "Europe/London"},
            }],
            ["8.8.8.0/24", {"country": {"iso_code": "US"}, "location": {"time_zone": "America/Chicago"}}],
            ["172.224.224.0/19", {"country": {"iso_code": "GB"}, "location": {"time_zone": "Europe/London"}}],
        ]),
    );
    let tor_exits = dir.join("torbulkexitlist");
    std::fs::write(&tor_exits, format!("{TOR_EXIT}\n")).unwrap();
    let relays = dir.join("egress-ip-ranges.csv");
    std::fs::write(&relays, "172.224.226.0/27,GB,GB-EN,London,\n").unwrap();
    IpData {
        databases: vec![asn, city],
        tor_exits,
        relays,
    }
}

/// A desktop Chrome's probes reporting `timezone`, with the clock's offset that fits it.
fn probes_in(timezone: &str, offset_min: i64) -> Value {
    let mut probes = probes();
    probes["locale"]["timezone"] = json!(timezone);
    probes["locale"]["timezone_offset_min"] = json!(offset_min);
    probes
}

/// Opens a session, sends `probes` as if from `from` (a trusted proxy's `X-Forwarded-For`), asks
/// for its result, and returns its detail once decided.
async fn scored_from(s: &TestServer, from: &str, probes: &Value) -> Value {
    let pk = &s.creds.keys.publishable_test;
    let session = open_session(s, pk).await;
    let sid = session.id.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answer = s
            .post(&format!("/v1/collect/sessions/{sid}/batches"))
            .key(pk)
            .header("x-forwarded-for", from)
            .json(session.batch(1, probes))
            .send()
            .await;
        // A server just started answers a retryable 503 until its log's topics are ready.
        if answer.status == 503 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        answer.ok(202);
        break;
    }
    session.results(s, pk).send().await.ok(200);
    final_detail(s, &sid).await
}

const NETWORK_SIGNALS: [&str; 4] = [
    "datacenter_ip",
    "tor_exit_node",
    "timezone_mismatch",
    "vpn_suspected",
];

/// The network signals among what fired.
fn network_signals(detail: &Value) -> Vec<String> {
    fired_in(detail)
        .into_iter()
        .filter(|s| NETWORK_SIGNALS.contains(s))
        .map(str::to_owned)
        .collect()
}

async fn served_with(data: &IpData) -> TestServer {
    let (databases, tor, relays) = (
        data.databases.clone(),
        data.tor_exits.clone(),
        data.relays.clone(),
    );
    TestServer::start_with(move |a| {
        a.trusted_proxy = vec!["127.0.0.1/32".parse().unwrap()];
        a.ip_database = databases.clone();
        a.tor_exit_list = Some(tor.clone());
        a.relay_list = Some(relays.clone());
        a.ip_data_poll = Duration::from_millis(100);
    })
    .await
}

#[tokio::test]
async fn a_broadband_address_in_its_own_zone_shows_where_it_is_and_fires_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = served_with(&ip_data(dir.path())).await;
    let detail = scored_from(&s, BRITISH_BROADBAND, &probes_in("Europe/London", -60)).await;
    assert_eq!(
        detail["network"]["ip_address"], BRITISH_BROADBAND,
        "the trusted proxy's client"
    );
    let network = &detail["network"];
    assert_eq!(
        network["asn"],
        json!({"number": 20712, "organization": "Andrews & Arnold Ltd"})
    );
    assert_eq!(network["country"], "GB");
    assert_eq!(network["city"], "London");
    assert_eq!(network["ip_timezone"], "Europe/London");
    assert_eq!(network["hosting"], false);
    assert_eq!(network["hosting_provider"], Value::Null);
    assert_eq!(network["tor_exit"], false);
    assert_eq!(
        network["vpn"],
        json!({"result": false, "confidence": null, "methods": {"timezone_mismatch": false, "hosting_desktop": false, "relay": false}})
    );
    assert!(network_signals(&detail).is_empty(), "{detail}");
}

#[tokio::test]
async fn a_zone_no_one_uses_in_the_addresss_country_is_a_mismatch_and_a_low_vpn() {
    let dir = tempfile::tempdir().unwrap();
    let s = served_with(&ip_data(dir.path())).await;
    let detail = scored_from(&s, BRITISH_BROADBAND, &probes_in("America/New_York", 300)).await;
    assert_eq!(
        network_signals(&detail),
        ["timezone_mismatch", "vpn_suspected"],
        "{detail}"
    );
    let mismatch = detail["signals_fired"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["signal"] == "timezone_mismatch")
        .unwrap();
    assert_eq!(
        mismatch["observed"],
        json!({"browser_timezone": "America/New_York", "ip_country": "GB", "zone_countries": ["US"]})
    );
    assert_eq!(detail["network"]["vpn"]["result"], true);
    assert_eq!(detail["network"]["vpn"]["confidence"], "low");
    assert_eq!(
        detail["network"]["vpn"]["methods"]["timezone_mismatch"],
        true
    );
}

#[tokio::test]
async fn a_desktop_browser_on_a_cloud_network_is_a_datacenter_address_and_a_medium_vpn() {
    let dir = tempfile::tempdir().unwrap();
    let s = served_with(&ip_data(dir.path())).await;
    let detail = scored_from(&s, GOOGLE, &probes_in("America/Chicago", 360)).await;
    let network = &detail["network"];
    assert_eq!(network["asn"]["number"], 15169);
    assert_eq!(network["hosting"], true);
    assert_eq!(network["hosting_provider"], "Google");
    assert_eq!(network["country"], "US");
    assert_eq!(
        network["city"],
        Value::Null,
        "the database has no city for it"
    );
    assert_eq!(network["vpn"]["confidence"], "medium");
    assert_eq!(network["vpn"]["methods"]["hosting_desktop"], true);
    assert_eq!(
        network_signals(&detail),
        ["datacenter_ip", "vpn_suspected"],
        "{detail}"
    );
}

#[tokio::test]
async fn a_tor_exit_and_a_relay_are_named_from_the_operators_lists() {
    let dir = tempfile::tempdir().unwrap();
    let data = ip_data(dir.path());
    let s = served_with(&data).await;

    let tor = scored_from(&s, TOR_EXIT, &probes_in("Europe/London", -60)).await;
    assert_eq!(tor["network"]["tor_exit"], true);
    assert_eq!(
        tor["network"]["asn"],
        Value::Null,
        "no database knows it: {tor}"
    );
    assert_eq!(
        tor["network"]["hosting"],
        Value::Null,
        "no ASN, no judgement"
    );
    assert_eq!(network_signals(&tor), ["tor_exit_node"], "{tor}");

    let relay = scored_from(&s, APPLE_RELAY, &probes_in("Europe/London", -60)).await;
    assert_eq!(
        relay["network"]["hosting"], false,
        "Akamai's AS is not listed"
    );
    assert_eq!(relay["network"]["vpn"]["confidence"], "high");
    assert_eq!(relay["network"]["vpn"]["methods"]["relay"], true);
    assert_eq!(network_signals(&relay), ["vpn_suspected"], "{relay}");

    let unknown = scored_from(&s, UNKNOWN, &probes_in("Europe/London", -60)).await;
    for member in ["asn", "country", "city", "ip_timezone", "hosting"] {
        assert_eq!(
            unknown["network"][member],
            Value::Null,
            "{member}: {unknown}"
        );
    }
    assert_eq!(unknown["network"]["tor_exit"], false);
    assert!(network_signals(&unknown).is_empty(), "{unknown}");

    // The Tor Project's list changes hourly: the file rewritten is read again.
    assert!(network_signals(&scored_from(&s, LATER_TOR_EXIT, &probes()).await).is_empty());
    let replaced = dir.path().join("torbulkexitlist.new");
    std::fs::write(&replaced, format!("{TOR_EXIT}\n{LATER_TOR_EXIT}\n")).unwrap();
    std::fs::rename(&replaced, &data.tor_exits).unwrap();
    let mut seen = false;
    for _ in 0..50 {
        let detail = scored_from(&s, LATER_TOR_EXIT, &probes()).await;
        if detail["network"]["tor_exit"] == true {
            assert_eq!(network_signals(&detail), ["tor_exit_node"]);
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen, "the rewritten list was read again");
}

#[tokio::test]
async fn the_sessions_export_carries_the_network_columns() {
    let dir = tempfile::tempdir().unwrap();
    let s = served_with(&ip_data(dir.path())).await;
    let google = scored_from(&s, GOOGLE, &probes_in("America/Chicago", 360)).await;
    let tor = scored_from(&s, TOR_EXIT, &probes()).await;
    let r = s
        .client
        .get(format!("{}/v1/sessions/export", s.base))
        .bearer_auth(&s.creds.keys.secret_test)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let arrow = dir.path().join("sessions.arrows");
    std::fs::write(&arrow, r.bytes().await.unwrap()).unwrap();
    let rows = vigil_tests::analysts::python(
        "import json, sys, pyarrow.ipc as ipc\n\
         t = ipc.open_stream(open(sys.argv[1], 'rb')).read_all()\n\
         cols = ['session_id', 'asn', 'asn_organization', 'country', 'hosting', 'tor_exit', 'vpn']\n\
         print(json.dumps({'types': {c: str(t.schema.field(c).type) for c in cols[1:]}, \
         'rows': t.select(cols).to_pylist(), 'version': t.schema.metadata[b'vigil.schema_version'].decode()}))",
        &[arrow.to_str().unwrap()],
    );
    let read: Value = serde_json::from_str(&rows).unwrap();
    assert_eq!(read["version"], "2");
    assert_eq!(
        read["types"],
        json!({"asn": "int64", "asn_organization": "string", "country": "string", "hosting": "bool", "tor_exit": "bool", "vpn": "bool"})
    );
    let row = |id: &Value| {
        read["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["session_id"] == *id)
            .cloned()
            .expect("the session's row")
    };
    assert_eq!(
        row(&google["id"]),
        json!({"session_id": google["id"], "asn": 15169, "asn_organization": "GOOGLE", "country": "US", "hosting": true, "tor_exit": false, "vpn": true})
    );
    assert_eq!(
        row(&tor["id"]),
        json!({"session_id": tor["id"], "asn": null, "asn_organization": null, "country": null, "hosting": null, "tor_exit": true, "vpn": false})
    );
}

#[tokio::test]
async fn without_ip_data_the_network_members_are_null_and_nothing_fires() {
    let s = TestServer::start_with(|a| {
        a.trusted_proxy = vec!["127.0.0.1/32".parse().unwrap()];
    })
    .await;
    let detail = scored_from(&s, GOOGLE, &probes_in("Asia/Tokyo", -540)).await;
    for member in [
        "asn",
        "country",
        "city",
        "ip_timezone",
        "hosting",
        "hosting_provider",
        "tor_exit",
        "vpn",
    ] {
        assert_eq!(detail["network"][member], Value::Null, "{member}: {detail}");
    }
    assert!(
        network_signals(&detail).is_empty(),
        "Vigil never guesses: {detail}"
    );
}

#[test]
fn a_file_that_cannot_be_read_stops_the_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_database = dir.path().join("GeoLite2-City.mmdb");
    std::fs::write(&not_a_database, b"not a MaxMind DB").unwrap();
    let broken_list = dir.path().join("tor.txt");
    std::fs::write(&broken_list, "185.220.101.1\nexit.example\n").unwrap();
    let missing = dir.path().join("absent.mmdb");
    for (flag, path, says) in [
        ("--ip-database", &missing, "absent.mmdb"),
        ("--ip-database", &not_a_database, "GeoLite2-City.mmdb"),
        ("--tor-exit-list", &broken_list, "tor.txt: line 2"),
    ] {
        let out = Command::new(vigil_tests::vigil_binary())
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("data"))
            .arg(flag)
            .arg(path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag} {}: {stderr}", path.display());
        assert!(
            stderr.contains("opening the IP data") && stderr.contains(says),
            "{flag}: {stderr}"
        );
    }
}

/// The public databases the test command fetches from the npm registry (scripts/ip-data.sh).
fn public_ip_data() -> PathBuf {
    PathBuf::from(std::env::var("VIGIL_TEST_IP_DATA").expect(
        "VIGIL_TEST_IP_DATA is not set: run the tests with scripts/test.sh, which fetches the \
         public IP databases into target/ipdata",
    ))
}

/// Addresses whose place the public databases agree on: Google's resolver, MaxMind's own test
/// address in London, and the RIPE NCC in Amsterdam. (Of Google's IPv6 resolver they do not:
/// GeoLite2 says the United States, DB-IP Canada.)
const WELL_KNOWN: [(&str, &str); 3] = [
    ("8.8.8.8", "US"),
    ("81.2.69.142", "GB"),
    ("193.0.6.139", "NL"),
];

/// The rows of the public ASN table (`asn-ipv4.csv`, Route Views and DB-IP) that hold the
/// IPv4 addresses of [`WELL_KNOWN`], written as a MaxMind DB in ip-location-db's ASN layout:
/// Vigil reads MaxMind DB files, and the whole table is half a million rows.
fn public_asn_rows(data: &Path, at: &Path) {
    let rows = vigil_tests::analysts::python(
        "import csv, ipaddress, json, sys\n\
         from netaddr import iprange_to_cidrs\n\
         wanted = [ipaddress.ip_address(a) for a in sys.argv[2:]]\n\
         out = []\n\
         for start, end, asn, org in csv.reader(open(sys.argv[1])):\n\
         \x20   s, e = ipaddress.ip_address(start), ipaddress.ip_address(end)\n\
         \x20   if any(s <= w <= e for w in wanted):\n\
         \x20       for cidr in iprange_to_cidrs(start, end):\n\
         \x20           out.append([str(cidr), {'autonomous_system_number': int(asn), 'autonomous_system_organization': org}])\n\
         print(json.dumps(out))",
        &[
            data.join("asn-ipv4.csv").to_str().unwrap(),
            "8.8.8.8",
            "81.2.69.142",
            "193.0.6.139",
        ],
    );
    let networks: Value = serde_json::from_str(&rows).unwrap();
    assert!(
        networks.as_array().unwrap().len() >= 3,
        "the table holds the three addresses: {networks}"
    );
    write_mmdb(at, "ip-location-db asn", 6, networks);
}

#[tokio::test]
async fn the_public_databases_place_well_known_addresses() {
    let data = public_ip_data();
    let dir = tempfile::tempdir().unwrap();
    let asn = dir.path().join("asn.mmdb");
    public_asn_rows(&data, &asn);
    let city = data.join("GeoLite2-City.mmdb");
    let dbip = data.join("dbip-country.mmdb");

    // Each file alone, as its layout is read.
    let geolite = ipdata::IpDatabases::open(std::slice::from_ref(&city)).unwrap();
    let db_ip = ipdata::IpDatabases::open(std::slice::from_ref(&dbip)).unwrap();
    for (address, country) in WELL_KNOWN {
        let ip = address.parse().unwrap();
        assert_eq!(
            geolite.lookup(ip).country.as_deref(),
            Some(country),
            "GeoLite2 {address}"
        );
        assert_eq!(
            db_ip.lookup(ip).country.as_deref(),
            Some(country),
            "DB-IP {address}"
        );
    }
    assert_eq!(
        geolite
            .lookup("81.2.69.142".parse().unwrap())
            .time_zone
            .as_deref(),
        Some("Europe/London")
    );
    let v6 = geolite.lookup("2001:4860:4860::8888".parse().unwrap());
    assert_eq!(v6.country.as_deref(), Some("US"), "GeoLite2 reads IPv6 too");

    // All three through a served Vigil: the ASN from the table, the place from GeoLite2, the
    // hosting provider from the shipped list.
    let paths = vec![city, dbip, asn];
    let s = TestServer::start_with(move |a| {
        a.trusted_proxy = vec!["127.0.0.1/32".parse().unwrap()];
        a.ip_database = paths.clone();
    })
    .await;
    let detail = scored_from(&s, GOOGLE, &probes_in("America/Chicago", 360)).await;
    let network = &detail["network"];
    assert_eq!(network["asn"]["number"], 15169, "{network}");
    assert_eq!(network["asn"]["organization"], "Google LLC");
    assert_eq!(network["country"], "US");
    assert!(
        network["ip_timezone"]
            .as_str()
            .is_some_and(|z| z.starts_with("America/")),
        "{network}"
    );
    assert_eq!(network["hosting"], true);
    assert_eq!(network["hosting_provider"], "Google");
    assert_eq!(network_signals(&detail), ["datacenter_ip", "vpn_suspected"]);

    let london = scored_from(&s, BRITISH_BROADBAND, &probes_in("Europe/London", -60)).await;
    assert_eq!(london["network"]["country"], "GB");
    assert_eq!(london["network"]["hosting"], false, "{london}");
    assert!(network_signals(&london).is_empty(), "{london}");
}
