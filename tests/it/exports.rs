//! Exports for analysts (docs/analysts.md) read by the analysts' own tools: real sessions
//! scored through the Collect API are exported over HTTP and read by pyarrow, polars, pandas
//! and DuckDB, and every row equals what the JSON API answers for the same session; on the
//! embedded store and on PostgreSQL. Then the boundaries: projection, windows, formats, keys,
//! scopes, the other environment, the schema alone, and a download cut mid-stream resumed with
//! `after`.

use std::process::Command;

use serde_json::{Value, json};
use vigil_tests::analysts::{
    assert_sessions_match_the_api, copied_to, python, read_with_each_tool, scored,
};
use vigil_tests::{TestServer, postgres_database};

/// `GET path` with `key` and `accept`: status and body bytes.
async fn get_bytes(s: &TestServer, path: &str, key: &str, accept: Option<&str>) -> (u16, Vec<u8>) {
    let mut request = s.client.get(format!("{}{path}", s.base)).bearer_auth(key);
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let r = request.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.bytes().await.unwrap().to_vec())
}

/// The rows of an Arrow stream file as JSON, read by pyarrow (ids, verdicts, scores, signals).
const PYARROW_ROWS: &str = r#"
import json, sys
import pyarrow as pa
with open(sys.argv[1], "rb") as f:
    table = pa.ipc.open_stream(f).read_all()
rows = table.to_pylist()
for r in rows:
    for k, v in list(r.items()):
        if hasattr(v, "isoformat"):
            r[k] = v.isoformat()
print(json.dumps({"metadata": {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()},
                  "columns": table.schema.names, "rows": rows}))
"#;

fn pyarrow_rows(bytes: &[u8]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("export.arrows");
    std::fs::write(&path, bytes).unwrap();
    serde_json::from_str(&python(PYARROW_ROWS, &[path.to_str().unwrap()])).unwrap()
}

/// The sessions export, read by pyarrow, polars, pandas and DuckDB, equals the JSON API.
async fn sessions_read_by_the_analysts_tools(s: &TestServer) {
    let ids = scored(s, 3).await;
    let sk = &s.creds.keys.secret_test;
    let (status, arrow) = get_bytes(s, "/v1/sessions/export", sk, None).await;
    assert_eq!(status, 200);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.arrows");
    std::fs::write(&path, &arrow).unwrap();
    let read = read_with_each_tool(&path);
    assert_eq!(read.metadata["vigil.schema_version"], "2");
    let exported: Vec<&str> = read
        .rows
        .iter()
        .map(|r| r["session_id"].as_str().unwrap())
        .collect();
    let mut expected: Vec<&str> = ids.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(exported, expected);
    assert!(read.rows.iter().all(|r| r["decision_status"] == "final"));
    assert_sessions_match_the_api(s, sk, &read.rows).await;

    // NDJSON carries the same rows.
    let (status, ndjson) =
        get_bytes(s, "/v1/sessions/export", sk, Some("application/x-ndjson")).await;
    assert_eq!(status, 200);
    let mut lines: Vec<Value> = String::from_utf8(ndjson)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    lines.sort_by_key(|l| l["session_id"].as_str().unwrap().to_owned());
    assert_eq!(lines.len(), 3);
    for (line, row) in lines.iter().zip(&read.rows) {
        assert_eq!(line["session_id"], row["session_id"]);
        assert_eq!(line["verdict"], row["verdict"]);
        assert_eq!(line["signals"], row["signals"]);
    }

    // pandas reads it too, with the times' zone kept.
    let counted = python(
        r#"
import sys
import pyarrow as pa
with open(sys.argv[1], "rb") as f:
    frame = pa.ipc.open_stream(f).read_all().to_pandas()
print(len(frame), frame["created_at"].dt.tz)
"#,
        &[path.to_str().unwrap()],
    );
    assert_eq!(counted.trim(), "3 UTC", "{counted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_export_to_pyarrow_polars_pandas_and_duckdb_as_the_api_answers() {
    let s = TestServer::start().await;
    sessions_read_by_the_analysts_tools(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_export_the_same_on_postgresql() {
    let url = postgres_database("exports").await;
    let s = TestServer::start_with(move |a| a.store.store = Some(url.clone())).await;
    sessions_read_by_the_analysts_tools(&s).await;
}

/// Fingerprints and events export too, each as its JSON API lists them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fingerprints_and_events_export_as_the_api_lists_them() {
    let s = TestServer::start().await;
    scored(&s, 2).await;
    let sk = &s.creds.keys.secret_test;
    let (status, arrow) = get_bytes(&s, "/v1/fingerprints/export", sk, None).await;
    assert_eq!(status, 200);
    let read = pyarrow_rows(&arrow);
    let listed = s.get("/v1/fingerprints").key(sk).send().await;
    let listed = listed.ok(200).clone();
    let rows = read["rows"].as_array().unwrap();
    let listed = listed.as_array().unwrap();
    assert!(!rows.is_empty());
    assert_eq!(rows.len(), listed.len());
    for row in rows {
        let api = listed
            .iter()
            .find(|f| f["id"] == row["visitor_id"])
            .expect("every exported fingerprint is listed");
        assert_eq!(row["seen_count"], api["lifecycle"]["seen_count"]);
        assert_eq!(row["user_agent"], api["latest_request"]["user_agent"]);
        assert_eq!(row["webgl_hash"], api["anchors"]["webgl_hash"]);
        assert_eq!(row["stored_in_cookies"], api["storage"]["cookies"]);
    }

    let events_path = format!("{}/events/export", s.org_path());
    let (status, arrow) = get_bytes(&s, &events_path, sk, None).await;
    assert_eq!(status, 200);
    let read = pyarrow_rows(&arrow);
    let listed = s
        .get(&format!("{}/events", s.org_path()))
        .key(sk)
        .send()
        .await;
    let listed = listed.ok(200).clone();
    let rows = read["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    assert_eq!(rows.len(), listed.as_array().unwrap().len());
    for (row, api) in rows.iter().zip(listed.as_array().unwrap()) {
        assert_eq!(row["event_id"], api["id"]);
        assert_eq!(row["type"], api["type"]);
        let data: Value = serde_json::from_str(row["data"].as_str().unwrap()).unwrap();
        assert_eq!(data, api["data"]);
    }
}

/// Projection, windows, formats, keys and scopes, the other environment, and the schema alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_requests_are_checked_and_bounded_by_the_key() {
    let s = TestServer::start().await;
    scored(&s, 2).await;
    let sk = &s.creds.keys.secret_test;

    let (_, arrow) = get_bytes(
        &s,
        "/v1/sessions/export?columns=verdict,session_id",
        sk,
        None,
    )
    .await;
    assert_eq!(
        pyarrow_rows(&arrow)["columns"],
        json!(["verdict", "session_id"])
    );
    let unknown = s
        .get("/v1/sessions/export?columns=verdict,nope")
        .key(sk)
        .send()
        .await;
    let e = unknown.err(422, "request.validation_failed");
    assert!(
        e["details"]["allowed_values"]
            .as_array()
            .unwrap()
            .contains(&json!("risk_score")),
        "{e}"
    );
    let wide = s
        .get("/v1/sessions/export?from=2026-01-01T00:00:00Z&to=2026-03-01T00:00:00Z")
        .key(sk)
        .send()
        .await;
    wide.err(422, "request.validation_failed");
    let csv = s
        .get("/v1/sessions/export")
        .key(sk)
        .header("accept", "text/csv")
        .send()
        .await;
    csv.err(406, "request.not_acceptable");
    s.get("/v1/sessions/export")
        .key(&s.creds.keys.publishable_test)
        .send()
        .await
        .err(403, "auth.credential_type_not_allowed");
    let narrow = s
        .post(&format!("{}/api-keys", s.org_path()))
        .key(sk)
        .json(json!({"name": "reader", "type": "secret", "environment": "test", "scopes": ["sessions:read"]}))
        .send()
        .await;
    let narrow = narrow.ok(201)["revealed_key"].as_str().unwrap().to_owned();
    s.get("/v1/sessions/export")
        .key(&narrow)
        .send()
        .await
        .err(403, "auth.insufficient_scope");
    // The other environment's key sees none of these rows.
    let (status, live) =
        get_bytes(&s, "/v1/sessions/export", &s.creds.keys.secret_live, None).await;
    assert_eq!(status, 200);
    assert_eq!(pyarrow_rows(&live)["rows"], json!([]));
    // The window's end is echoed: repeating it exports the same rows.
    let r = s
        .client
        .get(format!("{}/v1/sessions/export?format=ndjson", s.base))
        .bearer_auth(sk)
        .send()
        .await
        .unwrap();
    let to = r.headers()["vigil-export-to"].to_str().unwrap().to_owned();
    let first = r.text().await.unwrap();
    scored(&s, 1).await;
    let again = s
        .client
        .get(format!(
            "{}/v1/sessions/export?format=ndjson&to={to}",
            s.base
        ))
        .bearer_auth(sk)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(again, first);
    // The schema alone: the empty stream, read for its columns.
    let (status, schema) = get_bytes(&s, "/v1/sessions/export/schema", sk, None).await;
    assert_eq!(status, 200);
    let read = pyarrow_rows(&schema);
    assert_eq!(read["rows"], json!([]));
    assert!(
        read["columns"]
            .as_array()
            .unwrap()
            .contains(&json!("signals"))
    );
}

/// A download cut mid-stream is resumed with `after=<last id received>`: together the two
/// parts hold every row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_download_resumes_exactly_after_its_last_row() {
    let s = TestServer::start().await;
    let ids = scored(&s, 5).await;
    let sk = &s.creds.keys.secret_test;
    let r = s
        .client
        .get(format!("{}/v1/sessions/export?batch_size=1", s.base))
        .bearer_auth(sk)
        .send()
        .await
        .unwrap();
    let to = r.headers()["vigil-export-to"].to_str().unwrap().to_owned();
    let whole = r.bytes().await.unwrap();
    // What a client received before its connection broke: the head and a few batches.
    let cut = &whole[..whole.len() * 3 / 5];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("partial.arrows");
    std::fs::write(&path, cut).unwrap();
    let received = python(
        r#"
import json, sys
import pyarrow as pa
ids = []
try:
    with open(sys.argv[1], "rb") as f:
        for batch in pa.ipc.open_stream(f):
            ids.extend(batch.column("session_id").to_pylist())
except Exception:
    pass
print(json.dumps(ids))
"#,
        &[path.to_str().unwrap()],
    );
    let received: Vec<String> = serde_json::from_str(&received).unwrap();
    assert!(
        !received.is_empty() && received.len() < ids.len(),
        "{received:?}"
    );
    let last = received.last().unwrap();
    let (status, rest) = get_bytes(
        &s,
        &format!("/v1/sessions/export?batch_size=1&to={to}&after={last}"),
        sk,
        None,
    )
    .await;
    assert_eq!(status, 200);
    let rest: Vec<String> = pyarrow_rows(&rest)["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["session_id"].as_str().unwrap().to_owned())
        .collect();
    let mut all: Vec<String> = received.iter().cloned().chain(rest).collect();
    assert_eq!(all.len(), ids.len(), "no row twice: {all:?}");
    all.sort_unstable();
    let mut expected = ids.clone();
    expected.sort_unstable();
    assert_eq!(all, expected);
}

/// Every snippet of docs/analysts.md runs as written, against a server with two sessions scored
/// now and one copied to the first millisecond of yesterday (UTC): the polars snippet's
/// DataFrame of yesterday holds that one alone, and DuckDB counts the last day's two the same
/// through pyarrow and through its own httpfs extension.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_analysts_snippets_run_as_written() {
    let s = TestServer::start().await;
    let ids = scored(&s, 2).await;
    let today = chrono::Utc::now()
        .date_naive()
        .and_time(chrono::NaiveTime::MIN)
        .and_utc();
    let yesterday = copied_to(
        &s,
        &ids[0],
        today - chrono::Duration::days(1) + chrono::Duration::milliseconds(1),
    )
    .await;
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/analysts.md"))
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut printed = std::collections::BTreeMap::new();
    for part in page.split("<!-- analysts-snippet: ").skip(1) {
        let name = &part[..part.find(" -->").unwrap()];
        let start = part.find("```python\n").expect("a python block") + "```python\n".len();
        let code = &part[start..start + part[start..].find("```").unwrap()];
        let mut python = Command::new("python3");
        if name == "duckdb-httpfs" {
            python = duckdb_with_httpfs(home.path());
        }
        let out = python
            .arg("-c")
            .arg(code)
            .env("VIGIL_URL", &s.base)
            .env("VIGIL_SECRET_KEY", &s.creds.keys.secret_test)
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "the {name} snippet failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = String::from_utf8(out.stdout).unwrap();
        assert!(!out.is_empty(), "the {name} snippet prints its result");
        printed.insert(name.to_owned(), out);
    }
    assert_eq!(
        printed.keys().collect::<Vec<_>>(),
        ["duckdb", "duckdb-httpfs", "pandas", "polars", "pyarrow"]
    );
    assert!(
        printed["polars"].starts_with("1 ['session_id'"),
        "yesterday holds {yesterday} alone: {}",
        printed["polars"]
    );
    // One verdict for the two (the same probes scored twice), counted alike both ways.
    assert!(
        printed["duckdb"].ends_with(", 2)]\n"),
        "{}",
        printed["duckdb"]
    );
    assert_eq!(printed["duckdb-httpfs"], printed["duckdb"]);
}

/// The Python of a venv with DuckDB and its httpfs extension from PyPI (scripts/test.sh makes
/// it), with `home` as its home, where the extension is put as `INSTALL httpfs` would download
/// it: DuckDB's own extension site may be out of reach.
fn duckdb_with_httpfs(home: &std::path::Path) -> Command {
    let python = std::env::var("VIGIL_TEST_DUCKDB_HTTPFS_PYTHON")
        .expect("VIGIL_TEST_DUCKDB_HTTPFS_PYTHON: the venv scripts/test.sh makes");
    let found = Command::new(&python)
        .arg("-c")
        .arg(
            "import duckdb, duckdb_extension_httpfs, glob, os\n\
             print(duckdb.__version__, duckdb.sql('PRAGMA platform').fetchone()[0])\n\
             print(glob.glob(os.path.dirname(duckdb_extension_httpfs.__file__) + '/**/httpfs.duckdb_extension', recursive=True)[0])",
        )
        .output()
        .expect("the venv's python runs");
    assert!(
        found.status.success(),
        "{}",
        String::from_utf8_lossy(&found.stderr)
    );
    let found = String::from_utf8(found.stdout).unwrap();
    let mut lines = found.lines();
    let (version, platform) = lines.next().unwrap().split_once(' ').unwrap();
    let extension = lines.next().unwrap();
    let dir = home.join(format!(".duckdb/extensions/v{version}/{platform}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(extension, dir.join("httpfs.duckdb_extension")).unwrap();
    let mut command = Command::new(python);
    command.env("HOME", home);
    command
}
