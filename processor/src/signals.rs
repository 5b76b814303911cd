//! Observations to signals: each signal is one finding about a session, a slug with a category,
//! a weight (positive is concerning, negative is reassuring) and the observed value that
//! triggered it. Signals are data; how they add up to a verdict is [`crate::rules`]' business.
//!
//! The catalogue below is the single list of signals; [`CATALOG`] holds the same rows in code
//! (a unit test keeps this table and the code in step).
//!
//! | slug | category | weight | fires when |
//! | --- | --- | --- | --- |
//! | `webdriver` | automation | 90 | `navigator.webdriver` is true |
//! | `headless_user_agent` | automation | 80 | "Headless" in the UA, `appVersion`, the Worker's UA or the HTTP UA |
//! | `phantomjs` | automation | 90 | PhantomJS in the UA, or `_phantom`/`callPhantom` globals |
//! | `selenium` | automation | 90 | `$cdc_`/`$wdc_` keys, selenium attributes or globals, "Selenium" in the UA |
//! | `nightmare` | automation | 90 | the `__nightmare` global or Nightmare in the UA |
//! | `puppeteer_playwright` | automation | 90 | puppeteer or playwright globals, or their names in the UA |
//! | `devtools_protocol` | automation | 50 | logging an Error reads its `name` twice (Chromium): a DevTools-protocol client serialises the console |
//! | `electron` | automation | 60 | `process`/`versions.electron` traces or "Electron/" in the UA |
//! | `automation_user_agent` | automation | 80 | another automation tool names itself in the UA (SlimerJS, HtmlUnit, CefSharp, ...) |
//! | `automation_globals` | automation | 70 | other automation globals (`domAutomation`, webdriver helpers, ...) |
//! | `languages_empty` | automation | 55 | `navigator.languages` is empty or `navigator.language` is blank |
//! | `plugins_empty` | automation | 40 | desktop Chromium with no plugins |
//! | `notification_permission_mismatch` | automation | 70 | `Notification.permission` is "denied" while the permissions API says "prompt" |
//! | `headless_screen` | automation | 45 | an 800x600 screen (headless Chromium's default) under a larger window |
//! | `headless_default_window` | automation | 25 | an 800x600 screen with no taskbar and the window on it: headless Chromium's default display |
//! | `viewport_emulation` | automation | 45 | a desktop without touch or DevTools whose orientation contradicts its screen, or whose viewport is the screen (for script and CSS) inside browser chrome |
//! | `no_pointing_device` | automation | 25 | a desktop claim with no fine pointer, no hover and no touch points |
//! | `software_renderer` | automation | 25 | WebGL renders with SwiftShader, llvmpipe, softpipe, Mesa OffScreen or Microsoft Basic Render |
//! | `zero_outer_window` | automation | 60 | `outerWidth` and `outerHeight` are 0 in a page shown (a background tab's are 0 until shown) |
//! | `zero_connection_rtt` | automation | 30 | `navigator.connection.rtt` is 0 outside Android |
//! | `speech_voices_missing` | automation | 15 | no speech voices under a Windows or macOS claim |
//! | `media_devices_missing` | automation | 15 | no media devices under a Windows or macOS claim |
//! | `web_bot_auth_unverified` | automation | 30 | a Web Bot Auth signature was sent but could not be verified |
//! | `replayed_payload` | automation | 90 | a batch's mark in the replay record was left first by another session (its probes, or an early interaction stream within ±12% and 4 px) |
//! | `stale_challenge` | automation | 90 | the probes carry a challenge nonce other than the session's |
//! | `challenge_missing` | automation | 60 | the probes lack the challenge an SDK of 1.4 or later always answers |
//! | `time_ahead` | automation | 80 | an interaction window ends more than 3 s (and a tenth of the time passed) after the time the server saw pass since the session opened (15 s from the load for an SDK that does not say when it opened) |
//! | `plugins_inconsistent` | integrity | 40 | plugin and mime-type arrays fail their prototype checks or disagree |
//! | `hidden_webdriver` | integrity | 70 | the `navigator.webdriver` getter replaced, deleted, redefined, or different from a pristine realm's |
//! | `realm_mismatch` | integrity | 55 | navigator values differ from a pristine iframe's getters, or cores, memory, languages or WebGL differ from a worker's |
//! | `tampered_natives` | integrity | 50 | native functions other than pixel and sample read-back whose source is not native code (through the page's or a pristine realm's `toString`) |
//! | `fingerprint_noise` | integrity | 15 | only canvas, WebGL or audio read-back natives were replaced (privacy extensions) |
//! | `descriptor_anomalies` | integrity | 40 | navigator properties redefined on the instance |
//! | `probes_missing` | integrity | 30 | the session was decided without the probes batch |
//! | `probes_repeated` | integrity | 30 | more than one probes batch arrived |
//! | `ping_rtt_mismatch` | network | 40 | claimed ping round trips the server's arrival times rule out (most of them: one is a busy server's jitter), or pings the server never saw |
//! | `network_check_mismatch` | network | 45 | the WebSocket's identity differed from the HTTP request's |
//! | `missing_browser_headers` | network | 30 | the request lacks headers every claimed browser sends |
//! | `network_check_missing` | network | 45 | the session asked for its result and its network check's WebSocket never connected (more than `ping_rtt_mismatch`) |
//! | `time_behind` | network | 10 | interaction windows end over a minute (and half the time passed) before the time the server saw pass |
//! | `oversized_user_agent` | network | 45 | the `User-Agent` header was over 512 bytes (ingest keeps its first 512) |
//! | `web_bot_auth_invalid` | network | 70 | a Web Bot Auth signature failed verification |
//! | `web_bot_auth_verified` | network | -40 | a valid Web Bot Auth signature identifies the agent |
//! | `datacenter_ip` | network | 20 | the address's ASN is a hosting or cloud provider's |
//! | `tor_exit_node` | network | 20 | the address is in the operator's Tor exit list |
//! | `timezone_mismatch` | network | 15 | the browser's IANA zone is used in no country that is the address's (the tz database's zone-to-country table) |
//! | `vpn_suspected` | network | 10 | a VPN method holds: the zone mismatch, a desktop browser on a hosting network, or the operator's relay list |
//! | `tls_client_mismatch` | network | 35 | the UA claims a browser whose TLS stack the ClientHello's structure contradicts (GREASE, ALPN, cipher count, extensions) |
//! | `untrusted_input` | behavior | 70 | script-dispatched (`isTrusted` false) pointer, key or touch events, or several such clicks |
//! | `robotic_pointer_path` | behavior | 60 | most pointer strokes are straight lines at constant step or speed |
//! | `robotic_keystroke_timing` | behavior | 55 | keystrokes at a near-constant or superhuman rhythm |
//! | `click_without_movement` | behavior | 40 | clicks with no pointer movement, touch or keys |
//! | `off_grid_pointer` | behavior | 20 | most pointer positions fall between device pixels, on a desktop with no touch points |
//! | `unaligned_input_clock` | behavior | 20 | on Linux with a placed (X11) window, input times (all of them, or the keys alone) keep no common sub-millisecond phase (the X server stamps whole milliseconds); decisive alone (`protocol_clock`) |
//! | `no_input_events` | behavior | 15 | interaction batches arrived with no input at all |
//! | `human_like_input` | behavior | -35 | trusted input with a person's variety (curved strokes, uneven typing, touch gestures) |
//! | `ua_client_hints_mismatch` | consistency | 50 | client hints (brands, versions, platform, mobile) contradict the UA |
//! | `client_hints_missing` | consistency | 20 | a Chromium UA (90 or later) without `navigator.userAgentData` |
//! | `platform_mismatch` | consistency | 45 | `navigator.platform` names another OS than the UA |
//! | `worker_mismatch` | consistency | 60 | a Worker reports another UA or platform than the page |
//! | `http_user_agent_mismatch` | consistency | 50 | the HTTP `User-Agent` differs from `navigator.userAgent` |
//! | `product_sub_mismatch` | consistency | 40 | `navigator.productSub` is not the claimed engine's |
//! | `eval_length_mismatch` | consistency | 40 | `eval.toString().length` is not the claimed engine's |
//! | `engine_mismatch` | consistency | 50 | the error-stack engine is not the claimed engine |
//! | `vendor_mismatch` | consistency | 30 | `navigator.vendor` is not the claimed engine's |
//! | `chrome_object_missing` | consistency | 30 | a Chromium UA without `window.chrome` |
//! | `renderer_os_mismatch` | consistency | 40 | a Direct3D renderer outside Windows, or an Apple GPU outside Apple systems |
//! | `emulated_mobile` | consistency | 45 | a phone UA without touch, with a desktop platform, or with hints saying not mobile |
//! | `screen_inconsistent` | consistency | 25 | a zero-sized screen, or an available area larger than the screen |
//! | `timezone_offset_mismatch` | consistency | 40 | the UTC offset does not fit the IANA timezone |
//! | `locale_mismatch` | consistency | 20 | `Intl` locale, `navigator.language` and `navigator.languages` disagree |
//! | `consistent_client_hints` | consistency | -10 | client hints agree with the UA on brand, version, platform and mobile |

mod consistency;
mod network;
mod replay;
mod stealth;
mod tls;

use crate::behavior::{PixelGrid, UNTRUSTED_CLICKS_TOLERATED};
use crate::observations::{Automation, Probes, ServerContext, SessionObservations, WebBotAuth};
use crate::user_agent::{self, ClaimedBrowser, Engine, Os, UA_TRACES};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The five score categories (docs/architecture.md#decisions): the stored decision's
/// (`schemas::decision`).
pub use schemas::decision::Category;

/// One finding about a session. Serialised as an entry of `signals_fired`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Signal {
    #[serde(rename = "signal")]
    pub slug: &'static str,
    pub category: Category,
    /// Positive is concerning, negative is reassuring.
    pub weight: i32,
    pub observed: Value,
}

impl Signal {
    /// The catalogued signal `slug` with an observed value, or `None` for an unknown slug.
    pub fn new(slug: &str, observed: Value) -> Option<Self> {
        let spec = spec(slug)?;
        Some(Self {
            slug: spec.slug,
            category: spec.category,
            weight: spec.weight,
            observed,
        })
    }

    /// The sentence a highlight shows for this signal.
    pub fn sentence(&self) -> &'static str {
        spec(self.slug).map_or("", |spec| spec.sentence)
    }

    pub fn is_concerning(&self) -> bool {
        self.weight > 0
    }
}

/// A catalogued signal: what every firing of that slug shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalSpec {
    pub slug: &'static str,
    pub category: Category,
    pub weight: i32,
    /// The highlight sentence, written for a customer reading a session.
    pub sentence: &'static str,
}

const fn signal(
    slug: &'static str,
    category: Category,
    weight: i32,
    sentence: &'static str,
) -> SignalSpec {
    SignalSpec {
        slug,
        category,
        weight,
        sentence,
    }
}

use Category::{Automation as A, Behavior as B, Consistency as C, Integrity as I, Network as N};

/// Every signal the processor can fire, in the order `signals_fired` lists them. Among equal
/// weights, highlights follow this order too, so the most telling signals come first.
#[rustfmt::skip]
pub const CATALOG: &[SignalSpec] = &[
    signal("webdriver",                        A, 90,  "The browser reports that WebDriver is controlling it (navigator.webdriver is true)."),
    signal("headless_user_agent",              A, 80,  "The user agent identifies a headless browser."),
    signal("phantomjs",                        A, 90,  "PhantomJS traces were found in the page."),
    signal("selenium",                         A, 90,  "Selenium WebDriver traces were found in the page."),
    signal("nightmare",                        A, 90,  "Nightmare automation traces were found in the page."),
    signal("puppeteer_playwright",             A, 90,  "Puppeteer or Playwright traces were found in the page."),
    signal("devtools_protocol",                A, 50,  "A DevTools-protocol client (Puppeteer, Playwright, WebDriver) is attached to the page."),
    signal("electron",                         A, 60,  "The page runs inside an Electron app, a common host for automation."),
    signal("automation_user_agent",            A, 80,  "The user agent names a browser-automation tool."),
    signal("automation_globals",               A, 70,  "Globals left by automation tooling were found in the page."),
    signal("languages_empty",                  A, 55,  "The browser reports no preferred languages, as headless browsers do."),
    signal("plugins_empty",                    A, 40,  "A desktop Chromium browser reports no plugins, as headless Chrome does."),
    signal("notification_permission_mismatch", A, 70,  "Notification permission reads denied while the permissions API says prompt, a headless Chrome trait."),
    signal("headless_screen",                  A, 45,  "The screen is headless Chromium's default 800x600, smaller than the browser window on it."),
    signal("headless_default_window",          A, 25,  "The screen is headless Chromium's default 800x600 display, with no taskbar and the browser window on it."),
    signal("viewport_emulation",               A, 45,  "The page's viewport is emulated (its orientation or size contradicts the screen), as automation tools' DevTools-protocol viewports do."),
    signal("no_pointing_device",               A, 25,  "A desktop browser with no mouse, touchpad or touch screen, as headless browsers report."),
    signal("software_renderer",                A, 25,  "WebGL renders in software (SwiftShader, llvmpipe or Mesa), typical of headless and virtual machines."),
    signal("zero_outer_window",                A, 60,  "The browser window has no outer size, as headless browsers report."),
    signal("zero_connection_rtt",              A, 30,  "The network connection reports a round-trip time of zero, a headless trait."),
    signal("speech_voices_missing",            A, 15,  "No speech voices, which Windows and macOS always have."),
    signal("media_devices_missing",            A, 15,  "No media devices at all, which Windows and macOS browsers always list."),
    signal("web_bot_auth_unverified",          A, 30,  "The request carries a Web Bot Auth signature that could not be verified."),
    signal("replayed_payload",                 A, 90,  "A batch of this session was sent first by another session: recorded there and replayed here."),
    signal("stale_challenge",                  A, 90,  "The probes carry another session's challenge, as a batch recorded elsewhere and replayed does."),
    signal("challenge_missing",                A, 60,  "The probes lack the session's challenge, which the SDK version the session claims always answers."),
    signal("time_ahead",                       A, 80,  "Interaction batches claim more time than had passed since the session opened, as batches replayed faster than they were recorded do."),
    signal("plugins_inconsistent",             I, 40,  "The plugin and MIME-type lists are inconsistent, a sign they were faked."),
    signal("hidden_webdriver",                 I, 70,  "navigator.webdriver was faked or removed by script, to hide that automation controls the browser."),
    signal("realm_mismatch",                   I, 55,  "The page's navigator or WebGL values differ from a pristine frame's or a worker's: they were patched in the page."),
    signal("tampered_natives",                 I, 50,  "Native browser functions were overridden by script."),
    signal("fingerprint_noise",                I, 15,  "Canvas or audio read-back was patched, as privacy extensions do to add noise to fingerprints."),
    signal("descriptor_anomalies",             I, 40,  "Browser properties were redefined on the instance to hide their real values."),
    signal("probes_missing",                   I, 30,  "The session was decided without the device probes the SDK always sends first."),
    signal("probes_repeated",                  I, 30,  "The device probes were sent more than once, which the SDK never does."),
    signal("ping_rtt_mismatch",                N, 40,  "Round-trip times claimed by the client disagree with when the server saw its pings."),
    signal("network_check_mismatch",           N, 45,  "The WebSocket check came from a different network identity than the page's requests."),
    signal("missing_browser_headers",          N, 30,  "The request lacks headers every real browser of the claimed kind sends."),
    signal("network_check_missing",            N, 45,  "The session asked for its result without the WebSocket network check the SDK always runs first."),
    signal("time_behind",                      N, 10,  "Interaction batches claim much less time than had passed since the session opened (a device asleep, or batches sent slower than they were recorded)."),
    signal("oversized_user_agent",             N, 45,  "The User-Agent header was longer than any browser sends, and was cut to 512 bytes."),
    signal("web_bot_auth_invalid",             N, 70,  "The request carries a Web Bot Auth signature that failed verification."),
    signal("web_bot_auth_verified",            N, -40, "A valid Web Bot Auth signature identifies the agent."),
    signal("datacenter_ip",                    N, 20,  "The address belongs to a hosting or cloud provider's network, where servers rather than people usually are."),
    signal("tor_exit_node",                    N, 20,  "The address is a Tor exit node."),
    signal("timezone_mismatch",                N, 15,  "The browser's time zone is not used in the country of its address."),
    signal("vpn_suspected",                    N, 10,  "The connection looks like it comes through a VPN or relay."),
    signal("tls_client_mismatch",              N, 35,  "The TLS handshake was made by another client than the browser the user agent claims."),
    signal("untrusted_input",                  B, 70,  "Input events were dispatched by script rather than by a person (isTrusted is false)."),
    signal("robotic_pointer_path",             B, 60,  "Pointer movements follow straight lines at constant speed, as scripts draw them."),
    signal("robotic_keystroke_timing",         B, 55,  "Keystrokes arrive at a machine-regular rhythm."),
    signal("click_without_movement",           B, 40,  "Clicks arrived without any pointer movement, touch or typing."),
    signal("off_grid_pointer",                 B, 20,  "Pointer positions fall between device pixels, where a mouse never reports them and scripted moves land."),
    signal("unaligned_input_clock",            B, 20,  "Input events are not stamped on the display server's millisecond clock, as events dispatched through the DevTools protocol are not."),
    signal("no_input_events",                  B, 15,  "No pointer, keyboard, touch or scroll input was seen."),
    signal("human_like_input",                 B, -35, "Trusted input shows the natural variation of a person."),
    signal("ua_client_hints_mismatch",         C, 50,  "The user agent contradicts the browser's client hints."),
    signal("client_hints_missing",             C, 20,  "A Chromium user agent without the client hints every recent Chromium exposes."),
    signal("platform_mismatch",                C, 45,  "navigator.platform names a different operating system than the user agent."),
    signal("worker_mismatch",                  C, 60,  "A web worker reports a different browser identity than the page."),
    signal("http_user_agent_mismatch",         C, 50,  "The HTTP User-Agent header differs from the user agent script reports."),
    signal("product_sub_mismatch",             C, 40,  "navigator.productSub does not match the browser the user agent claims."),
    signal("eval_length_mismatch",             C, 40,  "The JavaScript engine's eval signature does not match the browser the user agent claims."),
    signal("engine_mismatch",                  C, 50,  "The JavaScript engine is not the one the claimed browser ships."),
    signal("vendor_mismatch",                  C, 30,  "navigator.vendor does not match the browser the user agent claims."),
    signal("chrome_object_missing",            C, 30,  "A Chrome user agent without the window.chrome object Chrome always has."),
    signal("renderer_os_mismatch",             C, 40,  "The graphics renderer belongs to a different operating system than the user agent's."),
    signal("emulated_mobile",                  C, 45,  "A phone user agent on a device without phone traits, as device emulation produces."),
    signal("screen_inconsistent",              C, 25,  "The reported screen geometry is impossible."),
    signal("timezone_offset_mismatch",         C, 40,  "The clock's UTC offset does not fit the reported timezone."),
    signal("locale_mismatch",                  C, 20,  "The browser's locale settings disagree with each other."),
    signal("consistent_client_hints",          C, -10, "Client hints agree with the user agent."),
];

/// The catalogue row of `slug`.
pub fn spec(slug: &str) -> Option<&'static SignalSpec> {
    CATALOG.iter().find(|spec| spec.slug == slug)
}

/// The browser the session claims to be: the page's own UA, or the HTTP UA when the probes
/// never came.
fn claimed_browser(probes: Option<&Probes>, context: &ServerContext) -> ClaimedBrowser {
    let user_agent = probes
        .and_then(|p| p.automation.as_ref())
        .and_then(|a| a.user_agent.as_deref())
        .or(context.request.user_agent.as_deref())
        .unwrap_or_default();
    user_agent::parse(user_agent)
}

/// The session's VPN judgement (`network.vpn`), as [`detect`] makes it: `None` without the
/// operator's IP data.
pub fn vpn(
    session: &SessionObservations,
    context: &ServerContext,
) -> Option<schemas::network::Vpn> {
    let probes = session.probes.as_deref();
    network::judge_vpn(probes, context, &claimed_browser(probes, context))
}

/// Every signal the session's observations and the server's context fire, in catalogue order.
pub fn detect(session: &SessionObservations, context: &ServerContext) -> Vec<Signal> {
    let mut fired = Fired::default();
    let probes = session.probes.as_deref();
    let claimed = claimed_browser(probes, context);
    if let Some(probes) = probes {
        automation_markers(probes, context, &claimed, &mut fired);
        consistency::identity_consistency(probes, context, &claimed, &mut fired);
        consistency::locale_consistency(probes, &mut fired);
        runtime_integrity(probes, &mut fired);
        stealth::detect(probes, &claimed, &mut fired);
        ping_timing(probes, context, &mut fired);
    }
    transport(session, context, &claimed, &mut fired);
    network::detect(probes, context, &claimed, &mut fired);
    tls::detect(context, &claimed, &mut fired);
    replay::detect(probes, context, &mut fired);
    if session.interactions_seen() {
        behavior(session, probes, &claimed, &mut fired);
    }
    fired.into_signals()
}

/// Signals found so far, at most one per slug.
#[derive(Default)]
struct Fired(BTreeMap<usize, Signal>);

impl Fired {
    fn fire(&mut self, slug: &str, observed: Value) {
        let index = CATALOG.iter().position(|spec| spec.slug == slug);
        debug_assert!(index.is_some(), "signal {slug} is not in the catalogue");
        if let (Some(index), Some(signal)) = (index, Signal::new(slug, observed)) {
            self.0.entry(index).or_insert(signal);
        }
    }

    fn into_signals(self) -> Vec<Signal> {
        self.0.into_values().collect()
    }
}

/// Automation globals and which signal each feeds; matched case-insensitively as substrings.
/// Names not listed feed `automation_globals`: the SDK only reports names it looks for.
const GLOBAL_TRACES: &[(&str, &str)] = &[
    ("_phantom", "phantomjs"),
    ("callphantom", "phantomjs"),
    ("__phantomas", "phantomjs"),
    ("__nightmare", "nightmare"),
    ("selenium", "selenium"),
    ("cdc_", "selenium"),
    ("$wdc_", "selenium"),
    ("__fxdriver", "selenium"),
    ("__driver_", "selenium"),
    ("__webdriver", "selenium"),
    ("__lastwatiralert", "selenium"),
    ("puppeteer", "puppeteer_playwright"),
    ("playwright", "puppeteer_playwright"),
    ("__pw", "puppeteer_playwright"),
    ("wdioelectron", "electron"),
];

/// Renderer names of software rasterisers, lower case.
const SOFTWARE_RENDERERS: &[&str] = &[
    "swiftshader",
    "llvmpipe",
    "softpipe",
    "mesa offscreen",
    "microsoft basic render",
];

fn automation_markers(
    probes: &Probes,
    context: &ServerContext,
    claimed: &ClaimedBrowser,
    fired: &mut Fired,
) {
    let empty = Automation::default();
    let automation = probes.automation.as_ref().unwrap_or(&empty);
    if automation.webdriver == Some(true) {
        fired.fire("webdriver", json!({ "navigator_webdriver": true }));
    }

    // Framework traces from every place they show, gathered per signal so each fires once
    // with all its evidence.
    let mut traces: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let texts = [
        ("user_agent", automation.user_agent.as_deref()),
        ("app_version", automation.app_version.as_deref()),
        ("http_user_agent", context.request.user_agent.as_deref()),
        // Stealth plugins patch the page's navigator but not the Worker's.
        (
            "worker_user_agent",
            probes
                .browser
                .as_ref()
                .and_then(|b| b.worker_user_agent.as_deref()),
        ),
    ];
    for (source, text) in texts {
        let Some(text) = text else { continue };
        for (needle, slug) in UA_TRACES {
            if text.contains(needle) {
                traces
                    .entry(slug)
                    .or_default()
                    .push(format!("{source}: {needle}"));
            }
        }
    }
    let flags = [
        (automation.headless_ua, "headless_user_agent"),
        (automation.electron, "electron"),
        (automation.selenium, "selenium"),
    ];
    for (flag, slug) in flags {
        if flag == Some(true) {
            traces.entry(slug).or_default().push("sdk probe".to_owned());
        }
    }
    for global in automation.globals.iter().flatten() {
        let lower = global.to_lowercase();
        let slug = GLOBAL_TRACES
            .iter()
            .find(|(needle, _)| lower.contains(needle))
            .map_or("automation_globals", |(_, slug)| slug);
        traces
            .entry(slug)
            .or_default()
            .push(format!("global: {global}"));
    }
    for (slug, evidence) in traces {
        fired.fire(slug, json!({ "evidence": evidence }));
    }

    let languages_empty = automation.languages.as_ref().is_some_and(Vec::is_empty);
    let language_blank = automation
        .language
        .as_deref()
        .is_some_and(|l| l.trim().is_empty());
    if languages_empty || language_blank {
        fired.fire(
            "languages_empty",
            json!({ "languages": automation.languages, "language": automation.language }),
        );
    }

    let desktop_chromium =
        claimed.engine == Engine::Blink && !claimed.mobile && claimed.os != Os::Android;
    if desktop_chromium && automation.plugins.as_ref().is_some_and(Vec::is_empty) {
        fired.fire("plugins_empty", json!({ "plugins": 0 }));
    }
    let plugin_count = automation.plugins.as_ref().map(Vec::len);
    let mime_count = automation.mime_types.as_ref().map(Vec::len);
    let lists_disagree =
        matches!((plugin_count, mime_count), (Some(p), Some(m)) if (p == 0) != (m == 0));
    if automation.plugins_consistent == Some(false) || lists_disagree {
        fired.fire(
            "plugins_inconsistent",
            json!({
                "plugins_consistent": automation.plugins_consistent,
                "plugins": plugin_count,
                "mime_types": mime_count,
            }),
        );
    }

    if automation.notification_permission.as_deref() == Some("denied")
        && automation.permissions_notifications.as_deref() == Some("prompt")
    {
        fired.fire(
            "notification_permission_mismatch",
            json!({ "notification_permission": "denied", "permissions_query": "prompt" }),
        );
    }

    if let Some(rendering) = &probes.rendering {
        let renderer = rendering.webgl_renderer.as_deref().unwrap_or_default();
        let vendor = rendering.webgl_vendor.as_deref().unwrap_or_default();
        let lower = renderer.to_lowercase();
        if SOFTWARE_RENDERERS.iter().any(|name| lower.contains(name)) || vendor == "Brian Paul" {
            fired.fire(
                "software_renderer",
                json!({ "webgl_vendor": vendor, "webgl_renderer": renderer }),
            );
        }
    }

    // A page loaded in a background tab (opened with a middle click, or one of several restored)
    // has no window to measure yet: Chromium reports its outer size as 0 until it is shown.
    if automation.window_outer == Some([0.0, 0.0])
        && automation.document_visibility.as_deref() != Some("hidden")
    {
        fired.fire("zero_outer_window", json!({ "window_outer": [0, 0] }));
    }
    // Android WebViews report 0 legitimately (BotD makes the same exception).
    if automation.connection_rtt == Some(0.0) && claimed.os != Os::Android {
        fired.fire("zero_connection_rtt", json!({ "connection_rtt": 0 }));
    }
}

/// Natives whose only use is reading rendered pixels or samples back: what farbling patches.
const FINGERPRINT_READBACK: &[&str] = &[
    "HTMLCanvasElement.prototype.toDataURL",
    "CanvasRenderingContext2D.prototype.getImageData",
    "WebGLRenderingContext.prototype.readPixels",
    "AudioBuffer.prototype.getChannelData",
    "AnalyserNode.prototype.getFloatFrequencyData",
];

fn runtime_integrity(probes: &Probes, fired: &mut Fired) {
    let Some(integrity) = &probes.integrity else {
        return;
    };
    // Privacy extensions and anti-fingerprinting modes patch the read-back of canvas, audio and
    // WebGL pixels to add noise; that is all they patch. Anything else replaced (navigator
    // getters, toString, permissions) is a spoofing or stealth kit's work.
    let (noise, other): (Vec<&String>, Vec<&String>) = integrity
        .tampered_natives
        .iter()
        .flatten()
        .partition(|native| FINGERPRINT_READBACK.contains(&native.as_str()));
    if !other.is_empty() {
        fired.fire("tampered_natives", json!({ "natives": other }));
    }
    if !noise.is_empty() {
        fired.fire("fingerprint_noise", json!({ "natives": noise }));
    }
    if let Some(properties) = integrity
        .descriptor_anomalies
        .as_ref()
        .filter(|p| !p.is_empty())
    {
        fired.fire("descriptor_anomalies", json!({ "properties": properties }));
    }
}

/// Brave reports a window position made up within this many pixels of the screen's corner.
const MADE_UP_POSITION_PX: f64 = 8.0;

/// A claimed round trip may exceed the gap before the next ping's arrival by this much (ms)
/// or this fraction of the gap, for clock granularity and network jitter.
const PING_SLACK_MS: f64 = 25.0;
const PING_SLACK_RATIO: f64 = 0.5;

/// The SDK sends its pings back to back, so the server-side gap between two arrivals contains
/// the whole round trip of the first: a client that claims a longer round trip than that gap
/// is reporting numbers it did not measure. A busy server stamps a ping's arrival late now and
/// then (the stamp is taken in the handler, after the request waited for a worker), which
/// shortens one gap; so one gap ruled out is jitter, and the signal needs most of them ruled
/// out (with the SDK's three pings, both gaps), or pings claimed that the server never saw.
fn ping_timing(probes: &Probes, context: &ServerContext, fired: &mut Fired) {
    let Some(claims) = probes
        .network
        .as_ref()
        .and_then(|n| n.ping_rtts_ms.as_ref())
    else {
        return;
    };
    let gaps: Vec<f64> = context
        .ping_arrivals
        .windows(2)
        .map(|pair| {
            (pair[1] - pair[0])
                .num_microseconds()
                .map_or(f64::MAX, |us| us as f64 / 1_000.0)
        })
        .collect();
    let mut reasons = Vec::new();
    if claims.len() > context.ping_arrivals.len() {
        reasons.push(
            json!({ "claimed_pings": claims.len(), "server_pings": context.ping_arrivals.len() }),
        );
    }
    let mut ruled_out = Vec::new();
    for (index, (claim, gap)) in claims.iter().zip(&gaps).enumerate() {
        let slack = PING_SLACK_MS.max(gap * PING_SLACK_RATIO);
        if *claim < 0.0 || *claim > gap + slack {
            ruled_out.push(json!({ "ping": index, "claimed_rtt_ms": claim, "server_gap_ms": gap }));
        }
    }
    let compared = claims.len().min(gaps.len());
    if ruled_out.len() * 2 > compared {
        reasons.extend(ruled_out);
    }
    if !reasons.is_empty() {
        fired.fire("ping_rtt_mismatch", json!({ "differences": reasons }));
    }
}

fn transport(
    session: &SessionObservations,
    context: &ServerContext,
    claimed: &ClaimedBrowser,
    fired: &mut Fired,
) {
    // Interaction without the probes, or nothing at all (a session a script opened and asked
    // the result of): either way no browser's SDK was observed, and nothing is a person's.
    if session.probes.is_none() {
        fired.fire(
            "probes_missing",
            json!({ "interaction_batches": session.interaction_batches }),
        );
    }
    if session.probes_batches > 1 {
        fired.fire(
            "probes_repeated",
            json!({ "probes_batches": session.probes_batches }),
        );
    }
    if context.network_check_consistent == Some(false) {
        fired.fire("network_check_mismatch", json!({ "consistent": false }));
    }

    let headers = &context.request.header_names;
    if !headers.is_empty() {
        let has = |name: &str| headers.iter().any(|h| h.eq_ignore_ascii_case(name));
        let mut expected = vec!["user-agent", "accept-language"];
        // Fetch metadata shipped in Chromium 80 and Firefox 90 (Safari later, so not asked).
        let fetch_metadata = match (claimed.engine, claimed.major) {
            (Engine::Blink, Some(major)) => major >= 80,
            (Engine::Gecko, Some(major)) => major >= 90,
            _ => false,
        };
        if fetch_metadata {
            expected.push("sec-fetch-mode");
        }
        let missing: Vec<&str> = expected.into_iter().filter(|name| !has(name)).collect();
        if !missing.is_empty() {
            fired.fire("missing_browser_headers", json!({ "missing": missing }));
        }
    }
    if let Some(received) = context.request.user_agent_bytes {
        fired.fire(
            "oversized_user_agent",
            json!({ "received_bytes": received, "kept_bytes": schemas::collect::MAX_USER_AGENT_BYTES }),
        );
    }

    let agent = context.signature_agent.as_deref();
    match context.web_bot_auth {
        WebBotAuth::Verified => {
            fired.fire("web_bot_auth_verified", json!({ "signature_agent": agent }))
        }
        WebBotAuth::Invalid => {
            fired.fire("web_bot_auth_invalid", json!({ "signature_agent": agent }))
        }
        WebBotAuth::Unverified => fired.fire(
            "web_bot_auth_unverified",
            json!({ "signature_agent": agent }),
        ),
        WebBotAuth::Absent => {}
    }
}

fn behavior(
    session: &SessionObservations,
    probes: Option<&Probes>,
    claimed: &ClaimedBrowser,
    fired: &mut Fired,
) {
    let input = session.input_summary();
    // A few untrusted clicks may be the page's own element.click(); untrusted pointer, key or
    // touch events are not something pages dispatch.
    if input.untrusted_device_events >= 1 || input.untrusted_clicks >= UNTRUSTED_CLICKS_TOLERATED {
        fired.fire(
            "untrusted_input",
            json!({
                "untrusted_events": input.untrusted_device_events,
                "untrusted_clicks": input.untrusted_clicks,
                "device_events": input.device_events,
            }),
        );
    }
    if input.robotic_pointer() {
        fired.fire("robotic_pointer_path", json!(input.strokes));
    }
    if input.robotic_typing() {
        fired.fire("robotic_keystroke_timing", json!(input.typing));
    }
    if input.clicks > 0
        && input.pointer_moves == 0
        && input.touch_starts == 0
        && input.keydowns == 0
    {
        fired.fire("click_without_movement", json!({ "clicks": input.clicks }));
    }
    // Where the input came from, judged only where a device's input has one known form: a
    // desktop with no touch points (a touch screen's positions are finer than pixels; a pen's
    // can be too, and a pen reports none, which is why this weighs little alone), at a known
    // pixel ratio; and for the clock, Linux on X11, whose server stamps input in whole
    // milliseconds. Chromium on Wayland stamps input when it handles it, like a protocol client,
    // and cannot know where its window is (it says 0,0): a window placed on the screen is X11's.
    // A place within a few pixels of the corner says nothing (Brave makes one up there), nor
    // does one beside a screen a privacy tool bound to the window. Windows, macOS and ChromeOS
    // stamp input more finely, and are not judged on the clock.
    let probes_screen = probes.and_then(|p| p.screen.as_ref());
    let no_touch = input.touch_starts == 0
        && probes_screen.is_none_or(|s| s.touch != Some(true))
        && probes
            .and_then(|p| p.browser.as_ref())
            .and_then(|b| b.max_touch_points)
            .is_some_and(|points| points == 0.0);
    if let Some(pixel_ratio) = probes_screen.and_then(|s| s.pixel_ratio)
        && claimed.is_desktop()
        && no_touch
    {
        let grid = PixelGrid::of(&session.events, pixel_ratio);
        if grid.off_grid() {
            fired.fire("off_grid_pointer", json!(grid));
        }
    }
    let window_placed = probes.is_some_and(|p| {
        !stealth::screen_bound_to_window(p)
            && p.automation
                .as_ref()
                .and_then(|a| a.window_position)
                .is_some_and(|[x, y]| {
                    x.abs() > MADE_UP_POSITION_PX || y.abs() > MADE_UP_POSITION_PX
                })
    });
    let clock = session.input_clock();
    if claimed.is_desktop() && claimed.os == Os::Linux && window_placed && clock.unaligned() {
        fired.fire("unaligned_input_clock", json!(clock));
    }
    if input.device_events == 0 && input.scrolls == 0 {
        fired.fire(
            "no_input_events",
            json!({ "interaction_batches": session.interaction_batches }),
        );
    }
    if input.human_like() {
        fired.fire(
            "human_like_input",
            json!({
                "device_events": input.device_events,
                "strokes": input.strokes,
                "typing": input.typing,
                "touch_starts": input.touch_starts,
            }),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_slugs_are_unique_and_documented() {
        let docs = include_str!("signals.rs");
        for (index, spec) in CATALOG.iter().enumerate() {
            assert!(
                CATALOG[..index].iter().all(|other| other.slug != spec.slug),
                "duplicate slug {}",
                spec.slug
            );
            let category = serde_json::to_value(spec.category).unwrap();
            let row = format!(
                "//! | `{}` | {} | {} |",
                spec.slug,
                category.as_str().unwrap(),
                spec.weight
            );
            assert!(docs.contains(&row), "module docs lack the row {row}");
            assert!(spec.sentence.ends_with('.'), "{} sentence", spec.slug);
            assert_ne!(spec.weight, 0, "{} has no weight", spec.slug);
        }
        let rows = docs
            .lines()
            .filter(|line| line.starts_with("//! | `"))
            .count();
        assert_eq!(
            rows,
            CATALOG.len(),
            "the docs table and the catalogue differ in length"
        );
    }

    #[test]
    fn ua_traces_name_catalogued_signals() {
        for (_, slug) in UA_TRACES.iter().chain(GLOBAL_TRACES) {
            assert!(spec(slug).is_some(), "{slug}");
        }
    }

    #[test]
    fn unknown_slugs_make_no_signal() {
        assert!(Signal::new("no_such_signal", Value::Null).is_none());
        assert_eq!(
            Signal::new("webdriver", Value::Bool(true)).unwrap().weight,
            90
        );
    }
}
