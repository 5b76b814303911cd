//! The detection matrix (issue 11): the browser configurations Vigil is tried against, what each
//! must read, and the driver that visits a page in one of them. The recorder
//! (`src/bin/record_fixtures.rs`) stores each visit's batches as a processor fixture; the
//! end-to-end test (`tests/it/detection.rs`) drives some of them against the service and reads the
//! decision back through the sessions API.
//!
//! The driver is `recorder/drive.mjs` (Node, with puppeteer-core, puppeteer-extra and its
//! stealth plugin, and playwright-core from npm: `npm ci --prefix tests/recorder`; Debian's
//! chromium, chromium-driver, xvfb and xdotool). scripts/test.sh installs them; a missing one
//! fails the test, never skips it.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::TestServer;
use crate::collect::logged_batches;

/// One configuration of the matrix and the decision it must get.
#[derive(Debug, Clone, Copy)]
pub struct Configuration {
    /// The name `drive.mjs --config` knows it by, and the fixture's (`recorded_<name>.json`).
    pub name: &'static str,
    pub description: &'static str,
    /// `automation_status` and `verdict` of the final decision.
    pub automation_status: &'static str,
    pub verdict: &'static str,
    /// Signals that must fire: the evidence the highlights name.
    pub evidence: &'static [&'static str],
    /// Signals that must not fire.
    pub absent: &'static [&'static str],
    /// A setup Vigil is known not to catch (docs/detection.md says why): it must not read
    /// `automated` either way, and its decision is pinned by its recorded fixture, so a change
    /// that starts catching it, or one that moves it, shows.
    pub known_gap: bool,
}

const fn bot(
    name: &'static str,
    description: &'static str,
    evidence: &'static [&'static str],
) -> Configuration {
    Configuration {
        name,
        description,
        automation_status: "automated",
        verdict: "bot",
        evidence,
        absent: &[],
        known_gap: false,
    }
}

/// A driver patched against DevTools-protocol detection: it must read automated on other
/// evidence, with the console probe and the webdriver flag seeing nothing.
const fn patched(
    name: &'static str,
    description: &'static str,
    evidence: &'static [&'static str],
) -> Configuration {
    Configuration {
        absent: &["devtools_protocol", "webdriver"],
        ..bot(name, description, evidence)
    }
}

/// A patched driver in a setup Vigil cannot tell from a person's (see [`Configuration::known_gap`]):
/// it reads `uncertain` or `human` with `evidence`, never the clock, and its recorded fixture
/// pins which.
const fn undetected(
    name: &'static str,
    description: &'static str,
    evidence: &'static [&'static str],
) -> Configuration {
    Configuration {
        automation_status: "uncertain",
        verdict: "suspicious",
        absent: &["devtools_protocol", "webdriver", "unaligned_input_clock"],
        known_gap: true,
        ..bot(name, description, evidence)
    }
}

const fn person(name: &'static str, description: &'static str) -> Configuration {
    Configuration {
        known_gap: false,
        name,
        description,
        automation_status: "human",
        verdict: "human",
        evidence: &[],
        absent: &[
            "devtools_protocol",
            "hidden_webdriver",
            "realm_mismatch",
            "headless_screen",
            "no_pointing_device",
            "headless_default_window",
            "viewport_emulation",
            "off_grid_pointer",
            "unaligned_input_clock",
        ],
    }
}

/// Every configuration this machine can build, automation first, then normal launches.
pub const MATRIX: &[Configuration] = &[
    bot(
        "webdriver_headless",
        "Headless Chromium under chromedriver (WebDriver), nothing hidden.",
        &["webdriver", "devtools_protocol"],
    ),
    bot(
        "webdriver_stealth_patches",
        "Headless Chromium under chromedriver with hand-written stealth patches injected before the page (navigator.webdriver getter returning false, 8 cores, an NVIDIA WebGL renderer, Function.prototype.toString masked) and a desktop user agent.",
        &["hidden_webdriver", "tampered_natives", "devtools_protocol"],
    ),
    bot(
        "puppeteer_headless",
        "Headless Chromium under puppeteer-core, nothing hidden.",
        &["webdriver", "headless_user_agent", "devtools_protocol"],
    ),
    bot(
        "puppeteer_headless_desktop_ua",
        "Headless Chromium under puppeteer-core with a desktop user agent set over the DevTools protocol.",
        &["webdriver", "devtools_protocol", "headless_screen"],
    ),
    bot(
        "puppeteer_stealth_headless",
        "Headless Chromium under puppeteer-extra with puppeteer-extra-plugin-stealth (all evasions: Windows Chrome user agent and client hints, faked plugins, WebGL vendor, core count, languages, chrome.runtime; AutomationControlled off), typing with randomised gaps.",
        &[
            "devtools_protocol",
            "realm_mismatch",
            "tampered_natives",
            "headless_screen",
        ],
    ),
    bot(
        "puppeteer_stealth_headful",
        "Headful Chromium under Xvfb, driven by puppeteer-extra with the stealth plugin, typing with randomised gaps.",
        &["devtools_protocol", "realm_mismatch", "tampered_natives"],
    ),
    bot(
        "playwright_headless",
        "Headless Chromium under playwright-core.",
        &["webdriver", "devtools_protocol"],
    ),
    bot(
        "playwright_headful",
        "Headful Chromium under Xvfb, driven by playwright-core.",
        &["webdriver", "devtools_protocol"],
    ),
    bot(
        "chromium_headless_debug_port",
        "Headless Chromium with a desktop user agent, AutomationControlled off and a remote-debugging port no client reads during the visit (a scraper's browser before it attaches).",
        &["headless_default_window", "no_pointing_device"],
    ),
    patched(
        "rebrowser_puppeteer_idle",
        "Headful Chromium under Xvfb driven by rebrowser-puppeteer-core (never enables the Runtime domain), no automation flags, its default viewport, the page left idle.",
        &["viewport_emulation"],
    ),
    patched(
        "patchright_idle",
        "Headful Chromium under Xvfb driven by patchright-core (never enables the Runtime domain), no automation flags, its default viewport, the page left idle.",
        &["viewport_emulation"],
    ),
    patched(
        "rebrowser_puppeteer_careful_input",
        "rebrowser-puppeteer-core as above with the window's own viewport, acting as careful operators do through its input calls: curved eased paths of single-step moves to a random point inside each element, presses held 95 ms (log-normal), keys held and spaced with log-normal gaps.",
        &["off_grid_pointer", "unaligned_input_clock"],
    ),
    patched(
        "patchright_careful_input",
        "patchright-core as above with the window's own viewport, acting as careful operators do through its input calls (curved eased paths, held presses, log-normal typing).",
        &["off_grid_pointer", "unaligned_input_clock"],
    ),
    patched(
        "rebrowser_puppeteer_whole_pixels",
        "rebrowser-puppeteer-core with the window's own viewport and the careful input above, every pointer position rounded to a whole pixel as a mouse reports it.",
        &["unaligned_input_clock"],
    ),
    patched(
        "patchright_whole_pixels",
        "patchright-core with the window's own viewport and the careful input above, every pointer position rounded to a whole pixel.",
        &["unaligned_input_clock"],
    ),
    patched(
        "rebrowser_puppeteer_keyboard_only",
        "rebrowser-puppeteer-core with the window's own viewport, keys only through its keyboard (the DevTools protocol's Input.dispatchKeyEvent): Tab to the field, typing with held keys and log-normal gaps, Tab and Enter; the pointer never moves.",
        &["unaligned_input_clock"],
    ),
    patched(
        "patchright_keyboard_only",
        "patchright-core with the window's own viewport, keys only through its keyboard: Tab, typing with held keys and log-normal gaps, Tab and Enter.",
        &["unaligned_input_clock"],
    ),
    undetected(
        "rebrowser_puppeteer_corner_window",
        "rebrowser-puppeteer-core with the window's own viewport and the careful input above, its window placed at 0,0, where Chromium on Wayland says every window is: the input clock is not judged there.",
        &["off_grid_pointer"],
    ),
    undetected(
        "patchright_corner_window",
        "patchright-core with the window's own viewport and the careful input above, its window placed at 0,0.",
        &["off_grid_pointer"],
    ),
    person(
        "chromium_headful_idle",
        "A person's Chromium under Xvfb with no automation client attached, the page left idle.",
    ),
    person(
        "chromium_headful_input",
        "A person's Chromium under Xvfb with no automation client attached; curved, uneven pointer moves, a click and irregular typing through the X server (xdotool).",
    ),
    person(
        "chromium_mobile_touch",
        "A person's Chromium under Xvfb in a phone-sized window with touch events enabled and a 2x device scale, no automation client attached.",
    ),
    person(
        "chromium_no_gpu_input",
        "A person's Chromium under Xvfb with the GPU disabled (WebGL in software), human-like input through the X server.",
    ),
    person(
        "chromium_keyboard_only",
        "A person's Chromium under Xvfb who only uses the keyboard: Tab to the field, typing with held keys and uneven gaps, Tab and Enter; the pointer never moves.",
    ),
    person(
        "chromium_placed_window_input",
        "A person's Chromium under Xvfb in a window placed away from the corner (120,80), where the input clock is judged: curved, uneven pointer moves, a click and irregular typing through the X server (xdotool).",
    ),
    person(
        "chromium_placed_window_keyboard_only",
        "A person's Chromium under Xvfb in a window placed away from the corner (120,80), keyboard only through the X server: Tab, typing with held keys and uneven gaps, Tab and Enter.",
    ),
    person(
        "chromium_farbling_extension",
        "A person's Chromium under Xvfb with a privacy extension that adds farbling-style noise to canvas and audio reads (content script in the page's world), human-like input through the X server.",
    ),
];

/// The configuration named `name`.
pub fn configuration(name: &str) -> &'static Configuration {
    MATRIX
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no configuration {name} in the matrix"))
}

pub fn recorder_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("recorder")
}

/// Runs `script` of `tests/recorder/` with `program`; the JSON line it printed last.
pub async fn recorder_script(program: &str, script: &str, args: &[&str]) -> Value {
    let dir = recorder_dir();
    let (program, script) = (program.to_owned(), script.to_owned());
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let name = script.clone();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(&program)
            .current_dir(&dir)
            .arg(&script)
            .args(&args)
            .output()
    })
    .await
    .expect("driver thread")
    .expect("the recorder's tools run (scripts/test.sh installs node, and python3's requests and cryptography)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{name} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{name} printed {line:?}: {e}"))
}

/// Visits the page in configuration `name` against `s`; returns the page's report (`ok`,
/// `session_id`, `load_ms`, ...).
pub async fn drive(s: &TestServer, name: &str) -> Value {
    let dir = recorder_dir();
    assert!(
        dir.join("node_modules/puppeteer-extra-plugin-stealth")
            .is_dir(),
        "the recorder's npm packages are missing: run `npm ci --prefix tests/recorder` (scripts/test.sh does)"
    );
    let mut command = Command::new("node");
    command.current_dir(&dir).args([
        "drive.mjs",
        "--api",
        &s.base,
        "--key",
        &s.creds.keys.publishable_test,
        "--config",
        name,
    ]);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("driver thread")
        .expect("node runs (scripts/test.sh installs nodejs)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "drive.mjs --config {name} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let line = stdout.lines().last().unwrap_or_default();
    let report: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("drive.mjs --config {name} printed {line:?}: {e}\n{stderr}"));
    assert_eq!(report["ok"], true, "{name}: {report}");
    report
}

/// The SDK's batches of `session_id` on the log, in `seq` order (server records left out).
pub async fn sdk_batches(s: &TestServer, session_id: &str) -> Vec<Value> {
    let mut batches: Vec<Value> = logged_batches(s)
        .await
        .into_iter()
        .filter(|r| r["session_id"] == session_id && r["seq"].as_u64().unwrap_or(0) > 0)
        .collect();
    batches.sort_by_key(|r| r["seq"].as_u64());
    assert!(
        batches
            .first()
            .is_some_and(|r| r["observations"]["kind"] == "probes"),
        "{session_id}: the probes batch is first on the log: {batches:?}"
    );
    batches
}

/// When the server saw the session's pings, as the processor reads them from the store.
pub async fn ping_arrivals(s: &TestServer, session_id: &str) -> Vec<Value> {
    let id: schemas::SessionId = session_id.parse().expect("a session id");
    let session = s
        .store()
        .get_collect_session(id)
        .await
        .expect("store read")
        .expect("the collect session");
    session
        .pings
        .iter()
        .filter_map(|p| p.arrived_at)
        .map(|t| json!(t))
        .collect()
}

/// A processor fixture (`processor/tests/fixtures/*.json`) of one recorded visit: the probes
/// request's context and the pings' arrivals, every SDK batch, and what the configuration must
/// read.
/// A known gap's fixture pins the decision it got (`live`); any other's, the matrix's.
pub fn fixture(
    configuration: &Configuration,
    chromium: &str,
    batches: &[Value],
    ping_arrivals: Vec<Value>,
    live: &Value,
) -> Value {
    let request = &batches[0]["request"];
    let (automation_status, verdict) = if configuration.known_gap {
        (live["automation_status"].clone(), live["verdict"].clone())
    } else {
        (
            json!(configuration.automation_status),
            json!(configuration.verdict),
        )
    };
    json!({
        "description": format!("Recorded with tests/recorder/drive.mjs on {chromium}: {}", configuration.description),
        "recorded": true,
        "context": {
            "request": {
                "ip": request["ip"],
                "user_agent": request["user_agent"],
                "header_names": request["header_names"],
                "url": request["url"],
            },
            "ping_arrivals": ping_arrivals,
        },
        "batches": batches.iter().map(|b| b["observations"].clone()).collect::<Vec<_>>(),
        "expect": {
            "automation_status": automation_status,
            "verdict": verdict,
            "fired": configuration.evidence,
            "not_fired": configuration.absent,
        },
    })
}

/// The session's decision once it is final (the page called `result()`), read through the
/// sessions API with the secret key, as a site's backend reads it.
pub async fn final_session(s: &TestServer, session_id: &str) -> Value {
    s.session_when(session_id, Duration::from_secs(30), "final decision", |d| {
        d["decision"]["decision_status"] == "final"
    })
    .await
}

/// The installed Chromium's version line (`Chromium 148.0...`).
pub fn chromium_version() -> String {
    Command::new("chromium")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|_| "Chromium".to_owned())
}
