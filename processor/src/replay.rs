//! Replayed batches (docs/detection.md#replayed-sessions): the marks a session's batches leave
//! in the replay record the fleet shares (`store::CollectStore::leave_replay_marks`), and how a
//! mark another session left first tells a batch recorded there and sent again here.
//!
//! A browser never sends the same probes twice, nor the same interaction stream. A probes batch
//! is marked by its answer to the session's challenge (the render of a nonce only that session
//! had, so no two real sessions share it, however alike their browsers): a copy carries the
//! recording's, whatever nonce was written in beside it. An early interaction stream is marked by
//! the sequence of its event kinds, with a sketch of its first events (their gaps and places). A stream whose kinds another session sent first
//! is a replay only if its sketch is that session's within the tolerance below, so people whose
//! streams merely share a shape (ten keys typed cleanly) are told apart, and a copy with its
//! times and places jittered is not.

use schemas::collect::BatchRecord;
use sha2::{Digest, Sha256};
use store::ReplayMark;

use crate::behavior::{EventKind, InputEvent};
use crate::observations::Batch;

/// Interaction batches are marked up to this number: the first few of a session, which any
/// replay of it sends too, keep the record to a few marks a session.
const LAST_MARKED_SEQ: u64 = 4;
/// A stream with fewer device events than this is too short to tell one person from another.
const MIN_STREAM_EVENTS: usize = 8;
/// A stream of one kind of event only (a pointer moving) is marked by its exact content: its
/// kinds alone would be every such stream's.
const MIN_STREAM_KINDS: usize = 2;
/// Gaps that vary less than this (their standard deviation over their mean) are machine-steady.
const STEADY_VARIATION: f64 = 0.25;
/// A gap shorter than this is a machine's: the keys of a chord a macro presses, a password
/// manager's burst. A person's hand does not follow one event with another so fast, so such gaps
/// say nothing of whose hand sent them.
const BURST_GAP_MS: f64 = 25.0;
/// A sketch needs this many events a person could have varied (a place, or a gap longer than a
/// burst's) to tell two sendings apart; with fewer, two people's shortcuts would read as one.
const MIN_VARIED_EVENTS: usize = 4;
/// Events a sketch keeps.
const SKETCH_EVENTS: usize = 16;
/// Bytes an event takes in a sketch: its kind, the gap since the one before (ms), its place.
const SKETCH_EVENT_BYTES: usize = 7;
/// A place a key event lacks.
const NO_PLACE: i16 = i16::MIN;
/// Two sketched events agree when their gaps differ by at most this share of the longer (or
/// [`GAP_SLACK_MS`]) and their places by at most [`PLACE_SLACK_PX`] on each axis; two sketches
/// are one stream when [`AGREEING_SHARE`] of their events agree. A copy jittered by ±5% in its
/// gaps and ±2 px in its places stays within; two people's streams do not.
const GAP_SLACK_SHARE: f64 = 0.12;
const GAP_SLACK_MS: f64 = 3.0;
const PLACE_SLACK_PX: i32 = 4;
const AGREEING_SHARE: f64 = 0.9;

/// The mark `batch` leaves, if it leaves one: every probes batch, and the early interaction
/// batches with enough device events to tell.
pub fn mark(batch: &BatchRecord, observed: &Batch) -> Option<ReplayMark> {
    let key = |kind: &[u8], content: &[u8]| {
        let digest = Sha256::new()
            .chain_update(b"vigil/replay/v1\0")
            .chain_update(kind)
            .chain_update(batch.organization_id.ulid().to_bytes())
            .chain_update([match batch.environment {
                schemas::credential::Environment::Live => 0u8,
                schemas::credential::Environment::Test => 1,
            }])
            .chain_update(content)
            .finalize();
        let mut key = [0u8; 16];
        key.copy_from_slice(&digest[..16]);
        key
    };
    match observed {
        // Only probes that answer a challenge: without one, two browsers that report alike
        // (Tor Browser's rounded timers) could send the same probes.
        Batch::Probes(probes) => {
            let render = probes.challenge.as_ref()?.render.as_deref()?;
            (!render.is_empty()).then(|| ReplayMark {
                key: key(b"challenge-render", render.as_bytes()),
                session_id: batch.session_id,
                sketch: Vec::new(),
            })
        }
        Batch::Interactions(interactions) if batch.seq <= LAST_MARKED_SEQ => {
            let device: Vec<&InputEvent> = interactions
                .events
                .iter()
                .filter(|e| e.kind.is_some_and(EventKind::is_device_input))
                .collect();
            if device.len() < MIN_STREAM_EVENTS || steady(&device) || burst(&device) {
                return None;
            }
            let kinds: Vec<u8> = device.iter().map(|e| kind_byte(e.kind)).collect();
            let mut distinct = kinds.clone();
            distinct.sort_unstable();
            distinct.dedup();
            if distinct.len() < MIN_STREAM_KINDS {
                let content = serde_json::to_vec(&interactions.events).ok()?;
                return Some(ReplayMark {
                    key: key(b"stream-exact", &content),
                    session_id: batch.session_id,
                    sketch: Vec::new(),
                });
            }
            Some(ReplayMark {
                key: key(b"stream", &kinds),
                session_id: batch.session_id,
                sketch: sketch(&device),
            })
        }
        Batch::Interactions(_) => None,
    }
}

/// Whether `found`, the mark the record held for `own`'s key, says `own`'s batch is a replay:
/// another session left it, and for a stream, its sketch is `own`'s within the tolerance.
pub fn replayed(own: &ReplayMark, found: &ReplayMark) -> bool {
    found.session_id != own.session_id
        && (own.sketch.is_empty() == found.sketch.is_empty())
        && (own.sketch.is_empty() || same_stream(&own.sketch, &found.sketch))
}

/// A stream whose gaps barely vary (their coefficient of variation under
/// [`STEADY_VARIATION`]) has no rhythm to tell one sending from another: a hardware key typing a
/// one-time password, a password manager's auto-type, a barcode scanner. It is not marked.
fn steady(device: &[&InputEvent]) -> bool {
    let gaps: Vec<f64> = device
        .windows(2)
        .filter_map(|pair| Some(pair[1].t? - pair[0].t?))
        .collect();
    if gaps.len() < 2 {
        return true;
    }
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let variance = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
    mean <= 0.0 || variance.sqrt() / mean < STEADY_VARIATION
}

/// A stream that is nearly all placeless keys in machine-fast succession (a macro's `Ctrl+A`,
/// `Ctrl+C`): fewer than [`MIN_VARIED_EVENTS`] of all its events carry a place or a gap of
/// [`BURST_GAP_MS`] or more. It is not marked: every sending of that macro is alike. Judged over
/// the whole stream, not its sketched start: a burst put in front of a recorded person's stream
/// leaves it marked (by a sketch every copy shares), never unmarked.
fn burst(device: &[&InputEvent]) -> bool {
    let placed = device
        .iter()
        .filter(|e| e.x.is_some() || e.y.is_some())
        .count();
    let slow_gaps = device
        .windows(2)
        .filter(|pair| match (pair[0].t, pair[1].t) {
            (Some(a), Some(b)) => b - a >= BURST_GAP_MS,
            _ => false,
        })
        .count();
    placed + slow_gaps < MIN_VARIED_EVENTS
}

fn kind_byte(kind: Option<EventKind>) -> u8 {
    match kind {
        Some(EventKind::Pointermove) => 1,
        Some(EventKind::Pointerdown) => 2,
        Some(EventKind::Pointerup) => 3,
        Some(EventKind::Click) => 4,
        Some(EventKind::Keydown) => 5,
        Some(EventKind::Keyup) => 6,
        Some(EventKind::Touchstart) => 7,
        Some(EventKind::Touchmove) => 8,
        Some(EventKind::Touchend) => 9,
        _ => 0,
    }
}

/// The first [`SKETCH_EVENTS`] device events: kind, gap since the one before in whole ms, and
/// place in whole pixels.
fn sketch(device: &[&InputEvent]) -> Vec<u8> {
    let mut out = Vec::with_capacity(SKETCH_EVENTS * SKETCH_EVENT_BYTES);
    let mut last_t: Option<f64> = None;
    for event in device.iter().take(SKETCH_EVENTS) {
        let gap = match (last_t, event.t) {
            (Some(last), Some(t)) => (t - last).round().clamp(0.0, f64::from(u16::MAX)) as u16,
            _ => 0,
        };
        last_t = event.t.or(last_t);
        let place = |v: Option<f64>| {
            v.map_or(NO_PLACE, |v| {
                v.round()
                    .clamp(f64::from(i16::MIN + 1), f64::from(i16::MAX)) as i16
            })
        };
        out.push(kind_byte(event.kind));
        out.extend_from_slice(&gap.to_be_bytes());
        out.extend_from_slice(&place(event.x).to_be_bytes());
        out.extend_from_slice(&place(event.y).to_be_bytes());
    }
    out
}

/// Whether two sketches are one stream, jittered or not (see [`GAP_SLACK_SHARE`]).
fn same_stream(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() || a.is_empty() || !a.len().is_multiple_of(SKETCH_EVENT_BYTES) {
        return false;
    }
    let events = a.len() / SKETCH_EVENT_BYTES;
    let mut agreeing = 0;
    for (ea, eb) in a
        .chunks_exact(SKETCH_EVENT_BYTES)
        .zip(b.chunks_exact(SKETCH_EVENT_BYTES))
    {
        if ea[0] != eb[0] {
            return false;
        }
        let gap = |e: &[u8]| f64::from(u16::from_be_bytes([e[1], e[2]]));
        let place = |e: &[u8], at: usize| i16::from_be_bytes([e[at], e[at + 1]]);
        let (ga, gb) = (gap(ea), gap(eb));
        let gaps_agree = (ga - gb).abs() <= GAP_SLACK_MS.max(GAP_SLACK_SHARE * ga.max(gb));
        let places_agree = [3, 5].into_iter().all(|at| {
            let (pa, pb) = (place(ea, at), place(eb, at));
            (pa == NO_PLACE && pb == NO_PLACE)
                || (pa != NO_PLACE
                    && pb != NO_PLACE
                    && (i32::from(pa) - i32::from(pb)).abs() <= PLACE_SLACK_PX)
        });
        if gaps_agree && places_agree {
            agreeing += 1;
        }
    }
    agreeing as f64 >= AGREEING_SHARE * events as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, t: f64, place: Option<(f64, f64)>) -> InputEvent {
        InputEvent {
            t: Some(t),
            kind: Some(kind),
            x: place.map(|p| p.0),
            y: place.map(|p| p.1),
            trusted: Some(true),
            field: None,
        }
    }

    /// A person's stream: a pointer's path, a click, typing.
    fn stream(seed: u64) -> Vec<InputEvent> {
        let mut r = seed;
        let mut next = move || {
            r = r
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (r >> 33) as f64 / f64::from(1u32 << 31)
        };
        let mut t = 100.0;
        let mut events = Vec::new();
        let (mut x, mut y) = (300.0, 200.0);
        for _ in 0..10 {
            t += 8.0 + next() * 30.0;
            x += next() * 40.0 - 10.0;
            y += next() * 20.0 - 5.0;
            events.push(event(EventKind::Pointermove, t, Some((x, y))));
        }
        for kind in [
            EventKind::Pointerdown,
            EventKind::Pointerup,
            EventKind::Click,
        ] {
            t += 40.0 + next() * 80.0;
            events.push(event(kind, t, Some((x, y))));
        }
        for _ in 0..6 {
            t += 90.0 + next() * 150.0;
            events.push(event(EventKind::Keydown, t, None));
            t += 60.0 + next() * 50.0;
            events.push(event(EventKind::Keyup, t, None));
        }
        events
    }

    fn jittered(events: &[InputEvent], seed: u64, share: f64, px: f64) -> Vec<InputEvent> {
        let mut r = seed;
        let mut next = move || {
            r = r
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (r >> 33) as f64 / f64::from(1u32 << 31) * 2.0 - 1.0
        };
        let mut out = Vec::new();
        let mut t = events[0].t.unwrap();
        for (i, e) in events.iter().enumerate() {
            if i > 0 {
                t += (e.t.unwrap() - events[i - 1].t.unwrap()) * (1.0 + share * next());
            }
            out.push(InputEvent {
                t: Some(t),
                x: e.x.map(|x| x + (px * next()).round()),
                y: e.y.map(|y| y + (px * next()).round()),
                ..e.clone()
            });
        }
        out
    }

    fn refs(events: &[InputEvent]) -> Vec<&InputEvent> {
        events.iter().collect()
    }

    #[test]
    fn a_jittered_copy_is_one_stream_and_another_persons_is_not() {
        let original = stream(1);
        let own = sketch(&refs(&original));
        assert!(same_stream(&own, &own));
        for seed in 0..200 {
            let copy = jittered(&original, seed, 0.05, 2.0);
            assert!(
                same_stream(&own, &sketch(&refs(&copy))),
                "a copy jittered ±5% and ±2 px (seed {seed})"
            );
        }
        // Another person's stream of the same shape.
        for seed in 2..200 {
            let other = stream(seed);
            assert!(!same_stream(&own, &sketch(&refs(&other))), "seed {seed}");
        }
        // Much more jitter is not a copy.
        let far = jittered(&original, 7, 0.5, 20.0);
        assert!(!same_stream(&own, &sketch(&refs(&far))));
    }

    /// How far the tolerance goes: the share of jittered copies still told as the stream, by
    /// how much their gaps and places moved (docs/detection.md#replayed-sessions gives the
    /// table, printed with `--nocapture`).
    #[test]
    fn the_tolerance_holds_for_small_jitter_and_gives_way_to_large() {
        let original = stream(1);
        let own = sketch(&refs(&original));
        let caught = |share: f64, px: f64| {
            (0..500)
                .filter(|&seed| {
                    same_stream(&own, &sketch(&refs(&jittered(&original, seed, share, px))))
                })
                .count() as f64
                / 500.0
        };
        for (share, px) in [
            (0.0, 0.0),
            (0.05, 2.0),
            (0.08, 2.0),
            (0.05, 3.0),
            (0.10, 3.0),
            (0.12, 4.0),
            (0.15, 4.0),
            (0.20, 5.0),
            (0.30, 8.0),
        ] {
            println!(
                "gaps ±{:.0}%, places ±{px} px: {:.1}% caught",
                share * 100.0,
                caught(share, px) * 100.0
            );
        }
        assert_eq!(caught(0.05, 2.0), 1.0, "the issue's ±5% and ±2 px, always");
        assert!(caught(0.08, 2.0) >= 0.99);
        assert!(
            caught(0.30, 8.0) <= 0.05,
            "a stream moved this far is not the same one"
        );
    }

    #[test]
    fn machine_steady_streams_and_unanswered_probes_leave_no_mark() {
        // A hardware key typing a one-time password: 44 keys, 8 ms apart, each held 4 ms.
        let mut otp = Vec::new();
        for i in 0..44 {
            let t = 100.0 + f64::from(i) * 8.0;
            otp.push(event(EventKind::Keydown, t, None));
            otp.push(event(EventKind::Keyup, t + 4.0, None));
        }
        assert!(steady(&refs(&otp)));
        assert!(!steady(&refs(&stream(1))));
        // A macro's Ctrl+A then Ctrl+C, its keys 6 to 15 ms apart (unsteady, yet every sending
        // of it is alike): no mark, where a person typing as many keys leaves one.
        let mut chords = Vec::new();
        for (i, gap) in [0.0, 6.0, 7.0, 7.0, 15.0, 8.0, 6.0, 7.0]
            .into_iter()
            .enumerate()
        {
            let t = chords.last().map_or(100.0, |e: &InputEvent| e.t.unwrap()) + gap;
            let kind = if i % 4 < 2 {
                EventKind::Keydown
            } else {
                EventKind::Keyup
            };
            chords.push(event(kind, t, None));
        }
        assert!(!steady(&refs(&chords)));
        assert!(burst(&refs(&chords)));
        assert!(!burst(&refs(&stream(1)[13..])), "a person's typing");
        // Sixteen machine-fast keys put before a recorded person's stream: still marked, by a
        // sketch every copy of it shares.
        let mut prefixed: Vec<InputEvent> = (0..16)
            .map(|i| {
                let kind = if i % 2 == 0 {
                    EventKind::Keydown
                } else {
                    EventKind::Keyup
                };
                event(kind, 50.0 + f64::from(i) * 3.0, None)
            })
            .collect();
        prefixed.extend(stream(1));
        assert!(!burst(&refs(&prefixed)));
        let record = |seq| BatchRecord {
            schema: schemas::collect::BATCH_RECORD_SCHEMA,
            organization_id: schemas::OrgId::generate(),
            environment: schemas::credential::Environment::Test,
            session_id: schemas::SessionId::generate(),
            seq,
            received_at: schemas::time::now(),
            request: schemas::collect::BatchRequest::default(),
            kind: None,
            observations: schemas::raw::RawJson::null(),
        };
        let keys = Batch::Interactions(crate::observations::InteractionBatch {
            window_ms: None,
            events: otp,
        });
        assert_eq!(mark(&record(2), &keys), None);
        let chords = Batch::Interactions(crate::observations::InteractionBatch {
            window_ms: None,
            events: chords,
        });
        assert_eq!(mark(&record(2), &chords), None);
        let prefixed_batch = |events: Vec<InputEvent>| {
            Batch::Interactions(crate::observations::InteractionBatch {
                window_ms: None,
                events,
            })
        };
        let once = mark(&record(2), &prefixed_batch(prefixed.clone())).expect("a mark");
        let again = mark(&record(2), &prefixed_batch(prefixed)).expect("a mark");
        assert!(same_stream(&once.sketch, &again.sketch));
        let probes = |challenge| {
            Batch::from_value(serde_json::json!({"kind": "probes", "challenge": challenge}))
                .unwrap()
        };
        assert_eq!(mark(&record(1), &probes(serde_json::Value::Null)), None);
        let answered = probes(serde_json::json!({"nonce": "abc", "render": "0f1e"}));
        let first = mark(&record(1), &answered).expect("a render leaves a mark");
        assert!(first.sketch.is_empty());
    }

    #[test]
    fn marks_of_another_session_say_replayed_and_of_its_own_not() {
        let (a, b) = (
            schemas::SessionId::generate(),
            schemas::SessionId::generate(),
        );
        let sketched = sketch(&refs(&stream(1)));
        let own = ReplayMark {
            key: [1; 16],
            session_id: a,
            sketch: sketched.clone(),
        };
        let found = |session, sketch: &[u8]| ReplayMark {
            key: [1; 16],
            session_id: session,
            sketch: sketch.to_vec(),
        };
        assert!(replayed(&own, &found(b, &sketched)));
        assert!(
            !replayed(&own, &found(a, &sketched)),
            "its own, delivered again"
        );
        assert!(!replayed(&own, &found(b, &sketch(&refs(&stream(3))))));
        let exact = ReplayMark {
            sketch: Vec::new(),
            ..own.clone()
        };
        assert!(replayed(&exact, &found(b, &[])));
    }
}
