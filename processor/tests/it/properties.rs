//! Properties that hold for any input a browser (or an attacker posing as one) can send: the
//! processor never panics, the risk and category scores stay in 0..=100, highlights stay at
//! five or fewer with concerning ones first, and the fingerprint helpers stay in range.

use processor::fingerprint::{self, Anchors};
use processor::{Batch, HighlightKind, ServerContext, SessionObservations, Verdict, WebBotAuth};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Any JSON value, nested a few levels.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-zA-Z0-9 ._/-]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,10}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Values the probes plausibly hold, mixed with arbitrary ones, so the detectors' branches run.
fn member_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any_json(),
        prop::sample::select(vec![
            json!(
                "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36"
            ),
            json!(
                "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1"
            ),
            json!("Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0"),
            json!("HeadlessChrome/120 Electron/28 PhantomJS"),
            json!("denied"),
            json!("prompt"),
            json!("v8"),
            json!("jsc"),
            json!("Win32"),
            json!("iPhone"),
            json!("Europe/London"),
            json!("Etc/GMT+99"),
            json!("SwiftShader Direct3D11 Metal"),
            json!([]),
            json!([0, 0]),
            json!([1e300, -1e300]),
            json!(0),
            json!(-60),
            json!(1e308),
            json!(["__nightmare", "cdc_x", "_phantom"]),
            json!([{ "brand": "Chromium", "version": "999999999999" }]),
            json!({ "brands": [{ "brand": "Chromium", "version": "124" }], "mobile": true, "platform": "Android" }),
        ]),
    ]
}

fn section(members: &'static [&'static str]) -> impl Strategy<Value = Value> {
    prop::collection::btree_map(
        prop::sample::select(members),
        member_value(),
        0..members.len(),
    )
    .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
}

fn probes_batch() -> impl Strategy<Value = Value> {
    (
        section(&[
            "webdriver", "globals", "user_agent", "app_version", "product_sub", "eval_length", "error_stack_engine",
            "has_chrome_object", "notification_permission", "permissions_notifications", "languages", "language",
            "plugins", "mime_types", "plugins_consistent", "window_outer", "window_inner", "window_position", "connection_rtt",
            "electron", "selenium", "headless_ua",
        ]),
        section(&[
            "user_agent_data", "high_entropy", "platform", "worker_user_agent", "worker_platform", "vendor",
            "hardware_concurrency", "device_memory", "max_touch_points",
        ]),
        section(&["webgl_vendor", "webgl_renderer", "webgl_parameters_hash", "webgl_hash", "canvas_hash", "audio_hash"]),
        section(&["width", "height", "avail_width", "avail_height", "color_depth", "pixel_ratio", "touch", "orientation", "media_matches"]),
        section(&["timezone", "timezone_offset_min", "intl_locale"]),
        section(&["tampered_natives", "descriptor_anomalies"]),
        section(&["ping_rtts_ms"]),
        any_json(),
    )
        .prop_map(|(automation, browser, rendering, screen, locale, integrity, network, extra)| {
            json!({ "kind": "probes", "automation": automation, "browser": browser, "rendering": rendering,
                    "screen": screen, "locale": locale, "integrity": integrity, "network": network,
                    "storage": extra.clone(), "unknown": extra })
        })
}

fn event() -> impl Strategy<Value = Value> {
    let kind = prop::sample::select(vec![
        "pointermove",
        "pointerdown",
        "pointerup",
        "click",
        "keydown",
        "keyup",
        "scroll",
        "touchstart",
        "touchmove",
        "touchend",
        "focus",
        "blur",
        "wheel",
    ]);
    let number = prop_oneof![-1e6..1e6f64, Just(0.0), Just(1e300), Just(-1e300)];
    prop_oneof![
        (kind, number.clone(), number.clone(), number, any::<bool>())
            .prop_map(|(kind, t, x, y, trusted)| json!({ "t": t, "type": kind, "x": x, "y": y, "trusted": trusted })),
        any_json(),
    ]
}

fn interactions_batch() -> impl Strategy<Value = Value> {
    (prop::collection::vec(event(), 0..120), any_json()).prop_map(
        |(events, window)| json!({ "kind": "interactions", "window_ms": window, "events": events }),
    )
}

fn batch() -> impl Strategy<Value = Value> {
    prop_oneof![2 => probes_batch(), 3 => interactions_batch(), 1 => any_json()]
}

fn context() -> impl Strategy<Value = ServerContext> {
    (
        prop::option::of("[ -~]{0,40}"),
        prop::collection::vec("[a-z-]{1,16}", 0..12),
        prop::collection::vec(-1_000_000_000i64..1_000_000_000, 0..5),
        prop::option::of(any::<bool>()),
        prop::sample::select(vec![
            WebBotAuth::Verified,
            WebBotAuth::Invalid,
            WebBotAuth::Unverified,
            WebBotAuth::Absent,
        ]),
    )
        .prop_map(
            |(user_agent, header_names, pings_ms, network_check_consistent, web_bot_auth)| {
                let mut context = ServerContext {
                    network_check_consistent,
                    web_bot_auth,
                    ..ServerContext::default()
                };
                context.request.user_agent = user_agent;
                context.request.header_names = header_names;
                context.ping_arrivals = pings_ms
                    .into_iter()
                    .filter_map(chrono::DateTime::from_timestamp_millis)
                    .collect();
                context
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn any_session_gets_a_well_formed_decision(batches in prop::collection::vec(batch(), 0..5), context in context()) {
        let mut session = SessionObservations::default();
        for value in batches {
            if let Ok(batch) = Batch::from_value(value) {
                session.record(batch);
            }
        }
        let decision = processor::evaluate(&session, &context);

        prop_assert!(decision.risk_score <= 100);
        prop_assert_eq!(decision.score_breakdown.categories.len(), 5);
        prop_assert!(decision.score_breakdown.categories.values().all(|&score| score <= 100));
        prop_assert!(decision.highlights.len() <= 5);
        let first_reassuring = decision.highlights.iter().position(|h| h.kind == HighlightKind::Reassuring);
        if let Some(index) = first_reassuring {
            prop_assert!(decision.highlights[index..].iter().all(|h| h.kind == HighlightKind::Reassuring));
        }
        for highlight in &decision.highlights {
            prop_assert!(decision.signals_fired.iter().any(|s| s.slug == highlight.evidence.signal));
        }
        prop_assert_eq!(decision.verdict == Verdict::VerifiedBot, context.web_bot_auth == WebBotAuth::Verified);
        prop_assert!(serde_json::to_string(&decision).is_ok());

        if let Some(probes) = &session.probes {
            let vector = fingerprint::component_vector(probes);
            prop_assert!(vector.iter().all(|v| v.is_finite()));
            let similarity = fingerprint::similarity(&vector, &vector);
            prop_assert!((0.0..=1.0).contains(&similarity));
            let anchors = Anchors::of(probes);
            prop_assert_eq!(anchors.matches(&anchors), [&anchors.webgl_hash, &anchors.parameters_hash, &anchors.audio_hash].iter().filter(|a| a.is_some()).count() >= 2);
        }
    }

    #[test]
    fn any_bytes_parse_or_fail_without_panicking(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = Batch::from_slice(&bytes);
    }

    #[test]
    fn similarity_stays_in_range(a in prop::collection::vec(-1e6..1e6f64, 0..20), b in prop::collection::vec(-1e6..1e6f64, 0..20)) {
        let similarity = fingerprint::similarity(&a, &b);
        prop_assert!((0.0..=1.0).contains(&similarity), "{}", similarity);
    }
}

#[test]
fn an_empty_object_with_a_kind_is_a_batch() {
    assert!(Batch::from_value(json!({ "kind": "probes" })).is_ok());
    assert!(Batch::from_value(Value::Object(Map::new())).is_err());
}
