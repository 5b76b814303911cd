//! The dispatcher role (D13, D24): it is to consume `events.v1`, fan each event out to its
//! organization's subscribed webhook endpoints, and deliver it signed, with retries kept in the
//! store. What is here so far is the signing every delivery uses ([`signing`]).

pub mod signing;
