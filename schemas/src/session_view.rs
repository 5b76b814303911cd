//! The part of the processor's per-session state (`SessionRecord::state`) that the query API
//! shows in a session's detail and a fingerprint's linked sessions: the contract between the
//! two processes, so the query API decodes declared members rather than pointing into the
//! processor's private document. The processor keeps much more (every event, counters); this
//! view decodes only what is shown and ignores the rest.
//!
//! Read as leniently as the processor reads the browser: every member is optional and a member
//! of an unexpected shape reads as absent, so a state written by another version never costs the
//! whole view. `processor`'s tests check its state decodes into this view member by member.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::raw::RawJson;
use crate::time::Timestamp;

crate::lenient_struct! {
    /// The processor's state of one session, as far as it is shown.
    pub struct SessionView {
        observations: ObservationsView,
        context: ContextView,
    }
}

impl SessionView {
    /// The view of a stored state; an empty view when the state is not an object.
    pub fn of(state: &RawJson) -> Self {
        state.decode().unwrap_or_default()
    }

    /// The session's first probes batch, if it sent one.
    pub fn probes(&self) -> Option<&ProbesView> {
        self.observations.as_ref()?.probes.as_ref()
    }

    pub fn context(&self) -> Option<&ContextView> {
        self.context.as_ref()
    }

    /// Whether the person used the page: any input (pointer, touch or keyboard) arrived.
    pub fn interacted(&self) -> bool {
        self.observations
            .as_ref()
            .and_then(|o| o.interaction_batches)
            .is_some_and(|n| n > 0)
    }

    /// The trusted input the element the page marked `mark` (`data-vigil-field`) received;
    /// none when it received none, or the page marks no such element.
    pub fn field(&self, mark: &str) -> FieldUseView {
        self.observations
            .as_ref()
            .and_then(|o| o.fields.as_ref())
            .and_then(|fields| fields.get(mark))
            .cloned()
            .unwrap_or_default()
    }
}

crate::lenient_struct! {
    /// The trusted input one marked element received.
    pub struct FieldUseView {
        /// Keys pressed while it had the focus.
        keys: u64,
        /// Presses of a pointer or a finger on it.
        presses: u64,
        /// Clicks on it, a keyboard's activation of a button included.
        clicks: u64,
    }
}

impl FieldUseView {
    /// Any trusted input at all.
    pub fn used(&self) -> bool {
        [self.keys, self.presses, self.clicks]
            .into_iter()
            .any(|n| n.is_some_and(|n| n > 0))
    }

    /// Pressed or clicked: what activating a button takes, by pointer, finger or keyboard.
    pub fn activated(&self) -> bool {
        self.clicks.is_some_and(|n| n > 0) || self.keys.is_some_and(|n| n > 0)
    }
}

crate::lenient_struct! {
    /// What the browser reported.
    pub struct ObservationsView {
        /// The first probes batch (`schemas/collect.md` §3.1).
        probes: ProbesView,
        /// How many interaction batches (input events) arrived.
        interaction_batches: u64,
        /// Input on the elements the page marked for Vigil, by mark.
        fields: std::collections::BTreeMap<String, FieldUseView>,
    }
}

crate::lenient_struct! {
    /// The members of the probes batch that are shown.
    pub struct ProbesView {
        collected_in_ms: f64,
        /// The probes that ran out of time.
        timed_out: Vec<String>,
        automation: AutomationView,
        browser: BrowserView,
        rendering: RenderingView,
        screen: ScreenView,
        locale: LocaleView,
        integrity: IntegrityView,
        network: NetworkView,
    }
}

crate::lenient_struct! {
    pub struct AutomationView {
        /// `navigator.webdriver`.
        webdriver: bool,
        user_agent: String,
        languages: Vec<String>,
    }
}

crate::lenient_struct! {
    pub struct BrowserView {
        /// `navigator.platform`.
        platform: String,
        max_touch_points: f64,
    }
}

crate::lenient_struct! {
    pub struct RenderingView {
        webgl_renderer: String,
    }
}

crate::lenient_struct! {
    pub struct LocaleView {
        /// IANA name.
        timezone: String,
    }
}

crate::lenient_struct! {
    pub struct IntegrityView {
        /// Native functions whose `toString` is not native code.
        tampered_natives: Vec<String>,
        /// Properties defined on the instance rather than the prototype.
        descriptor_anomalies: Vec<String>,
    }
}

crate::lenient_struct! {
    pub struct NetworkView {
        /// Round trips of the pings as the SDK measured them.
        ping_rtts_ms: Vec<f64>,
    }
}

/// `screen` and `devicePixelRatio`: shown whole, so members this build does not know are kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScreenView {
    #[serde(
        default,
        deserialize_with = "crate::raw::lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub width: Option<f64>,
    #[serde(
        default,
        deserialize_with = "crate::raw::lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub height: Option<f64>,
    #[serde(
        default,
        deserialize_with = "crate::raw::lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub touch: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ScreenView {
    /// `1920x1080`, when both dimensions are known.
    pub fn size(&self) -> Option<String> {
        let round = |n: f64| n.round() as i64;
        Some(format!("{}x{}", round(self.width?), round(self.height?)))
    }
}

/// The outcome of Web Bot Auth verification for the session's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WebBotAuthOutcome {
    Verified,
    Invalid,
    Unverified,
    /// No signature headers.
    Absent,
}

crate::lenient_struct! {
    /// What the server knows of the session beyond the browser's claims.
    pub struct ContextView {
        request: RequestView,
        /// When each ping reached the server, in arrival order.
        ping_arrivals: Vec<Timestamp>,
        /// Whether the WebSocket's identity matched the HTTP request's; absent until the
        /// network check ran.
        network_check_consistent: bool,
        web_bot_auth: WebBotAuthOutcome,
        signature_agent: String,
        /// What the operator's IP data says of the address; absent without IP data.
        network: crate::network::NetworkFacts,
        /// The VPN judgement, as last decided.
        vpn: crate::network::Vpn,
    }
}

crate::lenient_struct! {
    /// The HTTP request that carried the session's first batch.
    pub struct RequestView {
        /// Header names in wire order, lower case.
        header_names: Vec<String>,
        http_version: String,
        tls: crate::collect::TlsClient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_member_of_an_unexpected_shape_costs_only_itself() {
        let state = RawJson::encode(&json!({
            "observations": {
                "probes": {
                    "collected_in_ms": "soon",
                    "automation": {"webdriver": true},
                    "screen": {"width": 1920.0, "height": 1080.0, "orientation": "landscape"},
                },
                "events": [[1, 2, 3]],
            },
            "context": {"web_bot_auth": "telepathic", "signature_agent": "https://a.example"},
            "final_requested": true,
        }))
        .unwrap();
        let view = SessionView::of(&state);
        let probes = view.probes().unwrap();
        assert_eq!(probes.collected_in_ms, None);
        assert_eq!(probes.automation.as_ref().unwrap().webdriver, Some(true));
        let screen = probes.screen.as_ref().unwrap();
        assert_eq!(screen.size().as_deref(), Some("1920x1080"));
        assert_eq!(
            serde_json::to_value(screen).unwrap(),
            json!({"width": 1920.0, "height": 1080.0, "orientation": "landscape"})
        );
        let context = view.context().unwrap();
        assert_eq!(context.web_bot_auth, None);
        assert_eq!(
            context.signature_agent.as_deref(),
            Some("https://a.example")
        );
        assert_eq!(SessionView::of(&RawJson::null()), SessionView::default());
    }
}
