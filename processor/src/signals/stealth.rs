//! Stealth signals: what gives away an automation toolkit that hides its markers. Four kinds of
//! evidence, each read from probes that compare the page with something the toolkit does not
//! control:
//!
//! - a DevTools-protocol client (Puppeteer, Playwright, chromedriver): the console is
//!   serialised for it, which reads a logged Error once more than Chromium's own logging;
//! - patched natives: the page's navigator and WebGL disagree with a pristine realm (a fresh
//!   iframe's getters) or with a worker, or the `webdriver` flag was faked or removed;
//! - headless residue: the default headless screen under a larger window, or that screen whole
//!   with the window on it and no taskbar, no pointing device on a desktop, no speech voices or
//!   media devices where the claimed OS always has them;
//! - an emulated viewport: the DevTools protocol's `Emulation.setDeviceMetricsOverride` (what
//!   Puppeteer's and Playwright's viewports are, patched drivers' included) leaves a geometry no
//!   real window has.
//!
//! Weights keep each residue trait below the "elevated" band on its own (a real machine can
//! show any one of them); the rules table (`crate::rules`) decides what evidence together means.

use super::Fired;
use crate::observations::{Browser, Probes, Rendering};
use crate::user_agent::{ClaimedBrowser, Engine, Os};
use serde_json::{Value, json};

/// Chromium's own logging reads a logged Error's `name` once; a serialising DevTools client
/// reads it again (measured on Chromium 148 and 156 with Puppeteer, Playwright and
/// chromedriver; without a client, always 1).
const DEVTOOLS_CONSOLE_READS: f64 = 2.0;

/// Headless Chromium's screen when nothing sets one.
const HEADLESS_SCREEN: (f64, f64) = (800.0, 600.0);

pub(super) fn detect(probes: &Probes, claimed: &ClaimedBrowser, fired: &mut Fired) {
    devtools_client(probes, claimed, fired);
    hidden_webdriver(probes, fired);
    realm_mismatch(probes, fired);
    headless_residue(probes, claimed, fired);
    emulated_viewport(probes, claimed, fired);
}

fn devtools_client(probes: &Probes, claimed: &ClaimedBrowser, fired: &mut Fired) {
    let reads = probes
        .automation
        .as_ref()
        .and_then(|a| a.devtools_console_reads);
    // Measured on Blink only: other engines' consoles may read the name differently.
    if claimed.engine == Engine::Blink
        && let Some(reads) = reads.filter(|r| *r >= DEVTOOLS_CONSOLE_READS)
    {
        fired.fire("devtools_protocol", json!({ "console_reads": reads }));
    }
}

/// `navigator.webdriver` is the flag automation sets; a page that replaced its getter, removed
/// it from the prototype or answers differently from a pristine realm is hiding automation.
/// Privacy tools have no reason to touch it.
fn hidden_webdriver(probes: &Probes, fired: &mut Fired) {
    let Some(integrity) = &probes.integrity else {
        return;
    };
    let mut evidence: Vec<&str> = Vec::new();
    if integrity
        .tampered_natives
        .iter()
        .flatten()
        .any(|n| n == "navigator.webdriver getter")
    {
        evidence.push("the navigator.webdriver getter was replaced by script");
    }
    let anomalies = integrity.descriptor_anomalies.iter().flatten();
    for anomaly in anomalies {
        if anomaly == "Navigator.prototype.webdriver (absent)" {
            evidence.push("navigator.webdriver was deleted from its prototype");
        } else if anomaly.starts_with("navigator.webdriver")
            || anomaly.starts_with("Navigator.prototype.webdriver")
        {
            evidence.push("navigator.webdriver was redefined");
        }
    }
    if integrity
        .realm_mismatches
        .iter()
        .flatten()
        .any(|m| m == "webdriver")
    {
        evidence.push("navigator.webdriver differs from a pristine realm's");
    }
    if !evidence.is_empty() {
        evidence.dedup();
        fired.fire("hidden_webdriver", json!({ "evidence": evidence }));
    }
}

/// Values that one browser reports once, read in two realms: any difference is a patch in one
/// of them (the page's, since the pristine realm and the worker are out of a page script's
/// reach).
fn realm_mismatch(probes: &Probes, fired: &mut Fired) {
    let mut differences: Vec<Value> = Vec::new();
    if let Some(members) = probes
        .integrity
        .as_ref()
        .and_then(|i| i.realm_mismatches.as_ref())
    {
        for member in members.iter().filter(|m| *m != "webdriver") {
            differences.push(
                json!({ "value": format!("navigator.{member}"), "against": "pristine realm" }),
            );
        }
    }
    if let Some(browser) = &probes.browser {
        worker_differences(browser, probes.rendering.as_ref(), &mut differences);
        let page_languages = probes
            .automation
            .as_ref()
            .and_then(|a| a.languages.as_ref());
        if let (Some(page), Some(worker)) = (page_languages, browser.worker_languages.as_ref())
            && !page.is_empty()
            && !worker.is_empty()
            && page != worker
        {
            differences.push(json!({ "value": "navigator.languages", "against": "worker", "page": page, "worker": worker }));
        }
    }
    if !differences.is_empty() {
        fired.fire("realm_mismatch", json!({ "differences": differences }));
    }
}

/// Page and worker values of the same navigator and GPU. The user agent and platform are
/// compared by `worker_mismatch` (a consistency signal: a UA switcher also changes them).
fn worker_differences(browser: &Browser, rendering: Option<&Rendering>, out: &mut Vec<Value>) {
    // An unknown or empty value on either side is no evidence: a page whose WebGL context was
    // lost (a GPU process restarting) reports empty strings.
    let known = |v: &Value| !v.is_null() && v.as_str() != Some("");
    let mut differ = |value: &str, page: Value, worker: Value| {
        if known(&page) && known(&worker) && page != worker {
            out.push(
                json!({ "value": value, "against": "worker", "page": page, "worker": worker }),
            );
        }
    };
    differ(
        "navigator.hardwareConcurrency",
        json!(browser.hardware_concurrency),
        json!(browser.worker_hardware_concurrency),
    );
    differ(
        "navigator.deviceMemory",
        json!(browser.device_memory),
        json!(browser.worker_device_memory),
    );
    if let Some(rendering) = rendering {
        differ(
            "WebGL vendor",
            json!(rendering.webgl_vendor),
            json!(browser.worker_webgl_vendor),
        );
        differ(
            "WebGL renderer",
            json!(rendering.webgl_renderer),
            json!(browser.worker_webgl_renderer),
        );
    }
}

fn headless_residue(probes: &Probes, claimed: &ClaimedBrowser, fired: &mut Fired) {
    let desktop = claimed.is_desktop();
    let screen = probes.screen.as_ref();
    let outer = probes.automation.as_ref().and_then(|a| a.window_outer);
    if let (Some(screen), Some([outer_width, outer_height])) = (screen, outer)
        && (screen.width, screen.height) == (Some(HEADLESS_SCREEN.0), Some(HEADLESS_SCREEN.1))
        && (outer_width > HEADLESS_SCREEN.0 || outer_height > HEADLESS_SCREEN.1)
    {
        fired.fire(
            "headless_screen",
            json!({ "screen": [HEADLESS_SCREEN.0, HEADLESS_SCREEN.1], "window_outer": [outer_width, outer_height] }),
        );
    }
    // The same default display taken whole: no taskbar, and the window on it. Headless Chromium
    // started with no window size shows exactly this (a 780x580 window at 10,10 on Chromium 156).
    if let (Some(screen), Some([outer_width, outer_height])) = (screen, outer)
        && desktop
        && (screen.width, screen.height) == (Some(HEADLESS_SCREEN.0), Some(HEADLESS_SCREEN.1))
        && (screen.avail_width, screen.avail_height)
            == (Some(HEADLESS_SCREEN.0), Some(HEADLESS_SCREEN.1))
        && outer_width > 0.0
        && outer_width <= HEADLESS_SCREEN.0
        && outer_height <= HEADLESS_SCREEN.1
    {
        fired.fire(
            "headless_default_window",
            json!({ "screen": [HEADLESS_SCREEN.0, HEADLESS_SCREEN.1], "taskbar": false, "window_outer": [outer_width, outer_height] }),
        );
    }
    let Some(residue) = &probes.residue else {
        return;
    };
    let touch_points = touch_points(probes);
    if desktop
        && residue.any_fine_pointer == Some(false)
        && residue.any_hover == Some(false)
        && touch_points == 0.0
    {
        fired.fire(
            "no_pointing_device",
            json!({ "any_fine_pointer": false, "any_hover": false, "max_touch_points": 0 }),
        );
    }
    // Windows and macOS ship speech voices and always list at least a default audio device;
    // Linux often has neither, so only those claims are held to it.
    if matches!(claimed.os, Os::Windows | Os::MacOs) {
        if residue.speech_voices == Some(0.0) {
            fired.fire(
                "speech_voices_missing",
                json!({ "speech_voices": 0, "os": claimed.os }),
            );
        }
        if residue.media_devices == Some(0.0) {
            fired.fire(
                "media_devices_missing",
                json!({ "media_devices": 0, "os": claimed.os }),
            );
        }
    }
}

/// Browser chrome (tabs, address bar) above a real window's viewport is at least this tall.
const BROWSER_CHROME_PX: f64 = 40.0;
/// Privacy tools that bind `screen` to the window (Brave's screen protection reports the outer
/// window, a few pixels over the viewport; Firefox's resistFingerprinting, Tor and Mullvad use
/// the window) leave the screen this close to one of the window's sizes.
const WINDOW_BOUND_SCREEN_PX: f64 = 10.0;

/// Whether `screen` is one of the window's sizes, as privacy tools make it: then it, and the
/// window's position with it (Brave reports a made-up one), say nothing about the display.
pub(super) fn screen_bound_to_window(probes: &Probes) -> bool {
    let Some((Some(width), Some(height))) = probes.screen.as_ref().map(|s| (s.width, s.height))
    else {
        return false;
    };
    let automation = probes.automation.as_ref();
    let near = |[w, h]: [f64; 2]| {
        (w - width).abs() <= WINDOW_BOUND_SCREEN_PX && (h - height).abs() <= WINDOW_BOUND_SCREEN_PX
    };
    automation.and_then(|a| a.window_outer).is_some_and(near)
        || automation.and_then(|a| a.window_inner).is_some_and(near)
}

/// Two geometries that only the DevTools protocol's viewport emulation makes on a desktop
/// without touch (phones and tablets rotate, and an iPad's Safari claims macOS, so touch devices
/// are left out):
/// - an orientation that contradicts the screen's own sides: Puppeteer's viewports say
///   `portrait-primary` unless told otherwise, on a landscape screen. A screen bound to the
///   window by a privacy tool keeps the real display's orientation, so such a screen is not
///   judged on it;
/// - a Blink viewport exactly the size of the screen inside a window with browser chrome around
///   it, with CSS seeing that same screen: Playwright's viewports set the screen to the viewport
///   for script and CSS alike. A real window whose viewport fills the screen (fullscreen, kiosk)
///   has no chrome; Brave's protected screen is the outer window, a few pixels over the
///   viewport, never 40; and Firefox's resistFingerprinting is not Blink.
///
/// DevTools' own device mode emulates too: a page with DevTools attached (`devtools_protocol`)
/// is judged on that instead.
fn emulated_viewport(probes: &Probes, claimed: &ClaimedBrowser, fired: &mut Fired) {
    let Some(screen) = &probes.screen else {
        return;
    };
    let (Some(width), Some(height)) = (screen.width, screen.height) else {
        return;
    };
    // As `devtools_protocol` reads it: Blink's console only.
    let devtools_attached = claimed.engine == Engine::Blink
        && probes
            .automation
            .as_ref()
            .and_then(|a| a.devtools_console_reads)
            .is_some_and(|reads| reads >= DEVTOOLS_CONSOLE_READS);
    if !claimed.is_desktop()
        || screen.touch == Some(true)
        || touch_points(probes) > 0.0
        || width <= 0.0
        || height <= 0.0
        || devtools_attached
    {
        return;
    }
    let automation = probes.automation.as_ref();
    let outer = automation.and_then(|a| a.window_outer);
    let inner = automation.and_then(|a| a.window_inner);
    let bound_to_window = screen_bound_to_window(probes);
    let mut reasons = Vec::new();
    if let Some(orientation) = screen.orientation.as_deref()
        && !bound_to_window
    {
        let portrait = orientation.starts_with("portrait");
        let landscape = orientation.starts_with("landscape");
        if (portrait && width > height) || (landscape && height > width) {
            reasons.push(json!({ "orientation": orientation, "screen": [width, height] }));
        }
    }
    if let (Some([outer_width, outer_height]), Some([inner_width, inner_height])) = (outer, inner)
        && claimed.engine == Engine::Blink
        && screen.media_matches == Some(true)
        && (inner_width - width).abs() <= 1.0
        && (inner_height - height).abs() <= 1.0
        && outer_height - inner_height >= BROWSER_CHROME_PX
    {
        reasons.push(json!({
            "screen": [width, height],
            "window_inner": [inner_width, inner_height],
            "window_outer": [outer_width, outer_height],
            "media_matches": true,
        }));
    }
    if !reasons.is_empty() {
        fired.fire("viewport_emulation", json!({ "reasons": reasons }));
    }
}

/// `navigator.maxTouchPoints`, 0 when not reported.
fn touch_points(probes: &Probes) -> f64 {
    probes
        .browser
        .as_ref()
        .and_then(|b| b.max_touch_points)
        .unwrap_or(0.0)
}
