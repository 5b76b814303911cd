//! The typed members of what the query API shows of a session: a list row's decision summary,
//! the detail's decision and evidence members (docs/api.md#sessions-fingerprints-and-handoffs),
//! and a fingerprint's linked sessions. Built from the stored decision and the processor's state
//! as `schemas::session_view` reads it; the OpenAPI document describes each from these types.

use schemas::decision::{
    AutomationStatus, Category, Decision, DecisionStatus, FiredSignal, Highlight, Manipulation,
    Phase, Verdict,
};
use schemas::ids::DecisionId;
use schemas::network::{AsnFacts, Vpn};
use schemas::session_view::{ScreenView, SessionView, WebBotAuthOutcome};
use schemas::time::{self, Timestamp};
use schemas::{SessionId, VisitorId};
use serde::Serialize;
use store::SessionRecord;

use crate::latest_decision;

/// The latest decision's summary on a list row.
#[derive(Serialize, utoipa::ToSchema)]
pub struct DecisionSummary {
    event_id: DecisionId,
    verdict: Verdict,
    #[schema(maximum = 100)]
    risk_score: u8,
    automation_status: AutomationStatus,
    decision_status: DecisionStatus,
    phase: Phase,
    #[schema(required = true)]
    manipulation: Option<Manipulation>,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    evaluated_at: Timestamp,
}

impl DecisionSummary {
    pub fn of(d: &Decision) -> Self {
        DecisionSummary {
            event_id: d.event_id,
            verdict: d.verdict,
            risk_score: d.risk_score,
            automation_status: d.automation_status,
            decision_status: d.decision_status,
            phase: d.phase,
            manipulation: d.manipulation,
            evaluated_at: d.evaluated_at,
        }
    }
}

/// The detail's decision: every member null before the first decision.
#[derive(Serialize, utoipa::ToSchema)]
pub struct DecisionDetail {
    #[schema(required = true)]
    event_id: Option<DecisionId>,
    #[schema(required = true)]
    automation_status: Option<AutomationStatus>,
    #[schema(required = true)]
    decision_status: Option<DecisionStatus>,
    #[schema(required = true)]
    verdict: Option<Verdict>,
    #[schema(required = true, maximum = 100)]
    risk_score: Option<u8>,
    #[schema(required = true)]
    phase: Option<Phase>,
    #[schema(required = true)]
    manipulation: Option<Manipulation>,
    #[schema(required = true, value_type = Option<schemas::decision::ScoreBreakdown>)]
    score_breakdown: Option<schemas::decision::ScoreBreakdown>,
    #[schema(required = true)]
    is_provisional: Option<bool>,
    #[schema(required = true)]
    evaluation_duration_ms: Option<f64>,
    #[schema(required = true, value_type = Option<String>, format = DateTime)]
    evaluated_at: Option<String>,
    /// The row of the rules table that decided.
    #[schema(required = true)]
    rule: Option<String>,
}

/// `automation`: whether a program drives the browser, and the signals that say so.
#[derive(Serialize, utoipa::ToSchema)]
pub struct AutomationEvidence {
    #[schema(required = true)]
    status: Option<AutomationStatus>,
    /// `navigator.webdriver`, as the browser reported it.
    #[schema(required = true)]
    webdriver: Option<bool>,
    signals: Vec<FiredSignal>,
}

/// `web_bot_auth`: the outcome of the session's signed requests.
#[derive(Serialize, utoipa::ToSchema)]
pub struct WebBotAuthEvidence {
    #[schema(required = true)]
    status: Option<WebBotAuthOutcome>,
    /// The `Signature-Agent` a signed request named.
    #[schema(required = true)]
    signature_agent: Option<String>,
}

/// `network`: the address, where the operator's IP data places it, the round trips both sides
/// measured, the WebSocket comparison (docs/detection.md#network-identity). The IP data's
/// members are null without it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct NetworkEvidence {
    ip_address: String,
    #[schema(required = true)]
    asn: Option<AsnFacts>,
    /// ISO 3166-1 alpha-2.
    #[schema(required = true)]
    country: Option<String>,
    #[schema(required = true)]
    city: Option<String>,
    /// The IANA time zone of the address's location.
    #[schema(required = true)]
    ip_timezone: Option<String>,
    /// Whether the ASN is a hosting or cloud provider's; null without an ASN.
    #[schema(required = true)]
    hosting: Option<bool>,
    /// The provider's name when `hosting` is true.
    #[schema(required = true)]
    hosting_provider: Option<String>,
    /// Whether the address is a Tor exit; null without a Tor exit list.
    #[schema(required = true)]
    tor_exit: Option<bool>,
    /// Whether the session came through a VPN or relay, how surely, and by which methods;
    /// null without IP data.
    #[schema(required = true)]
    vpn: Option<Vpn>,
    /// As the SDK measured them.
    #[schema(required = true)]
    ping_rtts_ms: Option<Vec<f64>>,
    /// When each ping reached the server.
    #[schema(required = true, value_type = Option<Vec<String>>)]
    server_ping_arrivals: Option<Vec<Timestamp>>,
    /// Whether the WebSocket showed the same client; null until the network check ran.
    #[schema(required = true)]
    network_check_consistent: Option<bool>,
    signals: Vec<FiredSignal>,
}

/// `runtime_integrity`: what the page's JavaScript runtime shows of tampering.
#[derive(Serialize, utoipa::ToSchema)]
pub struct IntegrityEvidence {
    /// Native functions whose source is not native code.
    #[schema(required = true)]
    tampered_natives: Option<Vec<String>>,
    /// Properties defined on the instance rather than the prototype.
    #[schema(required = true)]
    descriptor_anomalies: Option<Vec<String>>,
    signals: Vec<FiredSignal>,
}

/// `visitor_fingerprint`: the visitor the session was linked to; null until linked.
#[derive(Serialize, utoipa::ToSchema)]
pub struct VisitorLink {
    #[schema(required = true)]
    id: Option<VisitorId>,
}

/// `connection_fingerprint`: the transport's identity (docs/detection.md#transport-identity).
/// The TLS members are null when neither Vigil nor a trusted proxy terminated TLS with a
/// fingerprint.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ConnectionFingerprint {
    user_agent: String,
    /// Header names of the first batch's request, in wire order, lower case.
    #[schema(required = true)]
    header_names: Option<Vec<String>>,
    /// FoxIO's JA4 of the client's ClientHello: `t13d1516h2_8daaf6152771_02713d6af862`.
    #[schema(required = true)]
    ja4: Option<String>,
    /// JA4's raw form: the sorted ciphers and extensions and the signature algorithms; null
    /// when a proxy passed the fingerprint.
    #[schema(required = true)]
    ja4_r: Option<String>,
    /// The TLS version negotiated: `TLSv1.3`.
    #[schema(required = true)]
    tls_version: Option<String>,
    /// The protocol ALPN negotiated: `h2`, `http/1.1`.
    #[schema(required = true)]
    alpn: Option<String>,
    /// The first batch's HTTP version: `HTTP/1.1`, `HTTP/2.0`.
    #[schema(required = true)]
    http_version: Option<String>,
}

/// `client_telemetry`: curated client telemetry, not the raw probes.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ClientTelemetry {
    #[schema(required = true)]
    user_agent: Option<String>,
    #[schema(required = true)]
    platform: Option<String>,
    #[schema(required = true)]
    languages: Option<Vec<String>>,
    /// IANA name.
    #[schema(required = true)]
    timezone: Option<String>,
    /// `width`, `height`, `touch`, and what else the browser reported of its screen.
    #[schema(required = true, value_type = Option<Object>)]
    screen: Option<ScreenView>,
    #[schema(required = true)]
    webgl_renderer: Option<String>,
    #[schema(required = true)]
    collected_in_ms: Option<f64>,
    /// The probes that ran out of time.
    #[schema(required = true)]
    timed_out: Option<Vec<String>>,
}

/// The detail's members after its id, built from the record's decision and state.
pub struct Evidence {
    pub decision: DecisionDetail,
    pub highlights: Vec<Highlight>,
    pub automation: AutomationEvidence,
    pub web_bot_auth: WebBotAuthEvidence,
    pub network: NetworkEvidence,
    pub runtime_integrity: IntegrityEvidence,
    pub visitor_fingerprint: VisitorLink,
    pub connection_fingerprint: ConnectionFingerprint,
    pub signals_fired: Vec<FiredSignal>,
    pub client_telemetry: ClientTelemetry,
}

/// The fired signals of one category; none without a decision.
fn signals_of(d: Option<&Decision>, category: Category) -> Vec<FiredSignal> {
    d.map(|d| d.signals_of(category).cloned().collect())
        .unwrap_or_default()
}

impl Evidence {
    pub fn of(s: &SessionRecord) -> Self {
        let decided = latest_decision(s);
        let d = decided.as_ref();
        let view = SessionView::of(&s.state);
        let probes = view.probes();
        let automation = probes.and_then(|p| p.automation.as_ref());
        let integrity = probes.and_then(|p| p.integrity.as_ref());
        let context = view.context();
        let facts = context.and_then(|c| c.network.as_ref());
        let request = context.and_then(|c| c.request.as_ref());
        let tls = request.and_then(|r| r.tls.as_ref());
        Evidence {
            decision: DecisionDetail {
                event_id: d.map(|d| d.event_id),
                automation_status: d.map(|d| d.automation_status),
                decision_status: d.map(|d| d.decision_status),
                verdict: d.map(|d| d.verdict),
                risk_score: d.map(|d| d.risk_score),
                phase: d.map(|d| d.phase),
                manipulation: d.and_then(|d| d.manipulation),
                score_breakdown: d.map(|d| d.score_breakdown.clone()),
                is_provisional: d.map(|d| d.is_provisional),
                evaluation_duration_ms: d.map(|d| d.evaluation_duration_ms),
                evaluated_at: d.map(|d| time::format(&d.evaluated_at)),
                rule: d.map(|d| d.rule.clone()),
            },
            highlights: d.map(|d| d.highlights.clone()).unwrap_or_default(),
            automation: AutomationEvidence {
                status: d.map(|d| d.automation_status),
                webdriver: automation.and_then(|a| a.webdriver),
                signals: signals_of(d, Category::Automation),
            },
            web_bot_auth: WebBotAuthEvidence {
                status: context.and_then(|c| c.web_bot_auth),
                signature_agent: context.and_then(|c| c.signature_agent.clone()),
            },
            network: NetworkEvidence {
                ip_address: s.ip.clone(),
                asn: facts.and_then(|f| f.asn.clone()),
                country: facts.and_then(|f| f.country.clone()),
                city: facts.and_then(|f| f.city.clone()),
                ip_timezone: facts.and_then(|f| f.ip_timezone.clone()),
                hosting: facts.and_then(|f| f.hosting),
                hosting_provider: facts.and_then(|f| f.hosting_provider.clone()),
                tor_exit: facts.and_then(|f| f.tor_exit),
                vpn: context.and_then(|c| c.vpn),
                ping_rtts_ms: probes
                    .and_then(|p| p.network.as_ref())
                    .and_then(|n| n.ping_rtts_ms.clone()),
                server_ping_arrivals: context.and_then(|c| c.ping_arrivals.clone()),
                network_check_consistent: context.and_then(|c| c.network_check_consistent),
                signals: signals_of(d, Category::Network),
            },
            runtime_integrity: IntegrityEvidence {
                tampered_natives: integrity.and_then(|i| i.tampered_natives.clone()),
                descriptor_anomalies: integrity.and_then(|i| i.descriptor_anomalies.clone()),
                signals: signals_of(d, Category::Integrity),
            },
            visitor_fingerprint: VisitorLink { id: s.visitor_id },
            connection_fingerprint: ConnectionFingerprint {
                user_agent: s.user_agent.clone(),
                header_names: request.and_then(|r| r.header_names.clone()),
                ja4: tls.and_then(|t| t.ja4.clone()),
                ja4_r: tls.and_then(|t| t.ja4_r.clone()),
                tls_version: tls.and_then(|t| t.tls_version.clone()),
                alpn: tls.and_then(|t| t.alpn.clone()),
                http_version: request.and_then(|r| r.http_version.clone()),
            },
            signals_fired: d.map(|d| d.signals_fired.clone()).unwrap_or_default(),
            client_telemetry: ClientTelemetry {
                user_agent: automation.and_then(|a| a.user_agent.clone()),
                platform: probes
                    .and_then(|p| p.browser.as_ref())
                    .and_then(|b| b.platform.clone()),
                languages: automation.and_then(|a| a.languages.clone()),
                timezone: probes
                    .and_then(|p| p.locale.as_ref())
                    .and_then(|l| l.timezone.clone()),
                screen: probes.and_then(|p| p.screen.clone()),
                webgl_renderer: probes
                    .and_then(|p| p.rendering.as_ref())
                    .and_then(|r| r.webgl_renderer.clone()),
                collected_in_ms: probes.and_then(|p| p.collected_in_ms),
                timed_out: probes.and_then(|p| p.timed_out.clone()),
            },
        }
    }
}

/// One recent session of a visitor, as the fingerprint detail lists it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct LinkedSession {
    session_id: SessionId,
    decision: LinkedDecision,
    request: LinkedRequest,
    score_breakdown: LinkedScores,
}

/// A linked session's decision; every member null before the first.
#[derive(Serialize, utoipa::ToSchema)]
struct LinkedDecision {
    #[schema(required = true)]
    event_id: Option<DecisionId>,
    #[schema(required = true)]
    verdict: Option<Verdict>,
    #[schema(required = true, maximum = 100)]
    risk_score: Option<u8>,
    #[schema(required = true)]
    phase: Option<Phase>,
    #[schema(required = true)]
    is_provisional: Option<bool>,
    #[schema(required = true)]
    manipulation: Option<Manipulation>,
    #[schema(required = true)]
    evaluation_duration_ms: Option<f64>,
    #[schema(required = true, value_type = Option<String>, format = DateTime)]
    evaluated_at: Option<String>,
}

/// The request a linked session came with.
#[derive(Serialize, utoipa::ToSchema)]
struct LinkedRequest {
    url: String,
    user_agent: String,
    ip_address: String,
    /// `<width>x<height>`, when the browser reported both.
    #[schema(required = true, pattern = "^[0-9]+x[0-9]+$")]
    screen_size: Option<String>,
    is_touch_capable: bool,
}

/// A linked session's category scores (empty before its first decision).
#[derive(Serialize, utoipa::ToSchema)]
struct LinkedScores {
    categories: std::collections::BTreeMap<Category, u8>,
}

impl LinkedSession {
    pub fn of(s: &SessionRecord) -> Self {
        let decided = latest_decision(s);
        let d = decided.as_ref();
        let view = SessionView::of(&s.state);
        let probes = view.probes();
        let screen = probes.and_then(|p| p.screen.as_ref());
        let touch_points = probes
            .and_then(|p| p.browser.as_ref())
            .and_then(|b| b.max_touch_points)
            .unwrap_or(0.0);
        LinkedSession {
            session_id: s.id,
            decision: LinkedDecision {
                event_id: d.map(|d| d.event_id),
                verdict: d.map(|d| d.verdict),
                risk_score: d.map(|d| d.risk_score),
                phase: d.map(|d| d.phase),
                is_provisional: d.map(|d| d.is_provisional),
                manipulation: d.and_then(|d| d.manipulation),
                evaluation_duration_ms: d.map(|d| d.evaluation_duration_ms),
                evaluated_at: d.map(|d| time::format(&d.evaluated_at)),
            },
            request: LinkedRequest {
                url: s.page_url.clone(),
                user_agent: s.user_agent.clone(),
                ip_address: s.ip.clone(),
                screen_size: screen.and_then(ScreenView::size),
                is_touch_capable: screen.and_then(|s| s.touch).unwrap_or(false)
                    || touch_points > 0.0,
            },
            score_breakdown: LinkedScores {
                categories: d
                    .map(|d| d.score_breakdown.categories.clone())
                    .unwrap_or_default(),
            },
        }
    }
}
