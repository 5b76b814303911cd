//! The tz database's zone-to-country table (`processor/data/zone-countries.tsv`, written by
//! `scripts/zone-countries.py`): which countries use each IANA zone a browser may report, so
//! `timezone_mismatch` can tell a browser's zone that no one in the address's country uses. A
//! zone the table lacks (`UTC`, `Etc/GMT+3`) belongs to no country and is never judged.

use std::collections::HashMap;
use std::sync::LazyLock;

const TABLE: &str = include_str!("../data/zone-countries.tsv");

static COUNTRIES: LazyLock<HashMap<&'static str, Vec<&'static str>>> = LazyLock::new(|| {
    TABLE
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once('\t'))
        .map(|(zone, codes)| (zone, codes.split(',').collect()))
        .collect()
});

/// The ISO 3166 countries that use `zone`; `None` for a zone of no country or one unknown.
pub fn countries(zone: &str) -> Option<&'static [&'static str]> {
    COUNTRIES.get(zone).map(Vec::as_slice)
}

/// Whether any zone of the table is used in `country`: a code the tz database does not know
/// (Kosovo's `XK`, a database's `EU` or `ZZ`) cannot be judged against a zone.
pub fn known_country(country: &str) -> bool {
    static KNOWN: LazyLock<std::collections::HashSet<&'static str>> =
        LazyLock::new(|| COUNTRIES.values().flatten().copied().collect());
    KNOWN.contains(country.to_ascii_uppercase().as_str())
}

#[cfg(test)]
mod tests {
    use super::countries;

    #[test]
    fn zones_old_names_and_shared_zones_have_their_countries() {
        assert_eq!(countries("America/New_York"), Some(&["US"][..]));
        assert_eq!(countries("Asia/Calcutta"), Some(&["IN"][..]), "a link");
        assert_eq!(countries("Europe/Kiev"), Some(&["UA"][..]), "a link");
        assert!(countries("Europe/Berlin").unwrap().contains(&"DE"));
        assert!(countries("Europe/Zurich").unwrap().contains(&"CH"));
        assert_eq!(countries("UTC"), None);
        assert_eq!(countries("Mars/Olympus_Mons"), None);
        assert!(super::known_country("GB") && super::known_country("jp"));
        assert!(!super::known_country("XK") && !super::known_country("EU"));
    }
}
