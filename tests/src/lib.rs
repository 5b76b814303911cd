//! The black-box test kit: starts the whole service in-process on port 0 with a fresh data dir
//! (or a given one, to test restarts) and talks to it over real HTTP, asserting statuses and the
//! error envelope.

use std::path::{Path, PathBuf};

use reqwest::Method;
use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::Value;
use tempfile::TempDir;
use vigil::config::ServeArgs;
use vigil::server::RunningServer;

pub use serde_json::json;

pub mod analysts;
pub mod browser;
pub mod collect;
pub mod detection;
pub mod faults;
pub mod gate;
pub mod receiver;
pub mod replay;
pub mod tls;

/// The run's Apache Kafka broker (`VIGIL_TEST_KAFKA_URL`, which scripts/test.sh starts), in a
/// namespace of this test's own (`kafka://…?namespace=…`), so that tests sharing the broker
/// never share a topic or a consumer group. A test that needs it fails without it.
pub fn kafka_broker(test: &str) -> String {
    let base = std::env::var("VIGIL_TEST_KAFKA_URL").expect(
        "VIGIL_TEST_KAFKA_URL is not set: run the tests with scripts/test.sh, which starts a Kafka broker",
    );
    let run = ulid::Ulid::generate().to_string().to_ascii_lowercase();
    format!("{base}?namespace={test}-{run}")
}

/// Creates the topics Vigil uses on a mock Kafka cluster, which does not answer topic creation
/// over the admin API (its own call does).
pub fn create_kafka_topics(cluster: &log::kafka::mock::MockKafka) {
    for (topic, partitions) in [
        (
            schemas::collect::BATCHES_TOPIC,
            schemas::collect::BATCHES_PARTITIONS,
        ),
        (
            schemas::events::EVENTS_TOPIC,
            schemas::events::EVENTS_PARTITIONS,
        ),
        (
            schemas::collect::DEAD_TOPIC,
            schemas::collect::DEAD_PARTITIONS,
        ),
        (
            schemas::events::EVENTS_DEAD_TOPIC,
            schemas::events::EVENTS_DEAD_PARTITIONS,
        ),
    ] {
        cluster
            .create_topic(&log::Topic::from_static(topic), partitions)
            .expect("creating a topic on the mock cluster");
    }
}
pub mod served;

/// The development organization's keys, as `credentials.json` holds them.
#[derive(Debug, Clone, Deserialize)]
pub struct DevKeys {
    pub secret_live: String,
    pub secret_test: String,
    pub publishable_live: String,
    pub publishable_test: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct DevCredentials {
    pub organization: Value,
    pub keys: DevKeys,
}

impl DevCredentials {
    pub fn org_id(&self) -> &str {
        self.organization["id"].as_str().expect("organization id")
    }
}

pub struct TestServer {
    pub base: String,
    pub running: Option<RunningServer>,
    pub dir: PathBuf,
    _temp: Option<TempDir>,
    pub creds: DevCredentials,
    pub client: reqwest::Client,
    configure: Box<dyn Fn(&mut ServeArgs) + Send + Sync>,
}

/// A response, read whole.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Value,
    /// The body as sent, for what parsing loses (the order of members).
    pub text: String,
}

impl Resp {
    /// Asserts the status and returns `data`.
    #[track_caller]
    pub fn ok(&self, status: u16) -> &Value {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.body
        );
        assert!(
            self.body["meta"]["request_id"]
                .as_str()
                .is_some_and(|r| r.starts_with("req_")),
            "meta.request_id: {}",
            self.body
        );
        &self.body["data"]
    }

    /// Asserts an error envelope with this status and code, and returns `error`.
    #[track_caller]
    pub fn err(&self, status: u16, code: &str) -> &Value {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.body
        );
        let e = &self.body["error"];
        assert_eq!(e["code"], code, "unexpected code; body: {}", self.body);
        assert_eq!(e["status"], status);
        assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()));
        assert!(e["retryable"].is_boolean());
        assert!(
            e["docs_url"]
                .as_str()
                .is_some_and(|u| u.starts_with("http"))
        );
        let rid = e["request_id"].as_str().expect("error.request_id");
        assert!(rid.starts_with("req_"));
        assert_eq!(
            self.header("x-request-id").as_deref(),
            Some(rid),
            "X-Request-Id matches error.request_id"
        );
        e
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    /// `details.fields[].name` of a 422.
    pub fn field_names(&self) -> Vec<String> {
        self.body["error"]["details"]["fields"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|f| f["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A request being built.
pub struct Call<'a> {
    server: &'a TestServer,
    req: reqwest::RequestBuilder,
}

impl Call<'_> {
    pub fn key(mut self, key: &str) -> Self {
        self.req = self.req.bearer_auth(key);
        self
    }

    pub fn json(mut self, body: Value) -> Self {
        self.req = self.req.json(&body);
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.req = self.req.header(name, value);
        self
    }

    pub fn raw_body(mut self, content_type: &str, body: impl Into<reqwest::Body>) -> Self {
        self.req = self.req.header("content-type", content_type).body(body);
        self
    }

    pub async fn send(self) -> Resp {
        let _ = self.server;
        let r = self.req.send().await.expect("request reaches the server");
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let bytes = r.bytes().await.expect("body");
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::String(text.clone()))
        };
        Resp {
            status,
            headers,
            body,
            text,
        }
    }
}

impl TestServer {
    /// A server with default settings on a fresh data dir.
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// A server on a fresh data dir, with settings changed by `configure`.
    pub async fn start_with(configure: impl Fn(&mut ServeArgs) + Send + Sync + 'static) -> Self {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = temp.path().to_path_buf();
        let mut s = Self::start_in(&dir, Box::new(configure)).await;
        s._temp = Some(temp);
        s
    }

    /// A server on a fresh data dir whose store refuses writes, as a full disk does, while the
    /// answered switch is on.
    pub async fn start_with_full_disk() -> (Self, faults::FullDisk) {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = temp.path().to_path_buf();
        let disk = faults::FullDisk::default();
        let wrapper = disk.clone();
        let wrap = vigil::server::Wrap {
            store: Some(Box::new(move |store| wrapper.wrap(store))),
            log: None,
        };
        let mut s = Self::start_in_wrapped(&dir, Box::new(|_| {}), wrap).await;
        s._temp = Some(temp);
        (s, disk)
    }

    /// A server on the data dir `dir`, which the caller owns (a mounted filesystem, say).
    pub async fn start_at(
        dir: &Path,
        configure: impl Fn(&mut ServeArgs) + Send + Sync + 'static,
    ) -> Self {
        Self::start_in(dir, Box::new(configure)).await
    }

    /// A server with default settings on a fresh data dir, its backends wrapped by `wrap` (to
    /// inject faults, see [`faults`]).
    pub async fn start_wrapped(wrap: vigil::server::Wrap) -> Self {
        Self::start_wrapped_with(wrap, |_| {}).await
    }

    /// [`TestServer::start_wrapped`] with settings changed by `configure`.
    pub async fn start_wrapped_with(
        wrap: vigil::server::Wrap,
        configure: impl Fn(&mut ServeArgs) + Send + Sync + 'static,
    ) -> Self {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = temp.path().to_path_buf();
        let mut s = Self::start_in_wrapped(&dir, Box::new(configure), wrap).await;
        s._temp = Some(temp);
        s
    }

    async fn start_in(dir: &Path, configure: Box<dyn Fn(&mut ServeArgs) + Send + Sync>) -> Self {
        Self::start_in_wrapped(dir, configure, vigil::server::Wrap::default()).await
    }

    async fn start_in_wrapped(
        dir: &Path,
        configure: Box<dyn Fn(&mut ServeArgs) + Send + Sync>,
        wrap: vigil::server::Wrap,
    ) -> Self {
        // `VIGIL_TEST_LOG=debug` shows the server's log while a test runs.
        if let Ok(filter) = std::env::var("VIGIL_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_test_writer()
                .try_init();
        }
        // One TLS provider for the process: the server's and the client's rustls agree on ring.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut args = ServeArgs::for_tests(dir.to_path_buf());
        // Tests make many requests without a key from one address; the IP limit has its own test.
        args.anonymous_rate_limit = 100_000;
        // Endpoints at public addresses this machine cannot reach would hold a stopping server
        // for the whole attempt timeout; tests that time deliveries out set their own.
        args.webhook_timeout = std::time::Duration::from_secs(2);
        configure(&mut args);
        let running = vigil::server::start_wrapped(args, wrap)
            .await
            .expect("server starts");
        let creds: DevCredentials = match std::fs::read(dir.join("credentials.json")) {
            Ok(bytes) => serde_json::from_slice(&bytes).expect("credentials parse"),
            // A shared store (PostgreSQL) gets no development organization: make one as
            // `vigil bootstrap` would.
            Err(_) => {
                let slug = format!(
                    "development-{}",
                    ulid::Ulid::generate().to_string().to_ascii_lowercase()
                );
                let out = admin_bootstrap(&running.store, &running.secret, &slug).await;
                serde_json::from_value(out).expect("bootstrap output")
            }
        };
        TestServer {
            base: format!("http://{}", running.addr),
            running: Some(running),
            dir: dir.to_path_buf(),
            _temp: None,
            creds,
            client: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("client"),
            configure,
        }
    }

    /// Stops the server (finishing requests in flight) and starts it again on the same data.
    pub async fn restart(&mut self) {
        self.stop().await;
        let temp = self._temp.take();
        let configure = std::mem::replace(&mut self.configure, Box::new(|_| {}));
        let mut next = Self::start_in(&self.dir.clone(), configure).await;
        next._temp = temp;
        *self = next;
    }

    pub async fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            r.stop().await.expect("server stops cleanly");
        }
    }

    /// Reads `GET /v1/sessions/{id}` with the test secret key until `ready` holds for the
    /// session (`data`), as a site's backend polls it; panics with the last answer after
    /// `within`.
    pub async fn session_when(
        &self,
        session_id: &str,
        within: std::time::Duration,
        what: &str,
        ready: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = std::time::Instant::now() + within;
        loop {
            let r = self
                .get(&format!("/v1/sessions/{session_id}"))
                .key(&self.creds.keys.secret_test)
                .send()
                .await;
            if r.status == 200 && ready(&r.body["data"]) {
                return r.body["data"].clone();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{session_id}: no {what} within {within:?}: {} {}",
                r.status,
                r.body
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Every page of the list at `path` (which has a query), read with `key` by following
    /// `next_cursor` until `has_more` is false; checks a cursor comes exactly with `has_more`.
    pub async fn pages(&self, key: &str, path: &str) -> Vec<Vec<Value>> {
        let mut pages = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let url = match &cursor {
                None => path.to_owned(),
                Some(c) => format!("{path}&cursor={c}"),
            };
            let page = self.get(&url).key(key).send().await;
            let rows = page.ok(200).as_array().expect("a list").clone();
            let pagination = &page.body["pagination"];
            pages.push(rows);
            if pagination["has_more"] == false {
                assert!(pagination["next_cursor"].is_null(), "{url}: {pagination}");
                return pages;
            }
            assert_eq!(pagination["has_more"], true, "{url}: {pagination}");
            let next = pagination["next_cursor"].as_str();
            cursor = Some(next.expect("has_more carries a cursor").to_owned());
        }
    }

    pub fn store(&self) -> &store::Store {
        &self.running.as_ref().expect("running").store
    }

    pub fn call(&self, method: Method, path: &str) -> Call<'_> {
        Call {
            server: self,
            req: self
                .client
                .request(method, format!("{}{}", self.base, path)),
        }
    }

    pub fn get(&self, path: &str) -> Call<'_> {
        self.call(Method::GET, path)
    }

    pub fn post(&self, path: &str) -> Call<'_> {
        self.call(Method::POST, path)
    }

    pub fn patch(&self, path: &str) -> Call<'_> {
        self.call(Method::PATCH, path)
    }

    pub fn delete(&self, path: &str) -> Call<'_> {
        self.call(Method::DELETE, path)
    }

    pub fn org_path(&self) -> String {
        format!("/v1/organizations/{}", self.creds.org_id())
    }

    /// Creates a key in the development organization with the live secret key (or the key given).
    pub async fn create_key(&self, with: &str, body: Value) -> Value {
        let r = self
            .post(&format!("{}/api-keys", self.org_path()))
            .key(with)
            .json(body)
            .send()
            .await;
        r.ok(201).clone()
    }

    /// Changes a development-organization key's stored row directly, as an operator tool or an
    /// older release would have written it (a legacy scope, a rate-limit override).
    pub async fn edit_key(
        &self,
        environment: schemas::credential::Environment,
        key_id: &str,
        edit: impl FnOnce(&mut store::ApiKeyRecord),
    ) {
        let org: schemas::OrgId = self.creds.org_id().parse().expect("org id");
        let id: schemas::KeyId = key_id.parse().expect("key id");
        let mut record = self
            .store()
            .get_api_key(org, environment, id)
            .await
            .expect("store")
            .expect("key exists");
        edit(&mut record);
        self.store().update_api_key(&record).await.expect("store");
    }

    /// Gives a credential of this server a bucket so large it never refuses, for benchmarks:
    /// the limiter still runs on every request, which is what they measure.
    pub async fn unlimit(&self, credential: &str) {
        let credential = schemas::credential::Credential::parse(credential).expect("a credential");
        let hash = self
            .running
            .as_ref()
            .expect("running")
            .secret
            .hash_credential(&credential);
        let mut key = self
            .store()
            .find_api_key_by_hash(&hash)
            .await
            .expect("store")
            .expect("the key exists");
        key.rate_limit_override = Some(u32::MAX);
        self.store().update_api_key(&key).await.expect("store");
    }

    /// The value of an unlabelled metric from `/metrics`.
    pub async fn metric(&self, name: &str) -> f64 {
        let text = self
            .get("/metrics")
            .send()
            .await
            .body
            .as_str()
            .expect("metrics text")
            .to_owned();
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
    }

    /// A second organization with its own keys, created the way `vigil bootstrap` does.
    pub async fn second_organization(&self, slug: &str) -> DevCredentials {
        let running = self.running.as_ref().expect("running");
        let out = admin_bootstrap(&running.store, &running.secret, slug).await;
        serde_json::from_value(out).expect("bootstrap output")
    }
}

async fn admin_bootstrap(
    store: &store::Store,
    secret: &secrets::ServerSecret,
    slug: &str,
) -> Value {
    let out = vigil_admin::bootstrap::bootstrap(store, secret, "Second", slug)
        .await
        .expect("bootstrap");
    serde_json::to_value(out).expect("serialize")
}

use admin_api as vigil_admin;

/// CPU seconds this process has used, user and system: in a benchmark, every server under test
/// and (for the in-process load generators) the client too. Per request it varies far less
/// between runs than the throughput does, so it shows small changes.
pub fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let fields = proc_stat_fields(&stat);
    let ticks = |i: usize| {
        fields[i]
            .parse::<f64>()
            .expect("utime and stime are numbers")
    };
    let ticks = ticks(11) + ticks(12);
    // Linux reports these in USER_HZ, 100 a second whatever the kernel's own tick.
    ticks / 100.0
}

/// The fields of a `/proc/<pid>/stat` line after its `(comm)`, which may itself hold spaces and
/// parentheses: index 0 is the state, 2 the process group, 11 and 12 the user and system CPU
/// time in clock ticks (USER_HZ, 100 a second whatever the kernel's own tick).
pub fn proc_stat_fields(stat: &str) -> Vec<&str> {
    stat.rsplit(')')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}

/// The Redis the test command started (`VIGIL_TEST_REDIS_URL`). A suite that needs Redis fails
/// without it; it never passes by skipping.
pub fn redis_url() -> String {
    std::env::var("VIGIL_TEST_REDIS_URL")
        .expect("VIGIL_TEST_REDIS_URL is not set: run the tests with scripts/test.sh, which starts redis-server")
}

/// The PostgreSQL the test command started (`VIGIL_TEST_POSTGRES_URL`). A suite that needs it
/// fails without it; it never passes by skipping.
pub fn postgres_url() -> String {
    std::env::var("VIGIL_TEST_POSTGRES_URL").expect(
        "VIGIL_TEST_POSTGRES_URL is not set: run the tests with scripts/test.sh, which starts PostgreSQL",
    )
}

/// A new, empty database in the test PostgreSQL, migrated to this build's schema; its URL.
pub async fn postgres_database(prefix: &str) -> String {
    let server = postgres_url();
    let name = format!(
        "{prefix}_{}",
        ulid::Ulid::generate().to_string().to_ascii_lowercase()
    );
    let (client, connection) = tokio_postgres::connect(&server, tokio_postgres::NoTls)
        .await
        .expect("connect to the test PostgreSQL");
    let driver = tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create a database");
    drop(client);
    let _ = driver.await;
    let (base, query) = match server.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (server.as_str(), String::new()),
    };
    let url = format!(
        "{}/{name}{query}",
        &base[..base.rfind('/').expect("a database path")]
    );
    store::postgres::migrations::migrate(&url)
        .await
        .expect("migrate the new database");
    url
}

/// The `vigil` executable, built by the test command before the tests run; `VIGIL_TEST_BINARY`
/// names another (a target directory shared by several checkouts holds whichever `vigil` was
/// built last).
pub fn vigil_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("VIGIL_TEST_BINARY") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> -> target/<profile>/vigil
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("vigil");
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build --bin vigil` first (scripts/test.sh does)",
        path.display()
    );
    path
}

/// An HTTP client for tests: no proxy, and the same TLS provider as the server.
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
}

/// The member names of `data` in the order the server wrote them.
pub fn data_member_order(text: &str) -> Vec<String> {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
            let mut keys = Vec::new();
            while let Some((k, _)) = map.next_entry::<String, IgnoredAny>()? {
                keys.push(k);
            }
            Ok(keys)
        }
    }
    // Parsing into a `Value` would sort the members; read them from the text instead. `data`
    // is the envelope's first member.
    let start = text.find("\"data\":").expect("data member") + 7;
    let mut de = serde_json::Deserializer::from_str(&text[start..]);
    de.deserialize_map(Keys).expect("data is an object")
}

/// Runs a real client program and returns what it printed, failing loudly if it cannot run.
pub fn run_client(program: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("{program} must be installed (scripts/test.sh installs it): {e}")
        });
    assert!(
        out.status.success(),
        "{program} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
