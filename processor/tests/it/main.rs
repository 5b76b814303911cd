//! The processor's tests in one binary: signal cases, recorded fixtures, golden decisions,
//! properties, stealth evasions and replicas sharing the log.

mod common;
mod fixtures;
mod golden;
mod properties;
mod replicas;
mod signals;
mod stealth_evasions;
