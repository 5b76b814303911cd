//! What an attempt's outcome does to a delivery (docs/architecture.md: #webhooks, #dispatcher), as
//! a pure step the dispatcher stores: a 2xx succeeds; a 410 fails it for good and disables the
//! endpoint; anything else (another status, a 3xx since redirects are not followed, a timeout, a
//! refused address) is retried on the schedule, waiting at least what `Retry-After` asks, until the
//! schedule is spent and the delivery fails.

use std::time::Duration;

use schemas::time::Timestamp;
pub use sender::{MAX_RESPONSE_BODY, Outcome};
use store::{DeliveryStatus, WebhookDeliveryRecord};

/// The longest wait before a retry, whatever the schedule or a `Retry-After` says: an endpoint
/// cannot park a delivery for years.
pub const MAX_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// `--webhook-retry-schedule`'s default: the waits before the 2nd, 3rd, … attempt.
pub const DEFAULT_SCHEDULE: &str = "5s,5m,30m,2h,5h,10h,10h";

/// The waits between attempts: after the first attempt fails, the first wait, and so on; a
/// delivery gets one attempt more than there are waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySchedule(Vec<Duration>);

impl RetrySchedule {
    /// A comma-separated list of durations (`5s,5m,2h`); an empty text means no retries.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(RetrySchedule(Vec::new()));
        }
        text.split(',')
            .map(|part| {
                humantime::parse_duration(part.trim())
                    .map_err(|e| format!("`{}` is not a duration: {e}", part.trim()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(RetrySchedule)
    }

    pub fn waits(&self) -> &[Duration] {
        &self.0
    }
}

/// The delivery after an attempt, and whether its endpoint is to be disabled (a 410).
#[derive(Debug, Clone, PartialEq)]
pub struct Attempted {
    pub delivery: WebhookDeliveryRecord,
    pub disable_endpoint: bool,
}

/// Records an attempt that ended with `outcome` at `now`.
pub fn record_attempt(
    mut delivery: WebhookDeliveryRecord,
    outcome: Outcome,
    schedule: &RetrySchedule,
    now: Timestamp,
) -> Attempted {
    delivery.attempts = delivery.attempts.saturating_add(1);
    delivery.updated_at = now;
    let mut disable_endpoint = false;
    let retry_after = match outcome {
        Outcome::Answered {
            status,
            body,
            retry_after: asked,
        } => {
            delivery.response_status = Some(status);
            delivery.response_body = Some(truncated(body));
            if (200..300).contains(&status) {
                delivery.status = DeliveryStatus::Succeeded;
                delivery.error = None;
                delivery.next_attempt_at = None;
                return Attempted {
                    delivery,
                    disable_endpoint,
                };
            }
            delivery.error = Some(match status {
                300..400 => format!("HTTP {status}: redirects are not followed"),
                _ => format!("HTTP {status}"),
            });
            if status == 410 {
                disable_endpoint = true;
                delivery.status = DeliveryStatus::Failed;
                delivery.next_attempt_at = None;
                return Attempted {
                    delivery,
                    disable_endpoint,
                };
            }
            asked
        }
        Outcome::Undeliverable(error) => {
            delivery.status = DeliveryStatus::Failed;
            delivery.error = Some(error);
            delivery.next_attempt_at = None;
            return Attempted {
                delivery,
                disable_endpoint,
            };
        }
        Outcome::NoAnswer(error) => {
            delivery.response_status = None;
            delivery.response_body = None;
            delivery.error = Some(error);
            None
        }
    };
    match schedule.waits().get(delivery.attempts as usize - 1) {
        Some(wait) => {
            let wait = retry_after.map_or(*wait, |asked| asked.max(*wait));
            delivery.status = DeliveryStatus::Pending;
            let wait = wait.min(MAX_WAIT);
            delivery.next_attempt_at = Some(
                now.checked_add_signed(chrono::TimeDelta::from_std(wait).unwrap_or_default())
                    .unwrap_or(now),
            );
        }
        None => {
            delivery.status = DeliveryStatus::Failed;
            delivery.next_attempt_at = None;
        }
    }
    Attempted {
        delivery,
        disable_endpoint,
    }
}

/// At most [`MAX_RESPONSE_BODY`] bytes, cut at a character boundary.
fn truncated(mut body: String) -> String {
    if body.len() > MAX_RESPONSE_BODY {
        let mut end = MAX_RESPONSE_BODY;
        while !body.is_char_boundary(end) {
            end -= 1;
        }
        body.truncate(end);
    }
    body
}

#[cfg(test)]
mod tests {
    use schemas::credential::Environment;
    use schemas::events::EventType;
    use schemas::ids::{OrgId, WebhookEndpointId};

    use super::*;

    fn pending(now: Timestamp) -> WebhookDeliveryRecord {
        WebhookDeliveryRecord::pending(
            OrgId::generate(),
            Environment::Live,
            (
                schemas::EventId::generate(),
                EventType::SessionResultPersisted,
            ),
            WebhookEndpointId::generate(),
            now,
        )
    }

    fn answered(status: u16, retry_after: Option<u64>) -> Outcome {
        Outcome::Answered {
            status,
            body: "ok".into(),
            retry_after: retry_after.map(Duration::from_secs),
        }
    }

    #[test]
    fn the_default_schedule_parses_and_bad_ones_do_not() {
        let s = RetrySchedule::parse(DEFAULT_SCHEDULE).unwrap();
        assert_eq!(s.waits().len(), 7);
        assert_eq!(s.waits()[0], Duration::from_secs(5));
        assert_eq!(s.waits()[6], Duration::from_secs(36_000));
        assert_eq!(RetrySchedule::parse(" 1s , 2s").unwrap().waits().len(), 2);
        assert!(RetrySchedule::parse("").unwrap().waits().is_empty());
        assert!(RetrySchedule::parse("5s,soon").is_err());
    }

    #[test]
    fn a_2xx_succeeds_and_a_410_fails_and_disables() {
        let now = schemas::time::now();
        let schedule = RetrySchedule::parse("5s").unwrap();
        let ok = record_attempt(pending(now), answered(204, None), &schedule, now);
        assert_eq!(ok.delivery.status, DeliveryStatus::Succeeded);
        assert_eq!(
            (ok.delivery.attempts, ok.delivery.next_attempt_at),
            (1, None)
        );
        assert_eq!(ok.delivery.response_status, Some(204));
        assert!(!ok.disable_endpoint);
        let gone = record_attempt(pending(now), answered(410, None), &schedule, now);
        assert_eq!(gone.delivery.status, DeliveryStatus::Failed);
        assert_eq!(gone.delivery.next_attempt_at, None);
        assert!(gone.disable_endpoint);
    }

    #[test]
    fn failures_retry_on_the_schedule_honour_retry_after_then_fail() {
        let now = schemas::time::now();
        let schedule = RetrySchedule::parse("5s,1m").unwrap();
        let first = record_attempt(pending(now), answered(500, None), &schedule, now).delivery;
        assert_eq!(first.status, DeliveryStatus::Pending);
        assert_eq!(
            first.next_attempt_at,
            Some(now + chrono::TimeDelta::seconds(5))
        );
        assert_eq!(first.error.as_deref(), Some("HTTP 500"));
        // Retry-After longer than the schedule's wait is honoured; shorter is not a shortcut.
        let asked =
            record_attempt(first.clone(), answered(503, Some(120)), &schedule, now).delivery;
        assert_eq!(
            asked.next_attempt_at,
            Some(now + chrono::TimeDelta::seconds(120))
        );
        let forever = record_attempt(first.clone(), answered(503, Some(u64::MAX)), &schedule, now);
        assert_eq!(
            forever.delivery.next_attempt_at,
            Some(now + chrono::TimeDelta::from_std(MAX_WAIT).unwrap()),
            "a Retry-After past any sense waits the longest wait"
        );
        let short = record_attempt(first.clone(), answered(429, Some(1)), &schedule, now).delivery;
        assert_eq!(
            short.next_attempt_at,
            Some(now + chrono::TimeDelta::seconds(60))
        );
        // A redirect is a failure; so is no answer at all. The schedule spent, it fails.
        let moved = record_attempt(pending(now), answered(301, None), &schedule, now).delivery;
        assert!(moved.error.unwrap().contains("redirects are not followed"));
        let last = record_attempt(
            asked,
            Outcome::NoAnswer("timed out after 15 s".into()),
            &schedule,
            now,
        );
        assert_eq!(last.delivery.attempts, 3);
        assert_eq!(last.delivery.status, DeliveryStatus::Failed);
        assert_eq!(last.delivery.next_attempt_at, None);
        assert_eq!(last.delivery.error.as_deref(), Some("timed out after 15 s"));
        assert_eq!(last.delivery.response_status, None);
        assert!(!last.disable_endpoint);
        let nowhere = record_attempt(
            pending(now),
            Outcome::Undeliverable("the endpoint is disabled".into()),
            &schedule,
            now,
        );
        assert_eq!(nowhere.delivery.status, DeliveryStatus::Failed);
        assert_eq!(nowhere.delivery.next_attempt_at, None);
        assert!(!nowhere.disable_endpoint);
    }

    #[test]
    fn response_bodies_are_kept_up_to_4_kib_at_a_character_boundary() {
        let now = schemas::time::now();
        let body = "é".repeat(3_000);
        let outcome = Outcome::Answered {
            status: 200,
            body,
            retry_after: None,
        };
        let kept = record_attempt(
            pending(now),
            outcome,
            &RetrySchedule::parse("").unwrap(),
            now,
        );
        let kept = kept.delivery.response_body.unwrap();
        assert!(kept.len() <= MAX_RESPONSE_BODY && kept.len() >= MAX_RESPONSE_BODY - 1);
        assert!(kept.chars().all(|c| c == 'é'));
    }
}
