//! A full disk is an answer, not an outage (docs/architecture.md#retention): on a real small
//! filesystem (a tmpfs mounted here; the suite runs as root, and a mount that fails fails the
//! test), filled until writes fail, a write answers a retryable 503 in the envelope with
//! `Retry-After`, `/readyz` answers 503 naming the store, reads keep working, nothing is
//! acknowledged that was not stored, and once space is freed, writes resume without a restart.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use vigil_tests::collect::open_session;
use vigil_tests::{Resp, TestServer, json};

/// A tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs {
    dir: PathBuf,
    _parent: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Self {
        let parent = tempfile::tempdir().expect("temp dir");
        let dir = parent.path().join("mnt");
        std::fs::create_dir(&dir).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("running mount");
        assert!(
            status.success(),
            "mounting a tmpfs failed ({status}): this test needs root, and never skips"
        );
        Tmpfs {
            dir,
            _parent: parent,
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Writes a file into `dir` until the filesystem refuses more; answers its path.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0xa5u8; 64 * 1024];
    loop {
        if file
            .write_all(&chunk)
            .and_then(|()| file.sync_data())
            .is_err()
        {
            break;
        }
    }
    // The last partial chunk may leave a few bytes; the small writes take those too.
    while file
        .write_all(&[0u8; 512])
        .and_then(|()| file.sync_data())
        .is_ok()
    {}
    path
}

/// The envelope's retryable 503, with `Retry-After`.
#[track_caller]
fn assert_unavailable(refused: &Resp) {
    assert_eq!(refused.err(503, "service.unavailable")["retryable"], true);
    assert!(refused.header("retry-after").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_a_retryable_503_and_writes_resume_when_space_returns() {
    let disk = Tmpfs::mount("32m");
    let mut s = TestServer::start_at(&disk.dir, |_| {}).await;
    let secret = s.creds.keys.secret_live.clone();
    let pk = s.creds.keys.publishable_test.clone();
    let keys_path = format!("{}/api-keys", s.org_path());
    let new_key = json!({"type": "secret", "name": "while full", "environment": "live", "scopes": ["organizations:read"]});
    let ready = s.get("/readyz").send().await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    // A session opened while there is room, to send a batch into once there is none.
    let session = open_session(&s, &pk).await;
    let batches = format!("/v1/collect/sessions/{}/batches", session.id);
    let probes = json!({"kind": "probes", "automation": {"webdriver": false}});

    let filler = fill(&disk.dir);

    // A write: the envelope's retryable 503, with Retry-After, and nothing stored.
    assert_unavailable(
        &s.post(&keys_path)
            .key(&secret)
            .json(new_key.clone())
            .send()
            .await,
    );
    // A batch: the log cannot take it, so it is not acknowledged.
    let refused = s
        .post(&batches)
        .key(&pk)
        .json(session.batch(1, &probes))
        .send()
        .await;
    assert_unavailable(&refused);
    // Readiness says which dependency and why.
    let ready = s.get("/readyz").send().await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert_eq!(ready.body["status"], "unavailable");
    for dependency in ["store", "log"] {
        assert!(
            ready.body[dependency]
                .as_str()
                .unwrap()
                .contains("disk full"),
            "{}",
            ready.body
        );
    }
    assert!(ready.header("retry-after").is_some());
    // Reads keep working.
    let listed = s.get(&keys_path).key(&secret).send().await;
    let names: Vec<&str> = listed
        .ok(200)
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap_or(""))
        .collect();
    assert!(
        !names.contains(&"while full"),
        "nothing refused was stored: {names:?}"
    );
    s.get(&s.org_path()).key(&secret).send().await.ok(200);

    // Space returns: writes resume in the same process.
    std::fs::remove_file(&filler).unwrap();
    let mut ready = s.get("/readyz").send().await;
    for _ in 0..50 {
        if ready.status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        ready = s.get("/readyz").send().await;
    }
    assert_eq!(ready.status, 200, "{}", ready.body);
    s.post(&keys_path)
        .key(&secret)
        .json(new_key)
        .send()
        .await
        .ok(201);
    s.post(&batches)
        .key(&pk)
        .json(session.batch(1, &probes))
        .send()
        .await
        .ok(202);
    // The processor, which retried its refused writes, scores the session.
    let (org, id) = (
        s.creds.org_id().parse().unwrap(),
        session.id.parse().unwrap(),
    );
    let mut decided = false;
    for _ in 0..200 {
        let stored = s
            .store()
            .get_session(org, schemas::credential::Environment::Test, id)
            .await
            .unwrap();
        if stored.is_some_and(|r| r.latest_decision.is_some()) {
            decided = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        decided,
        "the batch accepted after space returned reached a decision"
    );
    s.stop().await;
    drop(disk);
}

/// The same answers through a store that fails writes with the out-of-space error on demand,
/// which runs anywhere (no mount): key creation is not acknowledged, readiness names the store,
/// reads work, and writes resume when the switch is off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_out_of_space_answers_503_and_recovers_without_a_restart() {
    let (mut s, disk) = TestServer::start_with_full_disk().await;
    let secret = s.creds.keys.secret_live.clone();
    let keys_path = format!("{}/api-keys", s.org_path());
    let new_key = json!({"type": "secret", "name": "while full", "environment": "live", "scopes": ["organizations:read"]});

    disk.fill();
    assert_unavailable(
        &s.post(&keys_path)
            .key(&secret)
            .json(new_key.clone())
            .send()
            .await,
    );
    let ready = s.get("/readyz").send().await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert!(
        ready.body["store"].as_str().unwrap().contains("disk full"),
        "{}",
        ready.body
    );
    assert_eq!(ready.body["log"], "ok", "{}", ready.body);
    let listed = s.get(&keys_path).key(&secret).send().await;
    assert!(
        listed
            .ok(200)
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k["name"] != "while full"),
        "nothing refused was stored"
    );

    disk.free();
    assert_eq!(s.get("/readyz").send().await.status, 200);
    s.post(&keys_path)
        .key(&secret)
        .json(new_key)
        .send()
        .await
        .ok(201);
    s.stop().await;
}
