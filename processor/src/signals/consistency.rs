//! Consistency signals: does the runtime tell the same story as the user agent it claims?
//! Each check compares one claim (the UA's engine, OS, version, mobile flag) with a fact the
//! runtime reports on its own (productSub, eval length, error-stack engine, vendor, client hints,
//! platform, the Worker's view, the WebGL renderer, the timezone offset, the locales). Spoofing
//! tools rewrite the claim and forget some of the facts.

use super::Fired;
use crate::observations::{Automation, Browser, Probes, ServerContext};
use crate::timezones;
use crate::user_agent::{self, ClaimedBrowser, Engine, Os};
use serde_json::json;

/// What each engine's runtime reports, for comparison with what the UA claims.
struct EngineTraits {
    product_sub: &'static str,
    eval_length: f64,
    stack_engines: &'static [&'static str],
    vendor: &'static str,
}

fn engine_traits(engine: Engine) -> Option<EngineTraits> {
    match engine {
        Engine::Blink => Some(EngineTraits {
            product_sub: "20030107",
            eval_length: 33.0,
            stack_engines: &["v8"],
            vendor: "Google Inc.",
        }),
        Engine::Gecko => Some(EngineTraits {
            product_sub: "20100101",
            eval_length: 37.0,
            stack_engines: &["spidermonkey"],
            vendor: "",
        }),
        Engine::WebKit => Some(EngineTraits {
            product_sub: "20030107",
            eval_length: 37.0,
            stack_engines: &["javascriptcore", "jsc"],
            vendor: "Apple Computer, Inc.",
        }),
        Engine::Unknown => None,
    }
}

pub(super) fn identity_consistency(
    probes: &Probes,
    context: &ServerContext,
    claimed: &ClaimedBrowser,
    fired: &mut Fired,
) {
    let empty_automation = Automation::default();
    let automation = probes.automation.as_ref().unwrap_or(&empty_automation);
    let empty_browser = Browser::default();
    let browser = probes.browser.as_ref().unwrap_or(&empty_browser);
    let user_agent = automation.user_agent.as_deref().unwrap_or_default();

    if let Some(traits) = engine_traits(claimed.engine) {
        if let Some(product_sub) = automation.product_sub.as_deref()
            && product_sub != traits.product_sub
        {
            fired.fire(
                "product_sub_mismatch",
                json!({ "claimed_engine": claimed.engine, "product_sub": product_sub, "expected": traits.product_sub }),
            );
        }
        if let Some(eval_length) = automation.eval_length
            && eval_length != traits.eval_length
        {
            fired.fire(
                "eval_length_mismatch",
                json!({ "claimed_engine": claimed.engine, "eval_length": eval_length, "expected": traits.eval_length }),
            );
        }
        if let Some(stack_engine) = automation.error_stack_engine.as_deref() {
            let stack_engine = stack_engine.to_lowercase();
            let known =
                ["v8", "spidermonkey", "javascriptcore", "jsc"].contains(&stack_engine.as_str());
            if known && !traits.stack_engines.contains(&stack_engine.as_str()) {
                fired.fire(
                    "engine_mismatch",
                    json!({ "claimed_engine": claimed.engine, "error_stack_engine": stack_engine }),
                );
            }
        }
        if let Some(vendor) = browser.vendor.as_deref()
            && vendor != traits.vendor
        {
            fired.fire(
                "vendor_mismatch",
                json!({ "claimed_engine": claimed.engine, "vendor": vendor, "expected": traits.vendor }),
            );
        }
    }
    if claimed.engine == Engine::Blink && automation.has_chrome_object == Some(false) {
        fired.fire("chrome_object_missing", json!({ "window_chrome": false }));
    }

    client_hints(browser, claimed, probes, fired);

    if let Some(platform) = browser.platform.as_deref()
        && !user_agent.is_empty()
        && !user_agent::platform_fits(claimed.os, platform, user_agent)
    {
        fired.fire(
            "platform_mismatch",
            json!({ "platform": platform, "claimed_os": claimed.os }),
        );
    }

    let mut worker = Vec::new();
    if let Some(worker_ua) = browser.worker_user_agent.as_deref()
        && !user_agent.is_empty()
        && worker_ua != user_agent
    {
        worker.push(json!({ "worker_user_agent": worker_ua, "user_agent": user_agent }));
    }
    if let (Some(worker_platform), Some(platform)) = (
        browser.worker_platform.as_deref(),
        browser.platform.as_deref(),
    ) && worker_platform != platform
    {
        worker.push(json!({ "worker_platform": worker_platform, "platform": platform }));
    }
    if !worker.is_empty() {
        fired.fire("worker_mismatch", json!({ "differences": worker }));
    }

    if let Some(http_ua) = context.request.user_agent.as_deref()
        && !user_agent.is_empty()
        && http_ua.trim() != user_agent.trim()
    {
        fired.fire(
            "http_user_agent_mismatch",
            json!({ "http_user_agent": http_ua, "navigator_user_agent": user_agent }),
        );
    }

    if let Some(renderer) = probes
        .rendering
        .as_ref()
        .and_then(|r| r.webgl_renderer.as_deref())
    {
        let lower = renderer.to_lowercase();
        let renderer_os: &[Os] = if ["direct3d", "d3d11", "d3d9"]
            .iter()
            .any(|n| lower.contains(n))
        {
            &[Os::Windows]
        } else if ["metal", "apple m", "apple gpu"]
            .iter()
            .any(|n| lower.contains(n))
        {
            &[Os::MacOs, Os::Ios]
        } else {
            &[]
        };
        if !renderer_os.is_empty()
            && claimed.os != Os::Unknown
            && !renderer_os.contains(&claimed.os)
        {
            fired.fire(
                "renderer_os_mismatch",
                json!({ "webgl_renderer": renderer, "claimed_os": claimed.os }),
            );
        }
    }

    if claimed.mobile {
        let mut reasons = Vec::new();
        if browser.max_touch_points == Some(0.0) {
            reasons.push("max_touch_points is 0");
        }
        if probes.screen.as_ref().and_then(|s| s.touch) == Some(false) {
            reasons.push("no touch support");
        }
        if browser.user_agent_data.as_ref().and_then(|d| d.mobile) == Some(false) {
            reasons.push("client hints say not mobile");
        }
        let platform_os = browser
            .platform
            .as_deref()
            .and_then(user_agent::platform_os);
        if matches!(platform_os, Some(Os::Windows | Os::MacOs)) {
            reasons.push("desktop navigator.platform");
        }
        if !reasons.is_empty() {
            fired.fire("emulated_mobile", json!({ "reasons": reasons }));
        }
    }

    if let Some(screen) = &probes.screen {
        let zero = screen.width == Some(0.0) || screen.height == Some(0.0);
        let beyond = |avail: Option<f64>, full: Option<f64>| matches!((avail, full), (Some(a), Some(f)) if a > f + 1.0);
        if zero
            || beyond(screen.avail_width, screen.width)
            || beyond(screen.avail_height, screen.height)
        {
            fired.fire(
                "screen_inconsistent",
                json!({
                    "screen": [screen.width, screen.height],
                    "avail": [screen.avail_width, screen.avail_height],
                }),
            );
        }
    }
}

/// Client hints are the one identity channel Chromium keeps unreduced, so they must tell the
/// same story as the UA string.
fn client_hints(browser: &Browser, claimed: &ClaimedBrowser, probes: &Probes, fired: &mut Fired) {
    let Some(hints) = &browser.user_agent_data else {
        let browser_probed = probes.browser.is_some();
        if browser_probed
            && claimed.engine == Engine::Blink
            && claimed.major.is_some_and(|major| major >= 90)
        {
            fired.fire(
                "client_hints_missing",
                json!({ "claimed_major": claimed.major }),
            );
        }
        return;
    };
    let mut reasons: Vec<String> = Vec::new();
    let brands: Vec<(&str, Option<u32>)> = hints
        .brands
        .iter()
        .flatten()
        .chain(
            browser
                .high_entropy
                .iter()
                .flat_map(|h| h.full_version_list.iter().flatten()),
        )
        .filter_map(|b| {
            Some((
                b.brand.as_deref()?,
                b.version.as_deref().and_then(leading_number),
            ))
        })
        // GREASE brands ("Not A(Brand") exist to be ignored.
        .filter(|(brand, _)| !(brand.contains("Not") && brand.contains("Brand")))
        .collect();
    if claimed.engine != Engine::Blink && claimed.engine != Engine::Unknown {
        reasons.push(format!(
            "client hints exist but the UA claims a {:?} engine",
            claimed.engine
        ));
    } else {
        let chromium_major = brands
            .iter()
            .find(|(brand, _)| *brand == "Chromium" || *brand == "Google Chrome")
            .and_then(|(_, version)| *version);
        if let (Some(hint), Some(ua)) = (chromium_major, claimed.major)
            && hint != ua
        {
            reasons.push(format!("hints say Chromium {hint}, the UA says {ua}"));
        }
        for named in [
            user_agent::ChromiumBrand::Edge,
            user_agent::ChromiumBrand::Opera,
        ] {
            let in_hints = brands.iter().any(|(brand, _)| *brand == named.hint_brand());
            let in_ua = claimed.chromium_brand == Some(named);
            if !brands.is_empty() && in_hints != in_ua {
                reasons.push(format!("hints and UA disagree on {}", named.hint_brand()));
            }
        }
    }
    let hint_os = hints
        .platform
        .as_deref()
        .and_then(user_agent::hint_platform_os);
    if let Some(hint_os) = hint_os
        && claimed.os != Os::Unknown
        && hint_os != claimed.os
    {
        reasons.push(format!(
            "hints say {hint_os:?}, the UA says {:?}",
            claimed.os
        ));
    }
    if let Some(mobile) = hints.mobile
        && claimed.os != Os::Unknown
        && mobile != claimed.mobile
    {
        reasons.push(format!(
            "hints say mobile={mobile}, the UA says mobile={}",
            claimed.mobile
        ));
    }
    if !reasons.is_empty() {
        fired.fire("ua_client_hints_mismatch", json!({ "reasons": reasons }));
    } else if !brands.is_empty() && hint_os.is_some() {
        fired.fire(
            "consistent_client_hints",
            json!({ "brands": brands.iter().map(|(b, _)| b).collect::<Vec<_>>(), "platform": hints.platform }),
        );
    }
}

fn leading_number(text: &str) -> Option<u32> {
    let digits: String = text
        .chars()
        .take_while(char::is_ascii_digit)
        .take(6)
        .collect();
    digits.parse().ok()
}

pub(super) fn locale_consistency(probes: &Probes, fired: &mut Fired) {
    if let Some(locale) = &probes.locale
        && let (Some(zone), Some(offset)) = (locale.timezone.as_deref(), locale.timezone_offset_min)
        && let Some(expected) = timezones::expected_offsets(zone)
        && !expected.iter().any(|e| f64::from(*e) == offset)
    {
        fired.fire(
            "timezone_offset_mismatch",
            json!({ "timezone": zone, "timezone_offset_min": offset, "expected": expected }),
        );
    }

    let primary = |tag: &str| {
        tag.split(['-', '_'])
            .next()
            .unwrap_or_default()
            .to_lowercase()
    };
    let mut reasons = Vec::new();
    let language = probes
        .automation
        .as_ref()
        .and_then(|a| a.language.as_deref())
        .filter(|l| !l.is_empty());
    let first = probes
        .automation
        .as_ref()
        .and_then(|a| a.languages.as_ref())
        .and_then(|l| l.first())
        .map(String::as_str);
    let intl = probes
        .locale
        .as_ref()
        .and_then(|l| l.intl_locale.as_deref())
        .filter(|l| !l.is_empty());
    if let (Some(intl), Some(language)) = (intl, language)
        && primary(intl) != primary(language)
    {
        reasons.push(json!({ "intl_locale": intl, "language": language }));
    }
    if let (Some(first), Some(language)) = (first, language)
        && first != language
    {
        reasons.push(json!({ "languages_0": first, "language": language }));
    }
    if !reasons.is_empty() {
        fired.fire("locale_mismatch", json!({ "differences": reasons }));
    }
}
