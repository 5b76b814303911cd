//! The UTC offsets of the timezones most visitors report, so the processor can tell whether
//! `getTimezoneOffset()` fits the IANA name the same browser gives. Spoofing tools often set one
//! and forget the other. A zone not listed here is simply not checked: a short table that is
//! right beats a long one that is stale (offsets are as of 2024, after Mexico, Iran and Egypt
//! changed their DST rules).

/// `(zone, standard offset, daylight offset)`, offsets in minutes east of UTC.
const ZONES: &[(&str, i32, i32)] = &[
    ("UTC", 0, 0),
    ("Etc/UTC", 0, 0),
    ("GMT", 0, 0),
    ("Etc/GMT", 0, 0),
    ("Europe/London", 0, 60),
    ("Europe/Dublin", 0, 60),
    ("Europe/Lisbon", 0, 60),
    ("Atlantic/Reykjavik", 0, 0),
    ("Africa/Casablanca", 0, 60),
    ("Africa/Lagos", 60, 60),
    ("Europe/Paris", 60, 120),
    ("Europe/Berlin", 60, 120),
    ("Europe/Madrid", 60, 120),
    ("Europe/Rome", 60, 120),
    ("Europe/Amsterdam", 60, 120),
    ("Europe/Brussels", 60, 120),
    ("Europe/Vienna", 60, 120),
    ("Europe/Zurich", 60, 120),
    ("Europe/Stockholm", 60, 120),
    ("Europe/Oslo", 60, 120),
    ("Europe/Copenhagen", 60, 120),
    ("Europe/Warsaw", 60, 120),
    ("Europe/Prague", 60, 120),
    ("Europe/Budapest", 60, 120),
    ("Europe/Belgrade", 60, 120),
    ("Europe/Athens", 120, 180),
    ("Europe/Helsinki", 120, 180),
    ("Europe/Kiev", 120, 180),
    ("Europe/Kyiv", 120, 180),
    ("Europe/Bucharest", 120, 180),
    ("Europe/Sofia", 120, 180),
    ("Europe/Riga", 120, 180),
    ("Europe/Vilnius", 120, 180),
    ("Europe/Tallinn", 120, 180),
    ("Asia/Jerusalem", 120, 180),
    ("Africa/Cairo", 120, 180),
    ("Africa/Johannesburg", 120, 120),
    ("Europe/Istanbul", 180, 180),
    ("Europe/Moscow", 180, 180),
    ("Europe/Minsk", 180, 180),
    ("Asia/Riyadh", 180, 180),
    ("Africa/Nairobi", 180, 180),
    ("Asia/Tehran", 210, 210),
    ("Asia/Dubai", 240, 240),
    ("Asia/Karachi", 300, 300),
    ("Asia/Kolkata", 330, 330),
    ("Asia/Calcutta", 330, 330),
    ("Asia/Kathmandu", 345, 345),
    ("Asia/Dhaka", 360, 360),
    ("Asia/Bangkok", 420, 420),
    ("Asia/Jakarta", 420, 420),
    ("Asia/Ho_Chi_Minh", 420, 420),
    ("Asia/Shanghai", 480, 480),
    ("Asia/Hong_Kong", 480, 480),
    ("Asia/Singapore", 480, 480),
    ("Asia/Taipei", 480, 480),
    ("Asia/Manila", 480, 480),
    ("Australia/Perth", 480, 480),
    ("Asia/Tokyo", 540, 540),
    ("Asia/Seoul", 540, 540),
    ("Australia/Adelaide", 570, 630),
    ("Australia/Brisbane", 600, 600),
    ("Australia/Sydney", 600, 660),
    ("Australia/Melbourne", 600, 660),
    ("Pacific/Auckland", 720, 780),
    ("America/St_Johns", -210, -150),
    ("America/Halifax", -240, -180),
    ("America/Sao_Paulo", -180, -180),
    ("America/Argentina/Buenos_Aires", -180, -180),
    ("America/Santiago", -240, -180),
    ("America/Caracas", -240, -240),
    ("America/New_York", -300, -240),
    ("America/Toronto", -300, -240),
    ("America/Detroit", -300, -240),
    ("America/Bogota", -300, -300),
    ("America/Lima", -300, -300),
    ("America/Chicago", -360, -300),
    ("America/Mexico_City", -360, -360),
    ("America/Denver", -420, -360),
    ("America/Phoenix", -420, -420),
    ("America/Los_Angeles", -480, -420),
    ("America/Vancouver", -480, -420),
    ("America/Anchorage", -540, -480),
    ("Pacific/Honolulu", -600, -600),
];

/// The `getTimezoneOffset()` values (minutes west of UTC, so the sign is flipped) a zone can
/// report at some time of the year, or `None` for a zone this table does not know.
pub fn expected_offsets(zone: &str) -> Option<[i32; 2]> {
    if let Some(&(_, standard, daylight)) = ZONES.iter().find(|(name, _, _)| *name == zone) {
        return Some([-standard, -daylight]);
    }
    // "Etc/GMT+5" is five hours *behind* UTC: the POSIX sign, which is getTimezoneOffset's.
    let hours: i32 = zone.strip_prefix("Etc/GMT")?.parse().ok()?;
    (-14..=14)
        .contains(&hours)
        .then_some([hours * 60, hours * 60])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_in_get_timezone_offset_sign() {
        assert_eq!(expected_offsets("Europe/London"), Some([0, -60]));
        assert_eq!(expected_offsets("America/New_York"), Some([300, 240]));
        assert_eq!(expected_offsets("Etc/GMT+5"), Some([300, 300]));
        assert_eq!(expected_offsets("Etc/GMT-3"), Some([-180, -180]));
        assert_eq!(expected_offsets("Mars/Olympus_Mons"), None);
    }
}
