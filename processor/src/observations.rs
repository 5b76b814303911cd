//! What the processor reads: the decrypted batches the browser SDK sends (the probes batch and
//! interaction batches of `schemas/collect.md` §3) and the server-side context ingest records
//! beside them (§2 pings, §4 network check, §6 the log record's `request`, D9 Web Bot Auth).
//!
//! Browser payloads are read leniently. Every member is optional, unknown members are ignored,
//! and a member of the wrong type reads as absent instead of failing the whole batch: the
//! payload comes from a page an attacker controls, and one mangled member must not buy a client
//! its way out of being scored. Only a batch that is not an object, or has no known `kind`, is
//! refused ([`Batch::from_slice`]).

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

/// Reads a member as `Some(T)` when it has the right shape, and as `None` otherwise.
fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).ok())
}

/// Reads a list keeping the items that have the right shape: one odd event does not discard a
/// whole interaction batch.
fn lenient_items<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(match value {
        serde_json::Value::Array(items) => items
            .into_iter()
            .filter_map(|item| serde_json::from_value(item).ok())
            .collect(),
        _ => Vec::new(),
    })
}

/// Declares a browser-reported struct whose members are all optional and lenient.
macro_rules! observed {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$field_meta:meta])* $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        pub struct $name {
            $(
                $(#[$field_meta])*
                #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
                pub $field: Option<$ty>,
            )*
        }
    };
}

/// One decrypted batch, told apart by its `kind` member.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Batch {
    /// The static probes, sent once as `seq` 1.
    Probes(Box<Probes>),
    /// A window of input events, sent any number of times after the probes.
    Interactions(InteractionBatch),
}

impl Batch {
    /// Parses a decrypted batch. Fails only when the payload is not a JSON object with a known
    /// `kind`; everything inside is lenient.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// Parses a batch already read as JSON (the log record's `observations` member).
    pub fn from_value(value: serde_json::Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(value)
    }
}

observed! {
    /// The probes batch (`kind: "probes"`), §3.1. A probe that ran out of time is named in
    /// `timed_out` and its member is absent.
    pub struct Probes {
        collected_in_ms: f64,
        timed_out: Vec<String>,
        automation: Automation,
        browser: Browser,
        rendering: Rendering,
        screen: Screen,
        locale: Locale,
        storage: Storage,
        integrity: Integrity,
        network: Network,
    }
}

observed! {
    /// Automation markers: the facts BotD reads, unchanged from the browser.
    pub struct Automation {
        /// `navigator.webdriver`.
        webdriver: bool,
        /// Automation globals found on `window`/`document` (`__nightmare`, `_phantom`, ...).
        globals: Vec<String>,
        user_agent: String,
        app_version: String,
        product_sub: String,
        /// `eval.toString().length`.
        eval_length: f64,
        /// The engine guessed from the shape of `new Error().stack`: `v8`, `spidermonkey` or
        /// `javascriptcore`.
        error_stack_engine: String,
        /// `window.chrome` present.
        has_chrome_object: bool,
        /// `Notification.permission`.
        notification_permission: String,
        /// `navigator.permissions.query({name: "notifications"}).state`.
        permissions_notifications: String,
        languages: Vec<String>,
        language: String,
        plugins: Vec<Plugin>,
        mime_types: Vec<String>,
        /// PluginArray/MimeTypeArray prototypes and cross-links hold.
        plugins_consistent: bool,
        /// `[outerWidth, outerHeight]`.
        window_outer: [f64; 2],
        /// `[innerWidth, innerHeight]`.
        window_inner: [f64; 2],
        /// `navigator.connection.rtt`; absent when the browser has no Network Information API.
        connection_rtt: f64,
        document_focus: bool,
        /// `process`/`versions.electron` traces.
        electron: bool,
        /// `$cdc_`/`$wdc_` document keys or selenium attributes.
        selenium: bool,
        /// "HeadlessChrome" in the user agent, as the SDK saw it.
        headless_ua: bool,
    }
}

observed! {
    /// One entry of `navigator.plugins`.
    pub struct Plugin {
        name: String,
        filename: String,
    }
}

observed! {
    /// Browser and OS identity as the runtime reports it, in the page and in a worker.
    pub struct Browser {
        user_agent_data: UserAgentData,
        high_entropy: HighEntropy,
        /// `navigator.platform`.
        platform: String,
        /// `navigator.userAgent` inside a Worker.
        worker_user_agent: String,
        worker_platform: String,
        vendor: String,
        hardware_concurrency: f64,
        device_memory: f64,
        max_touch_points: f64,
    }
}

observed! {
    /// `navigator.userAgentData` (User-Agent Client Hints, low entropy).
    pub struct UserAgentData {
        brands: Vec<Brand>,
        mobile: bool,
        platform: String,
    }
}

observed! {
    /// `navigator.userAgentData.getHighEntropyValues(...)`.
    pub struct HighEntropy {
        platform_version: String,
        full_version_list: Vec<Brand>,
        architecture: String,
    }
}

observed! {
    /// A client-hints brand and its version.
    pub struct Brand {
        brand: String,
        version: String,
    }
}

observed! {
    /// WebGL, canvas and audio facts; the hashes are hex SHA-256 digests.
    pub struct Rendering {
        webgl_vendor: String,
        webgl_renderer: String,
        webgl_parameters_hash: String,
        webgl_hash: String,
        canvas_hash: String,
        audio_hash: String,
    }
}

observed! {
    /// `screen` and `devicePixelRatio`.
    pub struct Screen {
        width: f64,
        height: f64,
        avail_width: f64,
        avail_height: f64,
        color_depth: f64,
        pixel_ratio: f64,
        touch: bool,
    }
}

observed! {
    /// Timezone and locale as the runtime reports them.
    pub struct Locale {
        /// IANA name from `Intl.DateTimeFormat().resolvedOptions().timeZone`.
        timezone: String,
        /// `new Date().getTimezoneOffset()`: minutes to add to local time to get UTC.
        timezone_offset_min: f64,
        intl_locale: String,
    }
}

observed! {
    /// Storage availability and where the visitor token was found (D11).
    pub struct Storage {
        cookies_enabled: bool,
        local_storage: bool,
        session_storage: bool,
        indexed_db: bool,
        service_worker: bool,
        visitor_token: String,
        /// Of `cookies`, `local_storage`, `indexed_db`, `window_name`, `service_worker`.
        token_found_in: Vec<String>,
    }
}

observed! {
    /// Runtime-integrity checks.
    pub struct Integrity {
        /// Native functions whose `toString` is not native code.
        tampered_natives: Vec<String>,
        /// Properties defined on the instance rather than the prototype.
        descriptor_anomalies: Vec<String>,
    }
}

observed! {
    /// What the SDK measured of the network.
    pub struct Network {
        /// Round trips of the three pings, as measured with `performance.now()`.
        ping_rtts_ms: Vec<f64>,
    }
}

/// An interaction batch (`kind: "interactions"`), §3.2.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InteractionBatch {
    /// `[start, end]` of the window, in ms since the SDK loaded.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub window_ms: Option<[f64; 2]>,
    #[serde(default, deserialize_with = "lenient_items")]
    pub events: Vec<InputEvent>,
}

observed! {
    /// One input event. No key values are ever sent.
    pub struct InputEvent {
        /// Milliseconds since the SDK loaded.
        t: f64,
        #[serde(rename = "type")]
        kind: EventKind,
        x: f64,
        y: f64,
        /// `Event.isTrusted`: false when a script dispatched the event.
        trusted: bool,
    }
}

/// The event types the SDK records; anything else reads as [`EventKind::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    Pointermove,
    Pointerdown,
    Pointerup,
    Click,
    Keydown,
    Keyup,
    Scroll,
    Touchstart,
    Touchmove,
    Touchend,
    Focus,
    Blur,
    #[serde(other)]
    Other,
}

impl EventKind {
    /// Input a person produces with a device (focus, blur and scroll also follow from script or
    /// layout, so they do not count).
    pub fn is_device_input(self) -> bool {
        matches!(
            self,
            Self::Pointermove
                | Self::Pointerdown
                | Self::Pointerup
                | Self::Click
                | Self::Keydown
                | Self::Keyup
                | Self::Touchstart
                | Self::Touchmove
                | Self::Touchend
        )
    }
}

/// What the processor has seen of one collect session so far, folded batch by batch in log
/// order. It is plain data so the caller can keep it between batches.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SessionObservations {
    /// The first probes batch seen.
    pub probes: Option<Probes>,
    /// How many probes batches arrived; the SDK sends exactly one.
    pub probes_batches: u32,
    /// How many interaction batches arrived.
    pub interaction_batches: u32,
    /// Input events in arrival order, at most [`SessionObservations::MAX_EVENTS`].
    pub events: Vec<InputEvent>,
    /// Events beyond the cap, counted but not kept.
    pub dropped_events: u64,
}

impl SessionObservations {
    /// Events kept per session: enough for the behavioural statistics, bounded so a page left
    /// open for hours (or a hostile client) cannot grow the state without limit.
    /// The state is stored after every poll, so its size is paid again and again: 5,000 events
    /// made the processor the pipeline's bottleneck, and the first 400 are plenty for the
    /// path and timing statistics.
    pub const MAX_EVENTS: usize = 400;

    /// Folds one batch into the session.
    pub fn record(&mut self, batch: Batch) {
        match batch {
            Batch::Probes(probes) => {
                self.probes_batches = self.probes_batches.saturating_add(1);
                if self.probes.is_none() {
                    self.probes = Some(*probes);
                }
            }
            Batch::Interactions(interactions) => {
                self.interaction_batches = self.interaction_batches.saturating_add(1);
                let room = Self::MAX_EVENTS.saturating_sub(self.events.len());
                let total = interactions.events.len();
                self.events
                    .extend(interactions.events.into_iter().take(room));
                self.dropped_events = self
                    .dropped_events
                    .saturating_add(total.saturating_sub(room) as u64);
            }
        }
    }

    /// True once any interaction batch arrived: the decision is then behavioural.
    pub fn interactions_seen(&self) -> bool {
        self.interaction_batches > 0
    }
}

/// The outcome of Web Bot Auth verification (D9) for the session's requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebBotAuth {
    /// A valid RFC 9421 signature from a known `Signature-Agent`.
    Verified,
    /// A signature that failed verification.
    Invalid,
    /// Signature headers whose key could not be resolved, so nothing could be proved.
    Unverified,
    /// No signature headers.
    #[default]
    Absent,
}

/// The HTTP request that carried the batch: the log record's `request` member (§6), so the
/// consumer can read it straight into this type.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RequestContext {
    pub ip: Option<String>,
    pub user_agent: Option<String>,
    /// Header names in wire order, lower case.
    pub header_names: Vec<String>,
    pub url: Option<String>,
}

/// What the server knows about the session beyond the browser's claims.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerContext {
    pub request: RequestContext,
    /// When each ping of §2 reached the server, in arrival order.
    pub ping_arrivals: Vec<DateTime<Utc>>,
    /// The network check of §4: `Some(false)` when the WebSocket's identity differed from the
    /// HTTP request's; `None` until the check ran.
    pub network_check_consistent: Option<bool>,
    pub web_bot_auth: WebBotAuth,
    /// The `Signature-Agent` of a signed request, when there was one.
    pub signature_agent: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_member_of_the_wrong_type_reads_as_absent() {
        let batch = Batch::from_value(json!({
            "kind": "probes",
            "automation": { "webdriver": "yes", "languages": ["en"], "eval_length": 33 },
            "screen": 7,
            "unknown_member": { "ignored": true }
        }))
        .unwrap();
        let Batch::Probes(probes) = batch else {
            panic!("probes expected")
        };
        let automation = probes.automation.unwrap();
        assert_eq!(automation.webdriver, None);
        assert_eq!(automation.languages, Some(vec!["en".to_owned()]));
        assert_eq!(automation.eval_length, Some(33.0));
        assert_eq!(probes.screen, None);
    }

    #[test]
    fn odd_events_are_dropped_one_by_one() {
        let batch = Batch::from_value(json!({
            "kind": "interactions",
            "events": [
                { "t": 1, "type": "pointermove", "x": 1, "y": 2, "trusted": true },
                42,
                { "t": 2, "type": "gamepad", "trusted": true }
            ]
        }))
        .unwrap();
        let Batch::Interactions(interactions) = batch else {
            panic!("interactions expected")
        };
        assert_eq!(interactions.events.len(), 2);
        assert_eq!(interactions.events[1].kind, Some(EventKind::Other));
    }

    #[test]
    fn an_unknown_kind_or_a_non_object_is_refused() {
        assert!(Batch::from_value(json!({ "kind": "telemetry" })).is_err());
        assert!(Batch::from_value(json!([1, 2])).is_err());
        assert!(Batch::from_slice(b"not json").is_err());
    }

    #[test]
    fn the_session_keeps_the_first_probes_and_caps_events() {
        let mut session = SessionObservations::default();
        let probes = |ms: f64| {
            Batch::Probes(Box::new(Probes {
                collected_in_ms: Some(ms),
                ..Probes::default()
            }))
        };
        session.record(probes(1.0));
        session.record(probes(2.0));
        let events = vec![InputEvent::default(); SessionObservations::MAX_EVENTS + 10];
        session.record(Batch::Interactions(InteractionBatch {
            window_ms: None,
            events,
        }));
        assert_eq!(session.probes.unwrap().collected_in_ms, Some(1.0));
        assert_eq!(session.probes_batches, 2);
        assert_eq!(session.events.len(), SessionObservations::MAX_EVENTS);
        assert_eq!(session.dropped_events, 10);
        assert!(session.interaction_batches == 1);
    }
}
