//! Timestamps on the wire: ISO 8601 UTC with millisecond precision (`2026-11-21T23:18:46.123Z`).

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serializer;

pub type Timestamp = DateTime<Utc>;

pub fn format(t: &Timestamp) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `#[serde(serialize_with = "schemas::time::ser")]` for a timestamp field.
pub fn ser<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format(t))
}

/// The same for an optional timestamp, which the interface writes as `null` until its event.
pub fn ser_opt<S: Serializer>(t: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&format(t)),
        None => s.serialize_none(),
    }
}

/// The current time, truncated to the millisecond so what is stored equals what is shown.
pub fn now() -> Timestamp {
    let t = Utc::now();
    DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t)
}
