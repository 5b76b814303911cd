//! The conformance suite against the embedded backend, plus a crash test: every write the store
//! acknowledged is present and whole after the writing process is killed with SIGKILL.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use chrono::TimeDelta;
use schemas::credential::{Environment, KeyType};
use schemas::ids::{KeyId, OrgId};
use schemas::resources::OrgStatus;
use schemas::scope::Scope;
use schemas::time;
use store::{ApiKeyRecord, CredentialHash, OrganizationRecord, Store};

/// Each case gets its own directory, removed after the store is closed.
async fn embedded_store() -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(dir.path()).await;
    (store, dir)
}

async fn open(dir: &Path) -> Store {
    // Through the URL, as the binary opens it.
    store::open(&format!("embedded:{}", dir.display()))
        .await
        .expect("open embedded store")
}

store::store_conformance_suite!(embedded_store());

// ---- crash durability ----

/// Set (to the store directory) only in the child process the crash test starts.
const WRITER_DIR: &str = "VIGIL_STORE_CRASH_WRITER_DIR";
/// Precedes each acknowledgement line. The test harness may print `test crash_writer ... `
/// on the same line, so the parent searches for it rather than matching line starts.
const ACK: &str = "@@acknowledged@@ ";
/// How many acknowledgements the parent waits for before it kills the writer.
const ACKS_BEFORE_KILL: usize = 41;

fn key(org: OrgId, id: KeyId) -> ApiKeyRecord {
    let mut hash = [0x5a; 32];
    hash[..16].copy_from_slice(&id.ulid().to_bytes());
    ApiKeyRecord {
        id,
        organization_id: org,
        key_type: KeyType::Secret,
        environment: Environment::Live,
        name: format!("key {id}"),
        key_hash: CredentialHash(hash),
        key_preview: "sk_live_Zz90".into(),
        display_key: "sk_live_Zz90...abcd".into(),
        publishable_token: None,
        allowed_origins: Vec::new(),
        scopes: Scope::ALL.to_vec(),
        rate_limit_override: None,
        created_at: time::now(),
        rotated_at: None,
        revoked_at: None,
        grace_expires_at: None,
        last_used_at: None,
        replaced_by: None,
    }
}

/// The child half of `acknowledged_writes_survive_sigkill`: writes until killed, printing each
/// row after the store acknowledged it. Ignored, so only that test runs it (in a child process).
#[tokio::test]
#[ignore = "the writer process of acknowledged_writes_survive_sigkill"]
async fn crash_writer() {
    let Ok(dir) = std::env::var(WRITER_DIR) else {
        return;
    };
    let store = open(Path::new(&dir)).await;
    let org = OrganizationRecord {
        id: OrgId::generate(),
        name: "Crash Test".into(),
        slug: "crash-test".into(),
        status: OrgStatus::Active,
        created_at: time::now(),
        updated_at: time::now(),
    };
    store.create_organization(&org).await.unwrap();
    println!("{ACK}org {}", serde_json::to_string(&org).unwrap());

    // Bounded so an orphaned writer stops; printing also fails (and ends it) once the parent
    // has gone and the pipe is closed.
    for i in 0..10_000 {
        let created = key(org.id, KeyId::generate());
        store.create_api_key(&created).await.unwrap();
        if i % 2 == 0 {
            println!("{ACK}key {}", serde_json::to_string(&created).unwrap());
            continue;
        }
        // Every other key is rotated at once, and only the rotation is reported: what the
        // parent checks is never changed again after it was printed.
        let replacement = key(org.id, KeyId::generate());
        let now = time::now();
        let rotated = ApiKeyRecord {
            rotated_at: Some(now),
            grace_expires_at: Some(now + TimeDelta::hours(24)),
            replaced_by: Some(replacement.id),
            ..created
        };
        store.rotate_api_key(&rotated, &replacement).await.unwrap();
        println!("{ACK}key {}", serde_json::to_string(&rotated).unwrap());
        println!("{ACK}key {}", serde_json::to_string(&replacement).unwrap());
    }
}

/// Kills the writer if the parent test fails before it does.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "embedded::crash_writer",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(WRITER_DIR, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the writer"),
    );
    let mut lines = BufReader::new(writer.0.stdout.take().unwrap()).lines();
    let mut acks: Vec<String> = Vec::new();
    let take_ack = |acks: &mut Vec<String>, line: String| {
        if let Some((_, ack)) = line.split_once(ACK) {
            acks.push(ack.to_owned());
        }
    };
    while acks.len() < ACKS_BEFORE_KILL {
        let line = lines
            .next()
            .expect("the writer stopped before it was killed")
            .unwrap();
        take_ack(&mut acks, line);
    }
    // `Child::kill` is SIGKILL on Unix: no destructor, no flush, no clean close of the store.
    writer.0.kill().unwrap();
    let status = writer.0.wait().unwrap();
    assert!(
        !status.success(),
        "the writer must die by the signal, not finish: {status}"
    );
    // Lines still in the pipe were printed after their write was acknowledged: check them too.
    for line in lines {
        take_ack(&mut acks, line.unwrap());
    }
    assert!(acks.len() >= ACKS_BEFORE_KILL);

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = open(dir.path()).await;
        let mut org_id = None;
        let mut acknowledged_keys = Vec::new();
        for ack in &acks {
            match ack.split_once(' ').unwrap() {
                ("org", json) => {
                    let org: OrganizationRecord = serde_json::from_str(json).unwrap();
                    assert_eq!(
                        store.get_organization(org.id).await.unwrap().as_ref(),
                        Some(&org)
                    );
                    assert_eq!(
                        store.get_organization_by_slug(&org.slug).await.unwrap(),
                        Some(org.clone())
                    );
                    org_id = Some(org.id);
                }
                ("key", json) => {
                    let key: ApiKeyRecord = serde_json::from_str(json).unwrap();
                    let stored = store
                        .get_api_key(key.organization_id, key.environment, key.id)
                        .await
                        .unwrap();
                    assert_eq!(
                        stored.as_ref(),
                        Some(&key),
                        "acknowledged key {} is missing or changed",
                        key.id
                    );
                    assert_eq!(
                        store.find_api_key_by_hash(&key.key_hash).await.unwrap(),
                        Some(key.clone())
                    );
                    assert_eq!(
                        store.locate_api_key(key.id).await.unwrap(),
                        Some((key.organization_id, key.environment))
                    );
                    acknowledged_keys.push(key.id);
                }
                (other, _) => panic!("unknown acknowledgement `{other}`"),
            }
        }

        // Whatever else reached the disk (writes in flight at the kill) is whole: every row
        // decodes, and a rotation is there with both halves or not at all.
        let org = org_id.expect("the organization was acknowledged first");
        let all = store
            .list_api_keys(org, Environment::Live, None, usize::MAX)
            .await
            .unwrap();
        assert!(all.len() >= acknowledged_keys.len());
        for id in &acknowledged_keys {
            assert!(
                all.iter().any(|k| k.id == *id),
                "list misses acknowledged key {id}"
            );
        }
        for rotated in all.iter().filter(|k| k.replaced_by.is_some()) {
            let replacement = rotated.replaced_by.unwrap();
            assert!(
                all.iter().any(|k| k.id == replacement),
                "rotation of {} is half-written",
                rotated.id
            );
        }
        eprintln!(
            "{} acknowledged rows checked; {} keys on disk",
            acks.len(),
            all.len()
        );
    });
}
