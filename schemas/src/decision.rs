//! The decision document (docs/architecture.md#decisions): what the processor stores for a session
//! as its `latest_decision` and in `session_decisions`, what the query API and the handoff show,
//! and what `session.result.persisted` summarises. Written by one process and read by others that
//! may run another version, so it is a declared type: members this build does not know are
//! kept ([`Decision::extra`] and its like), and a round trip through it loses nothing.
//!
//! The members are declared in name order on purpose: the documents written before this type
//! were built as `serde_json::Value` maps, which sort their keys, so declaring them sorted makes
//! the type write those documents byte for byte (and what the handoff passes through unchanged).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::ids::DecisionId;
use crate::raw::RawJson;
use crate::time::{self, Timestamp};

/// Whether a program or a person drives the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AutomationStatus {
    Automated,
    Human,
    Uncertain,
}

/// What the customer should make of the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Human,
    Bot,
    /// An agent that proved its identity with a valid Web Bot Auth signature.
    VerifiedBot,
    Suspicious,
}

impl Verdict {
    pub const ALL: [Verdict; 4] = [
        Verdict::Human,
        Verdict::Bot,
        Verdict::VerifiedBot,
        Verdict::Suspicious,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Human => "human",
            Verdict::Bot => "bot",
            Verdict::VerifiedBot => "verified_bot",
            Verdict::Suspicious => "suspicious",
        }
    }
}

/// How much of the session the decision has seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Static probes only.
    Snapshot,
    /// Interaction seen.
    Behavioral,
    /// Set when `results` is called or the session went idle.
    Final,
}

/// Preliminary until the decision is made final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionStatus {
    Preliminary,
    Final,
}

/// The kind of disguise the signals point to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Manipulation {
    UserAgentSpoofing,
    RuntimeTampering,
    AntiDetectBrowser,
    EmulatedDevice,
}

/// The five score categories of a decision (docs/architecture.md#decisions). Declared (and so
/// ordered, as the keys of [`ScoreBreakdown::categories`]) by name, as the documents list them.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Automation,
    Behavior,
    Consistency,
    Integrity,
    Network,
}

impl Category {
    /// Every category, in the order docs/architecture.md#decisions names them.
    pub const ALL: [Category; 5] = [
        Self::Automation,
        Self::Integrity,
        Self::Network,
        Self::Behavior,
        Self::Consistency,
    ];
}

/// Whether a highlight counts for or against the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HighlightKind {
    Concerning,
    Reassuring,
}

/// A decision about a session at one point in its life, as stored and shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Decision {
    pub automation_status: AutomationStatus,
    pub decision_status: DecisionStatus,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    pub evaluated_at: Timestamp,
    /// How long folding the batches and deciding took.
    pub evaluation_duration_ms: f64,
    /// The decision's own id (`evt_`).
    pub event_id: DecisionId,
    /// At most five, concerning first.
    pub highlights: Vec<Highlight>,
    /// True until the decision is final.
    pub is_provisional: bool,
    #[schema(required = true)]
    pub manipulation: Option<Manipulation>,
    pub phase: Phase,
    /// 0 to 100.
    #[schema(maximum = 100)]
    pub risk_score: u8,
    /// The row of the processor's rules table that decided, for whoever asks why.
    pub rule: String,
    pub score_breakdown: ScoreBreakdown,
    /// Every signal that fired, in the catalogue's order.
    pub signals_fired: Vec<FiredSignal>,
    pub verdict: Verdict,
    /// Members of a newer writer, kept so that reading and writing back loses nothing.
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

/// Per-category scores, 0..=100 each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScoreBreakdown {
    pub categories: BTreeMap<Category, u8>,
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

/// One curated line of explanation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Highlight {
    pub evidence: Evidence,
    pub kind: HighlightKind,
    /// Written for a customer reading the session.
    pub sentence: String,
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

/// What a highlight rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Evidence {
    /// The value the signal observed.
    #[schema(value_type = serde_json::Value)]
    pub observed: Value,
    /// The signal's slug.
    pub signal: String,
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

/// One finding about the session: an entry of `signals_fired`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FiredSignal {
    pub category: Category,
    #[schema(value_type = serde_json::Value)]
    pub observed: Value,
    #[serde(rename = "signal")]
    pub slug: String,
    /// Positive is concerning, negative is reassuring.
    pub weight: i32,
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

impl Decision {
    /// Whether the decision is final.
    pub fn is_final(&self) -> bool {
        self.decision_status == DecisionStatus::Final
    }

    /// The decision as the store keeps it.
    pub fn to_raw(&self) -> serde_json::Result<RawJson> {
        RawJson::encode(self)
    }

    /// A stored decision.
    pub fn from_raw(raw: &RawJson) -> serde_json::Result<Self> {
        raw.decode()
    }

    /// Only the status of a stored decision, without decoding the rest (the processor asks on
    /// every fold of a session not yet final).
    pub fn status_of(raw: &RawJson) -> serde_json::Result<DecisionStatus> {
        #[derive(Deserialize)]
        struct Status {
            decision_status: DecisionStatus,
        }
        raw.decode::<Status>().map(|s| s.decision_status)
    }

    /// The fired signals of one category.
    pub fn signals_of(&self, category: Category) -> impl Iterator<Item = &FiredSignal> {
        self.signals_fired
            .iter()
            .filter(move |s| s.category == category)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A decision as the processor wrote it before the type existed: a `Value` tree, so with
    /// its keys sorted at every level.
    fn written_before() -> Value {
        let mut decision = json!({
            "automation_status": "automated",
            "verdict": "bot",
            "risk_score": 87,
            "phase": "final",
            "decision_status": "final",
            "manipulation": "runtime_tampering",
            "score_breakdown": {"categories": {
                "automation": 60, "integrity": 40, "network": 0, "behavior": 0, "consistency": 12
            }},
            "highlights": [{
                "kind": "concerning",
                "sentence": "The browser reports that automation software drives it.",
                "evidence": {"signal": "webdriver", "observed": true},
            }],
            "signals_fired": [
                {"signal": "webdriver", "category": "automation", "weight": 60, "observed": true},
                {"signal": "tampered_natives", "category": "integrity", "weight": 40,
                 "observed": {"functions": ["toString"], "count": 1}},
                {"signal": "human_like_input", "category": "behavior", "weight": -20,
                 "observed": null},
            ],
            "rule": "automation_markers",
        });
        let map = decision.as_object_mut().unwrap();
        map.insert("event_id".into(), json!(DecisionId::generate()));
        map.insert("evaluated_at".into(), json!("2026-11-21T23:18:46.123Z"));
        map.insert("evaluation_duration_ms".into(), json!(0.412_503));
        map.insert("is_provisional".into(), json!(false));
        decision
    }

    #[test]
    fn a_decision_written_before_the_type_reads_and_writes_back_byte_for_byte() {
        let before = written_before();
        let text = serde_json::to_string(&before).unwrap();
        let raw = RawJson::parse(text.as_bytes()).unwrap();
        let decision = Decision::from_raw(&raw).unwrap();
        assert_eq!(decision.verdict, Verdict::Bot);
        assert!(decision.is_final());
        assert_eq!(Decision::status_of(&raw).unwrap(), DecisionStatus::Final);
        assert_eq!(decision.signals_of(Category::Integrity).count(), 1);
        assert_eq!(
            decision.score_breakdown.categories[&Category::Automation],
            60
        );
        assert!(decision.extra.is_empty());
        assert_eq!(decision.to_raw().unwrap().as_str(), text);
        assert_eq!(serde_json::to_value(&decision).unwrap(), before);
    }

    #[test]
    fn members_of_a_newer_writer_survive_a_round_trip() {
        let mut newer = written_before();
        newer["confidence"] = json!(0.93);
        newer["highlights"][0]["evidence"]["details"] = json!({"source": "navigator"});
        newer["highlights"][0]["severity"] = json!("high");
        newer["signals_fired"][0]["first_seen_seq"] = json!(1);
        newer["score_breakdown"]["model"] = json!("v2");
        let decision: Decision = serde_json::from_value(newer.clone()).unwrap();
        assert_eq!(decision.extra["confidence"], json!(0.93));
        assert_eq!(serde_json::to_value(&decision).unwrap(), newer);
    }

    #[test]
    fn a_status_is_read_alone() {
        let raw = |v: Value| RawJson::encode(&v).unwrap();
        assert_eq!(
            Decision::status_of(&raw(json!({"decision_status": "preliminary"}))).unwrap(),
            DecisionStatus::Preliminary
        );
        assert!(Decision::status_of(&raw(json!({}))).is_err());
        assert!(Decision::status_of(&raw(json!({"decision_status": "maybe"}))).is_err());
    }
}
