//! Vigil's outbound HTTP sender (docs/architecture.md#webhooks): one signed POST of an event to a
//! URL someone else chose, as the dispatcher's webhook deliveries and Gate's calls to a
//! service's own webhook both make it. The outbound rule keeps such a URL off private and local
//! addresses ([`outbound`]), the body is signed per Standard Webhooks ([`signing`]), and an
//! attempt follows no redirect, uses no proxy and reads a bounded answer ([`sending`]).

pub mod outbound;
pub mod sending;
pub mod signing;

use std::time::Duration;

/// The most of an endpoint's answer kept on the delivery.
pub const MAX_RESPONSE_BODY: usize = 4 * 1024;

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The endpoint answered.
    Answered {
        status: u16,
        body: String,
        retry_after: Option<Duration>,
    },
    /// No answer: a timeout, a refused connection or address, a TLS failure.
    NoAnswer(String),
    /// Nothing was sent, and nothing ever will be: the endpoint was disabled or deleted, or
    /// the event is no longer kept. The delivery fails without retries.
    Undeliverable(String),
}
