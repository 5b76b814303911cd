//! The dispatcher role (D13, D24): it is to consume `events.v1`, fan each event out to its
//! organization's subscribed webhook endpoints, and deliver it signed, with retries kept in the
//! store. What is here so far: which deliveries an event is to have ([`fan_out`]), what an
//! attempt's outcome does to a delivery ([`attempts`]) and the signature every delivery
//! carries ([`signing`]).

pub mod attempts;
pub mod fan_out;
pub mod signing;
