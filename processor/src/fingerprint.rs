//! Visitor-linkage helpers (docs/architecture.md#visitors), pure: the anchors (exact hashes that
//! link a fresh profile on the same machine), the browser traits anchors must agree on, and the
//! component vector with the similarity used when nothing else links. The linker that stores and
//! searches visitors lives in `pipeline`; this module only says what to compare and how.
//!
//! The vector holds traits that survive cookie clearing and window resizes (screen, hardware,
//! timezone offset, language count, rendering hashes) and leaves out what changes visit to
//! visit (window size, focus, timings). Strings and hashes enter as buckets, so the stored
//! vector is a list of small numbers and not a second copy of the raw fingerprint.

use crate::observations::Probes;
use crate::user_agent::{self, Engine, Os};
use serde::{Deserialize, Serialize};

/// A component the browser did not report. No real trait takes this value: dimensions, counts
/// and buckets are non-negative, and UTC offsets are multiples of 15 minutes.
pub const MISSING: f64 = -1.0;

/// Strings and hashes are reduced to one of this many buckets.
pub const BUCKETS: u32 = 65_536;

/// Similarity at or above which the nearest stored vector is taken as the same visitor. High
/// on purpose: a wrong link merges two people, a missed one only starts a new visitor.
pub const LINK_THRESHOLD: f64 = 0.92;

/// How a component is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compare {
    /// Equal or not.
    Exact,
    /// Partial credit by ratio, for values that drift a little (zoom changes the pixel ratio).
    Ratio,
}

/// The components, in vector order: name, comparison, weight in the similarity.
const COMPONENTS: &[(&str, Compare, f64)] = &[
    ("screen_width", Compare::Exact, 1.5),
    ("screen_height", Compare::Exact, 1.5),
    ("color_depth", Compare::Exact, 0.5),
    ("pixel_ratio", Compare::Ratio, 0.5),
    ("hardware_concurrency", Compare::Exact, 1.0),
    ("device_memory", Compare::Exact, 1.0),
    ("max_touch_points", Compare::Exact, 1.0),
    ("timezone_offset_min", Compare::Exact, 1.0),
    ("languages_count", Compare::Exact, 0.5),
    ("plugins_count", Compare::Exact, 0.5),
    ("platform_bucket", Compare::Exact, 1.0),
    ("timezone_bucket", Compare::Exact, 1.0),
    ("webgl_renderer_bucket", Compare::Exact, 2.0),
    ("webgl_hash_bucket", Compare::Exact, 3.0),
    ("parameters_hash_bucket", Compare::Exact, 3.0),
    ("audio_hash_bucket", Compare::Exact, 3.0),
    ("canvas_hash_bucket", Compare::Exact, 2.0),
];

/// The names of the vector's components, in order (for documentation and debugging).
pub fn component_names() -> impl Iterator<Item = &'static str> {
    COMPONENTS.iter().map(|(name, _, _)| *name)
}

/// The component vector of a probes batch: `components.vector` of a visitor.
pub fn component_vector(probes: &Probes) -> Vec<f64> {
    let screen = probes.screen.as_ref();
    let browser = probes.browser.as_ref();
    let automation = probes.automation.as_ref();
    let rendering = probes.rendering.as_ref();
    let locale = probes.locale.as_ref();
    let number = |value: Option<f64>| {
        value
            .filter(|v| v.is_finite() && *v >= 0.0)
            .unwrap_or(MISSING)
    };
    let text = |value: Option<&String>| {
        value
            .filter(|v| !v.is_empty())
            .map_or(MISSING, |v| f64::from(bucket(v)))
    };
    let vector = vec![
        number(screen.and_then(|s| s.width)),
        number(screen.and_then(|s| s.height)),
        number(screen.and_then(|s| s.color_depth)),
        number(screen.and_then(|s| s.pixel_ratio)),
        number(browser.and_then(|b| b.hardware_concurrency)),
        number(browser.and_then(|b| b.device_memory)),
        number(browser.and_then(|b| b.max_touch_points)),
        // Offsets are negative east of UTC, so this one is not filtered for sign.
        locale
            .and_then(|l| l.timezone_offset_min)
            .filter(|v| v.is_finite())
            .unwrap_or(MISSING),
        number(
            automation
                .and_then(|a| a.languages.as_ref())
                .map(|l| l.len() as f64),
        ),
        number(
            automation
                .and_then(|a| a.plugins.as_ref())
                .map(|p| p.len() as f64),
        ),
        text(browser.and_then(|b| b.platform.as_ref())),
        text(locale.and_then(|l| l.timezone.as_ref())),
        text(rendering.and_then(|r| r.webgl_renderer.as_ref())),
        text(rendering.and_then(|r| r.webgl_hash.as_ref())),
        text(rendering.and_then(|r| r.webgl_parameters_hash.as_ref())),
        text(rendering.and_then(|r| r.audio_hash.as_ref())),
        text(rendering.and_then(|r| r.canvas_hash.as_ref())),
    ];
    debug_assert_eq!(vector.len(), COMPONENTS.len());
    vector
}

/// The bucket of a string: hex digests by their leading bits (already uniform), anything else
/// by FNV-1a, which unlike std's hasher is stable across Rust releases, as stored vectors need.
pub fn bucket(value: &str) -> u32 {
    let hex_prefix = value
        .get(..8)
        .and_then(|prefix| u32::from_str_radix(prefix, 16).ok());
    let hash = hex_prefix.unwrap_or_else(|| {
        value.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
            (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
        })
    });
    hash % BUCKETS
}

/// Similarity of two component vectors, 0.0 (nothing alike) to 1.0 (identical), over the
/// components both sides reported. Vectors of different lengths (an older layout) compare on
/// their common prefix. With nothing to compare it is 0.0, so an empty vector links nothing.
pub fn similarity(a: &[f64], b: &[f64]) -> f64 {
    let mut score = 0.0;
    let mut weight = 0.0;
    for ((x, y), (_, compare, w)) in a.iter().zip(b).zip(COMPONENTS) {
        if *x == MISSING || *y == MISSING || !x.is_finite() || !y.is_finite() {
            continue;
        }
        let alike = match compare {
            Compare::Exact => f64::from(u8::from(x == y)),
            Compare::Ratio if x == y => 1.0,
            Compare::Ratio => x.min(*y) / x.max(*y),
        };
        score += w * alike.clamp(0.0, 1.0);
        weight += w;
    }
    // Fewer than a third of the weight comparable says too little to link on.
    let total: f64 = COMPONENTS.iter().map(|(_, _, w)| w).sum();
    if weight < total / 3.0 {
        0.0
    } else {
        score / weight
    }
}

/// The rendering hashes that are the same for every profile of one browser on one machine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anchors {
    pub webgl_hash: Option<String>,
    pub parameters_hash: Option<String>,
    pub audio_hash: Option<String>,
}

impl Anchors {
    /// A probes batch's anchors; empty strings count as absent.
    pub fn of(probes: &Probes) -> Self {
        let rendering = probes.rendering.as_ref();
        let take = |value: Option<&String>| value.filter(|v| !v.is_empty()).cloned();
        Self {
            webgl_hash: take(rendering.and_then(|r| r.webgl_hash.as_ref())),
            parameters_hash: take(rendering.and_then(|r| r.webgl_parameters_hash.as_ref())),
            audio_hash: take(rendering.and_then(|r| r.audio_hash.as_ref())),
        }
    }

    /// An exact anchor match: at least two anchors present on both sides, and every anchor
    /// present on both sides equal. Two, because audio may time out, and one hash alone is
    /// shared by every machine with the same GPU and driver.
    pub fn matches(&self, other: &Self) -> bool {
        let pairs = [
            (&self.webgl_hash, &other.webgl_hash),
            (&self.parameters_hash, &other.parameters_hash),
            (&self.audio_hash, &other.audio_hash),
        ];
        let both: Vec<(&String, &String)> = pairs
            .iter()
            .filter_map(|(a, b)| Some(((*a).as_ref()?, (*b).as_ref()?)))
            .collect();
        both.len() >= 2 && both.iter().all(|(a, b)| a == b)
    }
}

/// The browser traits an anchor match must share: the same hashes from a different browser or
/// OS are a coincidence of hardware, not the same visitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BrowserTraits {
    pub engine: Engine,
    pub os: Os,
    pub major: Option<u32>,
}

/// Browsers update; a visitor a few majors apart is still the same install.
const MAX_MAJOR_DRIFT: u32 = 4;

impl BrowserTraits {
    pub fn of(probes: &Probes) -> Self {
        let user_agent = probes
            .automation
            .as_ref()
            .and_then(|a| a.user_agent.as_deref())
            .unwrap_or_default();
        let claimed = user_agent::parse(user_agent);
        Self {
            engine: claimed.engine,
            os: claimed.os,
            major: claimed.major,
        }
    }

    /// Same engine and OS, and versions (when both known) within a few majors.
    pub fn compatible(&self, other: &Self) -> bool {
        self.engine == other.engine
            && self.os == other.os
            && versions_close(self.major, other.major)
    }

    /// The traits as a visitor row keeps them (engine and OS by their snake_case names).
    pub fn stored(&self) -> store::VisitorTraits {
        let name = |v: serde_json::Result<serde_json::Value>| {
            v.ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        };
        store::VisitorTraits {
            engine: name(serde_json::to_value(self.engine)),
            os: name(serde_json::to_value(self.os)),
            major: self.major,
        }
    }

    /// [`BrowserTraits::compatible`] with the traits a stored visitor kept.
    pub fn compatible_with_stored(&self, stored: &store::VisitorTraits) -> bool {
        let mine = self.stored();
        mine.engine == stored.engine
            && mine.os == stored.os
            && versions_close(mine.major, stored.major)
    }
}

/// Major versions (when both known) within a few majors of each other.
fn versions_close(a: Option<u32>, b: Option<u32>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.abs_diff(b) <= MAX_MAJOR_DRIFT,
        _ => true,
    }
}

impl From<&Anchors> for store::VisitorAnchors {
    fn from(a: &Anchors) -> Self {
        store::VisitorAnchors {
            webgl_hash: a.webgl_hash.clone(),
            parameters_hash: a.parameters_hash.clone(),
            audio_hash: a.audio_hash.clone(),
        }
    }
}

impl From<&store::VisitorAnchors> for Anchors {
    fn from(a: &store::VisitorAnchors) -> Self {
        Anchors {
            webgl_hash: a.webgl_hash.clone(),
            parameters_hash: a.parameters_hash.clone(),
            audio_hash: a.audio_hash.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observations::{Rendering, Screen};

    fn probes(width: f64, webgl: &str) -> Probes {
        Probes {
            screen: Some(Screen {
                width: Some(width),
                height: Some(1080.0),
                pixel_ratio: Some(1.0),
                ..Screen::default()
            }),
            rendering: Some(Rendering {
                webgl_hash: Some(webgl.to_owned()),
                webgl_parameters_hash: Some("ab12cd34ef".to_owned()),
                audio_hash: Some("0011223344".to_owned()),
                ..Rendering::default()
            }),
            ..Probes::default()
        }
    }

    #[test]
    fn the_vector_marks_missing_traits() {
        let vector = component_vector(&Probes::default());
        assert_eq!(vector.len(), component_names().count());
        assert!(vector.iter().all(|&v| v == MISSING));
    }

    #[test]
    fn identical_probes_are_fully_similar_and_differences_lower_it() {
        let a = component_vector(&probes(1920.0, "deadbeef00"));
        assert_eq!(similarity(&a, &a), 1.0);
        let b = component_vector(&probes(1440.0, "cafebabe00"));
        let s = similarity(&a, &b);
        assert!(s < 1.0 && s > 0.0, "{s}");
        assert_eq!(similarity(&[], &a), 0.0);
    }

    #[test]
    fn buckets_are_stable_and_bounded() {
        assert_eq!(bucket("deadbeefcafe"), 0xdead_beef % BUCKETS);
        assert_eq!(bucket("Linux x86_64"), bucket("Linux x86_64"));
        assert!(bucket("Win32") < BUCKETS);
    }

    #[test]
    fn anchors_need_two_shared_and_no_conflict() {
        let a = Anchors::of(&probes(1920.0, "deadbeef00"));
        assert!(a.matches(&Anchors::of(&probes(1440.0, "deadbeef00"))));
        assert!(!a.matches(&Anchors::of(&probes(1920.0, "cafebabe00"))));
        let only_one = Anchors {
            webgl_hash: a.webgl_hash.clone(),
            ..Anchors::default()
        };
        assert!(!a.matches(&only_one));
    }

    #[test]
    fn traits_allow_a_browser_update_but_not_another_browser() {
        let chrome = |major| BrowserTraits {
            engine: Engine::Blink,
            os: Os::Windows,
            major: Some(major),
        };
        assert!(chrome(120).compatible(&chrome(123)));
        assert!(!chrome(110).compatible(&chrome(124)));
        let firefox = BrowserTraits {
            engine: Engine::Gecko,
            ..chrome(120)
        };
        assert!(!chrome(120).compatible(&firefox));
        assert!(chrome(120).compatible_with_stored(&chrome(123).stored()));
        assert!(!chrome(110).compatible_with_stored(&chrome(124).stored()));
        assert!(!chrome(120).compatible_with_stored(&firefox.stored()));
        assert_eq!(chrome(120).stored().engine, "blink");
    }
}
