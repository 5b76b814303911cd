//! Signals to a decision (docs/architecture.md#decisions), through one table read top to bottom.
//!
//! How a decision is made:
//!
//! 1. Each category's score is the sum of its fired weights, clamped to 0..=100.
//! 2. The base risk is the sum of all fired weights, clamped to 0..=100, so reassuring signals
//!    pull it down.
//! 3. The first row of [`RULES`] whose condition holds sets `automation_status` and `verdict`,
//!    and clamps the risk into the row's band, so a score always reads like its verdict.
//! 4. The first row of [`MANIPULATION_RULES`] that holds names the manipulation, if any.
//! 5. Highlights are the strongest concerning signals, then the strongest reassuring ones, at
//!    most five.
//!
//! Every threshold lives in these two tables; changing a verdict means editing a row, and the
//! golden test (`tests/it/golden.rs`) shows every decision that moved.

use crate::signals::{Category, Signal};
use serde::Serialize;
use std::collections::BTreeMap;

// The decision's vocabulary is the stored document's (`schemas::decision`): the query API and
// the handoff read the same enums the rules write.
pub use schemas::decision::{
    AutomationStatus, DecisionStatus, HighlightKind, Manipulation, Phase, Verdict,
};

/// A condition over the fired signals; the small language the tables are written in.
#[derive(Debug, Clone, Copy)]
pub enum When {
    Always,
    /// The signal fired.
    Fired(&'static str),
    /// At least one of the signals fired.
    AnyFired(&'static [&'static str]),
    /// At least `n` of the signals fired.
    CountFired(usize, &'static [&'static str]),
    /// The category scored at least this much.
    Category(Category, u8),
    /// The base risk is at least this much.
    RiskAtLeast(u8),
    /// Every condition holds.
    All(&'static [When]),
    /// At least one condition holds.
    Any(&'static [When]),
}

/// A row of the verdict table.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// Names the row in decisions (`rule`) and in the golden file.
    pub name: &'static str,
    pub when: When,
    pub automation_status: AutomationStatus,
    pub verdict: Verdict,
    /// The risk score is clamped into `min..=max`.
    pub risk: (u8, u8),
}

/// A row of the manipulation table.
#[derive(Debug, Clone, Copy)]
pub struct ManipulationRule {
    pub when: When,
    pub manipulation: Manipulation,
}

use AutomationStatus::{Automated, Human as Person, Uncertain};
use Category::{Automation as A, Behavior as B, Integrity as I};

const fn rule(
    name: &'static str,
    when: When,
    automation_status: AutomationStatus,
    verdict: Verdict,
    risk: (u8, u8),
) -> Rule {
    Rule {
        name,
        when,
        automation_status,
        verdict,
        risk,
    }
}

/// The verdict table: the first row that holds decides.
#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    // A signature proves who the agent is: a verified bot, whatever else fired.
    rule("signed_agent",        When::Fired("web_bot_auth_verified"),  Automated, Verdict::VerifiedBot, (0, 20)),
    rule("forged_signature",    When::Fired("web_bot_auth_invalid"),   Automated, Verdict::Bot,         (90, 100)),
    // A session that sent what another session sent first, carried another session's challenge
    // (or none, from an SDK that always answers it), or claimed time that had not passed: its
    // batches were recorded elsewhere and replayed (docs/detection.md#replayed-sessions).
    rule("replayed_session",    When::AnyFired(&["replayed_payload", "stale_challenge", "challenge_missing", "time_ahead"]),
                                                                       Automated, Verdict::Bot,         (80, 100)),
    // One strong automation marker (webdriver, a framework trace) or several weaker ones.
    rule("automation_markers",  When::Category(A, 60),                 Automated, Verdict::Bot,         (80, 100)),
    // Tampering policy (issue 11). Patching natives to hide automation is itself the proof:
    // nobody but an automation toolkit fakes or deletes navigator.webdriver.
    rule("hidden_automation",   When::Fired("hidden_webdriver"),       Automated, Verdict::Bot,         (85, 100)),
    // A DevTools-protocol client driving a page whose identity was patched (values that differ
    // from a pristine realm or a worker, replaced natives): a stealth toolkit. An open DevTools
    // window alone, or a privacy extension's patches alone, are each only suspicious; together
    // with headless residue the client reaches "automation_markers" above.
    rule("patched_devtools_client", When::All(&[When::Fired("devtools_protocol"),
                                                When::AnyFired(&["realm_mismatch", "tampered_natives", "descriptor_anomalies", "worker_mismatch"])]),
                                                                       Automated, Verdict::Bot,         (75, 100)),
    // Script-dispatched or machine-drawn input.
    rule("synthetic_input",     When::Category(B, 55),                 Automated, Verdict::Bot,         (75, 100)),
    // Three classes that hide their markers
    // (docs/detection.md#three-classes-that-hide-their-markers). Headless Chromium's own default
    // display with no pointing device: nobody looks at that browser (a person's 800x600 virtual
    // machine still has a pointer).
    rule("headless_compositor", When::All(&[When::Fired("headless_default_window"), When::Fired("no_pointing_device")]),
                                                                       Automated, Verdict::Bot,         (75, 100)),
    // Viewport emulation is a DevTools-protocol command (Emulation.setDeviceMetricsOverride): a
    // driver patched against Runtime detection still sets it for its viewport. The signal leaves
    // out what imitates it (privacy tools binding the screen to the window, DevTools' own device
    // mode, touch devices that rotate).
    rule("emulated_viewport",   When::Fired("viewport_emulation"),     Automated, Verdict::Bot,         (70, 100)),
    // Input placed between device pixels and stamped off the X server's clock: both at once is a
    // protocol client's Input.dispatchMouseEvent, however human its path and rhythm. Either alone
    // (a Wayland touchpad's sub-pixel motion, a pen) stays below the elevated band.
    rule("protocol_input",      When::All(&[When::Fired("off_grid_pointer"), When::Fired("unaligned_input_clock")]),
                                                                       Automated, Verdict::Bot,         (75, 100)),
    // Input stamped off the X server's clock on a window X11 placed: the display server stamps
    // every event a person makes, so a protocol client's input shows even when it rounds its
    // path to whole pixels or sends only keys. Judged only where the page can tell X11
    // (`unaligned_input_clock` says where).
    rule("protocol_clock",      When::Fired("unaligned_input_clock"),  Automated, Verdict::Bot,         (75, 100)),
    // A patched runtime plus a headless trait: a stealth-configured automation browser.
    rule("stealth_automation",  When::All(&[When::Category(I, 40), When::Category(A, 30)]),
                                                                       Automated, Verdict::Bot,         (70, 100)),
    // Many weaker findings, some of them about automation or behaviour. Inconsistency alone
    // (a UA switcher stacks six consistency signals on one fact) never reaches "automated".
    rule("overwhelming_risk",   When::All(&[When::RiskAtLeast(70), When::Any(&[When::Category(A, 30), When::Category(B, 30)])]),
                                                                       Automated, Verdict::Bot,         (70, 100)),
    rule("elevated_risk",       When::RiskAtLeast(30),                 Uncertain, Verdict::Suspicious,  (30, 89)),
    // Interaction batches with no input at all: nothing says bot, nothing says person.
    rule("no_input_yet",        When::Fired("no_input_events"),        Uncertain, Verdict::Human,       (0, 29)),
    rule("clean",               When::Always,                          Person,    Verdict::Human,       (0, 29)),
];

/// Identity layers that can each betray a spoofed profile.
const PROFILE_LAYERS: &[&str] = &[
    "ua_client_hints_mismatch",
    "platform_mismatch",
    "worker_mismatch",
    "renderer_os_mismatch",
    "timezone_offset_mismatch",
];

/// Signals that the UA string is not the browser's own.
const USER_AGENT_LAYERS: &[&str] = &[
    "ua_client_hints_mismatch",
    "client_hints_missing",
    "platform_mismatch",
    "worker_mismatch",
    "http_user_agent_mismatch",
    "product_sub_mismatch",
    "eval_length_mismatch",
    "engine_mismatch",
    "vendor_mismatch",
    "chrome_object_missing",
    "renderer_os_mismatch",
];

/// The manipulation table: the first row that holds names the manipulation.
#[rustfmt::skip]
pub const MANIPULATION_RULES: &[ManipulationRule] = &[
    ManipulationRule { when: When::Fired("emulated_mobile"),           manipulation: Manipulation::EmulatedDevice },
    // A whole fake profile shows in two independent layers at once; a UA switch shows in one.
    ManipulationRule { when: When::CountFired(2, PROFILE_LAYERS),      manipulation: Manipulation::AntiDetectBrowser },
    ManipulationRule { when: When::Category(I, 40),                    manipulation: Manipulation::RuntimeTampering },
    ManipulationRule { when: When::AnyFired(USER_AGENT_LAYERS),        manipulation: Manipulation::UserAgentSpoofing },
];

/// Highlights shown per session (the interface's limit).
pub const MAX_HIGHLIGHTS: usize = 5;

/// What the rules make of a session at one point in its life: the decision, in the processor's
/// own terms (its sentences and slugs are the catalogue's static strings). [`Evaluation::document`]
/// turns it into the `schemas::decision::Decision` that is stored and served.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    pub automation_status: AutomationStatus,
    pub verdict: Verdict,
    pub risk_score: u8,
    pub phase: Phase,
    pub decision_status: DecisionStatus,
    pub manipulation: Option<Manipulation>,
    pub score_breakdown: EvaluatedScores,
    pub highlights: Vec<EvaluatedHighlight>,
    pub signals_fired: Vec<Signal>,
    /// The [`RULES`] row that decided, for whoever asks why.
    pub rule: &'static str,
}

impl Evaluation {
    /// The decision made final (`results` was called, or the session went idle).
    pub fn finalize(mut self) -> Self {
        self.phase = Phase::Final;
        self.decision_status = DecisionStatus::Final;
        self
    }

    /// The document the processor stores and the other roles read, for the decision `event_id`
    /// made at `evaluated_at` in `evaluation_duration_ms`; provisional until it is final.
    pub fn document(
        &self,
        event_id: schemas::DecisionId,
        evaluated_at: schemas::time::Timestamp,
        evaluation_duration_ms: f64,
    ) -> schemas::decision::Decision {
        use schemas::decision as doc;
        let no_extra = serde_json::Map::new;
        doc::Decision {
            automation_status: self.automation_status,
            decision_status: self.decision_status,
            evaluated_at,
            evaluation_duration_ms,
            event_id,
            highlights: self
                .highlights
                .iter()
                .map(|h| doc::Highlight {
                    evidence: doc::Evidence {
                        observed: h.evidence.observed.clone(),
                        signal: h.evidence.signal.to_owned(),
                        extra: no_extra(),
                    },
                    kind: h.kind,
                    sentence: h.sentence.to_owned(),
                    extra: no_extra(),
                })
                .collect(),
            is_provisional: self.decision_status != DecisionStatus::Final,
            manipulation: self.manipulation,
            phase: self.phase,
            risk_score: self.risk_score,
            rule: self.rule.to_owned(),
            score_breakdown: doc::ScoreBreakdown {
                categories: self.score_breakdown.categories.clone(),
                extra: no_extra(),
            },
            signals_fired: self
                .signals_fired
                .iter()
                .map(|s| doc::FiredSignal {
                    category: s.category,
                    observed: s.observed.clone(),
                    slug: s.slug.to_owned(),
                    weight: s.weight,
                    extra: no_extra(),
                })
                .collect(),
            verdict: self.verdict,
            extra: no_extra(),
        }
    }
}

/// An evaluation's per-category scores, 0..=100 each, every category present.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvaluatedScores {
    pub categories: BTreeMap<Category, u8>,
}

/// One curated line of an evaluation's explanation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvaluatedHighlight {
    pub kind: HighlightKind,
    pub sentence: &'static str,
    pub evidence: EvaluatedEvidence,
}

/// What a highlight rests on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvaluatedEvidence {
    pub signal: &'static str,
    pub observed: serde_json::Value,
}

/// What the conditions are evaluated against.
struct Facts<'a> {
    signals: &'a [Signal],
    categories: &'a BTreeMap<Category, u8>,
    risk: u8,
}

impl When {
    fn holds(&self, facts: &Facts<'_>) -> bool {
        let fired = |slug: &str| facts.signals.iter().any(|signal| signal.slug == slug);
        match *self {
            When::Always => true,
            When::Fired(slug) => fired(slug),
            When::AnyFired(slugs) => slugs.iter().any(|slug| fired(slug)),
            When::CountFired(n, slugs) => slugs.iter().filter(|slug| fired(slug)).count() >= n,
            When::Category(category, at_least) => {
                facts.categories.get(&category).copied().unwrap_or(0) >= at_least
            }
            When::RiskAtLeast(at_least) => facts.risk >= at_least,
            When::All(conditions) => conditions.iter().all(|condition| condition.holds(facts)),
            When::Any(conditions) => conditions.iter().any(|condition| condition.holds(facts)),
        }
    }

    /// Every slug the condition names, for the test that checks them against the catalogue.
    pub fn slugs(&self) -> Vec<&'static str> {
        match *self {
            When::Fired(slug) => vec![slug],
            When::AnyFired(slugs) | When::CountFired(_, slugs) => slugs.to_vec(),
            When::All(conditions) | When::Any(conditions) => {
                conditions.iter().flat_map(When::slugs).collect()
            }
            When::Always | When::Category(..) | When::RiskAtLeast(_) => Vec::new(),
        }
    }
}

fn clamp_score(sum: i64) -> u8 {
    // Lossless: the value is clamped into 0..=100 first.
    sum.clamp(0, 100) as u8
}

/// Turns the fired signals into a decision. `phase` is what the caller has seen (snapshot or
/// behavioral); [`Evaluation::finalize`] makes it final.
pub fn decide(signals: Vec<Signal>, phase: Phase) -> Evaluation {
    let categories: BTreeMap<Category, u8> = Category::ALL
        .iter()
        .map(|&category| {
            let sum = signals
                .iter()
                .filter(|signal| signal.category == category)
                .map(|signal| i64::from(signal.weight))
                .sum();
            (category, clamp_score(sum))
        })
        .collect();
    let risk = clamp_score(signals.iter().map(|signal| i64::from(signal.weight)).sum());
    let facts = Facts {
        signals: &signals,
        categories: &categories,
        risk,
    };
    let rule = RULES
        .iter()
        .find(|rule| rule.when.holds(&facts))
        .unwrap_or(&RULES[RULES.len() - 1]);
    let manipulation = MANIPULATION_RULES
        .iter()
        .find(|row| row.when.holds(&facts))
        .map(|row| row.manipulation);
    let risk_score = risk.clamp(rule.risk.0, rule.risk.1);
    let highlights = highlights(&signals);
    Evaluation {
        automation_status: rule.automation_status,
        verdict: rule.verdict,
        risk_score,
        phase,
        decision_status: DecisionStatus::Preliminary,
        manipulation,
        score_breakdown: EvaluatedScores { categories },
        highlights,
        signals_fired: signals,
        rule: rule.name,
    }
}

/// Concerning signals by weight, then reassuring ones by weight; ties keep catalogue order.
fn highlights(signals: &[Signal]) -> Vec<EvaluatedHighlight> {
    let mut concerning: Vec<&Signal> = signals.iter().filter(|s| s.weight > 0).collect();
    let mut reassuring: Vec<&Signal> = signals.iter().filter(|s| s.weight < 0).collect();
    concerning.sort_by_key(|signal| std::cmp::Reverse(signal.weight));
    reassuring.sort_by_key(|signal| signal.weight);
    let as_highlight = |kind: HighlightKind| {
        move |signal: &&Signal| EvaluatedHighlight {
            kind,
            sentence: signal.sentence(),
            evidence: EvaluatedEvidence {
                signal: signal.slug,
                observed: signal.observed.clone(),
            },
        }
    };
    concerning
        .iter()
        .map(as_highlight(HighlightKind::Concerning))
        .chain(
            reassuring
                .iter()
                .map(as_highlight(HighlightKind::Reassuring)),
        )
        .take(MAX_HIGHLIGHTS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals::spec;
    use serde_json::Value;

    fn fire(slugs: &[&str]) -> Vec<Signal> {
        slugs
            .iter()
            .map(|slug| Signal::new(slug, Value::Null).unwrap())
            .collect()
    }

    #[test]
    fn every_slug_in_the_tables_is_catalogued() {
        let conditions = RULES
            .iter()
            .map(|r| r.when)
            .chain(MANIPULATION_RULES.iter().map(|r| r.when));
        for condition in conditions {
            for slug in condition.slugs() {
                assert!(
                    spec(slug).is_some(),
                    "the tables name unknown signal {slug}"
                );
            }
        }
    }

    #[test]
    fn the_last_rule_always_holds_and_bands_are_ordered() {
        assert!(matches!(RULES[RULES.len() - 1].when, When::Always));
        for rule in RULES {
            assert!(
                rule.risk.0 <= rule.risk.1 && rule.risk.1 <= 100,
                "{}",
                rule.name
            );
        }
    }

    #[test]
    fn a_verified_signature_is_a_verified_bot_even_when_automated() {
        let decision = decide(
            fire(&["webdriver", "web_bot_auth_verified"]),
            Phase::Snapshot,
        );
        assert_eq!(decision.verdict, Verdict::VerifiedBot);
        assert_eq!(decision.automation_status, AutomationStatus::Automated);
        assert!(decision.risk_score <= 20);
    }

    #[test]
    fn highlights_put_concerning_first_and_stop_at_five() {
        let decision = decide(
            fire(&[
                "human_like_input",
                "webdriver",
                "selenium",
                "phantomjs",
                "nightmare",
                "electron",
                "languages_empty",
            ]),
            Phase::Behavioral,
        );
        assert_eq!(decision.highlights.len(), MAX_HIGHLIGHTS);
        assert_eq!(decision.highlights[0].evidence.signal, "webdriver");
        assert!(
            decision
                .highlights
                .iter()
                .all(|h| h.kind == HighlightKind::Concerning)
        );
        let mixed = decide(
            fire(&["consistent_client_hints", "zero_connection_rtt"]),
            Phase::Snapshot,
        );
        let kinds: Vec<_> = mixed.highlights.iter().map(|h| h.kind).collect();
        assert_eq!(
            kinds,
            [HighlightKind::Concerning, HighlightKind::Reassuring]
        );
    }

    #[test]
    fn reassurance_lowers_risk_and_categories_stay_in_range() {
        let decision = decide(
            fire(&["human_like_input", "consistent_client_hints"]),
            Phase::Behavioral,
        );
        assert_eq!(decision.risk_score, 0);
        assert_eq!(decision.verdict, Verdict::Human);
        assert_eq!(decision.score_breakdown.categories.len(), 5);
        assert!(
            decision
                .score_breakdown
                .categories
                .values()
                .all(|&score| score == 0)
        );
    }

    #[test]
    fn finalize_sets_phase_and_status() {
        let decision = decide(Vec::new(), Phase::Snapshot).finalize();
        assert_eq!(
            (decision.phase, decision.decision_status),
            (Phase::Final, DecisionStatus::Final)
        );
    }
}
