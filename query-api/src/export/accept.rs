//! Reading an `Accept` header (RFC 9110 §12.5.1) for the few media types an export writes:
//! each is given the weight of the most specific range that names it, so `q=0` refuses a type
//! even where `*/*` would take it.

/// How much an `Accept` header wants one media type: its weight (0 to 1000, `q` in
/// thousandths), how specific the range that gave it was (2 exact, 1 `type/*`, 0 `*/*`), and
/// where that range stood in the header (earlier wins a tie).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Preference {
    weight: u16,
    specificity: u8,
    position: usize,
}

/// The weight of `range`'s parameters: `q`, in thousandths; a malformed `q` reads as 1, as a
/// range without one, rather than dropping a type the client named.
fn weight(params: &str) -> u16 {
    for param in params.split(';') {
        let Some((name, value)) = param.split_once('=') else {
            continue;
        };
        if name.trim().eq_ignore_ascii_case("q") {
            return match value.trim().parse::<f32>() {
                Ok(q) if (0.0..=1.0).contains(&q) => (q * 1000.0).round() as u16,
                _ => 1000,
            };
        }
    }
    1000
}

/// How `accept` ranks `media` (a lowercase `type/subtype`), or `None` if no range names it.
fn preference(accept: &str, media: &str) -> Option<Preference> {
    let (kind, _) = media.split_once('/')?;
    let mut best: Option<Preference> = None;
    for (position, range) in accept.split(',').enumerate() {
        let (name, params) = range.split_once(';').unwrap_or((range, ""));
        let name = name.trim().to_ascii_lowercase();
        let specificity = if name == media {
            2
        } else if name.strip_suffix("/*") == Some(kind) {
            1
        } else if name == "*/*" {
            0
        } else {
            continue;
        };
        // The most specific range decides, whatever its weight (`*/*;q=1, x/y;q=0` refuses x/y).
        if best.is_none_or(|b| specificity > b.specificity) {
            best = Some(Preference {
                weight: weight(params),
                specificity,
                position,
            });
        }
    }
    best
}

/// Which of `offered` (lowercase media types, the server's preference first) `accept` wants
/// most: the highest weight, then the more specific range, then the earlier one; `None` when
/// every one is unnamed or weighted 0 (a 406).
pub fn choose<'a>(accept: &str, offered: &[&'a str]) -> Option<&'a str> {
    offered
        .iter()
        .filter_map(|media| Some((*media, preference(accept, media)?)))
        .filter(|(_, p)| p.weight > 0)
        .min_by_key(|(_, p)| {
            (
                std::cmp::Reverse(p.weight),
                std::cmp::Reverse(p.specificity),
                p.position,
            )
        })
        .map(|(media, _)| media)
}

#[cfg(test)]
mod tests {
    use super::choose;

    const OFFERED: &[&str] = &[
        "application/vnd.apache.arrow.stream",
        "application/x-ndjson",
    ];

    #[test]
    fn q_zero_refuses_a_type_and_the_weights_decide() {
        let cases = [
            ("*/*", Some(OFFERED[0])),
            ("application/*", Some(OFFERED[0])),
            ("application/x-ndjson", Some(OFFERED[1])),
            ("application/x-ndjson, */*", Some(OFFERED[1])),
            (
                "application/vnd.apache.arrow.stream;q=0, application/x-ndjson",
                Some(OFFERED[1]),
            ),
            (
                "*/*, application/vnd.apache.arrow.stream;q=0",
                Some(OFFERED[1]),
            ),
            (
                "application/x-ndjson;q=0.5, application/*;q=0.9",
                Some(OFFERED[0]),
            ),
            (
                "application/x-ndjson;q=0, application/vnd.apache.arrow.stream;q=0",
                None,
            ),
            ("*/*;q=0", None),
            ("text/csv", None),
            ("APPLICATION/X-NDJSON ; Q=0.3", Some(OFFERED[1])),
        ];
        for (accept, expected) in cases {
            assert_eq!(choose(accept, OFFERED), expected, "Accept: {accept}");
        }
    }
}
