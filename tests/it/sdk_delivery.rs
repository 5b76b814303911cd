//! The SDK script as pages fetch it (issue 11): brotli or gzip when the client accepts them,
//! identity otherwise, a strong ETag answered with 304, a short-lived `/sdk/v1/vigil.js` and an
//! immutable `/sdk/v1/{version}/vigil.js`. Checked with raw requests (what each header does)
//! and with curl and Node's fetch, which decode what they are sent.

use std::io::Read;
use std::process::Command;

use vigil_tests::TestServer;

/// A GET with exactly these headers; the body as sent on the wire (reqwest here decodes nothing).
async fn raw(s: &TestServer, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = s.client.get(format!("{}{path}", s.base));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("request")
}

fn header(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

#[tokio::test]
async fn the_script_is_sent_compressed_as_the_client_accepts() {
    let s = TestServer::start().await;
    let plain = raw(&s, "/sdk/v1/vigil.js", &[]).await;
    assert_eq!(plain.status(), 200);
    assert_eq!(header(&plain, "content-encoding"), None);
    assert_eq!(header(&plain, "vary").as_deref(), Some("Accept-Encoding"));
    assert_eq!(
        header(&plain, "cache-control").as_deref(),
        Some("public, max-age=300")
    );
    let plain_etag = header(&plain, "etag").expect("an ETag");
    let script = plain.bytes().await.unwrap();
    assert!(
        std::str::from_utf8(&script)
            .unwrap()
            .contains("global.Vigil")
    );

    // A browser's Accept-Encoding: brotli wins.
    let br = raw(
        &s,
        "/sdk/v1/vigil.js",
        &[("accept-encoding", "gzip, deflate, br, zstd")],
    )
    .await;
    assert_eq!(header(&br, "content-encoding").as_deref(), Some("br"));
    let br_etag = header(&br, "etag").unwrap();
    let body = br.bytes().await.unwrap();
    let mut decoded = Vec::new();
    brotli_decompress(&body, &mut decoded);
    assert_eq!(decoded, script, "brotli decodes to the script");
    assert!(
        body.len() * 3 < script.len(),
        "brotli: {} of {} bytes",
        body.len(),
        script.len()
    );

    let gz = raw(
        &s,
        "/sdk/v1/vigil.js",
        &[("accept-encoding", "gzip;q=1.0, br;q=0")],
    )
    .await;
    assert_eq!(header(&gz, "content-encoding").as_deref(), Some("gzip"));
    let gz_etag = header(&gz, "etag").unwrap();
    let body = gz.bytes().await.unwrap();
    let mut decoded = Vec::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_end(&mut decoded)
        .unwrap();
    assert_eq!(decoded, script, "gzip decodes to the script");

    // Each representation has its own strong validator.
    assert!(plain_etag.starts_with('"') && !plain_etag.starts_with("W/"));
    assert!(plain_etag != br_etag && br_etag != gz_etag && plain_etag != gz_etag);

    // A cache revalidating its copy gets a 304 with no body.
    let again = raw(
        &s,
        "/sdk/v1/vigil.js",
        &[("accept-encoding", "br"), ("if-none-match", &br_etag)],
    )
    .await;
    assert_eq!(again.status(), 304);
    assert_eq!(header(&again, "etag").as_deref(), Some(br_etag.as_str()));
    assert!(again.bytes().await.unwrap().is_empty());
    // Another representation's validator does not match this one.
    let other = raw(
        &s,
        "/sdk/v1/vigil.js",
        &[("accept-encoding", "br"), ("if-none-match", &gz_etag)],
    )
    .await;
    assert_eq!(other.status(), 200);
}

#[tokio::test]
async fn the_versioned_url_is_immutable_and_names_one_release() {
    let s = TestServer::start().await;
    let current = raw(&s, "/sdk/v1/vigil.js", &[]).await;
    let link = header(&current, "link").expect("a Link to the versioned URL");
    let path = link
        .strip_prefix('<')
        .and_then(|l| l.split_once('>'))
        .map(|(p, _)| p.to_owned())
        .expect("<path>");
    assert_eq!(path, ingest::sdk::versioned_path());
    assert!(path.contains(ingest::sdk::version()));

    let pinned = raw(&s, &path, &[("accept-encoding", "gzip, br")]).await;
    assert_eq!(pinned.status(), 200);
    assert_eq!(
        header(&pinned, "cache-control").as_deref(),
        Some("public, max-age=31536000, immutable")
    );
    assert_eq!(header(&pinned, "content-encoding").as_deref(), Some("br"));
    assert_eq!(
        header(&pinned, "access-control-allow-origin").as_deref(),
        Some("*")
    );

    let other = s.get("/sdk/v1/0.9.0/vigil.js").send().await;
    other.err(404, "resource.not_found");
}

/// Runs a client program off the runtime's threads, so the in-process server keeps serving it.
async fn run(mut command: Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("client thread")
        .expect("the client runs")
}

/// curl and Node's fetch, as a site's build step or a CDN origin pull would fetch the script:
/// both ask for compression and decode it.
#[tokio::test(flavor = "multi_thread")]
async fn curl_and_node_fetch_get_the_script_compressed() {
    let s = TestServer::start().await;
    let url = format!("{}/sdk/v1/vigil.js", s.base);
    let plain_len = ingest::sdk::SCRIPT.len();
    let mut curl = Command::new("curl");
    curl.args([
        "-sS",
        "--compressed",
        "-o",
        "/dev/null",
        "-w",
        "%{size_download} %{http_code}",
        "-D",
        "-",
        &url,
    ]);
    let out = run(curl).await;
    let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(out.status.success(), "curl: {text}");
    assert!(
        text.contains("content-encoding: br") || text.contains("content-encoding: gzip"),
        "curl --compressed is sent a compressed script: {text}"
    );
    let wire: usize = text
        .split_whitespace()
        .rev()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        wire * 3 < plain_len,
        "curl downloaded {wire} bytes of a {plain_len}-byte script"
    );

    let script = format!(
        "const r = await fetch({url:?}); const t = await r.text(); \
         console.log(JSON.stringify({{ status: r.status, encoding: r.headers.get('content-encoding'), length: t.length }}));"
    );
    let mut node = Command::new("node");
    node.args(["--input-type=module", "-e", &script]);
    let out = run(node).await;
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("node: {e} {out:?}"));
    assert_eq!(report["status"], 200);
    // Node 20's fetch asks for gzip and deflate; later ones add brotli.
    assert!(
        report["encoding"] == "br" || report["encoding"] == "gzip",
        "Node's fetch is sent a compressed script: {report}"
    );
    assert_eq!(
        report["length"].as_u64(),
        Some(ingest::sdk::SCRIPT.chars().count() as u64)
    );
}

fn brotli_decompress(body: &[u8], out: &mut Vec<u8>) {
    brotli::Decompressor::new(body, 4096)
        .read_to_end(out)
        .unwrap();
}
