//! `vigil export` (docs/analysts.md#the-command-line) run as an analyst runs it: the binary,
//! against a real server with the secret key in its environment, or straight from a
//! PostgreSQL store; to each of the three formats, read by pyarrow, polars and DuckDB and equal
//! to what the JSON API answers; a download the store breaks mid-stream, resumed with
//! `--resume`, equal to an unbroken one; and, run without a terminal, nothing printed at all.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use serde_json::Value;
use vigil_tests::analysts::{
    assert_sessions_match_the_api, python, read_with_each_tool, scored, succeeded, vigil_export,
};
use vigil_tests::faults::FlakyStore;
use vigil_tests::{TestServer, postgres_database, vigil_binary};

/// The snippet docs/analysts.md#the-command-line gives for the files `vigil export` writes.
fn file_snippet() -> String {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/analysts.md"))
        .unwrap();
    let (_, after) = page
        .split_once("<!-- export-file-snippet -->\n```python\n")
        .expect("the snippet's marker");
    after[..after.find("```").unwrap()].to_owned()
}

fn failed(out: &Output) -> String {
    assert!(!out.status.success(), "vigil export should have failed");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The lines of an NDJSON file, parsed and sorted by `id`.
fn ndjson_rows(path: &Path, id: &str) -> Vec<Value> {
    let mut rows: Vec<Value> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    rows.sort_by_key(|r| r[id].as_str().unwrap_or_default().to_owned());
    rows
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn sorted(ids: &[String]) -> Vec<String> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_writes_each_format_as_the_api_answers() {
    let s = TestServer::start().await;
    let ids = scored(&s, 3).await;
    let sk = &s.creds.keys.secret_test;
    let dir = tempfile::tempdir().unwrap();

    for name in ["sessions.arrows", "sessions.parquet"] {
        let out = dir.path().join(name);
        succeeded(&vigil_export(
            &s,
            &["sessions", "--url", &s.base, "--out", path_str(&out)],
        ));
        let read = read_with_each_tool(&out);
        assert_eq!(read.metadata["vigil.schema_version"], "2", "{name}");
        assert_eq!(read.metadata["vigil.export"], "sessions", "{name}");
        let exported: Vec<String> = read
            .rows
            .iter()
            .map(|r| r["session_id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(exported, sorted(&ids), "{name}");
        assert_sessions_match_the_api(&s, sk, &read.rows).await;
    }

    // The docs' snippet for these files runs as written on each.
    for name in ["sessions.arrows", "sessions.parquet"] {
        let printed = python(&file_snippet(), &[path_str(&dir.path().join(name))]);
        assert!(
            printed.contains("verdict") && printed.contains(&format!(" {} ", ids.len())),
            "{name}: {printed}"
        );
    }

    // NDJSON: the lines the endpoint answers.
    let out = dir.path().join("sessions.ndjson");
    succeeded(&vigil_export(
        &s,
        &["sessions", "--url", &s.base, "--out", path_str(&out)],
    ));
    let r = s
        .client
        .get(format!("{}/v1/sessions/export?format=ndjson", s.base))
        .bearer_auth(sk)
        .send()
        .await
        .unwrap();
    let mut served: Vec<Value> = r
        .text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    served.sort_by_key(|r| r["session_id"].as_str().unwrap().to_owned());
    assert_eq!(ndjson_rows(&out, "session_id"), served);

    // A projection without the id writes only the columns asked for, in each format.
    let [arrows, lines] = ["verdicts.arrows", "verdicts.ndjson"].map(|n| dir.path().join(n));
    for out in [&arrows, &lines] {
        let args = [
            "sessions",
            "--url",
            &s.base,
            "--columns",
            "verdict,risk_score",
            "--out",
        ];
        let mut args = args.to_vec();
        args.push(path_str(out));
        succeeded(&vigil_export(&s, &args));
    }
    let read = read_with_each_tool(&arrows);
    assert_eq!(read.columns, ["verdict", "risk_score"]);
    assert_eq!(read.rows.len(), 3);
    for row in ndjson_rows(&lines, "verdict") {
        let keys: Vec<&String> = row.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["risk_score", "verdict"], "{row}");
    }

    // Events name their organization; they export as the events API lists them (events made
    // while the export ran may be in it or not).
    let before = event_ids(&s, sk).await;
    let events = dir.path().join("events.parquet");
    succeeded(&vigil_export(
        &s,
        &[
            "events",
            "--url",
            &s.base,
            "--organization",
            s.creds.org_id(),
            "--out",
            path_str(&events),
        ],
    ));
    let after = event_ids(&s, sk).await;
    let read = read_with_each_tool(&events);
    let exported: Vec<String> = read
        .rows
        .iter()
        .map(|r| r["event_id"].as_str().unwrap().to_owned())
        .collect();
    assert!(!before.is_empty());
    assert!(
        before.iter().all(|id| exported.contains(id)),
        "{before:?} {exported:?}"
    );
    assert!(
        exported.iter().all(|id| after.contains(id)),
        "{exported:?} {after:?}"
    );

    // Nothing is left beside the files written.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "events.parquet",
            "sessions.arrows",
            "sessions.ndjson",
            "sessions.parquet",
            "verdicts.arrows",
            "verdicts.ndjson"
        ]
    );
}

/// The ids of the events the events API lists, sorted.
async fn event_ids(s: &TestServer, key: &str) -> Vec<String> {
    let mut ids: Vec<String> = s
        .pages(key, &format!("{}/events", s.org_path()))
        .await
        .iter()
        .flatten()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort_unstable();
    ids
}

async fn with_flaky_store() -> (TestServer, Arc<FlakyStore>) {
    FlakyStore::serve(|_| {}).await
}

/// The store fails on the third page: the command stops with what it has in `<out>.part`,
/// and `--resume` continues after its last row; the result equals an unbroken export, in each
/// format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_export_resumed_equals_an_unbroken_one() {
    let (s, flaky) = with_flaky_store().await;
    let ids = scored(&s, 5).await;
    let dir = tempfile::tempdir().unwrap();
    for format in ["arrows", "parquet", "ndjson"] {
        let whole = dir.path().join(format!("whole.{format}"));
        let args = |out: &Path| -> Vec<String> {
            ["sessions", "--url", &s.base, "--batch-size", "1", "--out"]
                .iter()
                .map(|a| a.to_string())
                .chain([path_str(out).to_owned()])
                .collect()
        };
        let run = |args: &[String]| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            vigil_export(&s, &args)
        };
        succeeded(&run(&args(&whole)));

        let broken = dir.path().join(format!("broken.{format}"));
        flaky.fail_after("list_session_digests", 2, 1);
        let stderr = failed(&run(&args(&broken)));
        assert!(
            stderr.contains("--resume") && stderr.contains("after 2 rows"),
            "{stderr}"
        );
        assert!(!broken.exists(), "no {format} file until it is complete");
        let part = dir.path().join(format!("broken.{format}.part"));
        assert!(part.exists());

        // Starting again over it is refused; so is a resume that asks for another export.
        let stderr = failed(&run(&args(&broken)));
        assert!(stderr.contains("--resume"), "{stderr}");
        let mut other = args(&broken);
        other.extend(["--columns".into(), "verdict".into(), "--resume".into()]);
        let stderr = failed(&run(&other));
        assert!(stderr.contains("as it began"), "{stderr}");

        let mut resumed = args(&broken);
        resumed.push("--resume".into());
        succeeded(&run(&resumed));
        assert!(!part.exists());
        assert!(
            !dir.path()
                .join(format!("broken.{format}.part.json"))
                .exists()
        );
        if format == "ndjson" {
            let rows = ndjson_rows(&broken, "session_id");
            assert_eq!(rows.len(), ids.len());
            assert_eq!(rows, ndjson_rows(&whole, "session_id"));
        } else {
            let (got, want) = (read_with_each_tool(&broken), read_with_each_tool(&whole));
            assert_eq!(got.rows.len(), ids.len(), "{format}: every row once");
            assert_eq!(got.rows, want.rows, "{format}");
            assert_eq!(got.metadata, want.metadata);
        }
    }
}

/// On the store's host, the command reads a PostgreSQL store itself (while the service runs
/// on it) and writes what the service would answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_reads_the_store_itself() {
    let url = postgres_database("export_command").await;
    let store_url = url.clone();
    let s = TestServer::start_with(move |a| a.store.store = Some(store_url.clone())).await;
    scored(&s, 2).await;
    let dir = tempfile::tempdir().unwrap();
    let over_http = dir.path().join("http.parquet");
    succeeded(&vigil_export(
        &s,
        &[
            "fingerprints",
            "--url",
            &s.base,
            "--out",
            path_str(&over_http),
        ],
    ));
    let from_store = dir.path().join("store.parquet");
    let store_args = [
        "fingerprints",
        "--store",
        &url,
        "--organization",
        s.creds.org_id(),
        "--environment",
        "test",
        "--out",
        path_str(&from_store),
    ];
    succeeded(&vigil_export(&s, &store_args));
    let (http, store) = (
        read_with_each_tool(&over_http),
        read_with_each_tool(&from_store),
    );
    assert!(!store.rows.is_empty());
    assert_eq!(store.rows, http.rows);

    // The live environment holds none of the test key's rows.
    let live = dir.path().join("live.ndjson");
    let mut live_args = store_args.to_vec();
    live_args[6] = "live";
    live_args[8] = path_str(&live);
    succeeded(&vigil_export(&s, &live_args));
    assert_eq!(std::fs::read_to_string(&live).unwrap(), "");
}

/// What the command refuses, in words that name the flag to fix; a refused export leaves no
/// file behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_what_to_fix() {
    let s = TestServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let nowhere = elsewhere.path().join("no-data-here");
    let out = dir.path().join("sessions.arrows");
    let out = path_str(&out);

    let stderr = failed(&vigil_export(
        &s,
        &[
            "sessions",
            "--url",
            &s.base,
            "--columns",
            "verdict,nope",
            "--out",
            out,
        ],
    ));
    assert!(
        stderr.contains("--columns") && stderr.contains("`nope`") && stderr.contains("session_id"),
        "{stderr}"
    );
    let stderr = failed(&vigil_export(
        &s,
        &[
            "sessions",
            "--url",
            &s.base,
            "--from",
            "2020-01-01T00:00:00Z",
            "--out",
            out,
        ],
    ));
    assert!(stderr.contains("31 days"), "{stderr}");
    let stderr = failed(&vigil_export(
        &s,
        &["sessions", "--url", &s.base, "--out", "sessions.csv"],
    ));
    assert!(stderr.contains(".arrows, .parquet or .ndjson"), "{stderr}");
    let stderr = failed(&vigil_export(
        &s,
        &["events", "--url", &s.base, "--out", out],
    ));
    assert!(stderr.contains("--organization"), "{stderr}");
    let stderr = failed(&vigil_export(
        &s,
        &[
            "fingerprints",
            "--url",
            &s.base,
            "--verdict",
            "bot",
            "--out",
            out,
        ],
    ));
    assert!(stderr.contains("sessions export only"), "{stderr}");
    let stderr = failed(
        &Command::new(vigil_binary())
            .args(["export", "sessions", "--url", &s.base, "--out", out])
            .env_remove("VIGIL_SECRET_KEY")
            .output()
            .unwrap(),
    );
    assert!(stderr.contains("VIGIL_SECRET_KEY"), "{stderr}");
    let publishable = Command::new(vigil_binary())
        .args(["export", "sessions", "--url", &s.base, "--out", out])
        .env("VIGIL_SECRET_KEY", &s.creds.keys.publishable_test)
        .output()
        .unwrap();
    let stderr = failed(&publishable);
    assert!(stderr.contains("refused the export"), "{stderr}");
    assert!(
        !stderr.contains(&s.creds.keys.publishable_test),
        "the key is never printed: {stderr}"
    );
    let stderr = failed(&vigil_export(
        &s,
        &[
            "sessions",
            "--out",
            out,
            "--organization",
            s.creds.org_id(),
            "--data-dir",
            path_str(&nowhere),
        ],
    ));
    assert!(stderr.contains("no embedded store"), "{stderr}");
    let stderr = failed(&vigil_export(&s, &["sessions", "--resume", "--out", out]));
    assert!(stderr.contains("nothing to resume"), "{stderr}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// `<out>.part` is made new, for this user alone, and never through a symbolic link: a link or
/// a file already there (in a shared directory, another user could have put either) is refused
/// and left as it was. `--resume` takes only a regular file this user owns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn part_files_are_made_new_and_private_and_never_written_through_a_link() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
    let (s, flaky) = with_flaky_store().await;
    scored(&s, 4).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rows.ndjson");
    let part = dir.path().join("rows.ndjson.part");
    let run = |resume: bool| {
        let mut args = vec!["sessions", "--url", &s.base, "--batch-size", "1", "--out"];
        args.push(path_str(&out));
        if resume {
            args.push("--resume");
        }
        vigil_export(&s, &args)
    };
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "the user's own file").unwrap();
    symlink(&victim, &part).unwrap();
    let stderr = failed(&run(false));
    assert!(stderr.contains("never written into"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "the user's own file"
    );
    std::fs::remove_file(&part).unwrap();
    std::fs::write(&part, "someone else's").unwrap();
    failed(&run(false));
    assert_eq!(std::fs::read_to_string(&part).unwrap(), "someone else's");
    std::fs::remove_file(&part).unwrap();

    // A broken export leaves its part, the user's alone.
    flaky.fail_after("list_session_digests", 2, 1);
    failed(&run(false));
    let meta = std::fs::symlink_metadata(&part).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);

    // --resume refuses the part swapped for a link to it...
    let kept = dir.path().join("kept.part");
    std::fs::rename(&part, &kept).unwrap();
    let length = std::fs::metadata(&kept).unwrap().len();
    symlink(&kept, &part).unwrap();
    let stderr = failed(&run(true));
    assert!(stderr.contains("symbolic link"), "{stderr}");
    assert_eq!(std::fs::metadata(&kept).unwrap().len(), length);
    std::fs::remove_file(&part).unwrap();
    std::fs::rename(&kept, &part).unwrap();
    // ...and another user's file (the tests run as root, which may give it away).
    let own = std::fs::metadata(&part).unwrap().uid();
    std::os::unix::fs::chown(&part, Some(65534), Some(65534)).unwrap();
    let stderr = failed(&run(true));
    assert!(stderr.contains("another user"), "{stderr}");
    std::os::unix::fs::chown(&part, Some(own), None).unwrap();
    succeeded(&run(true));
    assert_eq!(ndjson_rows(&out, "session_id").len(), 4);
}
