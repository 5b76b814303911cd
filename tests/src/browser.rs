//! A real browser for end-to-end tests: headless Chromium driven through WebDriver over plain
//! HTTP (a handful of W3C WebDriver commands, no WebDriver crate), and a tiny page server on its
//! own port so the page that loads the SDK is on another origin than the API (CORS is exercised).
//!
//! Needs Debian's `chromium` and `chromium-driver` (scripts/test.sh installs them). Missing either
//! is a failure, never a skip.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;

/// The flags headless Chromium needs on these machines: no sandbox, since the tests run as root,
/// and no background networking, which the closed network refuses. `--user-data-dir` is added
/// per session.
pub const CHROMIUM_FLAGS: &[&str] = &[
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    // Chromium 148 (Debian bookworm's at times) renders WebGL with SwiftShader only when told
    // to; 156 does by itself. Either way WebGL must work, as it does for real visitors.
    "--enable-unsafe-swiftshader",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

/// An executable on the PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A browser profile directory, removed on drop. Reuse one across sessions for a "second visit"
/// by the same browser (cookies, localStorage, IndexedDB persist in it).
pub struct Profile {
    dir: TempDir,
}

impl Profile {
    pub fn new() -> Self {
        Profile {
            dir: tempfile::Builder::new()
                .prefix("vigil-chromium-")
                .tempdir()
                .expect("profile dir"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Default for Profile {
    fn default() -> Self {
        Self::new()
    }
}

/// A `chromedriver` child process on a free port, in its own process group so the browsers it
/// starts go with it: the group is terminated on drop.
pub struct ChromeDriver {
    child: Child,
    pub base: String,
    port: u16,
    chromium: PathBuf,
    client: reqwest::Client,
}

impl ChromeDriver {
    /// Starts chromedriver and waits until it says it is ready. Panics, with what to install,
    /// when `chromedriver` or `chromium` is missing.
    pub async fn start() -> Self {
        Self::start_with_env(&[]).await
    }

    /// [`ChromeDriver::start`] with `env` set for chromedriver and the browsers it starts
    /// (`TZ`, for a browser in another time zone).
    pub async fn start_with_env(env: &[(&str, &str)]) -> Self {
        let driver = which("chromedriver").unwrap_or_else(|| {
            panic!(
                "chromedriver is not on the PATH: install Debian's `chromium-driver` \
                 (scripts/test.sh does: apt-get install chromium chromium-driver)"
            )
        });
        let chromium = which("chromium").unwrap_or_else(|| {
            panic!(
                "chromium is not on the PATH: install Debian's `chromium` \
                 (scripts/test.sh does: apt-get install chromium chromium-driver)"
            )
        });
        let port = free_port();
        let child = Command::new(&driver)
            .arg(format!("--port={port}"))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", driver.display()));
        let mut me = ChromeDriver {
            child,
            base: format!("http://127.0.0.1:{port}"),
            port,
            chromium,
            client: crate::http_client(),
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = me.child.try_wait().expect("chromedriver status") {
                panic!("chromedriver exited at start: {status}");
            }
            if let Ok(r) = me.client.get(format!("{}/status", me.base)).send().await
                && let Ok(v) = r.json::<Value>().await
                && v["value"]["ready"] == true
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver on port {port} not ready within 15 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        me
    }

    /// A new browser: headless Chromium with [`CHROMIUM_FLAGS`] and this profile.
    pub async fn session(&self, profile: &Profile) -> Session {
        self.session_with(profile, &[]).await
    }

    /// [`ChromeDriver::session`] with more Chromium flags.
    pub async fn session_with(&self, profile: &Profile, flags: &[String]) -> Session {
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| (*s).to_owned()).collect();
        args.extend_from_slice(flags);
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let caps = json!({
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "pageLoadStrategy": "normal",
                    "goog:chromeOptions": {
                        "binary": self.chromium.to_string_lossy(),
                        "args": args,
                    },
                }
            }
        });
        let value = command(
            &self.client,
            reqwest::Method::POST,
            &format!("{}/session", self.base),
            Some(caps),
        )
        .await
        .unwrap_or_else(|e| panic!("creating a headless Chromium session: {e}"));
        let id = value["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("new session without sessionId: {value}"))
            .to_owned();
        let session = Session {
            base: format!("{}/session/{id}", self.base),
            id,
            port: self.port,
            client: self.client.clone(),
            quit: false,
            browser_version: value["capabilities"]["browserVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        };
        session
            .post("timeouts", json!({"script": 30_000, "pageLoad": 30_000}))
            .await
            .expect("setting timeouts");
        session
    }

    /// CPU time (clock ticks, user + system) used so far by each live process of this driver's
    /// process group (chromedriver and the browsers it started), by process id.
    fn group_cpu_ticks(&self) -> HashMap<u32, u64> {
        let group = self.child.id();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return HashMap::new();
        };
        entries
            .flatten()
            .filter_map(|e| {
                let pid: u32 = e.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
                let fields = crate::proc_stat_fields(&stat);
                let pgrp: u32 = fields.get(2)?.parse().ok()?;
                let utime: u64 = fields.get(11)?.parse().ok()?;
                let stime: u64 = fields.get(12)?.parse().ok()?;
                (pgrp == group).then_some((pid, utime + stime))
            })
            .collect()
    }

    /// Waits (about `limit` at most) until the browsers have finished starting: no more than 2
    /// clock ticks (about 20 ms) of CPU in a 250 ms window. A fresh browser keeps a core busy
    /// for half a second to a second after its first page loads (its browser process and a
    /// WebUI renderer finishing their start), which on two cores would be measured as the
    /// page's cost. Returns how long it waited and whether the browsers went quiet.
    ///
    /// The CPU is counted per process, so one that exits during a window (its time gone from
    /// the total) cannot make a busy window read as quiet. Reading `/proc` blocks the runtime's
    /// thread for a millisecond or so, which a benchmark between visits can afford.
    pub async fn wait_until_quiet(&self, limit: Duration) -> (Duration, bool) {
        let started = Instant::now();
        let mut before = self.group_cpu_ticks();
        while started.elapsed() < limit {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = self.group_cpu_ticks();
            // A process new in this window counts in full.
            let used: u64 = now
                .iter()
                .map(|(pid, ticks)| ticks.saturating_sub(before.get(pid).copied().unwrap_or(0)))
                .sum();
            if used <= 2 {
                return (started.elapsed(), true);
            }
            before = now;
        }
        (started.elapsed(), false)
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-TERM", "--", &group])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One WebDriver command; `Ok(value)` or `Err("<error>: <message>")`.
async fn command(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> Result<Value, String> {
    let mut req = client.request(method.clone(), url);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let r = req
        .send()
        .await
        .map_err(|e| format!("{method} {url}: {e}"))?;
    let status = r.status();
    let v: Value = r
        .json()
        .await
        .map_err(|e| format!("{method} {url}: body: {e}"))?;
    if !status.is_success() || v["value"]["error"].is_string() {
        return Err(format!(
            "{method} {url}: {status} {}: {}",
            v["value"]["error"].as_str().unwrap_or("?"),
            v["value"]["message"].as_str().unwrap_or("")
        ));
    }
    Ok(v["value"].clone())
}

/// A WebDriver session (one browser). `quit` it; drop quits it too (blocking) if a test panicked.
pub struct Session {
    pub id: String,
    base: String,
    port: u16,
    client: reqwest::Client,
    quit: bool,
    pub browser_version: String,
}

impl Session {
    async fn post(&self, path: &str, body: Value) -> Result<Value, String> {
        command(
            &self.client,
            reqwest::Method::POST,
            &format!("{}/{path}", self.base),
            Some(body),
        )
        .await
    }

    /// Navigates and waits for the page's load event.
    pub async fn goto(&self, url: &str) {
        self.post("url", json!({ "url": url }))
            .await
            .unwrap_or_else(|e| panic!("navigating to {url}: {e}"));
    }

    /// Opens the shop page of [`sdk_page`] and waits until its `window.__vigilLoad` is
    /// defined. A navigation can report the load done while another document is still showing
    /// (seen once under load, with a reused profile): the page is then opened once more, and if
    /// it still is not there, the panic says what the browser shows instead.
    pub async fn open_shop(&self, url: &str) {
        let ready = "(async () => { for (let i = 0; i < 100; i++) { \
            if (typeof window.__vigilLoad === 'function') return true; \
            await new Promise((r) => setTimeout(r, 50)); } \
            return { url: location.href, title: document.title, state: document.readyState }; })()";
        for _ in 0..2 {
            self.goto(url).await;
            let shown = self.eval_async(ready).await;
            if shown == Value::Bool(true) {
                return;
            }
            eprintln!("{url} did not show the shop page: {shown}; opening it again");
        }
        let shown = self.eval_async(ready).await;
        panic!("{url} never showed the shop page; the browser shows {shown}");
    }

    /// Clicks the element `css` selects, as a person would (WebDriver's element click: it is
    /// scrolled into view and must be the element at that point), and waits for a navigation
    /// it starts.
    pub async fn click(&self, css: &str) {
        let element = self.element(css).await;
        self.post(&format!("element/{element}/click"), json!({}))
            .await
            .unwrap_or_else(|e| panic!("clicking {css}: {e}"));
    }

    /// Types `text` into the element `css` selects, as WebDriver's element send keys does
    /// (key events through the browser's automation input).
    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.element(css).await;
        self.post(&format!("element/{element}/value"), json!({ "text": text }))
            .await
            .unwrap_or_else(|e| panic!("typing into {css}: {e}"));
    }

    /// The WebDriver id of the element `css` selects.
    async fn element(&self, css: &str) -> String {
        let found = self
            .post("element", json!({ "using": "css selector", "value": css }))
            .await
            .unwrap_or_else(|e| panic!("finding {css}: {e}"));
        found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element id for {css}: {found}"))
            .to_owned()
    }

    /// The page's address now.
    pub async fn current_url(&self) -> String {
        command(
            &self.client,
            reqwest::Method::GET,
            &format!("{}/url", self.base),
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("reading the url: {e}"))
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    /// Runs `script` as an async function body; it finishes by calling
    /// `arguments[arguments.length - 1](value)`, and `value` (JSON) is returned.
    pub async fn execute_async(&self, script: &str, args: Vec<Value>) -> Value {
        self.post("execute/async", json!({ "script": script, "args": args }))
            .await
            .unwrap_or_else(|e| panic!("execute/async: {e}\nscript: {script}"))
    }

    /// Awaits a page expression that yields a promise (or a value) and returns its JSON.
    pub async fn eval_async(&self, expression: &str) -> Value {
        let script = format!(
            "const done = arguments[arguments.length - 1];\n\
             Promise.resolve().then(() => ({expression})).then(done, \
             (e) => done({{ __error: String((e && e.stack) || e) }}));"
        );
        let v = self.execute_async(&script, vec![]).await;
        if let Some(e) = v.get("__error") {
            panic!("page expression `{expression}` failed: {e}");
        }
        v
    }

    /// Sets the window's outer size (WebDriver's window rect).
    pub async fn resize(&self, width: u32, height: u32) {
        self.post("window/rect", json!({ "width": width, "height": height }))
            .await
            .unwrap_or_else(|e| panic!("resizing the window: {e}"));
    }

    /// A PNG of what the window shows now (WebDriver's screenshot).
    pub async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine;
        let shot = command(
            &self.client,
            reqwest::Method::GET,
            &format!("{}/screenshot", self.base),
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("taking a screenshot: {e}"));
        base64::engine::general_purpose::STANDARD
            .decode(shot.as_str().expect("a base64 screenshot"))
            .expect("the screenshot is base64")
    }

    /// Closes the browser (chromedriver waits for it to exit, so the profile can be reused).
    pub async fn quit(mut self) {
        self.quit = true;
        command(&self.client, reqwest::Method::DELETE, &self.base, None)
            .await
            .unwrap_or_else(|e| panic!("quitting the browser: {e}"));
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.quit {
            return;
        }
        // A plain blocking DELETE: drop cannot await, and the runtime may be shutting down.
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = write!(
                s,
                "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                self.id, self.port
            );
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
        }
    }
}

/// A one-page site on its own loopback port (another origin than the API), served until drop.
pub struct PageServer {
    pub base: String,
    task: tokio::task::JoinHandle<()>,
}

impl PageServer {
    /// Serves `html` at `/` (and any path).
    pub async fn start(html: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("page server binds");
        let addr = listener.local_addr().expect("page server addr");
        let app = axum::Router::new().fallback(move || {
            let html = html.clone();
            async move {
                (
                    [
                        ("content-type", "text/html; charset=utf-8"),
                        ("cache-control", "no-store"),
                    ],
                    html,
                )
            }
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        PageServer {
            base: format!("http://{addr}"),
            task,
        }
    }
}

impl Drop for PageServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A shop page that loads the SDK from `api` (`<api>/sdk/v1/vigil.js`) and defines:
///
/// - `window.__vigilLoad()`: `Vigil.load({ key, endpoint: api })`, keeps the agent in
///   `window.__vigil` and resolves with `{ ok, session_id, visitor_token, load_ms, blocking_ms,
///   long_task_ms, long_tasks, timings, requests }` (or `{ ok: false, code, status, message }`);
///   `load_ms` runs from the call to `Vigil.load` until it resolves (the probes batch
///   acknowledged); `blocking_ms` is the long-task time over 50 ms during it (PerformanceObserver
///   'longtask'), `long_task_ms` the long tasks' whole duration.
/// - `window.__vigilResult()`: `agent.result()`, as `{ ok, handoff, expiresAt, sessionId }` or the
///   error.
/// - `window.__vigilErrors`: background errors the SDK reported to `onError`.
pub fn sdk_page(api: &str, publishable_key: &str) -> String {
    let api_js = serde_json::to_string(api).expect("json");
    let key_js = serde_json::to_string(publishable_key).expect("json");
    let sdk_src = format!("{api}/sdk/v1/vigil.js");
    format!(
        r#"<!doctype html>
<html><head><meta charset="utf-8"><title>Shop checkout (Vigil e2e)</title>
<script>
  window.__longTasks = [];
  window.__vigilErrors = [];
  try {{
    window.__longTaskObserver = new PerformanceObserver((list) => {{
      for (const e of list.getEntries()) window.__longTasks.push([e.startTime, e.duration]);
    }});
    window.__longTaskObserver.observe({{ type: 'longtask', buffered: true }});
  }} catch (e) {{ window.__longTaskError = String(e); }}
</script>
<script src="{sdk_src}"></script>
</head>
<body><h1>Checkout</h1>
<script>
  const API = {api_js};
  const KEY = {key_js};
  const errorOf = (e) => ({{ ok: false, code: e && e.code, status: e && e.status,
    request_id: e && e.requestId, message: String((e && e.message) || e) }});
  window.__vigilLoad = async function () {{
    if (typeof Vigil === 'undefined') return {{ ok: false, code: 'page.no_sdk', message: 'vigil.js did not load' }};
    const t0 = performance.now();
    let agent;
    try {{
      agent = await Vigil.load({{ key: KEY, endpoint: API,
        onError: (e) => window.__vigilErrors.push({{ code: e.code, status: e.status, message: e.message }}) }});
    }} catch (e) {{
      return errorOf(e);
    }}
    const t1 = performance.now();
    window.__vigil = agent;
    if (window.__longTaskObserver) {{
      for (const e of window.__longTaskObserver.takeRecords()) window.__longTasks.push([e.startTime, e.duration]);
    }}
    const during = window.__longTasks.filter(([start, d]) => start + d > t0 && start < t1);
    return {{
      ok: true,
      session_id: agent.sessionId,
      visitor_token: agent.visitorToken,
      load_ms: t1 - t0,
      long_tasks: during,
      blocking_ms: during.reduce((sum, [, d]) => sum + Math.max(0, d - 50), 0),
      long_task_ms: during.reduce((sum, [, d]) => sum + d, 0),
      long_task_error: window.__longTaskError || null,
      timings: agent.loadTimings || null,
      // The SDK's requests during load: [path, start since Vigil.load, duration] in ms.
      requests: performance.getEntriesByType('resource')
        .filter((e) => e.startTime >= t0 && e.startTime < t1)
        .map((e) => [new URL(e.name).pathname.replace(/^.*\/collect\//, ''),
          Math.round(e.startTime - t0), Math.round(e.duration)]),
    }};
  }};
  window.__vigilResult = async function () {{
    try {{
      const r = await window.__vigil.result();
      return {{ ok: true, handoff: r.handoff, expiresAt: r.expiresAt, sessionId: r.sessionId }};
    }} catch (e) {{
      return errorOf(e);
    }}
  }};
</script>
</body></html>
"#
    )
}

/// A visit of a fresh headless Chromium to a shop page that loads the SDK from `ingest` with
/// `publishable_key`: what `Vigil.load` reported (its `session_id`) and what `agent.result()`
/// answered (its `handoff`), each asserted to have succeeded.
pub async fn visit_and_hand_off(ingest: &str, publishable_key: &str) -> (Value, Value) {
    let page = PageServer::start(sdk_page(ingest, publishable_key)).await;
    let driver = ChromeDriver::start().await;
    let profile = Profile::new();
    let browser = driver.session(&profile).await;
    browser.open_shop(&format!("{}/checkout", page.base)).await;
    let loaded = browser.eval_async("window.__vigilLoad()").await;
    assert_eq!(loaded["ok"], true, "Vigil.load through {ingest}: {loaded}");
    let result = browser.eval_async("window.__vigilResult()").await;
    assert_eq!(result["ok"], true, "agent.result(): {result}");
    browser.quit().await;
    (loaded, result)
}
