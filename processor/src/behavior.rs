//! Statistics of the input stream that tell a hand from a script: how straight and how evenly
//! paced pointer strokes are, how regular keystrokes are, and whether events were trusted.
//!
//! People move a pointer along curved paths that speed up and slow down, and type with uneven
//! gaps; automation tools interpolate straight lines in equal steps and type at a fixed delay.
//! The thresholds below are deliberately conservative: a signal fires only when a whole stream
//! looks machine-made, because one straight human flick must not condemn a visitor.
//!
//! Input that only looks human still says where it came from: a mouse's events arrive at whole
//! device pixels, and through an X server on its millisecond clock, while a DevTools-protocol
//! client's (`Input.dispatchMouseEvent`) are placed where its interpolation puts them and stamped
//! when they are dispatched ([`PixelGrid`], [`InputClock`]; `crate::signals` says where each is
//! judged).
//!
//! The input events themselves ([`InputEvent`], [`EventKind`]) are defined here and re-exported
//! by `observations`, which keeps these statistics with a session's events (so the two modules
//! do not read each other).

use serde::{Deserialize, Serialize};

/// A pause longer than this ends a pointer stroke.
const STROKE_GAP_MS: f64 = 300.0;
/// A stroke shorter than this (points or pixels) says nothing about the hand that made it.
const MIN_STROKE_POINTS: usize = 6;
const MIN_STROKE_PX: f64 = 40.0;
/// Chord over path length at or above which a stroke counts as a straight line.
const STRAIGHT_LINEARITY: f64 = 0.995;
/// Coefficient of variation at or below which step sizes or speeds count as constant.
const CONSTANT_CV: f64 = 0.1;
/// A stroke this curved or this unevenly paced is what a hand does.
const HUMAN_LINEARITY: f64 = 0.98;
const HUMAN_SPEED_CV: f64 = 0.3;
/// Keydown gaps longer than this are pauses between bursts, not typing rhythm.
const TYPING_GAP_MS: f64 = 1_500.0;
const MIN_KEY_INTERVALS: usize = 6;
/// Faster than this on average is no human typist (about 60 keys a second).
const SUPERHUMAN_INTERVAL_MS: f64 = 15.0;
const ROBOTIC_KEY_CV: f64 = 0.08;
const HUMAN_KEY_CV: f64 = 0.2;
/// A pointer position this far (in device pixels, per device pixel of ratio, plus a little) from
/// a whole device pixel is between pixels: the SDK keeps hundredths and the store tenths of a CSS
/// pixel, so a whole device pixel at a ratio of 1.5 can read up to 0.05 x 1.5 away.
const GRID_TOLERANCE: f64 = 0.06;
/// Fewer pointer positions than this say nothing about the grid.
const MIN_GRID_POSITIONS: usize = 10;
/// Fewer timed events than this say nothing about the clock.
const MIN_CLOCK_EVENTS: usize = 20;
/// A clock's phase spans this many adjacent tenths of a millisecond: the browser coarsens event
/// times to 0.1 ms with jitter, so one phase can read as two neighbouring tenths.
const PHASE_WIDTH: usize = 3;
/// Below this share of events in one phase, the times are not on a millisecond clock (spread
/// evenly, three tenths in ten hold about 30%).
const IN_PHASE_SHARE: f64 = 0.6;
/// Fewer key events than this say nothing about the clock on their own. Keys are judged
/// apart from the pointer, and more strictly: every key event a page sees comes from the
/// display server (or its auto-repeat, on the same clock), where a browser may add pointer
/// moves of its own stamped when it makes them (after a scroll under a resting pointer), so a
/// person's keys keep one phase however few, and six keys of a protocol client all fall in one
/// phase by chance about once in 140.
const MIN_CLOCK_KEYS: usize = 6;
/// Below this share of key events in one phase, the keys are not on a millisecond clock.
const KEYS_IN_PHASE_SHARE: f64 = 0.9;
/// A page's own code may call `element.click()`, which dispatches an untrusted click; up to
/// this many are the site's doing, not the visitor's.
pub const UNTRUSTED_CLICKS_TOLERATED: usize = 3;

/// One input event. No key values are ever sent. Read leniently like every browser member, but
/// by hand (the observations' `input` module): interaction batches are most of the traffic, and
/// the generic lenient path builds a tree per member.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct InputEvent {
    /// Milliseconds since the SDK loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t: Option<f64>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<EventKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub y: Option<f64>,
    /// `Event.isTrusted`: false when a script dispatched the event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trusted: Option<bool>,
    /// The element the page marked for Vigil (`data-vigil-field`) that the event reached, by
    /// its mark. Folded into the session's [`crate::observations::FieldUse`] counts as the
    /// batch arrives, and not kept with the event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<Box<str>>,
}

/// The event types the SDK records; anything else reads as [`EventKind::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    Pointermove,
    Pointerdown,
    Pointerup,
    Click,
    Keydown,
    Keyup,
    Scroll,
    Touchstart,
    Touchmove,
    Touchend,
    Focus,
    Blur,
    #[serde(other)]
    Other,
}

impl EventKind {
    /// Input a person produces with a device (focus, blur and scroll also follow from script or
    /// layout, so they do not count).
    pub fn is_device_input(self) -> bool {
        matches!(
            self,
            Self::Pointermove
                | Self::Pointerdown
                | Self::Pointerup
                | Self::Click
                | Self::Keydown
                | Self::Keyup
                | Self::Touchstart
                | Self::Touchmove
                | Self::Touchend
        )
    }
}

/// Counts and shape statistics of a session's input events.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct InputSummary {
    pub events: usize,
    /// Device input (pointer, key, touch, click) events.
    pub device_events: usize,
    pub untrusted_device_events: usize,
    pub untrusted_clicks: usize,
    pub pointer_moves: usize,
    pub clicks: usize,
    pub keydowns: usize,
    pub touch_starts: usize,
    pub scrolls: usize,
    pub strokes: StrokeStats,
    pub typing: Option<TypingStats>,
}

/// Shape of the pointer strokes long enough to judge.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StrokeStats {
    pub judged: usize,
    /// Straight, evenly stepped or evenly paced: what an interpolating script draws.
    pub robotic: usize,
    /// Curved or unevenly paced: what a hand draws.
    pub human: usize,
}

/// Rhythm of the keydown events within typing bursts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TypingStats {
    pub intervals: usize,
    pub mean_interval_ms: f64,
    pub interval_cv: f64,
}

impl InputSummary {
    /// Summarises events in arrival order.
    pub fn of(events: &[InputEvent]) -> Self {
        let mut summary = Self {
            events: events.len(),
            ..Self::default()
        };
        for event in events {
            let Some(kind) = event.kind else { continue };
            let untrusted = event.trusted == Some(false);
            if kind.is_device_input() {
                summary.device_events += 1;
                if untrusted {
                    if kind == EventKind::Click {
                        summary.untrusted_clicks += 1;
                    } else {
                        summary.untrusted_device_events += 1;
                    }
                }
            }
            match kind {
                EventKind::Pointermove => summary.pointer_moves += 1,
                EventKind::Click => summary.clicks += 1,
                EventKind::Keydown => summary.keydowns += 1,
                EventKind::Touchstart => summary.touch_starts += 1,
                EventKind::Scroll => summary.scrolls += 1,
                _ => {}
            }
        }
        summary.strokes = stroke_stats(events);
        summary.typing = typing_stats(events);
        summary
    }

    /// Most judged strokes are machine-drawn.
    pub fn robotic_pointer(&self) -> bool {
        self.strokes.judged >= 2 && self.strokes.robotic * 10 >= self.strokes.judged * 7
    }

    /// Keystrokes at a near-constant or impossible rhythm.
    pub fn robotic_typing(&self) -> bool {
        self.typing.as_ref().is_some_and(|typing| {
            typing.interval_cv <= ROBOTIC_KEY_CV || typing.mean_interval_ms < SUPERHUMAN_INTERVAL_MS
        })
    }

    /// Trusted input with the variety a person produces, and no sign of a script.
    pub fn human_like(&self) -> bool {
        let varied_pointer = self.strokes.human > 0;
        let varied_typing = self
            .typing
            .as_ref()
            .is_some_and(|typing| typing.interval_cv >= HUMAN_KEY_CV && !self.robotic_typing());
        let touch_gestures = self.touch_starts >= 2;
        self.untrusted_device_events == 0
            && self.untrusted_clicks < UNTRUSTED_CLICKS_TOLERATED
            && self.device_events >= 10
            && !self.robotic_pointer()
            && !self.robotic_typing()
            && (varied_pointer || varied_typing || touch_gestures)
    }
}

/// Where a session's pointer positions fall against the device's pixel grid.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PixelGrid {
    /// Trusted pointer moves, presses and releases with a position.
    pub judged: usize,
    /// Of those, the ones between device pixels.
    pub between_pixels: usize,
    /// The page's device pixel ratio, which sets where the device pixels are.
    pub pixel_ratio: f64,
}

impl PixelGrid {
    /// A mouse reports whole device pixels (CSS pixels times the ratio); a protocol client's
    /// interpolated path lands between them. Clicks are left out: `MouseEvent` positions are
    /// rounded whatever made them.
    pub fn of(events: &[InputEvent], pixel_ratio: f64) -> Self {
        let ratio = if pixel_ratio.is_finite() && pixel_ratio > 0.0 {
            pixel_ratio
        } else {
            1.0
        };
        let mut grid = Self {
            pixel_ratio: ratio,
            ..Self::default()
        };
        let tolerance = GRID_TOLERANCE * ratio.max(1.0);
        let off = |v: f64| {
            let device = v * ratio;
            (device - device.round()).abs() > tolerance
        };
        for event in events {
            let pointer = matches!(
                event.kind,
                Some(EventKind::Pointermove | EventKind::Pointerdown | EventKind::Pointerup)
            );
            if !pointer || event.trusted == Some(false) {
                continue;
            }
            let (Some(x), Some(y)) = (event.x, event.y) else {
                continue;
            };
            grid.judged += 1;
            if off(x) || off(y) {
                grid.between_pixels += 1;
            }
        }
        grid
    }

    /// Most positions are between device pixels.
    pub fn off_grid(&self) -> bool {
        self.judged >= MIN_GRID_POSITIONS && self.between_pixels * 2 > self.judged
    }
}

/// Whether a session's input times keep one sub-millisecond phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct InputClock {
    /// Trusted device events with a time.
    pub judged: usize,
    /// Of those, the ones in the most common phase ([`PHASE_WIDTH`] adjacent tenths).
    pub in_phase: usize,
    /// Trusted key events (down and up) with a time.
    pub keys: usize,
    /// Of those, the ones in their most common phase.
    pub keys_in_phase: usize,
}

impl InputClock {
    /// On Linux under X11, the server stamps input in whole milliseconds of its clock, so the
    /// times a page sees share one sub-millisecond remainder; a protocol client's events are
    /// stamped when dispatched and spread over every remainder.
    pub fn of(events: &[InputEvent]) -> Self {
        let mut tenths = [0usize; 10];
        let mut key_tenths = [0usize; 10];
        let (mut judged, mut keys) = (0, 0);
        for event in events {
            let device = event.kind.is_some_and(|kind| kind.is_device_input());
            let (true, Some(t)) = (device && event.trusted != Some(false), event.t) else {
                continue;
            };
            if !t.is_finite() {
                continue;
            }
            let tenth = ((t * 10.0).round() as i64).rem_euclid(10) as usize;
            judged += 1;
            tenths[tenth] += 1;
            if matches!(event.kind, Some(EventKind::Keydown | EventKind::Keyup)) {
                keys += 1;
                key_tenths[tenth] += 1;
            }
        }
        let most_in_phase = |tenths: &[usize; 10]| {
            (0..10)
                .map(|start| (0..PHASE_WIDTH).map(|i| tenths[(start + i) % 10]).sum())
                .max()
                .unwrap_or(0)
        };
        Self {
            judged,
            in_phase: most_in_phase(&tenths),
            keys,
            keys_in_phase: most_in_phase(&key_tenths),
        }
    }

    /// Enough events, and no millisecond clock behind them: all input together, or the keys
    /// alone (a keyboard-only visit has few events, but every key is the display server's).
    pub fn unaligned(&self) -> bool {
        let all = self.judged >= MIN_CLOCK_EVENTS
            && (self.in_phase as f64) < IN_PHASE_SHARE * self.judged as f64;
        let keys = self.keys >= MIN_CLOCK_KEYS
            && (self.keys_in_phase as f64) < KEYS_IN_PHASE_SHARE * self.keys as f64;
        all || keys
    }
}

fn stroke_stats(events: &[InputEvent]) -> StrokeStats {
    let mut stats = StrokeStats::default();
    let mut stroke: Vec<(f64, f64, f64)> = Vec::new();
    let moves = events.iter().filter_map(|event| match event {
        InputEvent {
            kind: Some(EventKind::Pointermove),
            t: Some(t),
            x: Some(x),
            y: Some(y),
            ..
        } => Some((*t, *x, *y)),
        _ => None,
    });
    for point in moves {
        if stroke
            .last()
            .is_some_and(|last| point.0 - last.0 > STROKE_GAP_MS || point.0 < last.0)
        {
            judge_stroke(&stroke, &mut stats);
            stroke.clear();
        }
        stroke.push(point);
    }
    judge_stroke(&stroke, &mut stats);
    stats
}

fn judge_stroke(stroke: &[(f64, f64, f64)], stats: &mut StrokeStats) {
    if stroke.len() < MIN_STROKE_POINTS {
        return;
    }
    let steps: Vec<f64> = stroke
        .windows(2)
        .map(|pair| (pair[1].1 - pair[0].1).hypot(pair[1].2 - pair[0].2))
        .collect();
    let path: f64 = steps.iter().sum();
    if !(path.is_finite() && path >= MIN_STROKE_PX) {
        return;
    }
    let (first, last) = (stroke[0], stroke[stroke.len() - 1]);
    let linearity = (last.1 - first.1).hypot(last.2 - first.2) / path;
    // Speeds need time between points; a script that dispatches every step in the same
    // millisecond has none, and then even step sizes alone give it away.
    let speeds: Vec<f64> = stroke
        .windows(2)
        .zip(&steps)
        .filter(|(pair, _)| pair[1].0 - pair[0].0 > 0.5)
        .map(|(pair, step)| step / (pair[1].0 - pair[0].0))
        .collect();
    let step_cv = coefficient_of_variation(&steps);
    let speed_cv =
        (speeds.len() >= MIN_STROKE_POINTS - 1).then(|| coefficient_of_variation(&speeds));
    stats.judged += 1;
    let even = step_cv <= CONSTANT_CV || speed_cv.is_some_and(|cv| cv <= CONSTANT_CV);
    if linearity >= STRAIGHT_LINEARITY && even {
        stats.robotic += 1;
    } else if linearity < HUMAN_LINEARITY || speed_cv.is_some_and(|cv| cv >= HUMAN_SPEED_CV) {
        stats.human += 1;
    }
}

fn typing_stats(events: &[InputEvent]) -> Option<TypingStats> {
    let times: Vec<f64> = events
        .iter()
        .filter(|event| event.kind == Some(EventKind::Keydown))
        .filter_map(|event| event.t)
        .collect();
    let intervals: Vec<f64> = times
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .filter(|gap| (0.0..=TYPING_GAP_MS).contains(gap))
        .collect();
    if intervals.len() < MIN_KEY_INTERVALS {
        return None;
    }
    Some(TypingStats {
        intervals: intervals.len(),
        mean_interval_ms: mean(&intervals),
        interval_cv: coefficient_of_variation(&intervals),
    })
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

/// Standard deviation over mean; 0 for a constant series (including an all-zero one, which is
/// as constant as a series gets).
fn coefficient_of_variation(values: &[f64]) -> f64 {
    let mean = mean(values);
    if values.len() < 2 || mean.abs() < f64::EPSILON {
        return 0.0;
    }
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / values.len() as f64;
    let cv = variance.sqrt() / mean.abs();
    if cv.is_finite() { cv } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pointer(t: f64, x: f64, y: f64) -> InputEvent {
        InputEvent {
            t: Some(t),
            kind: Some(EventKind::Pointermove),
            x: Some(x),
            y: Some(y),
            trusted: Some(true),
            field: None,
        }
    }

    fn key(t: f64) -> InputEvent {
        InputEvent {
            t: Some(t),
            kind: Some(EventKind::Keydown),
            trusted: Some(true),
            ..InputEvent::default()
        }
    }

    #[test]
    fn interpolated_lines_are_robotic_and_curves_are_human() {
        let line = |start: f64| {
            (0..10).map(move |i| {
                pointer(
                    start + i as f64 * 16.0,
                    100.0 + i as f64 * 20.0,
                    200.0 + i as f64 * 10.0,
                )
            })
        };
        let lines: Vec<_> = line(0.0).chain(line(1_000.0)).collect();
        let summary = InputSummary::of(&lines);
        assert_eq!(summary.strokes.judged, 2);
        assert!(summary.robotic_pointer());
        assert!(!summary.human_like());

        // An arc with an accelerating then slowing hand.
        let arc: Vec<_> = (0..12)
            .map(|i| {
                let s = (i as f64 / 11.0 * std::f64::consts::PI).sin();
                let angle = i as f64 * 0.15;
                pointer(
                    i as f64 * 16.0,
                    300.0 * angle.cos() * (0.5 + s),
                    300.0 * angle.sin(),
                )
            })
            .collect();
        let summary = InputSummary::of(&arc);
        assert_eq!(summary.strokes.human, 1);
        assert!(!summary.robotic_pointer());
        assert!(summary.human_like());
    }

    #[test]
    fn steps_dispatched_in_the_same_millisecond_are_robotic() {
        let burst: Vec<_> = (0..20)
            .map(|i| {
                pointer(
                    if i < 10 { 5.0 } else { 900.0 },
                    (i % 10) as f64 * 15.0,
                    0.0,
                )
            })
            .collect();
        assert!(InputSummary::of(&burst).robotic_pointer());
    }

    #[test]
    fn a_fixed_typing_delay_is_robotic() {
        let fixed: Vec<_> = (0..12).map(|i| key(i as f64 * 100.0)).collect();
        assert!(InputSummary::of(&fixed).robotic_typing());
        let instant: Vec<_> = (0..12)
            .map(|i| key(i as f64 * 2.0 + (i % 3) as f64))
            .collect();
        assert!(InputSummary::of(&instant).robotic_typing());
        let gaps = [
            140.0, 95.0, 210.0, 120.0, 330.0, 80.0, 160.0, 240.0, 110.0, 190.0,
        ];
        let human: Vec<_> = gaps
            .iter()
            .scan(0.0, |t, gap| {
                *t += gap;
                Some(key(*t))
            })
            .collect();
        let summary = InputSummary::of(&human);
        assert!(!summary.robotic_typing());
        assert!(summary.typing.unwrap().interval_cv > HUMAN_KEY_CV);
    }

    #[test]
    fn positions_between_device_pixels_are_off_the_grid() {
        let whole: Vec<InputEvent> = (0..12)
            .map(|i| pointer(i as f64 * 10.0, 100.0 + i as f64, 200.0))
            .collect();
        assert!(!PixelGrid::of(&whole, 1.0).off_grid());
        // At a ratio of 1.5 a whole device pixel is a third of a CSS pixel, stored as .3 or .7.
        let thirds: Vec<InputEvent> = (0..12)
            .map(|i| pointer(i as f64 * 10.0, 100.0 + i as f64 / 1.5, 200.7))
            .collect();
        let thirds: Vec<InputEvent> = thirds
            .into_iter()
            .map(|mut e| {
                e.x = e.x.map(|x| (x * 10.0).round() / 10.0);
                e
            })
            .collect();
        assert!(
            !PixelGrid::of(&thirds, 1.5).off_grid(),
            "{:?}",
            PixelGrid::of(&thirds, 1.5)
        );
        let between: Vec<InputEvent> = (0..12)
            .map(|i| {
                pointer(
                    i as f64 * 10.0,
                    100.0 + i as f64 * 2.37,
                    200.0 + i as f64 * 1.9,
                )
            })
            .collect();
        assert!(PixelGrid::of(&between, 1.0).off_grid());
        assert!(
            !PixelGrid::of(&between[..5], 1.0).off_grid(),
            "too few to judge"
        );
    }

    #[test]
    fn times_on_a_millisecond_clock_share_a_phase() {
        let aligned: Vec<InputEvent> = (0..30).map(|i| key(1_000.2 + i as f64 * 87.0)).collect();
        assert!(
            !InputClock::of(&aligned).unaligned(),
            "{:?}",
            InputClock::of(&aligned)
        );
        let spread: Vec<InputEvent> = (0..30).map(|i| key(1_000.0 + i as f64 * 87.3)).collect();
        assert!(
            InputClock::of(&spread).unaligned(),
            "{:?}",
            InputClock::of(&spread)
        );
        assert!(
            !InputClock::of(&spread[..5]).unaligned(),
            "too few to judge"
        );
        // Keys alone are judged from six: a keyboard-only visit's Tab, Tab, Enter.
        assert!(
            InputClock::of(&spread[..6]).unaligned(),
            "{:?}",
            InputClock::of(&spread[..6])
        );
        assert!(!InputClock::of(&aligned[..6]).unaligned());
        // Pointer moves the browser stamps itself do not make a person's keys unaligned, nor
        // are a few pointer events judged.
        let mut person = aligned[..8].to_vec();
        person.extend((0..6).map(|i| pointer(2_000.0 + f64::from(i) * 13.37, 5.0, 5.0)));
        assert!(
            !InputClock::of(&person).unaligned(),
            "{:?}",
            InputClock::of(&person)
        );
    }

    #[test]
    fn untrusted_events_are_counted_apart_from_clicks() {
        let mut events = vec![pointer(0.0, 0.0, 0.0)];
        events[0].trusted = Some(false);
        events.push(InputEvent {
            kind: Some(EventKind::Click),
            trusted: Some(false),
            ..InputEvent::default()
        });
        let summary = InputSummary::of(&events);
        assert_eq!(
            (summary.untrusted_device_events, summary.untrusted_clicks),
            (1, 1)
        );
    }
}
