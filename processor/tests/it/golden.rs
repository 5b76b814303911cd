//! Golden test of the rules table: a fixed set of inputs and the decisions they produce,
//! snapshotted in `tests/golden/decisions.json`. Any change to a weight, a threshold or a row
//! shows here as the list of decisions that moved.
//!
//! The inputs are every fixture in `tests/fixtures/` (evaluated whole) and the signal sets in
//! [`RULE_CASES`], chosen to reach every row of `RULES` and `MANIPULATION_RULES`.
//!
//! After an intended change, regenerate the snapshot and review its diff:
//!
//! ```sh
//! VIGIL_UPDATE_GOLDEN=1 cargo test -p vigil-processor --test it golden
//! ```

use crate::common;

use processor::rules::{self, MANIPULATION_RULES, Phase, RULES};
use processor::signals::Signal;
use serde_json::{Map, Value};
use std::path::Path;

use Phase::{Behavioral as B, Snapshot as S};

/// `(name, phase, fired signals)`.
const RULE_CASES: &[(&str, Phase, &[&str])] = &[
    ("nothing_fired_snapshot", S, &[]),
    // Network identity (docs/detection.md#network-identity): context, never automation alone.
    ("datacenter_ip_alone", S, &["datacenter_ip"]),
    ("tor_exit_alone", S, &["tor_exit_node"]),
    (
        "cloud_desktop_in_a_foreign_zone",
        S,
        &["datacenter_ip", "timezone_mismatch", "vpn_suspected"],
    ),
    ("relay_alone", S, &["vpn_suspected"]),
    (
        "webdriver_from_a_datacenter",
        S,
        &["webdriver", "datacenter_ip"],
    ),
    ("nothing_fired_behavioral", B, &[]),
    (
        "signed_agent_even_if_headless",
        S,
        &["web_bot_auth_verified", "webdriver", "headless_user_agent"],
    ),
    ("forged_signature", S, &["web_bot_auth_invalid"]),
    (
        "unverified_signature_alone",
        S,
        &["web_bot_auth_unverified"],
    ),
    ("webdriver_alone", S, &["webdriver"]),
    ("electron_alone", S, &["electron"]),
    ("software_renderer_alone", S, &["software_renderer"]),
    (
        "two_weak_headless_traits",
        S,
        &["zero_connection_rtt", "plugins_empty"],
    ),
    ("untrusted_input", B, &["untrusted_input"]),
    ("robotic_typing_alone", B, &["robotic_keystroke_timing"]),
    ("robotic_pointer_alone", B, &["robotic_pointer_path"]),
    (
        "stealth_natives_and_swiftshader",
        S,
        &["tampered_natives", "software_renderer"],
    ),
    ("tampered_natives_alone", S, &["tampered_natives"]),
    // Issue 11's tampering policy.
    ("webdriver_getter_patched", S, &["hidden_webdriver"]),
    (
        "devtools_client_with_patched_values",
        S,
        &["devtools_protocol", "realm_mismatch"],
    ),
    ("devtools_window_open_alone", S, &["devtools_protocol"]),
    // The classes that hide their markers (docs/detection.md): each piece of evidence alone,
    // and what together reads as automation.
    (
        "headless_default_window_alone",
        S,
        &["headless_default_window"],
    ),
    (
        "headless_default_window_without_a_pointer",
        S,
        &["headless_default_window", "no_pointing_device"],
    ),
    ("emulated_viewport", S, &["viewport_emulation"]),
    (
        "off_grid_pointer_alone",
        B,
        &["off_grid_pointer", "human_like_input"],
    ),
    (
        "unaligned_input_clock_alone",
        B,
        &["unaligned_input_clock", "human_like_input"],
    ),
    // Replayed sessions: each piece of evidence decides alone, however human the input.
    (
        "replayed_payload_alone",
        B,
        &["replayed_payload", "human_like_input"],
    ),
    ("stale_challenge_alone", S, &["stale_challenge"]),
    ("challenge_missing_alone", S, &["challenge_missing"]),
    ("time_ahead_alone", B, &["time_ahead", "human_like_input"]),
    ("time_behind_alone", B, &["time_behind"]),
    ("network_check_missing_alone", S, &["network_check_missing"]),
    (
        "network_unmeasured",
        S,
        &["network_check_missing", "ping_rtt_mismatch"],
    ),
    (
        "protocol_input_that_looks_human",
        B,
        &[
            "off_grid_pointer",
            "unaligned_input_clock",
            "human_like_input",
        ],
    ),
    (
        "devtools_client_on_a_headless_screen",
        S,
        &["devtools_protocol", "headless_screen"],
    ),
    ("fingerprint_noise_alone", S, &["fingerprint_noise"]),
    (
        "patched_natives_with_headless_residue",
        S,
        &[
            "tampered_natives",
            "no_pointing_device",
            "software_renderer",
        ],
    ),
    ("privacy_extension_spoofing_webgl", S, &["realm_mismatch"]),
    (
        "privacy_extension_spoofing_webgl_person",
        B,
        &["realm_mismatch", "human_like_input"],
    ),
    (
        "headless_residue_without_a_client",
        S,
        &[
            "no_pointing_device",
            "speech_voices_missing",
            "media_devices_missing",
        ],
    ),
    (
        "privacy_extension_person",
        B,
        &["tampered_natives", "human_like_input"],
    ),
    (
        "firefox_with_a_chrome_ua_switcher",
        S,
        &[
            "product_sub_mismatch",
            "eval_length_mismatch",
            "engine_mismatch",
            "vendor_mismatch",
            "chrome_object_missing",
            "client_hints_missing",
        ],
    ),
    (
        "anti_detect_profile",
        S,
        &[
            "worker_mismatch",
            "renderer_os_mismatch",
            "timezone_offset_mismatch",
        ],
    ),
    (
        "anti_detect_profile_driven",
        B,
        &[
            "worker_mismatch",
            "renderer_os_mismatch",
            "robotic_pointer_path",
        ],
    ),
    (
        "emulated_iphone",
        S,
        &["emulated_mobile", "platform_mismatch"],
    ),
    (
        "network_identity_only",
        S,
        &["network_check_mismatch", "ping_rtt_mismatch"],
    ),
    (
        "many_weak_findings",
        B,
        &[
            "zero_connection_rtt",
            "click_without_movement",
            "missing_browser_headers",
        ],
    ),
    (
        "person_with_noise",
        B,
        &[
            "zero_connection_rtt",
            "human_like_input",
            "consistent_client_hints",
        ],
    ),
    (
        "no_input_yet",
        B,
        &["no_input_events", "consistent_client_hints"],
    ),
    (
        "clicks_without_movement_only",
        B,
        &["click_without_movement"],
    ),
    (
        "six_concerning_highlights_capped",
        B,
        &[
            "webdriver",
            "selenium",
            "languages_empty",
            "software_renderer",
            "zero_outer_window",
            "plugins_empty",
            "human_like_input",
        ],
    ),
];

fn decisions() -> Map<String, Value> {
    let mut out = Map::new();
    for name in common::names() {
        let decision = common::evaluate(&common::load(&name));
        out.insert(
            format!("fixture/{name}"),
            serde_json::to_value(decision).unwrap(),
        );
    }
    for (name, phase, slugs) in RULE_CASES {
        let signals = slugs
            .iter()
            .map(|slug| {
                Signal::new(slug, Value::Null).unwrap_or_else(|| panic!("unknown slug {slug}"))
            })
            .collect();
        let decision = rules::decide(signals, *phase);
        out.insert(
            format!("rules/{name}"),
            serde_json::to_value(decision).unwrap(),
        );
    }
    out
}

#[test]
fn decisions_match_the_golden_snapshot() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/decisions.json");
    // Through text and back, as the snapshot was: serde_json's float parsing is not exact to the
    // last bit, so an in-memory float can differ from the same float read from the file.
    let actual: Map<String, Value> =
        serde_json::from_str(&serde_json::to_string(&decisions()).unwrap()).unwrap();
    if std::env::var_os("VIGIL_UPDATE_GOLDEN").is_some() {
        let text = serde_json::to_string_pretty(&actual).unwrap() + "\n";
        std::fs::write(&path, text).unwrap();
        return;
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with VIGIL_UPDATE_GOLDEN=1 to create it",
            path.display()
        )
    });
    let expected: Map<String, Value> = serde_json::from_str(&text).unwrap();
    let mut moved = Vec::new();
    for (name, decision) in &actual {
        match expected.get(name) {
            None => moved.push(format!("{name}: new case")),
            Some(old) if old != decision => moved.push(format!(
                "{name}: was {} / {} / risk {}, now {} / {} / risk {}",
                old["verdict"],
                old["rule"],
                old["risk_score"],
                decision["verdict"],
                decision["rule"],
                decision["risk_score"]
            )),
            Some(_) => {}
        }
    }
    moved.extend(
        expected
            .keys()
            .filter(|name| !actual.contains_key(*name))
            .map(|name| format!("{name}: case removed")),
    );
    assert!(
        moved.is_empty(),
        "decisions moved (review, then VIGIL_UPDATE_GOLDEN=1 to accept):\n{}",
        moved.join("\n")
    );
}

#[test]
fn the_cases_reach_every_row_of_both_tables() {
    let decisions = decisions();
    for rule in RULES {
        assert!(
            decisions.values().any(|d| d["rule"] == rule.name),
            "no golden case reaches rule {}",
            rule.name
        );
    }
    for row in MANIPULATION_RULES {
        let value = serde_json::to_value(row.manipulation).unwrap();
        assert!(
            decisions.values().any(|d| d["manipulation"] == value),
            "no golden case reaches manipulation {value}"
        );
    }
}
