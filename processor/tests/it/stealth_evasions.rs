//! The catalogue of puppeteer-extra-plugin-stealth's evasions (issue 11): each evasion recorded
//! alone in headless Chromium under puppeteer-extra (`fixtures/stealth_evasions/<evasion>.json`,
//! by `cargo run -p vigil-tests --bin record-fixtures -- --evasions`), against the same launch
//! with no evasion (`none.json`). For each evasion, [`CATALOGUE`] says which signals it hides
//! (they fire without it and not with it) and which trace it leaves (signals that fire only
//! with it); the test pins both, so a change to the probes or the plugin shows here.

use crate::common;

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

/// `(evasion, signals it hides, signals it leaves)`.
#[rustfmt::skip]
const CATALOGUE: &[(&str, &[&str], &[&str])] = &[
    // Each adds to `window.chrome` what headless Chromium 148 already has, in plain script objects
    // that no probe reads: no trace.
    ("chrome_app",                    &[],                      &[]),
    ("chrome_csi",                    &[],                      &[]),
    ("chrome_loadTimes",              &[],                      &[]),
    ("chrome_runtime",                &[],                      &[]),
    // Launch flags only (no --enable-automation default): no trace.
    ("defaultArgs",                   &[],                      &[]),
    // Installs the plugin's Function.prototype.toString proxy: it reads as a Proxy.
    ("iframe_contentWindow",          &[],                      &["tampered_natives"]),
    ("media_codecs",                  &[],                      &["tampered_natives"]),
    // The page's core count (4) against the worker's (2), and a proxied getter.
    ("navigator_hardwareConcurrency", &[],                      &["realm_mismatch", "tampered_natives"]),
    ("navigator_languages",           &[],                      &["tampered_natives"]),
    ("navigator_permissions",         &[],                      &["tampered_natives"]),
    // Headless Chromium 148 has plugins: the evasion leaves them alone.
    ("navigator_plugins",             &[],                      &[]),
    ("navigator_vendor",              &[],                      &["tampered_natives"]),
    // --disable-blink-features=AutomationControlled: the flag is really false, nothing patched.
    ("navigator_webdriver",           &["webdriver"],           &[]),
    // Strips the sourceURL of the client's own evaluated scripts; nothing in the page.
    ("sourceurl",                     &[],                      &[]),
    // A Windows user agent and client hints over CDP: the worker keeps Linux's platform, and
    // Windows without speech voices or media devices.
    ("user_agent_override",           &["headless_user_agent"], &["media_devices_missing", "speech_voices_missing", "worker_mismatch"]),
    // "Intel Iris OpenGL Engine" in the page, SwiftShader in the worker, and a proxied getParameter.
    ("webgl_vendor",                  &["software_renderer"],   &["realm_mismatch", "tampered_natives"]),
    // Launches without Puppeteer's emulated viewport (the window's own instead); with the
    // DevTools client attached, the viewport is not what gives it away. Headless Chromium 148
    // already reports an outer window: no trace.
    ("window_outerdimensions",        &[],                      &[]),
];

fn load(evasion: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/stealth_evasions/{evasion}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn fired(evasion: &str) -> (BTreeSet<&'static str>, processor::Evaluation) {
    let decision = common::evaluate(&load(evasion));
    (common::fired(&decision).into_iter().collect(), decision)
}

#[test]
fn each_evasion_hides_and_leaves_what_the_catalogue_says() {
    let (baseline, _) = fired("none");
    let mut report = Vec::new();
    for (evasion, hides, leaves) in CATALOGUE {
        let (with, _) = fired(evasion);
        let hidden: Vec<&str> = baseline.difference(&with).copied().collect();
        let left: Vec<&str> = with.difference(&baseline).copied().collect();
        if hidden != *hides || left != *leaves {
            report.push(format!("({evasion:?}, &{hidden:?}, &{left:?}),"));
        }
    }
    assert!(
        report.is_empty(),
        "the catalogue moved; rows as recorded:\n{}",
        report.join("\n")
    );
}

#[test]
fn every_recorded_evasion_is_catalogued_and_still_reads_automated() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stealth_evasions");
    let mut recorded: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.path().file_stem()?.to_str().map(str::to_owned))
        .filter(|name| name != "none")
        .collect();
    recorded.sort();
    let catalogued: Vec<&str> = CATALOGUE.iter().map(|row| row.0).collect();
    for name in &recorded {
        assert!(
            catalogued.contains(&name.as_str()),
            "{name} is recorded but not catalogued"
        );
        let (_, decision) = fired(name);
        assert_eq!(
            decision.automation_status,
            processor::AutomationStatus::Automated,
            "{name}: {}",
            decision.rule
        );
    }
    assert_eq!(
        recorded.len(),
        CATALOGUE.len(),
        "every catalogued evasion is recorded"
    );
}
