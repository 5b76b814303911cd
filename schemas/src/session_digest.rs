//! A session as the sessions export reads it (docs/analysts.md#sessions): its request and its
//! latest decision flattened into a few hundred bytes. The store keeps one beside each
//! session's row, written with it, so an export reads these rather than decoding every
//! session's whole state and decision, which made it thirty times slower (docs/performance.md#exports).
//! Enumerated values are kept as the JSON API spells them.

use serde::{Deserialize, Serialize};

use crate::decision::{Category, Decision};
use crate::ids::{SessionId, VisitorId};
use crate::session_view::SessionView;
use crate::time::Timestamp;

/// The categories of [`DecisionDigest::scores`], in order.
pub const CATEGORIES: [Category; 5] = [
    Category::Automation,
    Category::Integrity,
    Category::Network,
    Category::Behavior,
    Category::Consistency,
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionDigest {
    pub session_id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visitor_id: Option<VisitorId>,
    /// Milliseconds since the epoch, the precision of every stored time.
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub url: String,
    pub user_agent: String,
    pub ip_address: String,
    /// CSS pixels, as the browser reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen_width: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen_height: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_bot_auth: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<DecisionDigest>,
}

/// The latest decision, flattened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionDigest {
    pub decided_at_ms: i64,
    pub automation_status: String,
    pub verdict: String,
    pub decision_status: String,
    pub phase: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manipulation: Option<String>,
    pub risk_score: u8,
    pub rule: String,
    /// By [`CATEGORIES`].
    pub scores: [Option<u8>; 5],
    /// The slugs of the signals that fired.
    pub signals: Vec<String>,
}

/// What a session's row says of its request.
pub struct Request<'a> {
    pub session_id: SessionId,
    pub visitor_id: Option<VisitorId>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub url: &'a str,
    pub user_agent: &'a str,
    pub ip_address: &'a str,
}

impl SessionDigest {
    /// The digest of a session: its request, its latest decision, and the browser's screen and
    /// the signed agent's outcome from the processor's state (`views`: the state's parts, read
    /// in turn; the first with a member gives it).
    pub fn of(request: Request<'_>, decision: Option<&Decision>, views: &[&SessionView]) -> Self {
        let screen = views
            .iter()
            .find_map(|v| v.probes().and_then(|p| p.screen.as_ref()));
        let side = |side: Option<f64>| {
            side.filter(|v| v.is_finite() && *v >= 0.0)
                .map(|v| v as i64)
        };
        SessionDigest {
            session_id: request.session_id,
            visitor_id: request.visitor_id,
            created_at_ms: request.created_at.timestamp_millis(),
            updated_at_ms: request.updated_at.timestamp_millis(),
            url: request.url.to_owned(),
            user_agent: request.user_agent.to_owned(),
            ip_address: request.ip_address.to_owned(),
            screen_width: screen.and_then(|s| side(s.width)),
            screen_height: screen.and_then(|s| side(s.height)),
            web_bot_auth: views
                .iter()
                .find_map(|v| v.context().and_then(|c| c.web_bot_auth))
                .and_then(name),
            decision: decision.map(DecisionDigest::of),
        }
    }
}

impl DecisionDigest {
    fn of(d: &Decision) -> Self {
        DecisionDigest {
            decided_at_ms: d.evaluated_at.timestamp_millis(),
            automation_status: name(d.automation_status).unwrap_or_default(),
            verdict: name(d.verdict).unwrap_or_default(),
            decision_status: name(d.decision_status).unwrap_or_default(),
            phase: name(d.phase).unwrap_or_default(),
            manipulation: d.manipulation.and_then(name),
            risk_score: d.risk_score,
            rule: d.rule.clone(),
            scores: CATEGORIES.map(|c| d.score_breakdown.categories.get(&c).copied()),
            signals: d.signals_fired.iter().map(|s| s.slug.clone()).collect(),
        }
    }
}

/// An enumerated value's name as the JSON API spells it.
fn name(value: impl Serialize) -> Option<String> {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => Some(s),
        _ => None,
    }
}
