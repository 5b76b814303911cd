//! The processor: what the browser SDK observed and what the server saw become signals
//! ([`signals`]), signals become a decision through one table ([`rules`]), and probes become the
//! anchors and component vector that link visitors ([`fingerprint`]); all of that is pure logic
//! with no I/O. The consumer loop that reads the log, keeps per-session state and stores
//! decisions ([`pipeline`]) is the one module that does I/O, and calls [`evaluate`].
//!
//! ```
//! use processor::{Batch, ServerContext, SessionObservations, Verdict};
//!
//! let mut session = SessionObservations::default();
//! let batch = Batch::from_slice(br#"{"kind": "probes", "automation": {"webdriver": true}}"#).unwrap();
//! session.record(batch);
//! let decision = processor::evaluate(&session, &ServerContext::default());
//! assert_eq!(decision.verdict, Verdict::Bot);
//! assert_eq!(decision.highlights[0].evidence.signal, "webdriver");
//! ```

mod behavior;
pub mod events;
pub mod fingerprint;
pub mod observations;
pub mod pipeline;
pub mod replay;
pub mod retry;
pub mod rules;
pub mod signals;
pub mod telemetry;
mod timezones;
pub mod user_agent;
mod zone_countries;

pub use observations::{
    Batch, InputEvent, InteractionBatch, Probes, ReplayedBatch, RequestContext, ServerContext,
    SessionObservations, WebBotAuth,
};
pub use rules::{
    AutomationStatus, DecisionStatus, EvaluatedHighlight, Evaluation, HighlightKind, Manipulation,
    Phase, Verdict,
};
pub use signals::{Category, Signal};

/// The preliminary decision for a session from everything seen so far: snapshot until an
/// interaction batch arrives, behavioral after. Call [`Evaluation::finalize`] to make it final.
pub fn evaluate(session: &SessionObservations, context: &ServerContext) -> Evaluation {
    let phase = if session.interactions_seen() {
        Phase::Behavioral
    } else {
        Phase::Snapshot
    };
    rules::decide(signals::detect(session, context), phase)
}
