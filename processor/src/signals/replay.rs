//! Replay signals (docs/detection.md#replayed-sessions): what gives away batches recorded in one
//! session and sent again in another. The session's challenge, which its probes must carry back;
//! the replay record, where another session left the same batch first; the time the interaction
//! batches claim against the time the server saw pass; and the network check the SDK always runs
//! before it asks for its result.

use super::Fired;
use crate::observations::{Probes, ServerContext};
use serde_json::json;

/// The SDK version from which the probes answer the session's challenge.
const ANSWERS_CHALLENGES_FROM: (u64, u64, u64) = (1, 4, 0);

/// A window may end this long after the time that passed since the session opened (or
/// [`AHEAD_SLACK_SHARE`] of it), counted from the open on the page's clock (the probes say when
/// that was): for the clocks' granularity and the hosts' skew; beyond, the batch claims time
/// that had not passed.
const AHEAD_SLACK_MS: f64 = 3_000.0;
const AHEAD_SLACK_SHARE: f64 = 0.1;
/// The same from the load, for an SDK that does not say when its session opened: the open
/// request may take up to its 10 s timeout, on top of the page's own work before it.
const AHEAD_SLACK_FROM_LOAD_MS: f64 = 15_000.0;
/// A window may end this long before the time that passed (or [`BEHIND_SLACK_SHARE`] of it): a
/// device that slept, a page whose timers were held back in the background.
const BEHIND_SLACK_MS: f64 = 60_000.0;
const BEHIND_SLACK_SHARE: f64 = 0.5;

pub(super) fn detect(probes: Option<&Probes>, context: &ServerContext, fired: &mut Fired) {
    if let Some(first) = context.replayed.first() {
        fired.fire(
            "replayed_payload",
            json!({ "batches": context.replayed.len(), "first": first }),
        );
    }
    challenge(probes, context, fired);
    let claims = &context.time_claims;
    // Counted from the open when the probes say when it was, else from the load.
    let (ahead, slack) = match probes.and_then(|p| p.opened_in_ms).filter(|o| *o >= 0.0) {
        Some(opened) => (claims.most_ahead_ms - opened, AHEAD_SLACK_MS),
        None => (claims.most_ahead_ms, AHEAD_SLACK_FROM_LOAD_MS),
    };
    if ahead > slack.max(AHEAD_SLACK_SHARE * claims.elapsed_at_most_ahead_ms) {
        fired.fire(
            "time_ahead",
            json!({ "claimed_ahead_ms": ahead, "elapsed_ms": claims.elapsed_at_most_ahead_ms }),
        );
    }
    if claims.most_behind_ms
        > BEHIND_SLACK_MS.max(BEHIND_SLACK_SHARE * claims.elapsed_at_most_behind_ms)
    {
        fired.fire(
            "time_behind",
            json!({ "claimed_behind_ms": claims.most_behind_ms, "elapsed_ms": claims.elapsed_at_most_behind_ms }),
        );
    }
    // The SDK opens the network check's WebSocket as soon as the session opens and waits for
    // the check before asking for the result: a session that asked for it with no WebSocket
    // ever connected never ran the check (one still under way on a slow network has connected).
    if context.results_asked
        && context.network_check_consistent.is_none()
        && !context.network_check_connected
    {
        fired.fire("network_check_missing", json!({ "results_asked": true }));
    }
}

/// The probes must carry this session's nonce back: another's is a batch recorded elsewhere,
/// none from an SDK that answers challenges a batch made by something else.
fn challenge(probes: Option<&Probes>, context: &ServerContext, fired: &mut Fired) {
    let (Some(probes), Some(expected)) = (
        probes,
        context.challenge.as_deref().filter(|c| !c.is_empty()),
    ) else {
        return;
    };
    match probes.challenge.as_ref().and_then(|c| c.nonce.as_deref()) {
        Some(nonce) if nonce == expected => {}
        Some(_) => fired.fire("stale_challenge", json!({ "matches_this_session": false })),
        None if answers_challenges(context.sdk_version.as_deref()) => fired.fire(
            "challenge_missing",
            json!({ "sdk_version": context.sdk_version }),
        ),
        None => {}
    }
}

/// Whether the SDK version a session was opened with answers challenges.
fn answers_challenges(version: Option<&str>) -> bool {
    let Some(version) = version else {
        return false;
    };
    let mut parts = version
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u64>().ok());
    match (parts.next(), parts.next(), parts.next()) {
        (Some(Some(major)), Some(Some(minor)), Some(Some(patch))) => {
            (major, minor, patch) >= ANSWERS_CHALLENGES_FROM
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_1_4_answer_challenges() {
        for yes in ["1.4.0", "1.4.1", "1.10.0", "2.0.0", "1.4.0-beta"] {
            assert!(answers_challenges(Some(yes)), "{yes}");
        }
        for no in ["1.3.0", "1.0.0", "1.4", "x", ""] {
            assert!(!answers_challenges(Some(no)), "{no}");
        }
        assert!(!answers_challenges(None));
    }
}
