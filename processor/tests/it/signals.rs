//! One test per signal: start from a recorded fixture in which the signal does not fire, change
//! the one observation the signal is about, and see it fire. A test below fails when a
//! catalogued signal has no such case.

use crate::common;

use common::{load, remove, set, with_events};
use processor::signals::CATALOG;
use serde_json::{Value, json};

const HUMAN: &str = "desktop_chrome_human";
const SAFARI: &str = "mobile_safari_human";
const HEADLESS: &str = "headless_chromium_webdriver";
/// A person's Chromium on Linux, input through the X server (recorded).
const LINUX_PERSON: &str = "recorded_chromium_headful_input";

const UA_ANDROID: &str = "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36";
const UA_IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1";

/// Cases that set one member: `(signal, fixture, JSON pointer, new value as JSON)`.
/// `/p/...` is short for the probes batch, `/batches/0/...`.
#[rustfmt::skip]
const SET_ONE: &[(&str, &str, &str, &str)] = &[
    ("webdriver",                        HUMAN,    "/p/automation/webdriver",                  "true"),
    ("headless_user_agent",              HUMAN,    "/p/automation/headless_ua",                "true"),
    ("phantomjs",                        HUMAN,    "/p/automation/globals",                    r#"["callPhantom", "_phantom"]"#),
    ("selenium",                         HUMAN,    "/p/automation/selenium",                   "true"),
    ("nightmare",                        HUMAN,    "/p/automation/globals",                    r#"["__nightmare"]"#),
    ("puppeteer_playwright",             HUMAN,    "/p/automation/globals",                    r#"["__playwright__binding__"]"#),
    ("devtools_protocol",                HUMAN,    "/p/automation/devtools_console_reads",     "2"),
    ("electron",                         HUMAN,    "/p/automation/electron",                   "true"),
    ("automation_globals",               HUMAN,    "/p/automation/globals",                    r#"["domAutomationController"]"#),
    ("languages_empty",                  HUMAN,    "/p/automation/languages",                  "[]"),
    ("notification_permission_mismatch", HUMAN,    "/p/automation/notification_permission",    r#""denied""#),
    ("software_renderer",                HUMAN,    "/p/rendering/webgl_renderer",              r#""ANGLE (Mesa, llvmpipe (LLVM 15.0.6, 256 bits), OpenGL 4.5)""#),
    ("no_pointing_device",               HUMAN,    "/p/residue",                               r#"{"any_fine_pointer": false, "any_hover": false}"#),
    ("zero_outer_window",                HUMAN,    "/p/automation/window_outer",               "[0, 0]"),
    ("speech_voices_missing",            HUMAN,    "/p/residue/speech_voices",                 "0"),
    ("media_devices_missing",            HUMAN,    "/p/residue/media_devices",                 "0"),
    ("zero_connection_rtt",              HUMAN,    "/p/automation/connection_rtt",             "0"),
    ("web_bot_auth_unverified",          HUMAN,    "/context/web_bot_auth",                    r#""unverified""#),
    ("plugins_inconsistent",             HUMAN,    "/p/automation/plugins_consistent",         "false"),
    ("hidden_webdriver",                 HUMAN,    "/p/integrity/realm_mismatches",            r#"["webdriver"]"#),
    ("realm_mismatch",                   HUMAN,    "/p/browser/worker_hardware_concurrency",   "4"),
    ("tampered_natives",                 HUMAN,    "/p/integrity/tampered_natives",            r#"["Function.prototype.toString"]"#),
    ("fingerprint_noise",                HUMAN,    "/p/integrity/tampered_natives",            r#"["HTMLCanvasElement.prototype.toDataURL"]"#),
    ("descriptor_anomalies",             HUMAN,    "/p/integrity/descriptor_anomalies",        r#"["navigator.languages"]"#),
    ("ping_rtt_mismatch",                HUMAN,    "/p/network/ping_rtts_ms",                  "[480.0, 470.5, 460.0]"),
    ("network_check_mismatch",           HUMAN,    "/context/network_check_consistent",        "false"),
    ("web_bot_auth_invalid",             HUMAN,    "/context/web_bot_auth",                    r#""invalid""#),
    ("web_bot_auth_verified",            HEADLESS, "/context/web_bot_auth",                    r#""verified""#),
    ("ua_client_hints_mismatch",         HUMAN,    "/p/browser/user_agent_data/brands/0/version", r#""120""#),
    ("platform_mismatch",                HUMAN,    "/p/browser/platform",                      r#""MacIntel""#),
    ("worker_mismatch",                  HUMAN,    "/p/browser/worker_platform",               r#""Linux x86_64""#),
    ("http_user_agent_mismatch",         HUMAN,    "/context/request/user_agent",              r#""python-requests/2.31.0""#),
    ("oversized_user_agent",             HUMAN,    "/context/request/user_agent_bytes",        "20000"),
    ("datacenter_ip",                    HUMAN,    "/context/network",                         r#"{"asn": {"number": 16509, "organization": "AMAZON-02"}, "country": "GB", "hosting": true, "hosting_provider": "Amazon Web Services"}"#),
    ("tor_exit_node",                    HUMAN,    "/context/network",                         r#"{"country": "DE", "tor_exit": true}"#),
    ("timezone_mismatch",                HUMAN,    "/context/network",                         r#"{"country": "US"}"#),
    ("vpn_suspected",                    HUMAN,    "/context/network",                         r#"{"country": "GB", "relay": false, "hosting": true}"#),
    ("tls_client_mismatch",              HUMAN,    "/context/request/tls",                     r#"{"ja4": "t13d3112h2_e8f1e7e78f70_b26ce05bbdd6", "greased": false, "source": "listener"}"#),
    ("replayed_payload",                 HUMAN,    "/context/replayed",                        r#"[{"seq": 1, "kind": "probes", "first_seen_in": "sid_01j0000000000000000000000b"}]"#),
    ("time_behind",                      HUMAN,    "/context/time_claims",                     r#"{"batches": 2, "most_behind_ms": 200000, "elapsed_at_most_behind_ms": 240000}"#),
    ("product_sub_mismatch",             HUMAN,    "/p/automation/product_sub",                r#""20100101""#),
    ("eval_length_mismatch",             HUMAN,    "/p/automation/eval_length",                "37"),
    ("engine_mismatch",                  HUMAN,    "/p/automation/error_stack_engine",         r#""spidermonkey""#),
    ("vendor_mismatch",                  HUMAN,    "/p/browser/vendor",                        r#""""#),
    ("chrome_object_missing",            HUMAN,    "/p/automation/has_chrome_object",          "false"),
    ("renderer_os_mismatch",             HUMAN,    "/p/rendering/webgl_renderer",              r#""ANGLE (Apple, ANGLE Metal Renderer: Apple M2, Unspecified Version)""#),
    ("emulated_mobile",                  SAFARI,   "/p/browser/max_touch_points",              "0"),
    ("screen_inconsistent",              HUMAN,    "/p/screen/avail_width",                    "2560"),
    ("timezone_offset_mismatch",         HUMAN,    "/p/locale/timezone_offset_min",            "300"),
    ("locale_mismatch",                  HUMAN,    "/p/locale/intl_locale",                    r#""de-DE""#),
];

/// A change to a fixture document.
type Change = fn(&mut Value);

/// Cases whose change is more than one member: `(signal, fixture, change)`.
const RESHAPE: &[(&str, &str, Change)] = &[
    ("automation_user_agent", HUMAN, |d| {
        let ua = d["batches"][0]["automation"]["user_agent"]
            .as_str()
            .unwrap();
        let ua = format!("{ua} SlimerJS/1.0");
        set(d, "/batches/0/automation/user_agent", json!(ua));
    }),
    ("plugins_empty", HUMAN, |d| {
        set(d, "/batches/0/automation/plugins", json!([]));
        set(d, "/batches/0/automation/mime_types", json!([]));
    }),
    ("probes_missing", HUMAN, |d| remove(d, "/batches/0")),
    // The session's challenge, and probes that carry another session's nonce back.
    ("stale_challenge", HUMAN, |d| {
        set(d, "/context/challenge", json!("ZmVzaC1ub25jZS0xMjM0NQ"));
        set(d, "/context/sdk_version", json!("1.4.0"));
        set(
            d,
            "/batches/0/challenge",
            json!({"nonce": "b2xkLW5vbmNlLTEyMzQ1Ng", "render": "ab"}),
        );
    }),
    // A session opened by an SDK that answers challenges, whose probes answer none.
    ("challenge_missing", HUMAN, |d| {
        set(d, "/context/challenge", json!("ZmVzaC1ub25jZS0xMjM0NQ"));
        set(d, "/context/sdk_version", json!("1.4.0"));
    }),
    // Batches that claim 9 s since the load, the session having opened 0.35 s into it, where
    // 1.2 s had passed on the server since the open.
    ("time_ahead", HUMAN, |d| {
        set(d, "/batches/0/opened_in_ms", json!(350.0));
        set(
            d,
            "/context/time_claims",
            json!({"batches": 4, "most_ahead_ms": 7800, "elapsed_at_most_ahead_ms": 1200}),
        );
    }),
    // The result asked for, and no network check ever ran.
    ("network_check_missing", HUMAN, |d| {
        set(d, "/context/results_asked", json!(true));
        remove(d, "/context/network_check_consistent");
    }),
    ("probes_repeated", HUMAN, |d| {
        let probes = d["batches"][0].clone();
        d["batches"].as_array_mut().unwrap().push(probes);
    }),
    ("missing_browser_headers", HUMAN, |d| {
        let headers = d["context"]["request"]["header_names"]
            .as_array_mut()
            .unwrap();
        headers.retain(|h| h != "accept-language");
    }),
    ("client_hints_missing", HUMAN, |d| {
        remove(d, "/batches/0/browser/user_agent_data");
    }),
    ("untrusted_input", HUMAN, |d| {
        for_each_event(d, |event| event["trusted"] = json!(false))
    }),
    ("robotic_pointer_path", HUMAN, |d| {
        with_events(d, straight_strokes())
    }),
    ("robotic_keystroke_timing", HUMAN, |d| {
        let keys =
            (0..12).map(|i| json!({ "t": 500 + i * 120, "type": "keydown", "trusted": true }));
        with_events(d, keys.collect());
    }),
    ("click_without_movement", HUMAN, |d| {
        let clicks = (0..3).map(
            |i| json!({ "t": 900 + i * 700, "type": "click", "x": 400, "y": 300, "trusted": true }),
        );
        with_events(d, clicks.collect());
    }),
    ("no_input_events", HUMAN, |d| with_events(d, Vec::new())),
    // Headless Chromium's default screen under a browser window larger than it.
    ("headless_screen", HUMAN, |d| {
        set(d, "/batches/0/screen/width", json!(800));
        set(d, "/batches/0/screen/height", json!(600));
        set(d, "/batches/0/screen/avail_width", json!(800));
        set(d, "/batches/0/screen/avail_height", json!(600));
        set(d, "/batches/0/automation/window_outer", json!([1280, 900]));
    }),
    // Headless Chromium's default display taken whole: no taskbar, the window on it.
    ("headless_default_window", HUMAN, |d| {
        set(d, "/batches/0/screen/width", json!(800));
        set(d, "/batches/0/screen/height", json!(600));
        set(d, "/batches/0/screen/avail_width", json!(800));
        set(d, "/batches/0/screen/avail_height", json!(600));
        set(d, "/batches/0/automation/window_outer", json!([780, 580]));
    }),
    // Playwright's viewport: the screen set to the viewport for script and CSS, browser chrome
    // still above it.
    ("viewport_emulation", HUMAN, |d| {
        set(d, "/batches/0/screen/media_matches", json!(true));
        set(d, "/batches/0/screen/width", json!(1280));
        set(d, "/batches/0/screen/height", json!(720));
        set(d, "/batches/0/automation/window_inner", json!([1280, 720]));
        set(d, "/batches/0/automation/window_outer", json!([1288, 805]));
    }),
    // An interpolated path: the same moves, a fraction of a pixel off the grid.
    ("off_grid_pointer", HUMAN, |d| {
        for_each_event(d, |event| {
            if let Some(x) = event["x"].as_f64() {
                event["x"] = json!(x + 0.37);
            }
        });
    }),
    // A Linux person's input in a placed (X11) window, each event stamped a little later than
    // the X server did.
    ("unaligned_input_clock", LINUX_PERSON, |d| {
        set(d, "/batches/0/automation/window_position", json!([10, 10]));
        stamped_when_dispatched(d);
    }),
    ("human_like_input", HEADLESS, |d| {
        let human = load(HUMAN);
        let batches = human["batches"].as_array().unwrap();
        let events = batches
            .iter()
            .skip(1)
            .flat_map(|b| b["events"].as_array().unwrap().clone());
        with_events(d, events.collect());
    }),
    // Safari has no client hints; made into a consistent Chrome for Android, it has them.
    ("consistent_client_hints", SAFARI, |d| {
        set(d, "/batches/0/automation/user_agent", json!(UA_ANDROID));
        set(d, "/batches/0/browser/worker_user_agent", json!(UA_ANDROID));
        set(d, "/context/request/user_agent", json!(UA_ANDROID));
        set(d, "/batches/0/browser/platform", json!("Linux armv8l"));
        set(
            d,
            "/batches/0/browser/worker_platform",
            json!("Linux armv8l"),
        );
        let hints = json!({
            "brands": [{ "brand": "Chromium", "version": "124" }, { "brand": "Not-A.Brand", "version": "99" }],
            "mobile": true,
            "platform": "Android",
        });
        set(d, "/batches/0/browser/user_agent_data", hints);
    }),
];

/// Runs `change` on every input event of the fixture's interaction batches.
fn for_each_event(d: &mut Value, mut change: impl FnMut(&mut Value)) {
    for batch in d["batches"].as_array_mut().unwrap().iter_mut().skip(1) {
        for event in batch["events"].as_array_mut().unwrap() {
            change(event);
        }
    }
}

/// Each event stamped a little later than the one before was (0.37 ms more each time), as a
/// client stamps events when it dispatches them: the times keep no sub-millisecond phase.
fn stamped_when_dispatched(d: &mut Value) {
    let mut shift = 0.0;
    for_each_event(d, |event| {
        if let Some(t) = event["t"].as_f64() {
            shift += 0.37;
            event["t"] = json!(((t + shift) * 10.0).round() / 10.0);
        }
    });
}

/// Three straight strokes in equal steps, as `page.mouse.move(x, y, { steps })` draws them.
fn straight_strokes() -> Vec<Value> {
    (0..3)
        .flat_map(|stroke| {
            (0..15).map(move |i| {
                json!({ "t": stroke as f64 * 1_000.0 + i as f64 * 16.0, "type": "pointermove",
                        "x": 100 + i * 20, "y": 300 + stroke * 50, "trusted": true })
            })
        })
        .collect()
}

/// Every case as `(signal, fixture, the fixture after the change)`.
fn cases() -> Vec<(&'static str, &'static str, Value)> {
    let sets = SET_ONE.iter().map(|&(slug, base, pointer, value)| {
        let mut doc = load(base);
        let pointer = pointer.replacen("/p/", "/batches/0/", 1);
        set(&mut doc, &pointer, serde_json::from_str(value).expect(slug));
        (slug, base, doc)
    });
    let reshapes = RESHAPE.iter().map(|&(slug, base, change)| {
        let mut doc = load(base);
        change(&mut doc);
        (slug, base, doc)
    });
    sets.chain(reshapes).collect()
}

#[test]
fn every_signal_fires_when_its_observation_changes() {
    let mut failures = Vec::new();
    for (slug, base, changed) in cases() {
        let before = common::fired(&common::evaluate(&load(base)));
        let after = common::fired(&common::evaluate(&changed));
        if before.contains(&slug) {
            failures.push(format!("{slug} already fires in {base}"));
        }
        if !after.contains(&slug) {
            failures.push(format!(
                "{slug} does not fire after its change to {base} (fired {after:?})"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_catalogued_signal_has_a_case() {
    let slugs: Vec<&str> = SET_ONE
        .iter()
        .map(|c| c.0)
        .chain(RESHAPE.iter().map(|c| c.0))
        .collect();
    for spec in CATALOG {
        assert!(slugs.contains(&spec.slug), "no case for {}", spec.slug);
    }
}

#[test]
fn an_iphone_user_agent_on_a_desktop_is_an_emulated_device() {
    let mut doc = load(HUMAN);
    set(
        &mut doc,
        "/batches/0/automation/user_agent",
        json!(UA_IPHONE),
    );
    let decision = common::evaluate(&doc);
    assert_eq!(
        decision.manipulation,
        Some(processor::Manipulation::EmulatedDevice)
    );
    assert!(common::fired(&decision).contains(&"platform_mismatch"));
}

/// The fixture's pings arrived 57.4 and 52.5 ms apart: a busy server that stamped the second
/// arrival late shortens one gap, so one claim past its gap is jitter, two are not.
#[test]
fn one_ping_past_its_gap_is_jitter_and_most_are_not() {
    let mut doc = load(HUMAN);
    set(
        &mut doc,
        "/batches/0/network/ping_rtts_ms",
        json!([120.0, 44.7, 46.2]),
    );
    let fired = common::fired(&common::evaluate(&doc));
    assert!(!fired.contains(&"ping_rtt_mismatch"), "{fired:?}");
    set(
        &mut doc,
        "/batches/0/network/ping_rtts_ms",
        json!([120.0, 110.0, 46.2]),
    );
    let fired = common::fired(&common::evaluate(&doc));
    assert!(fired.contains(&"ping_rtt_mismatch"), "{fired:?}");
}

#[test]
fn a_few_untrusted_clicks_from_the_page_itself_are_tolerated() {
    let mut doc = load(HUMAN);
    let batch = doc["batches"].as_array_mut().unwrap().last_mut().unwrap();
    let clicks = (0..2).map(|i| json!({ "t": 19_000 + i, "type": "click", "trusted": false }));
    batch["events"].as_array_mut().unwrap().extend(clicks);
    let fired = common::fired(&common::evaluate(&doc));
    assert!(!fired.contains(&"untrusted_input"), "{fired:?}");
    assert!(fired.contains(&"human_like_input"), "{fired:?}");
}

#[test]
fn languages_patched_in_the_page_differ_from_the_workers() {
    let mut doc = load(HUMAN);
    set(
        &mut doc,
        "/batches/0/browser/worker_languages",
        json!(["de-DE", "de"]),
    );
    let decision = common::evaluate(&doc);
    let realm = decision
        .signals_fired
        .iter()
        .find(|s| s.slug == "realm_mismatch")
        .expect("realm_mismatch fires");
    let observed = serde_json::to_value(realm).unwrap();
    assert_eq!(
        observed["observed"]["differences"][0]["value"], "navigator.languages",
        "{observed}"
    );
}

#[test]
fn a_portrait_viewport_on_a_landscape_screen_is_emulated_unless_the_device_rotates() {
    let mut doc = load(HUMAN);
    set(
        &mut doc,
        "/batches/0/screen/orientation",
        json!("portrait-primary"),
    );
    let fired = common::fired(&common::evaluate(&doc));
    assert!(fired.contains(&"viewport_emulation"), "{fired:?}");
    // A touch device (an iPad's Safari claims macOS) keeps its sides when it turns.
    set(&mut doc, "/batches/0/browser/max_touch_points", json!(5));
    let fired = common::fired(&common::evaluate(&doc));
    assert!(!fired.contains(&"viewport_emulation"), "{fired:?}");
    // A real display in landscape says so.
    let mut doc = load(HUMAN);
    set(
        &mut doc,
        "/batches/0/screen/orientation",
        json!("landscape-primary"),
    );
    assert!(!common::fired(&common::evaluate(&doc)).contains(&"viewport_emulation"));
}

#[test]
fn input_provenance_is_judged_only_where_a_device_has_one_form() {
    // Off-grid positions with touch input: a touch screen's positions are finer than pixels.
    let mut doc = load(HUMAN);
    for_each_event(&mut doc, |event| {
        if let Some(x) = event["x"].as_f64() {
            event["x"] = json!(x + 0.37);
        }
    });
    let batch = doc["batches"].as_array_mut().unwrap().last_mut().unwrap();
    let touch = json!({ "t": 30_000, "type": "touchstart", "x": 10, "y": 10, "trusted": true });
    batch["events"].as_array_mut().unwrap().push(touch);
    assert!(!common::fired(&common::evaluate(&doc)).contains(&"off_grid_pointer"));
    // The clock on Windows: its input times are finer than X11's milliseconds (the hand-made
    // Windows fixture's times are spread, and nothing fires).
    let fired = common::fired(&common::evaluate(&load(HUMAN)));
    assert!(!fired.contains(&"unaligned_input_clock"), "{fired:?}");
}

#[test]
fn screens_bound_to_the_window_by_privacy_tools_are_not_emulation() {
    // Brave's screen protection: the screen is the outer window, a few pixels over the viewport,
    // for script and CSS alike; a window taller than wide on a landscape display.
    let mut doc = load(HUMAN);
    let geometry = |doc: &mut Value, inner: [u32; 2], outer: [u32; 2], screen: [u32; 2]| {
        set(doc, "/batches/0/automation/window_inner", json!(inner));
        set(doc, "/batches/0/automation/window_outer", json!(outer));
        set(doc, "/batches/0/screen/width", json!(screen[0]));
        set(doc, "/batches/0/screen/height", json!(screen[1]));
    };
    geometry(&mut doc, [900, 1000], [903, 1006], [903, 1006]);
    set(
        &mut doc,
        "/batches/0/screen/orientation",
        json!("landscape-primary"),
    );
    set(&mut doc, "/batches/0/screen/media_matches", json!(true));
    let fired = common::fired(&common::evaluate(&doc));
    assert!(!fired.contains(&"viewport_emulation"), "{fired:?}");
    // A screen exactly the viewport inside browser chrome, which CSS does not see: not
    // emulation.
    geometry(&mut doc, [900, 1000], [900, 1085], [900, 1000]);
    set(&mut doc, "/batches/0/screen/media_matches", json!(false));
    let fired = common::fired(&common::evaluate(&doc));
    assert!(!fired.contains(&"viewport_emulation"), "{fired:?}");
    // DevTools' device mode emulates for CSS too, and is judged as DevTools.
    set(&mut doc, "/batches/0/screen/media_matches", json!(true));
    assert!(common::fired(&common::evaluate(&doc)).contains(&"viewport_emulation"));
    set(
        &mut doc,
        "/batches/0/automation/devtools_console_reads",
        json!(2),
    );
    let fired = common::fired(&common::evaluate(&doc));
    assert!(!fired.contains(&"viewport_emulation"), "{fired:?}");
}

#[test]
fn the_clock_is_judged_only_in_a_placed_x11_window() {
    let mut doc = load(LINUX_PERSON);
    stamped_when_dispatched(&mut doc);
    // Wayland tells a page no window position (Chromium says 0,0) and stamps input when it
    // handles it: spread times there are a person's too.
    set(
        &mut doc,
        "/batches/0/automation/window_position",
        json!([0, 0]),
    );
    let fired = common::fired(&common::evaluate(&doc));
    assert!(!fired.contains(&"unaligned_input_clock"), "{fired:?}");
    // Brave makes a position up within a few pixels of the corner, and binds the screen to the
    // window: neither says X11.
    set(
        &mut doc,
        "/batches/0/automation/window_position",
        json!([3, 7]),
    );
    let fired = common::fired(&common::evaluate(&doc));
    assert!(!fired.contains(&"unaligned_input_clock"), "{fired:?}");
    set(
        &mut doc,
        "/batches/0/automation/window_position",
        json!([0, 27]),
    );
    assert!(common::fired(&common::evaluate(&doc)).contains(&"unaligned_input_clock"));
    let outer = doc["batches"][0]["automation"]["window_outer"].clone();
    set(&mut doc, "/batches/0/screen/width", outer[0].clone());
    set(&mut doc, "/batches/0/screen/height", outer[1].clone());
    let fired = common::fired(&common::evaluate(&doc));
    assert!(!fired.contains(&"unaligned_input_clock"), "{fired:?}");
}

/// A page loaded in a background tab (a person's second tab, a middle click) has no window to
/// measure: Chromium reports its outer size as 0 until it is shown, which is no headless
/// browser's trace then.
#[test]
fn a_background_tab_without_an_outer_window_is_not_headless() {
    let mut doc = load(HUMAN);
    set(
        &mut doc,
        "/batches/0/automation/window_outer",
        json!([0, 0]),
    );
    assert!(common::fired(&common::evaluate(&doc)).contains(&"zero_outer_window"));
    set(
        &mut doc,
        "/batches/0/automation/document_visibility",
        json!("hidden"),
    );
    assert!(!common::fired(&common::evaluate(&doc)).contains(&"zero_outer_window"));
}

const NETWORK_SIGNALS: [&str; 4] = [
    "datacenter_ip",
    "tor_exit_node",
    "timezone_mismatch",
    "vpn_suspected",
];

/// The network signals among those `doc` fires.
fn network_fired(doc: &Value) -> Vec<String> {
    common::fired(&common::evaluate(doc))
        .into_iter()
        .filter(|s| NETWORK_SIGNALS.contains(s))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_broadband_address_in_the_browsers_own_country_fires_no_network_signal() {
    let mut doc = load(HUMAN);
    set(
        &mut doc,
        "/context/network",
        json!({"asn": {"number": 20712, "organization": "Andrews & Arnold Ltd"}, "country": "GB",
               "hosting": false, "tor_exit": false, "relay": false}),
    );
    assert!(network_fired(&doc).is_empty());
    // A zone of no country, or one the table does not know, is never judged.
    for zone in ["UTC", "Etc/GMT+3", "Mars/Olympus_Mons"] {
        set(&mut doc, "/batches/0/locale/timezone", json!(zone));
        assert!(network_fired(&doc).is_empty(), "{zone}");
    }
}

#[test]
fn a_phone_on_a_hosting_network_is_a_datacenter_address_but_no_vpn() {
    let mut doc = load(SAFARI);
    let zone = doc["batches"][0]["locale"]["timezone"].clone();
    let country = match zone.as_str() {
        Some("America/Los_Angeles" | "America/New_York" | "America/Chicago") => "US",
        other => panic!("the Safari fixture's zone {other:?}: pick its country here"),
    };
    set(
        &mut doc,
        "/context/network",
        json!({"asn": {"number": 14061, "organization": "DIGITALOCEAN-ASN"}, "country": country,
               "hosting": true, "hosting_provider": "DigitalOcean"}),
    );
    assert_eq!(network_fired(&doc), ["datacenter_ip"]);
}

#[test]
fn the_vpn_judgement_names_its_methods_and_how_sure_it_is() {
    let judged = |network: Value| {
        let mut doc = load(HUMAN);
        set(&mut doc, "/context/network", network);
        common::evaluate(&doc)
            .signals_fired
            .into_iter()
            .find(|s| s.slug == "vpn_suspected")
            .map_or(Value::Null, |s| s.observed)
    };
    assert_eq!(
        judged(json!({"country": "US"})),
        json!({"confidence": "low", "methods": {"timezone_mismatch": true, "hosting_desktop": false, "relay": false}})
    );
    assert_eq!(
        judged(json!({"country": "GB", "hosting": true})),
        json!({"confidence": "medium", "methods": {"timezone_mismatch": false, "hosting_desktop": true, "relay": false}})
    );
    assert_eq!(
        judged(json!({"country": "US", "hosting": true}))["confidence"],
        "high"
    );
    assert_eq!(judged(json!({"relay": true}))["confidence"], "high");
    assert_eq!(
        judged(json!({"country": "GB", "hosting": false, "relay": false})),
        Value::Null
    );
}

/// Chromium's own hello (recorded from Chromium 156 against Vigil's listener): greased, h2
/// first, fifteen ciphers, certificate compression.
const CHROMIUM_TLS: &str = r#"{"ja4": "t13d1516h2_8daaf6152771_d8a2da3f94cd", "greased": true, "source": "listener",
    "ja4_r": "t13d1516h2_002f,0035,009c,009d,1301,1302,1303,c013,c014,c02b,c02c,c02f,c030,cca8,cca9_0005,000a,000b,000d,0012,0017,001b,0023,002b,002d,0033,44cd,fe0d,ff01_0403,0804,0401,0503,0805,0501,0806,0601"}"#;

#[test]
fn a_chrome_user_agent_over_chromiums_own_tls_is_no_mismatch_and_over_a_librarys_is() {
    let with_tls = |tls: &str| {
        let mut doc = load(HUMAN);
        set(
            &mut doc,
            "/context/request/tls",
            serde_json::from_str(tls).unwrap(),
        );
        common::evaluate(&doc)
            .signals_fired
            .into_iter()
            .find(|s| s.slug == "tls_client_mismatch")
            .map(|s| s.observed)
    };
    assert_eq!(with_tls(CHROMIUM_TLS), None);
    // A proxy's bare JA4 of Chromium: judged on the counts and the ALPN alone.
    assert_eq!(
        with_tls(r#"{"ja4": "t13d1516h2_8daaf6152771_02713d6af862", "source": "header"}"#),
        None
    );
    // Python's requests: no GREASE, http/1.1 first, eighteen ciphers, no certificate compression.
    let requests = with_tls(
        r#"{"ja4": "t13d1812h1_85036bcba153_b26ce05bbdd6", "greased": false, "source": "listener",
            "ja4_r": "t13d1812h1_0067,006b,009e,009f,00ff,1301,1302,1303,c023,c024,c027,c028,c02b,c02c,c02f,c030,cca8,cca9_000a,000b,000d,0015,0016,0017,002b,002d,0031,0033_0403"}"#,
    )
    .expect("fires");
    assert_eq!(
        requests["contradictions"],
        json!([
            "no GREASE, which Chromium always sends",
            "h2 not offered first, as Chromium offers it",
            "no certificate compression, which Chromium always offers"
        ])
    );
    // Node's fetch through a proxy: too many ciphers for Chromium, even without the raw form.
    assert!(
        with_tls(r#"{"ja4": "t13d5911h1_a33745022dd6_1f22a2ca17c4", "source": "header"}"#)
            .is_some()
    );
}

#[test]
fn a_safari_claim_without_grease_is_a_mismatch_and_with_it_is_not() {
    let with_tls = |greased: bool| {
        let mut doc = load(SAFARI);
        set(
            &mut doc,
            "/context/request/tls",
            json!({"ja4": "t13d2014h2_a09f3c656075_14788d8d241b", "greased": greased, "source": "listener"}),
        );
        common::fired(&common::evaluate(&doc)).contains(&"tls_client_mismatch")
    };
    assert!(!with_tls(true), "Safari's own stack greases");
    assert!(with_tls(false));
}
