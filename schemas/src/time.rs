//! Timestamps on the wire: ISO 8601 UTC with millisecond precision (`2026-11-21T23:18:46.123Z`).

use chrono::{DateTime, Datelike, SecondsFormat, Timelike, Utc};
use serde::Serializer;

pub type Timestamp = DateTime<Utc>;

pub fn format(t: &Timestamp) -> String {
    let mut spelled = [0u8; SPELLED_LEN];
    match spell(t, &mut spelled) {
        Some(s) => s.to_owned(),
        None => by_chrono(t),
    }
}

/// `#[serde(serialize_with = "schemas::time::ser")]` for a timestamp field.
pub fn ser<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
    let mut spelled = [0u8; SPELLED_LEN];
    match spell(t, &mut spelled) {
        Some(text) => s.serialize_str(text),
        None => s.serialize_str(&by_chrono(t)),
    }
}

/// The spelling [`spell`] follows, for what it cannot hold.
fn by_chrono(t: &Timestamp) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The same for an optional timestamp, which the interface writes as `null` until its event.
pub fn ser_opt<S: Serializer>(t: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => ser(t, s),
        None => s.serialize_none(),
    }
}

/// The length of `YYYY-MM-DDTHH:MM:SS.mmmZ`.
const SPELLED_LEN: usize = 24;

/// Spells `t` as chrono's `to_rfc3339_opts(SecondsFormat::Millis, true)` does, into `out`
/// rather than through the formatting machinery into a new `String`: every answer and every
/// exported row spells its timestamps. `None` for what that fixed shape cannot hold (a year
/// outside 0000-9999, a leap second), which [`format`] leaves to chrono.
fn spell<'a>(t: &Timestamp, out: &'a mut [u8; SPELLED_LEN]) -> Option<&'a str> {
    let year = u32::try_from(t.year()).ok().filter(|y| *y <= 9999)?;
    let nanos = t.nanosecond();
    if nanos >= 1_000_000_000 {
        return None;
    }
    // Each field's digits, most significant first, then the character after it.
    let mut at = 0;
    let mut put = |mut value: u32, width: usize, then: u8| {
        for digit in out[at..at + width].iter_mut().rev() {
            *digit = b'0' + (value % 10) as u8;
            value /= 10;
        }
        out[at + width] = then;
        at += width + 1;
    };
    put(year, 4, b'-');
    put(t.month(), 2, b'-');
    put(t.day(), 2, b'T');
    put(t.hour(), 2, b':');
    put(t.minute(), 2, b':');
    put(t.second(), 2, b'.');
    put(nanos / 1_000_000, 3, b'Z');
    std::str::from_utf8(&out[..]).ok()
}

/// The current time, truncated to the millisecond so what is stored equals what is shown.
pub fn now() -> Timestamp {
    let t = Utc::now();
    DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chrono_spelling(t: &Timestamp) -> String {
        t.to_rfc3339_opts(SecondsFormat::Millis, true)
    }

    #[test]
    fn the_spelling_is_chronos_for_every_kind_of_instant() {
        let mut instants: Vec<Timestamp> = [
            0i64,
            1,
            999,
            -1,
            1_795_723_855_995,
            253_402_300_799_999, // 9999-12-31T23:59:59.999Z
            -62_167_219_200_000, // 0000-01-01T00:00:00.000Z
        ]
        .iter()
        .map(|ms| DateTime::from_timestamp_millis(*ms).unwrap())
        .collect();
        // Sub-millisecond digits are cut, not rounded, as chrono does.
        instants.push(DateTime::from_timestamp(1_795_723_855, 999_999_999).unwrap());
        // A spread of instants across the four-digit years (10,000 Gregorian years of
        // milliseconds from 0000-01-01), from a fixed-seed generator.
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let ms = (state >> 11) as i64 % 315_569_520_000_000 - 62_167_219_200_000;
            instants.push(DateTime::from_timestamp_millis(ms).unwrap());
        }
        for t in &instants {
            assert_eq!(format(t), chrono_spelling(t), "{t:?}");
            let json = serde_json::to_string(&Wrapped(*t)).unwrap();
            assert_eq!(json, format!("\"{}\"", chrono_spelling(t)));
        }
    }

    #[test]
    fn what_the_fixed_shape_cannot_hold_is_left_to_chrono() {
        let after_9999 = DateTime::from_timestamp_millis(253_402_300_800_000).unwrap();
        let before_0 = DateTime::from_timestamp_millis(-62_167_219_200_001).unwrap();
        let leap = DateTime::from_timestamp(1_483_228_799, 1_500_000_000).unwrap();
        for t in [after_9999, before_0, leap] {
            assert_eq!(spell(&t, &mut [0; SPELLED_LEN]), None, "{t:?}");
            assert_eq!(format(&t), chrono_spelling(&t));
            let json = serde_json::to_string(&Wrapped(t)).unwrap();
            assert_eq!(json, format!("\"{}\"", chrono_spelling(&t)));
        }
        assert_eq!(format(&leap), "2016-12-31T23:59:60.500Z");
    }

    struct Wrapped(Timestamp);

    impl serde::Serialize for Wrapped {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            ser(&self.0, s)
        }
    }
}
