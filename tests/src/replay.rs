//! Replaying a recorded visit as an attacker does (docs/detection.md#replayed-sessions): a real
//! Chromium, used by a person through the X server, on a page that keeps each batch's plaintext
//! before the SDK seals it ([`record`], `recorder/record_session.mjs`); then scripts that open
//! fresh collect sessions and send those batches again, sealed under the new keys, from Node's
//! `fetch` ([`Replayer::Node`], `recorder/replay.mjs`) and Python's `requests`
//! ([`Replayer::Python`], `recorder/replay.py`).

use std::path::{Path, PathBuf};

use crate::detection::recorder_script;

/// A recorded visit: its session and the file holding its batches' plaintexts.
pub struct Recording {
    pub session_id: String,
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

/// A person uses a shop page that loads the SDK from `api` with `key`, in a real Chromium, while
/// the page keeps a copy of every batch it seals.
pub async fn record(api: &str, key: &str) -> Recording {
    let report = recorder_script("node", "record_session.mjs", &["--api", api, "--key", key]).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("recording.json");
    std::fs::write(&path, report.to_string()).expect("the recording is written");
    Recording {
        session_id: report["session_id"]
            .as_str()
            .expect("the recorded session")
            .to_owned(),
        path,
        _dir: dir,
    }
}

/// Who sends the recorded batches again.
#[derive(Debug, Clone, Copy)]
pub enum Replayer {
    /// Node's `fetch`, sealing with the SDK's own crypto.
    Node,
    /// Python's `requests`, sealing with pyca/cryptography.
    Python,
}

/// How a replay changes what it sends.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    /// Gaps ×0.95–1.05 and places ±2 px, from this seed.
    pub jitter: Option<u32>,
    /// The new session's challenge written into the recorded probes.
    pub fresh_challenge: bool,
    /// Each batch sent when the recording's clock says it was (Node only).
    pub paced: bool,
    /// The client address, as `X-Forwarded-For` to a server that trusts loopback.
    pub from: Option<String>,
}

/// Replays `recording` to `api` with `key`; the new session's id.
pub async fn replay(by: Replayer, api: &str, key: &str, recording: &Path, how: &Replay) -> String {
    let recording = recording.to_str().expect("a UTF-8 path").to_owned();
    let mut args = vec![
        "--api".to_owned(),
        api.to_owned(),
        "--key".to_owned(),
        key.to_owned(),
        "--recording".to_owned(),
        recording,
    ];
    if let Some(seed) = how.jitter {
        args.extend(["--jitter".to_owned(), seed.to_string()]);
    }
    if how.fresh_challenge {
        args.push("--fresh-challenge".to_owned());
    }
    if let Some(from) = &how.from {
        args.extend(["--forwarded-for".to_owned(), from.clone()]);
    }
    let (program, script) = match by {
        Replayer::Node => {
            if how.paced {
                args.extend(["--pace".to_owned(), "original".to_owned()]);
            }
            ("node", "replay.mjs")
        }
        Replayer::Python => {
            assert!(!how.paced, "replay.py sends as fast as it can");
            ("python3", "replay.py")
        }
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let report = recorder_script(program, script, &args).await;
    report["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{script} printed no session: {report}"))
        .to_owned()
}

/// A person's visits that look alike (`recorder/person_visits.mjs`): `--reloads N` (the page
/// reloaded N times, much the same done each time) or `--tabs N` (N tabs of it at once). Their
/// sessions, in the order they reported.
pub async fn person_visits(api: &str, key: &str, how: &[&str]) -> Vec<String> {
    let mut args = vec!["--api", api, "--key", key];
    args.extend_from_slice(how);
    let report = recorder_script("node", "person_visits.mjs", &args).await;
    assert_eq!(
        report["ok"], true,
        "every visit reported its session: {report}"
    );
    report["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s.as_str().expect("a session id").to_owned())
        .collect()
}
