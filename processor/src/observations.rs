//! What the processor reads: the decrypted batches the browser SDK sends (the probes batch and
//! interaction batches of `schemas/collect.md` §3) and the server-side context ingest records
//! beside them (§2 pings, §4 network check, §6 the log record's `request`, Web Bot Auth:
//! docs/architecture.md#collect-transport).
//!
//! Browser payloads are read leniently. Every member is optional, unknown members are ignored,
//! and a member of the wrong type reads as absent instead of failing the whole batch: the
//! payload comes from a page an attacker controls, and one mangled member must not buy a client
//! its way out of being scored. Only a batch that is not an object, or has no known `kind`, is
//! refused ([`Batch::from_slice`]).

use std::borrow::Cow;

use chrono::{DateTime, Utc};

pub use crate::behavior::{EventKind, InputEvent};
use serde::{Deserialize, Serialize};

/// One decrypted batch, told apart by its `kind` member (read by [`Batch::from_slice`], or
/// carried beside it in the log's record and given to [`Batch::of_kind`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
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
        // The kind first, then the batch's own struct from the same text: serde's internally
        // tagged form would buffer the whole batch into a tree before reading it.
        #[derive(Deserialize)]
        struct Kind<'a> {
            #[serde(borrow)]
            kind: Option<std::borrow::Cow<'a, str>>,
        }
        let Kind { kind } = serde_json::from_slice(bytes)?;
        Self::of_kind(kind.as_deref(), bytes)
    }

    /// Parses a decrypted batch whose `kind` was read already (ingest carries it in the log's
    /// record, [`schemas::collect::BatchRecord::kind`]). The kind is trusted, not checked
    /// against the batch's own: ingest read it from the same text.
    pub fn of_kind(kind: Option<&str>, bytes: &[u8]) -> Result<Self, serde_json::Error> {
        let Some(of_kind) = kind.and_then(OfKind::new) else {
            return Err(serde::de::Error::custom(
                "a batch needs `kind`: `probes` or `interactions`",
            ));
        };
        let mut reader = serde_json::Deserializer::from_slice(bytes);
        let batch = serde::de::DeserializeSeed::deserialize(of_kind, &mut reader)?;
        reader.end()?;
        Ok(batch)
    }

    /// Parses a batch already read as JSON.
    pub fn from_value(value: serde_json::Value) -> Result<Self, serde_json::Error> {
        Self::from_slice(&serde_json::to_vec(&value)?)
    }
}

/// Reads a batch of a kind already known, from whatever holds it: a batch's own text
/// ([`Batch::of_kind`]) or the log record carrying it (`pipeline/polled.rs`).
#[derive(Debug, Clone, Copy)]
pub enum OfKind {
    Probes,
    Interactions,
}

impl OfKind {
    /// The reading of a batch of `kind`; `None` for a kind this build does not know.
    pub fn new(kind: &str) -> Option<Self> {
        match kind {
            "probes" => Some(OfKind::Probes),
            "interactions" => Some(OfKind::Interactions),
            _ => None,
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for OfKind {
    type Value = Batch;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Batch, D::Error> {
        Ok(match self {
            OfKind::Probes => Batch::Probes(Box::new(Probes::deserialize(d)?)),
            OfKind::Interactions => Batch::Interactions(InteractionBatch::deserialize(d)?),
        })
    }
}

schemas::lenient_struct! {
    /// The probes batch (`kind: "probes"`), §3.1. A probe that ran out of time is named in
    /// `timed_out` and its member is absent.
    pub struct Probes {
        collected_in_ms: f64,
        /// When the session opened, in ms since the SDK loaded (§3.1; SDK 1.4.0 and later):
        /// the interaction windows count from the load, the server's clock from the open.
        opened_in_ms: f64,
        timed_out: Vec<String>,
        automation: Automation,
        browser: Browser,
        rendering: Rendering,
        screen: Screen,
        locale: Locale,
        storage: Storage,
        integrity: Integrity,
        network: Network,
        residue: Residue,
        /// The session's challenge answered (§1): the nonce the open answer gave, and the hash
        /// of its render on a canvas.
        challenge: Challenge,
    }
}

schemas::lenient_struct! {
    /// The session's challenge as the probes carry it back.
    pub struct Challenge {
        nonce: String,
        render: String,
    }
}

schemas::lenient_struct! {
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
        /// `[screenX, screenY]`; SDK 1.2.0 and later.
        window_position: [f64; 2],
        /// `navigator.connection.rtt`; absent when the browser has no Network Information API.
        connection_rtt: f64,
        document_focus: bool,
        /// `document.visibilityState` when the probes ran (`hidden` in a background tab); SDK
        /// 1.4.0 and later.
        document_visibility: String,
        /// `process`/`versions.electron` traces.
        electron: bool,
        /// `$cdc_`/`$wdc_` document keys or selenium attributes.
        selenium: bool,
        /// "HeadlessChrome" in the user agent, as the SDK saw it.
        headless_ua: bool,
        /// How many times logging an Error through the console read its `name`: once more
        /// than Chromium's own logging when a DevTools-protocol client serialises the console.
        devtools_console_reads: f64,
    }
}

schemas::lenient_struct! {
    /// One entry of `navigator.plugins`.
    pub struct Plugin {
        name: String,
        filename: String,
    }
}

schemas::lenient_struct! {
    /// Browser and OS identity as the runtime reports it, in the page and in a worker.
    pub struct Browser {
        user_agent_data: UserAgentData,
        high_entropy: HighEntropy,
        /// `navigator.platform`.
        platform: String,
        /// `navigator.userAgent` inside a Worker.
        worker_user_agent: String,
        worker_platform: String,
        worker_hardware_concurrency: f64,
        worker_languages: Vec<String>,
        worker_device_memory: f64,
        /// The unmasked WebGL vendor and renderer of an `OffscreenCanvas` in the worker.
        worker_webgl_vendor: String,
        worker_webgl_renderer: String,
        vendor: String,
        hardware_concurrency: f64,
        device_memory: f64,
        max_touch_points: f64,
    }
}

schemas::lenient_struct! {
    /// `navigator.userAgentData` (User-Agent Client Hints, low entropy).
    pub struct UserAgentData {
        brands: Vec<Brand>,
        mobile: bool,
        platform: String,
    }
}

schemas::lenient_struct! {
    /// `navigator.userAgentData.getHighEntropyValues(...)`.
    pub struct HighEntropy {
        platform_version: String,
        full_version_list: Vec<Brand>,
        architecture: String,
    }
}

schemas::lenient_struct! {
    /// A client-hints brand and its version.
    pub struct Brand {
        brand: String,
        version: String,
    }
}

schemas::lenient_struct! {
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

schemas::lenient_struct! {
    /// `screen` and `devicePixelRatio`.
    pub struct Screen {
        width: f64,
        height: f64,
        avail_width: f64,
        avail_height: f64,
        color_depth: f64,
        pixel_ratio: f64,
        touch: bool,
        /// `screen.orientation.type` (`landscape-primary`, ...); SDK 1.2.0 and later.
        orientation: String,
        /// The CSS media queries `device-width` and `device-height` match `width` and `height`;
        /// SDK 1.2.0 and later.
        media_matches: bool,
    }
}

schemas::lenient_struct! {
    /// Timezone and locale as the runtime reports them.
    pub struct Locale {
        /// IANA name: `Temporal.Now.timeZoneId()` from SDK 1.3.0 where the browser has it, else
        /// `Intl.DateTimeFormat().resolvedOptions().timeZone` (the same zone).
        timezone: String,
        /// `new Date().getTimezoneOffset()`: minutes to add to local time to get UTC.
        timezone_offset_min: f64,
        /// The default locale: `Intl.PluralRules` resolves it from SDK 1.3.0 (its region may differ
        /// from `Intl.DateTimeFormat`'s, never its language), else `Intl.DateTimeFormat`.
        intl_locale: String,
    }
}

schemas::lenient_struct! {
    /// Storage availability and where the visitor token was found (docs/architecture.md#visitors).
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

schemas::lenient_struct! {
    /// Runtime-integrity checks.
    pub struct Integrity {
        /// Native functions whose `toString` is not native code.
        tampered_natives: Vec<String>,
        /// Properties defined on the instance rather than the prototype.
        descriptor_anomalies: Vec<String>,
        /// Navigator members whose page value differs from what a pristine realm's own getter
        /// returns for the same navigator.
        realm_mismatches: Vec<String>,
    }
}

schemas::lenient_struct! {
    /// What a headless browser lacks even under another user agent.
    pub struct Residue {
        /// `matchMedia("(any-pointer: fine)")`: a mouse or touchpad is attached.
        any_fine_pointer: bool,
        /// `matchMedia("(any-hover: hover)")`.
        any_hover: bool,
        /// `speechSynthesis.getVoices().length`, after waiting briefly for them to load.
        speech_voices: f64,
        /// `navigator.mediaDevices.enumerateDevices().length`.
        media_devices: f64,
    }
}

schemas::lenient_struct! {
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
        deserialize_with = "schemas::raw::lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub window_ms: Option<[f64; 2]>,
    #[serde(default, deserialize_with = "input::events")]
    pub events: Vec<InputEvent>,
}

mod input;

/// What the processor has seen of one collect session so far, folded batch by batch in log
/// order. It is plain data so the caller can keep it between batches.
///
/// Change it through [`SessionObservations::record`]: the JSON of its probes and events is kept
/// once made ([`Encoded`]), and `record` is what lets go of it when they change.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct SessionObservations {
    /// The first probes batch seen.
    /// Boxed: the probes are most of a state's size, and a state is moved whole through every
    /// fold (out of the processor's memory, into the poll's saves and back).
    pub probes: Option<Box<Probes>>,
    /// How many probes batches arrived; the SDK sends exactly one.
    pub probes_batches: u32,
    /// How many interaction batches arrived.
    pub interaction_batches: u32,
    /// Input events in arrival order, at most [`SessionObservations::MAX_EVENTS`]. Kept packed
    /// (see [`compact_events`]): the state is read and written on every batch. Only ever
    /// appended to, by [`SessionObservations::record`]: the kept statistics rely on it.
    #[serde(with = "compact_events")]
    pub events: Vec<InputEvent>,
    /// Events beyond the cap, counted but not kept.
    pub dropped_events: u64,
    /// Input on the elements the page marked for Vigil (`data-vigil-field`), by mark, at most
    /// [`SessionObservations::MAX_FIELDS`] of them: Gate's consent page marks its user code field
    /// and its Approve button, and judges an approval on the input they received.
    pub fields: std::collections::BTreeMap<Box<str>, FieldUse>,
    #[serde(skip)]
    encoded: Encoded,
    #[serde(skip)]
    statistics: Statistics,
}

/// The trusted input one marked element received (events a script dispatched are not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FieldUse {
    /// Keys pressed while it had the focus.
    pub keys: u32,
    /// Presses of a pointer or a finger on it.
    pub presses: u32,
    /// Clicks on it, a keyboard's activation of a button included.
    pub clicks: u32,
}

impl FieldUse {
    fn count(&mut self, event: &InputEvent) {
        if event.trusted == Some(false) {
            return;
        }
        let counter = match event.kind {
            Some(EventKind::Keydown) => &mut self.keys,
            Some(EventKind::Pointerdown | EventKind::Touchstart) => &mut self.presses,
            Some(EventKind::Click) => &mut self.clicks,
            _ => return,
        };
        *counter = counter.saturating_add(1);
    }
}

/// Whether `mark` is one a page may give an element (`data-vigil-field`): 1 to 32 characters of
/// `a-z`, `0-9`, `_` and `-`.
fn field_mark(mark: &str) -> bool {
    (1..=32).contains(&mark.len())
        && mark
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// The statistics of the kept events that the behavioural signals read, computed once per set
/// of events: once the cap is reached a long session's every fold judged the same 400 events
/// again, about 4% of a saturated ingest's CPU. Each with the number of events it was taken
/// of: events are only ever appended.
#[derive(Debug, Clone, Default)]
struct Statistics {
    input: std::sync::OnceLock<(usize, crate::behavior::InputSummary)>,
    clock: std::sync::OnceLock<(usize, crate::behavior::InputClock)>,
}

/// A cache: two observations are equal whatever either has computed.
impl PartialEq for Statistics {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// The JSON of the parts of a session's observations that stop changing: the probes once they
/// came, the events once [`SessionObservations::MAX_EVENTS`] are kept. The state is encoded
/// after every fold, and encoding these two was a sixth of the processor's work.
#[derive(Debug, Clone, Default)]
struct Encoded {
    probes: std::sync::OnceLock<Box<serde_json::value::RawValue>>,
    /// With the number of events it encodes: events are only ever appended.
    events: std::sync::OnceLock<(usize, Box<serde_json::value::RawValue>)>,
}

/// A cache: two observations are equal whatever either has encoded.
impl PartialEq for Encoded {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

fn raw<T: Serialize + ?Sized, E: serde::ser::Error>(
    value: &T,
) -> Result<Box<serde_json::value::RawValue>, E> {
    serde_json::value::to_raw_value(value).map_err(E::custom)
}

/// The events packed ([`compact_events`]) as the JSON string they are stored as.
fn packed_events<E: serde::ser::Error>(
    events: &[InputEvent],
) -> Result<Box<serde_json::value::RawValue>, E> {
    struct Packed<'a>(&'a [InputEvent]);
    impl Serialize for Packed<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            compact_events::serialize(self.0, s)
        }
    }
    raw(&Packed(events))
}

impl SessionObservations {
    /// The probes and events as JSON, from [`Encoded`] when it has them (and kept there when
    /// they stopped changing), handed to `write`.
    fn with_encoded<R, E: serde::ser::Error>(
        &self,
        write: impl FnOnce(&serde_json::value::RawValue, &serde_json::value::RawValue) -> Result<R, E>,
    ) -> Result<R, E> {
        let probes = match self.encoded.probes.get() {
            Some(json) => json,
            None => {
                let json = raw(&self.probes)?;
                self.encoded.probes.get_or_init(|| json)
            }
        };
        let fresh;
        let events = match self.encoded.events.get() {
            Some((count, json)) if *count == self.events.len() => json.as_ref(),
            Some(_) => {
                fresh = packed_events(&self.events)?;
                &*fresh
            }
            None => {
                let json = packed_events(&self.events)?;
                &self
                    .encoded
                    .events
                    .get_or_init(|| (self.events.len(), json))
                    .1
            }
        };
        write(probes, events)
    }
}

/// The same members as a derived implementation, with the probes and events written from
/// [`Encoded`] when it has them.
impl Serialize for SessionObservations {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        self.with_encoded(|probes, events| {
            let mut st = s.serialize_struct("SessionObservations", 6)?;
            st.serialize_field("probes", probes)?;
            st.serialize_field("probes_batches", &self.probes_batches)?;
            st.serialize_field("interaction_batches", &self.interaction_batches)?;
            st.serialize_field("events", events)?;
            st.serialize_field("dropped_events", &self.dropped_events)?;
            if !self.fields.is_empty() {
                st.serialize_field("fields", &self.fields)?;
            }
            st.end()
        })
    }
}

/// The members of a session's observations that stop changing (the probes once they came, the
/// events once [`SessionObservations::MAX_EVENTS`] are kept), serialized alone: the processor
/// stores them apart from the rest of the state (`store::SessionSave::settled`).
pub struct Settled<'a>(pub &'a SessionObservations);

/// The other members of a session's observations, serialized alone.
pub struct Unsettled<'a>(pub &'a SessionObservations);

impl Serialize for Settled<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        self.0.with_encoded(|probes, events| {
            let mut st = s.serialize_struct("SessionObservations", 2)?;
            st.serialize_field("probes", probes)?;
            st.serialize_field("events", events)?;
            st.end()
        })
    }
}

impl Serialize for Unsettled<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let o = self.0;
        let mut st = s.serialize_struct("SessionObservations", 4)?;
        st.serialize_field("probes_batches", &o.probes_batches)?;
        st.serialize_field("interaction_batches", &o.interaction_batches)?;
        st.serialize_field("dropped_events", &o.dropped_events)?;
        // Only on pages that mark elements: every other session's state stays as it was.
        if !o.fields.is_empty() {
            st.serialize_field("fields", &o.fields)?;
        }
        st.end()
    }
}

impl SessionObservations {
    /// Events kept per session: enough for the behavioural statistics, bounded so a page left
    /// open for hours (or a hostile client) cannot grow the state without limit.
    /// The state is stored after every poll, so its size is paid again and again: 5,000 events
    /// made the processor the pipeline's bottleneck, and the first 400 are plenty for the
    /// path and timing statistics.
    pub const MAX_EVENTS: usize = 400;
    /// Marked elements counted per session: a page marks a few, and a hostile client cannot
    /// grow the state with made-up marks.
    pub const MAX_FIELDS: usize = 8;

    /// Folds one batch into the session.
    pub fn record(&mut self, batch: Batch) {
        match batch {
            Batch::Probes(probes) => {
                self.probes_batches = self.probes_batches.saturating_add(1);
                if self.probes.is_none() {
                    self.probes = Some(probes);
                    self.encoded.probes.take();
                }
            }
            Batch::Interactions(interactions) => {
                self.interaction_batches = self.interaction_batches.saturating_add(1);
                let room = Self::MAX_EVENTS.saturating_sub(self.events.len());
                let total = interactions.events.len();
                if room > 0 && total > 0 {
                    self.encoded.events.take();
                    self.statistics = Statistics::default();
                }
                let fields = &mut self.fields;
                let mut events = interactions.events;
                // Marks are counted over every event, kept or not: the decision's button comes
                // last, after any cap.
                for event in &mut events {
                    if let Some(mark) = event.field.take() {
                        let room_for_mark =
                            fields.len() < Self::MAX_FIELDS || fields.contains_key(&mark);
                        if room_for_mark {
                            fields.entry(mark).or_default().count(event);
                        }
                    }
                }
                self.events
                    .extend(events.into_iter().take(room).map(quantize));
                self.dropped_events = self
                    .dropped_events
                    .saturating_add(total.saturating_sub(room) as u64);
            }
        }
    }

    /// The kept events' counts and stroke and typing statistics.
    pub fn input_summary(&self) -> Cow<'_, crate::behavior::InputSummary> {
        let of = || crate::behavior::InputSummary::of(&self.events);
        match self
            .statistics
            .input
            .get_or_init(|| (self.events.len(), of()))
        {
            (kept, summary) if *kept == self.events.len() => Cow::Borrowed(summary),
            _ => Cow::Owned(of()),
        }
    }

    /// The kept events' input clock.
    pub fn input_clock(&self) -> crate::behavior::InputClock {
        let of = || crate::behavior::InputClock::of(&self.events);
        match self
            .statistics
            .clock
            .get_or_init(|| (self.events.len(), of()))
        {
            (kept, clock) if *kept == self.events.len() => *clock,
            _ => of(),
        }
    }

    /// True once any interaction batch arrived: the decision is then behavioural.
    pub fn interactions_seen(&self) -> bool {
        self.interaction_batches > 0
    }
}

/// An event as the session keeps it: time and coordinates to a tenth (of a millisecond, of a
/// pixel), within ±10¹² so they fit the kept rows exactly. Finer than any statistic needs, and
/// the same whether the state was just folded or read back from the store.
fn quantize(mut e: InputEvent) -> InputEvent {
    let q = |v: Option<f64>| v.map(|v| (v.clamp(-1e12, 1e12) * 10.0).round() / 10.0);
    e.t = q(e.t);
    e.x = q(e.x);
    e.y = q(e.y);
    e
}

/// The kept input events, packed: the state is stored on every fold, and as JSON rows its 400
/// events were most of its 13 KB and of the processor's encoding time. Written as base64 text
/// of, per event, a byte of flags (which members are present, and `trusted`), the type by its
/// number in [`KINDS`], and time and coordinates as zigzag LEB128 varints of their tenths (see
/// [`super::quantize`]), each the difference from the same member of the event before, so a
/// pointer path costs a few bytes an event. States stored before hold rows
/// `[t, type, x, y, trusted]`; those read too.
mod compact_events {
    use std::fmt;

    use base64::Engine;
    use base64::engine::general_purpose::STANDARD_NO_PAD;
    use serde::de::{self, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    use super::{EventKind, InputEvent};

    const KINDS: [EventKind; 13] = [
        EventKind::Other,
        EventKind::Pointermove,
        EventKind::Pointerdown,
        EventKind::Pointerup,
        EventKind::Click,
        EventKind::Keydown,
        EventKind::Keyup,
        EventKind::Scroll,
        EventKind::Touchstart,
        EventKind::Touchmove,
        EventKind::Touchend,
        EventKind::Focus,
        EventKind::Blur,
    ];

    const T: u8 = 1;
    const KIND: u8 = 1 << 1;
    const X: u8 = 1 << 2;
    const Y: u8 = 1 << 3;
    const TRUSTED_KNOWN: u8 = 1 << 4;
    const TRUSTED: u8 = 1 << 5;

    fn tenths(v: Option<f64>) -> Option<i64> {
        v.map(|v| (v * 10.0).round() as i64)
    }

    fn from_tenths(v: Option<i64>) -> Option<f64> {
        v.map(|v| v as f64 / 10.0)
    }

    fn kind_of(number: u8) -> EventKind {
        KINDS
            .get(usize::from(number))
            .copied()
            .unwrap_or(EventKind::Other)
    }

    /// The previous value of each of the three delta-coded members.
    #[derive(Default)]
    struct Last([i64; 3]);

    fn put_varint(out: &mut Vec<u8>, value: i64, last: &mut i64) {
        let delta = value.wrapping_sub(*last);
        *last = value;
        let mut zigzag = ((delta << 1) ^ (delta >> 63)) as u64;
        while zigzag >= 0x80 {
            out.push(zigzag as u8 | 0x80);
            zigzag >>= 7;
        }
        out.push(zigzag as u8);
    }

    fn take_varint(bytes: &mut &[u8], last: &mut i64) -> Option<i64> {
        let mut zigzag = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = bytes.split_first()?;
            *bytes = rest;
            zigzag |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                let delta = (zigzag >> 1) as i64 ^ -((zigzag & 1) as i64);
                *last = last.wrapping_add(delta);
                return Some(*last);
            }
        }
        None
    }

    pub fn pack(events: &[InputEvent]) -> Vec<u8> {
        let mut out = Vec::with_capacity(events.len() * 6);
        let mut last = Last::default();
        for e in events {
            let kind = e
                .kind
                .map(|k| KINDS.iter().position(|x| *x == k).unwrap_or(0) as u8);
            let (t, x, y) = (tenths(e.t), tenths(e.x), tenths(e.y));
            let mut flags = 0;
            for (present, bit) in [
                (t.is_some(), T),
                (kind.is_some(), KIND),
                (x.is_some(), X),
                (y.is_some(), Y),
                (e.trusted.is_some(), TRUSTED_KNOWN),
                (e.trusted == Some(true), TRUSTED),
            ] {
                if present {
                    flags |= bit;
                }
            }
            out.push(flags);
            if let Some(kind) = kind {
                out.push(kind);
            }
            for (i, v) in [t, x, y].into_iter().enumerate() {
                if let Some(v) = v {
                    put_varint(&mut out, v, &mut last.0[i]);
                }
            }
        }
        out
    }

    pub fn unpack(mut bytes: &[u8]) -> Option<Vec<InputEvent>> {
        let mut events = Vec::with_capacity(bytes.len() / 4);
        let mut last = Last::default();
        while let Some((&flags, rest)) = bytes.split_first() {
            bytes = rest;
            let kind = if flags & KIND != 0 {
                let (&k, rest) = bytes.split_first()?;
                bytes = rest;
                Some(kind_of(k))
            } else {
                None
            };
            let mut values = [None; 3];
            for (i, bit) in [T, X, Y].into_iter().enumerate() {
                if flags & bit != 0 {
                    values[i] = Some(take_varint(&mut bytes, &mut last.0[i])?);
                }
            }
            events.push(InputEvent {
                t: from_tenths(values[0]),
                kind,
                x: from_tenths(values[1]),
                y: from_tenths(values[2]),
                trusted: (flags & TRUSTED_KNOWN != 0).then_some(flags & TRUSTED != 0),
                field: None,
            });
        }
        Some(events)
    }

    pub fn serialize<S: Serializer>(events: &[InputEvent], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD_NO_PAD.encode(pack(events)))
    }

    /// A row of the states stored before the packed form.
    type Row = (
        Option<i64>,
        Option<u8>,
        Option<i64>,
        Option<i64>,
        Option<bool>,
    );

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<InputEvent>, D::Error> {
        struct Events;
        impl<'de> Visitor<'de> for Events {
            type Value = Vec<InputEvent>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("packed events or event rows")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                let bytes = STANDARD_NO_PAD.decode(v).map_err(E::custom)?;
                unpack(&bytes).ok_or_else(|| E::custom("packed events end mid-event"))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut events = Vec::new();
                while let Some((t, kind, x, y, trusted)) = seq.next_element::<Row>()? {
                    events.push(InputEvent {
                        t: from_tenths(t),
                        kind: kind.map(kind_of),
                        x: from_tenths(x),
                        y: from_tenths(y),
                        trusted,
                        field: None,
                    });
                }
                Ok(events)
            }
        }
        d.deserialize_any(Events)
    }
}

/// The outcome of Web Bot Auth verification (docs/architecture.md#collect-transport) for the
/// session's requests.
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

impl WebBotAuth {
    /// Which outcome a session keeps when its requests disagree: a failed signature outweighs
    /// a valid one (an agent replaying a captured header is still caught), and a valid one
    /// outweighs an unresolvable one.
    fn weight(self) -> u8 {
        match self {
            WebBotAuth::Absent => 0,
            WebBotAuth::Unverified => 1,
            WebBotAuth::Verified => 2,
            WebBotAuth::Invalid => 3,
        }
    }
}

impl ServerContext {
    /// Folds in one request's Web Bot Auth check (ingest's, on the log record).
    pub fn record_web_bot_auth(&mut self, check: &schemas::collect::WebBotAuthCheck) {
        use schemas::collect::WebBotAuthStatus as S;
        let outcome = match check.status {
            S::Verified => WebBotAuth::Verified,
            S::Invalid => WebBotAuth::Invalid,
            S::Unverified => WebBotAuth::Unverified,
        };
        if outcome.weight() >= self.web_bot_auth.weight() {
            self.web_bot_auth = outcome;
            if check.signature_agent.is_some() {
                self.signature_agent = check.signature_agent.clone();
            }
        }
    }
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
    /// The `User-Agent`'s length as received, when ingest cut it to its first 512 bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_agent_bytes: Option<usize>,
    /// `HTTP/1.1`, `HTTP/2.0`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_version: Option<String>,
    /// The TLS client, when Vigil or a trusted proxy read its hello.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<schemas::collect::TlsClient>,
}

impl RequestContext {
    /// The context of the request a batch record names.
    pub fn of(request: &schemas::collect::BatchRequest) -> Self {
        RequestContext {
            ip: Some(request.ip.clone()),
            user_agent: Some(request.user_agent.clone()),
            header_names: request.header_names.clone(),
            url: Some(request.url.clone()),
            user_agent_bytes: request.user_agent_bytes,
            http_version: request.http_version.clone(),
            tls: request.tls.clone(),
        }
    }
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
    /// The SDK asked for the result (§5), as opposed to the session going idle.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub results_asked: bool,
    /// The network check's WebSocket connected (§4), whether or not its comparison came.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub network_check_connected: bool,
    pub web_bot_auth: WebBotAuth,
    /// The `Signature-Agent` of a signed request, when there was one.
    pub signature_agent: Option<String>,
    /// The session's challenge nonce (schemas/collect.md §1), which its probes must carry back,
    /// and the SDK version the session was opened with; `None` before challenges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub challenge: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sdk_version: Option<String>,
    /// Batches another session sent first (docs/detection.md#replayed-sessions).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replayed: Vec<ReplayedBatch>,
    /// The time the interaction batches claimed against the time the server saw pass.
    #[serde(skip_serializing_if = "TimeClaims::is_empty")]
    pub time_claims: TimeClaims,
    /// What the operator's IP data says of the first batch's address, looked up when it came;
    /// absent without IP data (docs/detection.md#network-identity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<schemas::network::NetworkFacts>,
    /// The VPN judgement of the network facts and the browser's claims, as last decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vpn: Option<schemas::network::Vpn>,
}

/// A batch whose mark another session left first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayedBatch {
    pub seq: u64,
    /// `probes` or `interactions`.
    pub kind: String,
    /// The session that sent it first.
    pub first_seen_in: schemas::SessionId,
}

/// What the interaction batches claimed of the time since the session opened, against the
/// server's own clock: the most a batch's window ended after the time that had passed (a batch
/// from the future), and the most one ended before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TimeClaims {
    pub batches: u32,
    pub most_ahead_ms: f64,
    pub most_behind_ms: f64,
    /// The time that had passed when the batch most ahead arrived.
    pub elapsed_at_most_ahead_ms: f64,
    pub elapsed_at_most_behind_ms: f64,
}

impl TimeClaims {
    fn is_empty(&self) -> bool {
        self.batches == 0
    }

    /// Counts a batch whose window ended `claimed_ms` after the SDK loaded, arriving
    /// `elapsed_ms` after the session opened.
    pub fn count(&mut self, claimed_ms: f64, elapsed_ms: f64) {
        if !claimed_ms.is_finite() || !elapsed_ms.is_finite() {
            return;
        }
        self.batches = self.batches.saturating_add(1);
        let ahead = claimed_ms - elapsed_ms;
        if ahead > self.most_ahead_ms {
            self.most_ahead_ms = ahead;
            self.elapsed_at_most_ahead_ms = elapsed_ms;
        }
        if -ahead > self.most_behind_ms {
            self.most_behind_ms = -ahead;
            self.elapsed_at_most_behind_ms = elapsed_ms;
        }
    }
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

    /// A batch read with the kind its record carries is the batch read from itself, and a kind
    /// this build does not know is refused either way.
    #[test]
    fn a_carried_kind_reads_the_batch_as_its_own_does() {
        let texts = [
            r#"{"kind": "probes", "collected_in_ms": 2, "automation": {"webdriver": true}}"#,
            r#"{"kind": "interactions", "events": [{"t": 1, "type": "pointermove", "x": 3}]}"#,
        ];
        for (text, kind) in texts.iter().zip(["probes", "interactions"]) {
            assert_eq!(
                Batch::of_kind(Some(kind), text.as_bytes()).unwrap(),
                Batch::from_slice(text.as_bytes()).unwrap(),
                "{text}"
            );
        }
        assert!(Batch::of_kind(Some("telemetry"), texts[0].as_bytes()).is_err());
        assert!(Batch::of_kind(None, texts[0].as_bytes()).is_err());
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

    /// Input on marked elements is counted per mark as batches arrive, trusted events only, past
    /// the events' cap too (the decision's button comes last); malformed marks and marks past
    /// the eighth are not, and the counts survive the state's round trip and read back through
    /// the query API's view.
    #[test]
    fn marked_fields_count_trusted_input_per_mark() {
        let batch = Batch::from_slice(
            br#"{"kind":"interactions","events":[
                {"t":1,"type":"keydown","trusted":true,"field":"code"},
                {"t":2,"type":"keyup","trusted":true,"field":"code"},
                {"t":3,"type":"keydown","trusted":false,"field":"code"},
                {"t":4,"type":"pointerdown","trusted":true,"field":"approve"},
                {"t":5,"type":"click","trusted":true,"field":"approve"},
                {"t":6,"type":"click","trusted":true,"field":"Not A Mark"},
                {"t":7,"type":"click","trusted":true,"field":{"nested":1}},
                {"t":8,"type":"pointermove","trusted":true}
            ]}"#,
        )
        .unwrap();
        let mut session = SessionObservations::default();
        let filler = vec![InputEvent::default(); SessionObservations::MAX_EVENTS];
        session.record(Batch::Interactions(InteractionBatch {
            window_ms: None,
            events: filler,
        }));
        session.record(batch);
        assert_eq!(session.events.len(), SessionObservations::MAX_EVENTS);
        assert_eq!(session.fields.len(), 2, "{:?}", session.fields);
        assert_eq!(
            session.fields["code"],
            FieldUse {
                keys: 1,
                presses: 0,
                clicks: 0
            }
        );
        assert_eq!(
            session.fields["approve"],
            FieldUse {
                keys: 0,
                presses: 1,
                clicks: 1
            }
        );
        for i in 0..20 {
            session.record(Batch::Interactions(InteractionBatch {
                window_ms: None,
                events: vec![InputEvent {
                    kind: Some(EventKind::Click),
                    trusted: Some(true),
                    field: Some(format!("mark-{i}").into()),
                    ..InputEvent::default()
                }],
            }));
        }
        assert_eq!(session.fields.len(), SessionObservations::MAX_FIELDS);
        let json = serde_json::to_string(&session).unwrap();
        let back: SessionObservations = serde_json::from_str(&json).unwrap();
        assert_eq!(back.fields, session.fields);
        let view: schemas::session_view::SessionView =
            serde_json::from_str(&format!(r#"{{"observations":{json}}}"#)).unwrap();
        assert!(view.field("code").used());
        assert!(view.field("approve").activated());
        assert!(!view.field("elsewhere").used());
    }

    /// The event statistics computed once ([`Statistics`]) follow every change of the events:
    /// each read equals the statistics taken afresh, and once the cap is reached they are kept.
    #[test]
    fn kept_event_statistics_follow_every_change() {
        use crate::behavior::{InputClock, InputSummary};
        // Strokes of uneven steps at whole pixels, on a sub-millisecond clock that drifts.
        let stroke = |start: f64| {
            Batch::Interactions(InteractionBatch {
                window_ms: None,
                events: (0..60)
                    .map(|i| {
                        let i = f64::from(i);
                        InputEvent {
                            t: Some(start + i * 16.3 + (i * 0.37) % 1.0),
                            kind: Some(EventKind::Pointermove),
                            x: Some((10.0 + i * 3.0 + (i * i) % 7.0).round()),
                            y: Some((20.0 + (i * 1.7) % 11.0).round()),
                            trusted: Some(true),
                            field: None,
                        }
                    })
                    .collect(),
            })
        };
        let mut session = SessionObservations::default();
        let mut summaries = Vec::new();
        for round in 0..9 {
            session.record(stroke(2000.0 * f64::from(round)));
            let summary = session.input_summary().into_owned();
            assert_eq!(summary, InputSummary::of(&session.events), "round {round}");
            assert_eq!(session.input_clock(), InputClock::of(&session.events));
            summaries.push(summary);
        }
        assert_eq!(session.events.len(), SessionObservations::MAX_EVENTS);
        assert!(summaries[0] != summaries[6], "the statistics never changed");
        assert!(matches!(session.input_summary(), Cow::Borrowed(_)));
        // Events changed behind its back are read afresh, not from the kept statistics.
        session.events.truncate(100);
        assert_eq!(
            session.input_summary().into_owned(),
            InputSummary::of(&session.events)
        );
        assert_eq!(session.input_clock(), InputClock::of(&session.events));
    }

    /// The probes and events encoded once ([`Encoded`]) are let go of when they change: each
    /// encoding along a session's folds equals that of a copy encoded from scratch.
    #[test]
    fn a_kept_encoding_follows_every_change() {
        // The same members in a value that has encoded nothing yet.
        let fresh = |session: &SessionObservations| {
            serde_json::to_string(&SessionObservations {
                probes: session.probes.clone(),
                probes_batches: session.probes_batches,
                interaction_batches: session.interaction_batches,
                events: session.events.clone(),
                dropped_events: session.dropped_events,
                ..SessionObservations::default()
            })
            .unwrap()
        };
        let interactions = |n: usize, t: f64| {
            Batch::Interactions(InteractionBatch {
                window_ms: None,
                events: (0..n)
                    .map(|i| InputEvent {
                        t: Some(t + i as f64),
                        x: Some(i as f64),
                        ..InputEvent::default()
                    })
                    .collect(),
            })
        };
        let mut session = SessionObservations::default();
        let mut encodings = vec![serde_json::to_string(&session).unwrap()];
        session.record(interactions(150, 0.0));
        encodings.push(serde_json::to_string(&session).unwrap());
        session.record(Batch::from_slice(br#"{"kind": "probes", "collected_in_ms": 2}"#).unwrap());
        encodings.push(serde_json::to_string(&session).unwrap());
        for round in 0..4 {
            session.record(interactions(150, 1000.0 * f64::from(round)));
            let text = serde_json::to_string(&session).unwrap();
            assert_eq!(text, fresh(&session), "after interactions batch {round}");
            encodings.push(text);
        }
        assert_eq!(session.events.len(), SessionObservations::MAX_EVENTS);
        assert!(
            encodings.windows(2).all(|w| w[0] != w[1]),
            "each fold changed the encoding"
        );
        assert!(
            encodings[2].contains(r#""collected_in_ms":2"#),
            "{}",
            encodings[2]
        );
    }

    #[test]
    fn kept_state_round_trips_with_events_packed() {
        let mut session = SessionObservations::default();
        session.record(
            Batch::from_slice(
                br#"{"kind": "interactions", "events": [
                    {"t": 1.5, "type": "pointermove", "x": 3, "y": 4, "trusted": true},
                    {"t": 7.26, "type": "click", "x": 0.04, "y": 1e300},
                    {"t": 2, "type": "wheel", "trusted": false},
                    {"type": "click", "x": "odd"},
                    {"t": -1e300, "x": -3, "y": 4}
                ]}"#,
            )
            .unwrap(),
        );
        let text = serde_json::to_string(&session).unwrap();
        assert!(
            text.contains(r#""events":"PwEePFA"#),
            "flags, the type by number, tenths as varints: {text}"
        );
        let back: SessionObservations = serde_json::from_str(&text).unwrap();
        assert_eq!(back, session, "what is read back is what was kept");
        assert_eq!(back.events[1].t, Some(7.3), "kept to a tenth");
        assert_eq!(back.events[1].y, Some(1e12), "clamped");
        assert_eq!(back.events[2].kind, Some(EventKind::Other));
        assert_eq!(back.events[2].trusted, Some(false));
        assert_eq!(back.events[3].x, None);
        assert_eq!(back.events[4].t, Some(-1e12));
    }

    #[test]
    fn states_stored_with_event_rows_still_read() {
        let stored =
            serde_json::json!({"events": [[15, 1, 30, 40, true], [null, 4, null, -5, null]]});
        let read: SessionObservations = serde_json::from_value(stored).unwrap();
        assert_eq!(
            read.events,
            vec![
                InputEvent {
                    t: Some(1.5),
                    kind: Some(EventKind::Pointermove),
                    x: Some(3.0),
                    y: Some(4.0),
                    trusted: Some(true),
                    field: None,
                },
                InputEvent {
                    kind: Some(EventKind::Click),
                    y: Some(-0.5),
                    ..InputEvent::default()
                },
            ]
        );
    }

    #[test]
    fn packed_events_cut_short_are_refused() {
        let packed = compact_events::pack(&[InputEvent {
            t: Some(123_456.7),
            kind: Some(EventKind::Keydown),
            ..InputEvent::default()
        }]);
        assert!(compact_events::unpack(&packed).is_some());
        assert!(compact_events::unpack(&packed[..packed.len() - 1]).is_none());
    }

    proptest::proptest! {
        #[test]
        fn packed_events_round_trip(
            rows in proptest::collection::vec(
                (
                    proptest::option::of(-1e12f64..1e12),
                    proptest::option::of(0usize..13),
                    proptest::option::of(-1e12f64..1e12),
                    proptest::option::of(-1e12f64..1e12),
                    proptest::option::of(proptest::bool::ANY),
                ),
                0..50,
            )
        ) {
            let kinds = [EventKind::Other, EventKind::Pointermove, EventKind::Click, EventKind::Blur];
            let events: Vec<InputEvent> = rows
                .into_iter()
                .map(|(t, kind, x, y, trusted)| quantize(InputEvent {
                    t,
                    kind: kind.map(|k| kinds[k % kinds.len()]),
                    x,
                    y,
                    trusted,
                    field: None,
                }))
                .collect();
            let back = compact_events::unpack(&compact_events::pack(&events));
            proptest::prop_assert_eq!(back, Some(events));
        }
    }

    #[test]
    fn odd_input_events_never_fail_their_batch() {
        let batch = Batch::from_slice(
            br#"{"kind": "interactions", "events": [
                {"t": 1, "t": 2, "type": "click", "type": 7, "x": [1, {"a": 2}], "y": {"z": []}, "trusted": "yes"},
                5, "text", null, [1, 2], {},
                {"t": 3.5, "type": "keydown", "trusted": true, "extra": {"deep": [1]}}
            ]}"#,
        )
        .unwrap();
        let Batch::Interactions(b) = batch else {
            panic!("not interactions")
        };
        assert_eq!(b.events.len(), 3, "objects are kept, other items dropped");
        assert_eq!(b.events[0].t, Some(2.0), "the last duplicate wins");
        assert_eq!(b.events[0].kind, None, "a type of the wrong type is absent");
        assert_eq!(
            (b.events[0].x, b.events[0].y, b.events[0].trusted),
            (None, None, None)
        );
        assert_eq!(b.events[1], InputEvent::default());
        assert_eq!(b.events[2].kind, Some(EventKind::Keydown));
        for not_a_list in [r#"{"a": 1}"#, "7", r#""x""#, "null", "true"] {
            let text = format!(r#"{{"kind": "interactions", "events": {not_a_list}}}"#);
            let Batch::Interactions(b) = Batch::from_slice(text.as_bytes()).unwrap() else {
                panic!("not interactions")
            };
            assert!(b.events.is_empty(), "{not_a_list}");
        }
        assert!(Batch::from_slice(br#"{"kind": 3}"#).is_err());
        assert!(Batch::from_slice(br#"[1]"#).is_err());
    }
}
