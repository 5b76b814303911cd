//! Benchmark: the operator's IP data (docs/detection.md#network-identity), with the public
//! databases the test command fetches (scripts/ip-data.sh: GeoLite2 City, DB-IP's countries), a
//! Tor exit list of 1,500 addresses and a relay list of 250,000 ranges (the sizes of the Tor
//! Project's and Apple's). Prints
//! - lookups a second, one thread, of random public IPv4 addresses through the databases and
//!   both lists (without an ASN file, the hosting list is not consulted);
//! - the resident memory the sources take once open, against the files' size;
//! - the whole embedded pipeline's CPU a batch with the IP data on and off, alternated in the
//!   same run: short visits (probes and four interaction batches) from public addresses through
//!   a trusted proxy's `X-Forwarded-For`, each session looked up once.
//!
//! `VIGIL_BENCH_SECONDS` (default 8) sets each pipeline run's length.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use vigil_tests::TestServer;
use vigil_tests::collect::open_session;

#[path = "common/goals.rs"]
mod goals;
#[path = "common/load.rs"]
#[allow(dead_code)] // the other benchmarks' helpers
mod load;
use goals::goal;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A public IPv4 address from `n`: spread over 1.0.0.0 to 223.255.255.255, past the private
/// and reserved blocks' chance of mattering.
fn public_address(n: u64) -> std::net::Ipv4Addr {
    let mixed = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
    let v = 0x0100_0000 + (mixed as u32 % (0xe000_0000 - 0x0100_0000));
    std::net::Ipv4Addr::from(v)
}

/// The sources: the public databases, and lists of the Tor Project's and Apple's sizes.
fn paths(dir: &Path) -> ipdata::NetworkPaths {
    let data = PathBuf::from(std::env::var("VIGIL_TEST_IP_DATA").expect(
        "VIGIL_TEST_IP_DATA is not set: run scripts/bench.sh, which fetches the public IP databases",
    ));
    let tor = dir.join("torbulkexitlist");
    let exits: Vec<String> = (0..1_500)
        .map(|n| public_address(n * 7919).to_string())
        .collect();
    std::fs::write(&tor, exits.join("\n")).unwrap();
    let relays = dir.join("egress-ip-ranges.csv");
    let ranges: Vec<String> = (0..250_000u64)
        .map(|n| format!("{}/27,GB,GB-EN,London,", public_address(n * 104_729 + 3)))
        .collect();
    std::fs::write(&relays, ranges.join("\n")).unwrap();
    ipdata::NetworkPaths {
        ip_databases: vec![
            data.join("GeoLite2-City.mmdb"),
            data.join("dbip-country.mmdb"),
        ],
        hosting_asns: None,
        tor_exit_list: Some(tor),
        relay_list: Some(relays),
    }
}

/// This process's resident memory, in bytes.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn files_bytes(paths: &ipdata::NetworkPaths) -> u64 {
    paths
        .ip_databases
        .iter()
        .chain(&paths.tor_exit_list)
        .chain(&paths.relay_list)
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}

/// A real visit recorded from Chromium: its probes, and its interaction batches.
fn visit() -> Vec<Vec<u8>> {
    let fixture: Value = serde_json::from_str(include_str!(
        "../../processor/tests/fixtures/recorded_chromium_headful_input.json"
    ))
    .unwrap();
    fixture["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| serde_json::to_vec(b).unwrap())
        .collect()
}

async fn server(paths: Option<ipdata::NetworkPaths>) -> TestServer {
    let s = TestServer::start_with(move |a| {
        a.trusted_proxy = vec!["127.0.0.1/32".parse().unwrap()];
        if let Some(paths) = &paths {
            a.ip_database = paths.ip_databases.clone();
            a.tor_exit_list = paths.tor_exit_list.clone();
            a.relay_list = paths.relay_list.clone();
        }
    })
    .await;
    s.unlimit(&s.creds.keys.publishable_test).await;
    // Unmeasured: the first visits warm the caches.
    let _ = open_session(&s, &s.creds.keys.publishable_test).await;
    s
}

fn main() {
    let seconds: u64 = std::env::var("VIGIL_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path());

    // Lookups, and the memory the sources hold.
    let before = resident_bytes();
    let data = ipdata::NetworkData::open(&paths).unwrap();
    let held = resident_bytes().saturating_sub(before);
    let files = files_bytes(&paths);
    println!(
        "resident memory of the open sources: {:.1} MB (the files: {:.1} MB)",
        held as f64 / 1e6,
        files as f64 / 1e6
    );
    let started = Instant::now();
    let mut lookups = 0u64;
    let mut placed = 0u64;
    while started.elapsed() < Duration::from_secs(2) {
        for _ in 0..1_000 {
            let facts = data.lookup(public_address(lookups).into());
            placed += u64::from(facts.country.is_some());
            lookups += 1;
        }
    }
    let rate = lookups as f64 / started.elapsed().as_secs_f64();
    println!(
        "lookups: {rate:.0} a second on one thread ({:.2} µs each; {:.0}% of the addresses placed)",
        1e6 / rate,
        placed as f64 * 100.0 / lookups as f64
    );
    goal(
        "IP data: lookups a second, one thread, the databases and both lists",
        format!("{rate:.0}/s"),
        "≥ 100,000/s",
        rate >= 100_000.0,
    );
    drop(data);

    // The whole pipeline, IP data on and off, alternated.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (with, without, rise) = load::on_against_off("IP data", |with| {
        let given = with.then(|| paths.clone());
        runtime.block_on(async {
            let s = server(given).await;
            let batches = visit();
            load::visits_cpu(&s, 16, seconds, move |n| {
                (Some(public_address(n).to_string()), batches.clone())
            })
            .await
        })
    });
    println!(
        "pipeline CPU a batch: {with:.1} µs with the IP data, {without:.1} µs without ({rise:+.1}%)"
    );
    goal(
        "IP data: CPU a batch of short visits from public addresses, on against off",
        format!("{with:.1} µs against {without:.1} µs ({rise:+.1}%)"),
        "≤ +10%",
        rise <= 10.0,
    );
}
