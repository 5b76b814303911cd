//! For tests that need IP databases whose every answer they know (the `test-support` feature):
//! MaxMind DB files written by `mmdb-writer` from PyPI (`write_mmdb.py`, beside this file),
//! which the test command installs.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// Writes a MaxMind DB of `database_type` (`GeoLite2-ASN`, `ipinfo lite`…) holding `networks`,
/// `[[cidr, record], …]`, at `path`, every integer a 32-bit unsigned one as the ASN layouts
/// store their numbers. Panics when Python or mmdb-writer fails: a test cannot go on.
pub fn write_mmdb(path: &Path, database_type: &str, ip_version: u8, networks: Value) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/src/write_mmdb.py");
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let spec = json!({
        "path": path,
        "database_type": database_type,
        "ip_version": ip_version,
        "networks": networks,
    });
    serde_json::to_writer(child.stdin.take().expect("piped"), &spec).expect("the spec is sent");
    let out = child.wait_with_output().expect("python3 ends");
    assert!(
        out.status.success(),
        "write_mmdb.py (mmdb-writer from PyPI; scripts/test.sh installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
