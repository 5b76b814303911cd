//! Detection end to end (issue 11): Debian's Chromium driven the way bot operators drive it,
//! loading the SDK from the service on a page of another origin, and the decision read back
//! through the sessions API with the secret key, as a site's backend reads it. The stealth
//! configurations must read `automated` with highlights naming the evidence; a person's
//! browser with no automation client must read `human`.
//!
//! The driver is `tests/recorder/drive.mjs` (see `vigil_tests::detection`); the same visits,
//! recorded, are the processor's `recorded_*` fixtures. Needs Node with the recorder's npm
//! packages, chromium, chromedriver, Xvfb and xdotool (scripts/test.sh installs them); without
//! them these tests fail, they never skip.

use serde_json::Value;
use vigil_tests::TestServer;
use vigil_tests::detection::{self, Configuration};

/// The slugs of the session's fired signals.
fn fired(session: &Value) -> Vec<&str> {
    session["signals_fired"]
        .as_array()
        .expect("signals_fired")
        .iter()
        .filter_map(|s| s["signal"].as_str())
        .collect()
}

/// Whether the session's probes carry the worker's GPU answer (its WebGL renderer).
async fn worker_gpu_answered(s: &TestServer, session_id: &str) -> bool {
    let batches = detection::sdk_batches(s, session_id).await;
    let renderer = &batches[0]["observations"]["browser"]["worker_webgl_renderer"];
    renderer.as_str().is_some_and(|r| !r.is_empty())
}

/// Visits in `configuration` and checks the final decision against the matrix.
async fn visit_and_check(name: &str) -> Value {
    let configuration: &Configuration = detection::configuration(name);
    let s = TestServer::start().await;
    let report = detection::drive(&s, name).await;
    let session_id = report["session_id"].as_str().expect("session id");
    let session = detection::final_session(&s, session_id).await;
    let decision = &session["decision"];
    let fired = fired(&session);
    let context = format!("{name}: {decision} fired {fired:?}");
    if configuration.known_gap {
        // Not caught (docs/detection.md says why); whatever it reads, never a bot's verdict by
        // chance, and its recorded fixture pins the reading.
        assert_ne!(decision["automation_status"], "automated", "{context}");
    } else {
        assert_eq!(
            decision["automation_status"], configuration.automation_status,
            "{context}"
        );
        assert_eq!(decision["verdict"], configuration.verdict, "{context}");
    }
    let worker_answered = worker_gpu_answered(&s, session_id).await;
    for slug in configuration.evidence {
        // The headful stealth launch's `realm_mismatch` is the worker's GPU against the page's
        // spoofed one, and the SDK keeps the worker's answer only when it comes within its
        // budget: a loaded machine can miss it by design, and then nothing can be compared.
        if *slug == "realm_mismatch" && !worker_answered && !fired.contains(slug) {
            eprintln!("{name}: the worker's GPU answer came late; realm_mismatch not required");
            continue;
        }
        assert!(fired.contains(slug), "{slug} should fire in {context}");
    }
    for slug in configuration.absent {
        assert!(!fired.contains(slug), "{slug} should not fire in {context}");
    }
    session
}

#[tokio::test(flavor = "multi_thread")]
async fn puppeteer_with_the_stealth_plugin_reads_automated_and_says_why() {
    let session = visit_and_check("puppeteer_stealth_headless").await;
    let highlighted: Vec<&str> = session["highlights"]
        .as_array()
        .expect("highlights")
        .iter()
        .filter(|h| h["kind"] == "concerning")
        .filter_map(|h| h["evidence"]["signal"].as_str())
        .collect();
    assert!(
        highlighted.contains(&"devtools_protocol") && highlighted.contains(&"realm_mismatch"),
        "the highlights name the DevTools client and the patched values: {highlighted:?}"
    );
    // The patched values are named in the evidence, each with the realm that contradicts it.
    let realm = session["signals_fired"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["signal"] == "realm_mismatch")
        .expect("realm_mismatch");
    let values: Vec<&str> = realm["observed"]["differences"]
        .as_array()
        .expect("differences")
        .iter()
        .filter_map(|d| d["value"].as_str())
        .collect();
    assert!(
        values.contains(&"navigator.hardwareConcurrency"),
        "the stealth plugin's core count is named: {values:?}"
    );
    // Its WebGL vendor patch shows as a proxied getParameter, and also as a renderer that differs
    // from the worker's when the worker's GPU answer came in time (a busy machine can miss it).
    let tampered = session["signals_fired"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["signal"] == "tampered_natives")
        .expect("tampered_natives");
    let natives = tampered["observed"]["natives"].to_string();
    assert!(
        natives.contains("WebGLRenderingContext.prototype.getParameter"),
        "the proxied WebGL getParameter is named: {natives}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn puppeteer_with_the_stealth_plugin_in_a_headful_window_reads_automated() {
    visit_and_check("puppeteer_stealth_headful").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn hand_written_stealth_patches_under_webdriver_read_automated() {
    let session = visit_and_check("webdriver_stealth_patches").await;
    assert_eq!(session["decision"]["manipulation"], "runtime_tampering");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_with_no_automation_client_reads_human() {
    visit_and_check("chromium_headful_input").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_whose_extension_adds_fingerprint_noise_is_not_automated() {
    let session = visit_and_check("chromium_farbling_extension").await;
    let fired = fired(&session);
    assert!(
        fired.contains(&"fingerprint_noise") && !fired.contains(&"tampered_natives"),
        "the extension's canvas and audio patches read as noise, not tampering: {fired:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn headless_chromium_with_a_debugging_port_and_no_client_reads_automated() {
    visit_and_check("chromium_headless_debug_port").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn drivers_patched_against_devtools_detection_left_idle_read_automated() {
    for name in ["rebrowser_puppeteer_idle", "patchright_idle"] {
        visit_and_check(name).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn patched_drivers_acting_as_careful_operators_read_automated() {
    for name in [
        "rebrowser_puppeteer_careful_input",
        "patchright_careful_input",
    ] {
        let session = visit_and_check(name).await;
        // The input looked human enough to earn the reassuring signal; where it came from
        // decided.
        assert!(
            fired(&session).contains(&"human_like_input"),
            "{name}: {session}"
        );
        assert_eq!(session["decision"]["rule"], "protocol_input", "{name}");
    }
}

/// The tweaks that got past the careful input: every pointer position rounded to a whole
/// pixel, or keys only. The display server's clock still tells the protocol's input apart.
#[tokio::test(flavor = "multi_thread")]
async fn patched_drivers_rounding_to_whole_pixels_or_sending_only_keys_read_automated() {
    for name in [
        "rebrowser_puppeteer_whole_pixels",
        "patchright_whole_pixels",
        "rebrowser_puppeteer_keyboard_only",
        "patchright_keyboard_only",
    ] {
        let session = visit_and_check(name).await;
        assert_eq!(
            session["decision"]["rule"], "protocol_clock",
            "{name}: {session}"
        );
        assert!(
            !fired(&session).contains(&"off_grid_pointer"),
            "{name}: whole pixels, or no pointer at all: {session}"
        );
    }
}

/// The tweak that is not caught: the window at 0,0, where Chromium on Wayland says every
/// window is and stamps input as a protocol client does, so the clock is not judged. The
/// positions between pixels still show, weakly (docs/detection.md#what-it-does-not-catch).
#[tokio::test(flavor = "multi_thread")]
async fn a_patched_driver_in_a_window_at_the_corner_is_a_known_gap() {
    for name in [
        "rebrowser_puppeteer_corner_window",
        "patchright_corner_window",
    ] {
        assert!(detection::configuration(name).known_gap);
        visit_and_check(name).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn people_without_a_gpu_or_a_mouse_read_human() {
    for name in ["chromium_no_gpu_input", "chromium_keyboard_only"] {
        visit_and_check(name).await;
    }
}

/// People whose window sits away from the corner, where the input clock is judged: the X
/// server stamped their input, pointer and keys alike, and they read human.
#[tokio::test(flavor = "multi_thread")]
async fn people_in_a_placed_window_read_human_on_the_clock() {
    for name in [
        "chromium_placed_window_input",
        "chromium_placed_window_keyboard_only",
    ] {
        visit_and_check(name).await;
    }
}
