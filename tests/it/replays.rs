//! Replayed sessions (docs/detection.md#replayed-sessions), tested as the attack was made: a
//! person's real visit in Chromium is recorded through a wrapped `SubtleCrypto.encrypt`, and
//! scripts send its batches again in fresh collect sessions, from Python's `requests` and from
//! Node's `fetch`, with a browser's headers: exact copies, copies jittered (gaps ±5%, places ±2
//! px) with the new session's challenge written in, copies paced as the original was, from one
//! address and from many. The original reads `human`; every replay reads `automated`, the exact
//! ones from the first.

use serde_json::Value;
use vigil_tests::TestServer;
use vigil_tests::detection::final_session;
use vigil_tests::replay::{Replay, Replayer, person_visits, record, replay};

/// The slugs of a session's fired signals.
fn fired(session: &Value) -> Vec<String> {
    session["signals_fired"]
        .as_array()
        .expect("signals_fired")
        .iter()
        .filter_map(|s| s["signal"].as_str().map(str::to_owned))
        .collect()
}

/// A server that takes `X-Forwarded-For` from loopback, so replays can come from many
/// addresses.
async fn server() -> TestServer {
    TestServer::start_with(|a| a.trusted_proxy = vec!["127.0.0.1/32".parse().unwrap()]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_sessions_read_automated_and_the_original_human() {
    let s = server().await;
    let pk = s.creds.keys.publishable_test.clone();
    let recording = record(&s.base, &pk).await;
    let original = final_session(&s, &recording.session_id).await;
    assert_eq!(
        original["decision"]["automation_status"], "human",
        "the recorded visit is a person's: {original}"
    );

    // Exact copies, from Python and from Node, each from its own address: caught by the
    // challenge the probes carry back and by the replay record.
    for (by, from) in [
        (Replayer::Python, "198.51.100.7"),
        (Replayer::Node, "203.0.113.9"),
    ] {
        let how = Replay {
            from: Some(from.to_owned()),
            ..Replay::default()
        };
        let id = replay(by, &s.base, &pk, &recording.path, &how).await;
        let session = final_session(&s, &id).await;
        let fired = fired(&session);
        assert_eq!(
            session["decision"]["automation_status"], "automated",
            "{by:?} exact: {session}"
        );
        assert_eq!(session["decision"]["rule"], "replayed_session");
        for slug in ["stale_challenge", "replayed_payload"] {
            assert!(
                fired.iter().any(|f| f == slug),
                "{by:?} exact: {slug} in {fired:?}"
            );
        }
        assert_eq!(
            session["network"]["ip_address"], from,
            "from its own address"
        );
    }

    // Jittered copies with the new session's challenge written in, from six addresses: the
    // challenge passes, the probes' mark differs; the interaction streams' sketches still
    // agree within the tolerance, and the batches claim time that had not passed.
    for seed in 1..=6u32 {
        let by = if seed % 2 == 0 {
            Replayer::Node
        } else {
            Replayer::Python
        };
        let how = Replay {
            jitter: Some(seed),
            fresh_challenge: true,
            from: Some(format!("192.0.2.{}", 10 + seed)),
            ..Replay::default()
        };
        let id = replay(by, &s.base, &pk, &recording.path, &how).await;
        let session = final_session(&s, &id).await;
        let fired = fired(&session);
        assert_eq!(
            session["decision"]["automation_status"], "automated",
            "{by:?} jittered (seed {seed}): {session}"
        );
        assert!(
            fired.iter().any(|f| f == "replayed_payload"),
            "{by:?} jittered (seed {seed}): {fired:?}"
        );
        assert!(!fired.iter().any(|f| f == "stale_challenge"), "{fired:?}");
        assert_eq!(
            session["network"]["ip_address"],
            format!("192.0.2.{}", 10 + seed)
        );
    }

    // Paced as the original was, jittered, with the new challenge: no time claimed that had not
    // passed, and still the same stream.
    let how = Replay {
        jitter: Some(42),
        fresh_challenge: true,
        paced: true,
        ..Replay::default()
    };
    let id = replay(Replayer::Node, &s.base, &pk, &recording.path, &how).await;
    let session = final_session(&s, &id).await;
    let fired = fired(&session);
    assert_eq!(
        session["decision"]["automation_status"], "automated",
        "paced: {session}"
    );
    assert!(fired.iter().any(|f| f == "replayed_payload"), "{fired:?}");
    assert!(!fired.iter().any(|f| f == "time_ahead"), "paced: {fired:?}");

    // The original, decided before any replay, is unchanged: the first to send is not the copy.
    let again = final_session(&s, &recording.session_id).await;
    assert_eq!(again["decision"]["automation_status"], "human");
    assert!(!self::fired(&again).iter().any(|f| f == "replayed_payload"));
}

/// People whose visits look alike are not replays: one who reloads the page ten times doing
/// much the same each time, and one with two tabs of it open (the second loaded in the
/// background). Every session reads `human`, with no replay signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_reloading_ten_times_or_with_two_tabs_is_no_replay() {
    let s = server().await;
    let pk = s.creds.keys.publishable_test.clone();
    for how in [&["--reloads", "10"][..], &["--tabs", "2"][..]] {
        let sessions = person_visits(&s.base, &pk, how).await;
        assert_eq!(
            sessions.len(),
            if how[0] == "--tabs" { 2 } else { 10 },
            "{how:?}"
        );
        for id in sessions {
            let session = final_session(&s, &id).await;
            let fired = fired(&session);
            assert_eq!(
                session["decision"]["automation_status"], "human",
                "{how:?} {id}: {session}"
            );
            for slug in [
                "replayed_payload",
                "stale_challenge",
                "challenge_missing",
                "time_ahead",
            ] {
                assert!(!fired.iter().any(|f| f == slug), "{how:?} {id}: {fired:?}");
            }
        }
    }
}
