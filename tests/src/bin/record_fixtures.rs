//! Records the detection fixtures: visits the shop page once in each configuration of the
//! matrix (`vigil_tests::detection::MATRIX`) against an in-process service, and stores the
//! SDK's batches of each visit as `processor/tests/fixtures/recorded_<configuration>.json`, with
//! the decision it must get. The processor's fixture and golden tests replay them.
//!
//! ```sh
//! cargo run -p vigil-tests --bin record-fixtures                 # every configuration
//! cargo run -p vigil-tests --bin record-fixtures -- puppeteer_stealth_headless
//! cargo run -p vigil-tests --bin record-fixtures -- --evasions   # the stealth plugin's evasions
//! ```
//!
//! `--evasions` records headless Chromium under puppeteer-extra with each evasion of the stealth
//! plugin alone, and with none, into `processor/tests/fixtures/stealth_evasions/`; the
//! catalogue of what each leaves is `processor/tests/it/stealth_evasions.rs`.
//!
//! Needs what `tests/recorder/drive.mjs` needs (scripts/test.sh installs it).

use std::path::PathBuf;

use vigil_tests::TestServer;
use vigil_tests::detection::{self, MATRIX};

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let wanted: Vec<String> = std::env::args().skip(1).collect();
    if wanted.first().map(String::as_str) == Some("--evasions") {
        return record_evasions().await;
    }
    let configurations: Vec<_> = MATRIX
        .iter()
        .filter(|c| wanted.is_empty() || wanted.iter().any(|w| w == c.name))
        .collect();
    assert!(
        !configurations.is_empty(),
        "no configuration named {wanted:?}"
    );
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../processor/tests/fixtures");
    let chromium = detection::chromium_version();
    let s = TestServer::start().await;
    for configuration in configurations {
        let report = detection::drive(&s, configuration.name).await;
        let session_id = report["session_id"].as_str().expect("session id");
        let batches = detection::sdk_batches(&s, session_id).await;
        let session = detection::final_session(&s, session_id).await;
        let pings = detection::ping_arrivals(&s, session_id).await;
        let fixture = detection::fixture(
            configuration,
            &chromium,
            &batches,
            pings,
            &session["decision"],
        );
        let path = fixtures.join(format!("recorded_{}.json", configuration.name));
        let text = serde_json::to_string_pretty(&fixture).expect("json") + "\n";
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        println!(
            "{}: {} batches, load {:.0} ms, live decision {} / {} ({}), fired {:?}",
            configuration.name,
            batches.len(),
            report["load_ms"].as_f64().unwrap_or_default(),
            session["decision"]["automation_status"],
            session["decision"]["verdict"],
            session["decision"]["rule"],
            session["signals_fired"]
                .as_array()
                .map(|s| s.iter().map(|x| x["signal"].clone()).collect::<Vec<_>>())
                .unwrap_or_default(),
        );
    }
}

/// Each `stealth_evasion_*` configuration of `drive.mjs`, recorded alone.
async fn record_evasions() {
    let dir = detection::recorder_dir();
    let list = std::process::Command::new("node")
        .current_dir(&dir)
        .args(["drive.mjs", "--list"])
        .output()
        .expect("node runs");
    let names: Vec<String> = serde_json::from_slice(&list.stdout).expect("a JSON list");
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../processor/tests/fixtures/stealth_evasions");
    std::fs::create_dir_all(&fixtures).expect("fixtures directory");
    let chromium = detection::chromium_version();
    let s = TestServer::start().await;
    for name in names.iter().filter(|n| n.starts_with("stealth_evasion_")) {
        let report = detection::drive(&s, name).await;
        let session_id = report["session_id"].as_str().expect("session id");
        let batches = detection::sdk_batches(&s, session_id).await;
        let pings = detection::ping_arrivals(&s, session_id).await;
        let configuration = detection::Configuration {
            name: "stealth_evasion",
            description: "Headless Chromium under puppeteer-extra with only this evasion of puppeteer-extra-plugin-stealth (none for stealth_evasion_none), no input.",
            automation_status: "automated",
            verdict: "bot",
            evidence: &[],
            absent: &[],
            known_gap: false,
        };
        let fixture = detection::fixture(
            &configuration,
            &chromium,
            &batches,
            pings,
            &serde_json::Value::Null,
        );
        let evasion = name.trim_start_matches("stealth_evasion_");
        let path = fixtures.join(format!("{evasion}.json"));
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&fixture).expect("json") + "\n",
        )
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        println!(
            "{evasion}: {} batches, timed out {}",
            batches.len(),
            batches[0]["observations"]["timed_out"]
        );
    }
}
