//! The analysts' tools, for the export tests (docs/analysts.md): an export file read by
//! pyarrow, polars and DuckDB in Python (the test command installs them), each tool's rows
//! compared with the others', and a sessions export's rows compared with what the JSON API
//! answers for the same sessions; and `vigil export` run as a pipeline runs it.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::collect::score_session;
use crate::{TestServer, vigil_binary};

/// A desktop Chrome's probes (a processor fixture), so each session is scored on real data.
pub fn probes() -> Value {
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../processor/tests/fixtures/desktop_chrome_human.json"
        ))
        .expect("the fixture"),
    )
    .expect("the fixture is JSON");
    fixture["batches"][0].clone()
}

/// `n` sessions opened through the Collect API and scored to a final decision; their ids.
pub async fn scored(s: &TestServer, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..n {
        let (session, _) = score_session(s, &probes(), None, |a| {
            a["decision"]["decision_status"] == "final"
        })
        .await;
        ids.push(session.id.clone());
    }
    ids
}

/// A copy of the stored session `id` under a fresh id minted at `at`, as if it had been made
/// then (the test environment's); its id.
pub async fn copied_to(s: &TestServer, id: &str, at: chrono::DateTime<chrono::Utc>) -> String {
    let org: schemas::OrgId = s.creds.org_id().parse().expect("an org id");
    let env = schemas::credential::Environment::Test;
    let stored = s
        .store()
        .get_session(org, env, id.parse().expect("a session id"))
        .await
        .expect("the store answers")
        .expect("the session is stored");
    let copy = schemas::SessionId::from_ulid(ulid::Ulid::from_parts(
        at.timestamp_millis() as u64,
        schemas::SessionId::generate().ulid().random(),
    ));
    let session = store::SessionRecord {
        id: copy,
        opened_at: at,
        updated_at: at,
        ..stored
    };
    s.store()
        .save_sessions(&[store::SessionSave {
            session,
            decision: None,
            events: Vec::new(),
            settled: None,
            fence: None,
        }])
        .await
        .expect("the copy is saved");
    copy.to_string()
}

/// Runs Python with the analysts' libraries; its stdout. A failing script fails the test.
pub fn python(script: &str, args: &[&str]) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("python prints UTF-8")
}

/// Reads the file in argv[1] (`arrows` or `parquet` in argv[2]) with each tool and prints each
/// one's rows as JSON, sorted by the first column; times as UTC ISO strings.
const EACH_TOOL: &str = r#"
import datetime, json, sys
import duckdb, polars as pl, pyarrow as pa, pyarrow.parquet as pq
path, kind = sys.argv[1], sys.argv[2]

def plain(v):
    if isinstance(v, datetime.datetime):
        return v.astimezone(datetime.timezone.utc).isoformat()
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v

def rows(names, tuples):
    out = [{n: plain(v) for n, v in zip(names, t)} for t in tuples]
    return sorted(out, key=lambda r: r[names[0]])

if kind == "arrows":
    with open(path, "rb") as f:
        table = pa.ipc.open_stream(f).read_all()
    frame = pl.read_ipc_stream(path)
else:
    table = pq.read_table(path)
    frame = pl.read_parquet(path)
names = table.schema.names
by_pyarrow = rows(names, [tuple(r.values()) for r in table.to_pylist()])
by_polars = rows(frame.columns, frame.rows())
exported = table
if kind == "arrows":
    result = duckdb.sql("SELECT * FROM exported")
else:
    result = duckdb.sql(f"SELECT * FROM read_parquet('{path}')")
by_duckdb = rows([d[0] for d in result.description], result.fetchall())
metadata = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
print(json.dumps({"columns": names, "metadata": metadata,
                  "pyarrow": by_pyarrow, "polars": by_polars, "duckdb": by_duckdb}))
"#;

/// What the three tools read from an export file.
pub struct Read {
    pub columns: Vec<String>,
    pub metadata: Value,
    /// The rows, sorted by the first column; pyarrow, polars and DuckDB read the same ones.
    pub rows: Vec<Value>,
}

/// `path` (an `.arrows` or `.parquet` file) read by pyarrow, polars and DuckDB, which must
/// agree on every row.
pub fn read_with_each_tool(path: &Path) -> Read {
    let kind = match path.extension().and_then(|e| e.to_str()) {
        Some("parquet") => "parquet",
        _ => "arrows",
    };
    let out: Value = serde_json::from_str(&python(
        EACH_TOOL,
        &[path.to_str().expect("a UTF-8 path"), kind],
    ))
    .expect("the script prints JSON");
    assert_eq!(
        out["pyarrow"], out["polars"],
        "polars reads what pyarrow reads"
    );
    assert_eq!(
        out["pyarrow"], out["duckdb"],
        "DuckDB reads what pyarrow reads"
    );
    Read {
        columns: serde_json::from_value(out["columns"].clone()).expect("column names"),
        metadata: out["metadata"].clone(),
        rows: out["pyarrow"].as_array().expect("rows").clone(),
    }
}

/// Each exported session row equals what `GET /v1/sessions/{id}` answers for it: its decision
/// (verdict, automation status, risk score, rule, signals), visitor, network and agent.
pub async fn assert_sessions_match_the_api(s: &TestServer, key: &str, rows: &[Value]) {
    for row in rows {
        let id = row["session_id"].as_str().expect("session_id");
        let api = s.get(&format!("/v1/sessions/{id}")).key(key).send().await;
        let api = api.ok(200).clone();
        let decision = &api["decision"];
        assert_eq!(row["verdict"], decision["verdict"], "{id}");
        assert_eq!(
            row["automation_status"], decision["automation_status"],
            "{id}"
        );
        assert_eq!(row["decision_status"], decision["decision_status"], "{id}");
        assert_eq!(
            row["risk_score"].as_f64().map(|v| v as f32),
            decision["risk_score"].as_f64().map(|v| v as f32),
            "{id}"
        );
        assert_eq!(row["rule"], decision["rule"], "{id}");
        let api_signals: Vec<&Value> = api["signals_fired"]
            .as_array()
            .expect("signals_fired")
            .iter()
            .map(|s| &s["signal"])
            .collect();
        let row_signals: Vec<&Value> = row["signals"].as_array().expect("signals").iter().collect();
        assert_eq!(row_signals, api_signals, "{id}");
        assert_eq!(row["visitor_id"], api["visitor_fingerprint"]["id"], "{id}");
        assert_eq!(row["ip_address"], api["network"]["ip_address"], "{id}");
        assert_eq!(
            row["user_agent"], api["connection_fingerprint"]["user_agent"],
            "{id}"
        );
    }
}

/// `vigil export <args>` with the test environment's secret key, as a pipeline runs it: no
/// terminal on any stream.
pub fn vigil_export(s: &TestServer, args: &[&str]) -> Output {
    Command::new(vigil_binary())
        .arg("export")
        .args(args)
        .env("VIGIL_SECRET_KEY", &s.creds.keys.secret_test)
        .env_remove("VIGIL_URL")
        .env_remove("VIGIL_STORE")
        .stdin(Stdio::null())
        .output()
        .expect("vigil runs")
}

/// `vigil export` succeeded, silently.
pub fn succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "vigil export failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Without a terminal it is quiet: no progress bar, no summary.
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
