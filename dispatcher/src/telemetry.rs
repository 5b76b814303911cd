//! The dispatcher's telemetry (docs/architecture.md#conv-telemetry-events): each event below both
//! logs and counts. The metrics are registered in prometheus's default registry, which `/metrics`
//! serves beside the HTTP layer's (`edge::metrics`); every label is bounded
//! (an attempt's result from a closed set, a dead letter's reason from a closed set, a retried
//! operation's static name).

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{Histogram, IntCounter, IntCounterVec};
use schemas::events::EventDeadReason;
use store::{DeliveryStatus, WebhookDeliveryRecord};
use telemetry::{DeadLetters, Retries};

telemetry::metrics! {
    owner: "dispatcher";
    created: IntCounter = counter(
        "vigil_dispatcher_deliveries_created_total",
        "Webhook deliveries the dispatcher created by fanning events out to endpoints",
    );
    attempts: IntCounterVec = counters(
        "vigil_dispatcher_attempts_total",
        "Delivery attempts, by what they left the delivery as: succeeded, retrying \
         (pending, another attempt scheduled) or failed",
        &["result"],
    );
    attempt_seconds: Histogram = seconds(
        "vigil_dispatcher_attempt_duration_seconds",
        "Time from sending a delivery to having the endpoint's answer (or giving up)",
    );
    first_attempt_seconds: Histogram = seconds(
        "vigil_dispatcher_event_to_first_attempt_seconds",
        "Time from an event's creation to the first attempt of a delivery of it",
    );
    retries: Retries = retries(
        "vigil_dispatcher_retries_total",
        "Transient store or log failures the dispatcher retried, by operation",
    );
    unreadable: IntCounter = counter(
        "vigil_dispatcher_unreadable_events_total",
        "Events the dispatcher could not fan out (their endpoints could not be read, or the \
         event or its deliveries not stored) and passed over",
    );
    disabled: IntCounter = counter(
        "vigil_dispatcher_endpoints_disabled_total",
        "Webhook endpoints disabled because a delivery was answered 410 Gone",
    );
    deferred: IntCounter = counter(
        "vigil_dispatcher_deferred_total",
        "Due deliveries put off because their endpoint had its most attempts waiting already",
    );
    dead_letters: DeadLetters = dead_letters(
        "vigil_dispatcher_dead_letters_total",
        "Records of events.v1 the dispatcher cannot read, set aside on events.dead.v1, by \
         reason: newer_schema, unknown_event_type or unreadable_record",
        (schemas::events::EVENTS_DEAD_TOPIC, "dead-lettered a record of events.v1 it cannot deliver"),
        EventDeadReason::ALL.map(EventDeadReason::as_str),
    );
    => |made| {
        for result in ["succeeded", "retrying", "failed"] {
            made.attempts.with_label_values(&[result]);
        }
    }
}

/// Registers the metrics, so `/metrics` shows them before the first event arrives.
pub fn init() {
    LazyLock::force(&METRICS);
}

pub fn created(deliveries: usize) {
    METRICS.created.inc_by(deliveries as u64);
}

/// An attempt that took `took` left `delivery` as it is.
pub fn attempted(delivery: &WebhookDeliveryRecord, took: Duration) {
    let result = match delivery.status {
        DeliveryStatus::Succeeded => "succeeded",
        DeliveryStatus::Pending => "retrying",
        DeliveryStatus::Failed => "failed",
    };
    METRICS.attempts.with_label_values(&[result]).inc();
    METRICS.attempt_seconds.observe(took.as_secs_f64());
    if delivery.status != DeliveryStatus::Succeeded {
        tracing::info!(
            delivery = %delivery.id,
            endpoint = %delivery.endpoint_id,
            attempts = delivery.attempts,
            result,
            error = delivery.error.as_deref().unwrap_or(""),
            "dispatcher: a delivery attempt did not succeed"
        );
    }
}

/// The first attempt of a delivery started `since` its event was created.
pub fn first_attempt(since: Duration) {
    METRICS.first_attempt_seconds.observe(since.as_secs_f64());
}

/// A transient failure of `what`, about to be retried (the `failures`th in a row).
pub fn retried(what: &'static str, error: &dyn std::fmt::Display, failures: u32) {
    METRICS.retries.retried(what, error, failures);
}

/// A record of `events.v1` set aside on `events.dead.v1`, at `partition`/`offset`.
pub fn dead_lettered(reason: EventDeadReason, partition: u32, offset: u64, message: &str) {
    METRICS
        .dead_letters
        .set_aside(reason.as_str(), partition, offset, message);
}

/// An event that could not be fanned out, passed over.
pub fn unreadable(error: &dyn std::fmt::Display) {
    METRICS.unreadable.inc();
    tracing::error!(%error, "dispatcher: passing over an event it cannot deliver");
}

/// An endpoint disabled after a 410.
pub fn disabled(endpoint: &schemas::ids::WebhookEndpointId) {
    METRICS.disabled.inc();
    tracing::warn!(%endpoint, "dispatcher: the endpoint answered 410 Gone; disabled");
}

/// Due deliveries put off, their endpoint's queue full.
pub fn deferred(deliveries: usize) {
    METRICS.deferred.inc_by(deliveries as u64);
}
