//! `docker-compose.yml` and the `Dockerfile` (docs/operations.md#run-it-with-docker-compose),
//! checked without Docker, which these machines lack:
//! - the compose file validates against the Compose specification's schema
//!   (`check-jsonschema`), and its references resolve: every `depends_on`, volume and profile,
//!   every image pinned, every long-running service with a healthcheck, every variable given to
//!   Vigil one that `vigil serve` reads;
//! - the Dockerfile passes hadolint and its `COPY` sources exist;
//! - the compose-shaped fleet: every Vigil service of the `postgres` profile, and again of the
//!   `scylla` profile, started as a native process with exactly the command and environment the
//!   file gives it (engine host names rewritten to the run's Redis, Kafka broker and PostgreSQL
//!   or CQL node, ports to free ones), in the order its `depends_on` and healthchecks give; keys
//!   made the documented way; a headless Chromium session scored through the declared ingest
//!   port and read through the API's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use vigil_tests::browser::visit_and_hand_off;
use vigil_tests::{DevCredentials, http_client, postgres_database, redis_url, vigil_binary};

fn repository() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The compose file as the YAML it is, anchors and merge keys resolved (PyYAML).
fn compose_file() -> Value {
    let path = repository().join("docker-compose.yml");
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
        ])
        .arg(&path)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the compose file as JSON")
}

fn services(compose: &Value) -> &serde_json::Map<String, Value> {
    compose["services"].as_object().expect("services")
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().expect("a string").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// `depends_on` as (service, condition, required).
fn depends_on(service: &Value) -> Vec<(String, String, bool)> {
    match &service["depends_on"] {
        Value::Object(deps) => deps
            .iter()
            .map(|(name, d)| {
                let condition = d["condition"].as_str().unwrap_or("service_started");
                (
                    name.clone(),
                    condition.to_owned(),
                    d["required"].as_bool().unwrap_or(true),
                )
            })
            .collect(),
        Value::Array(names) => names
            .iter()
            .map(|n| {
                (
                    n.as_str().unwrap().to_owned(),
                    "service_started".into(),
                    true,
                )
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn is_vigil(service: &Value) -> bool {
    service["image"]
        .as_str()
        .is_some_and(|i| i.starts_with("vigil:"))
}

/// A service others wait for to have completed (a one-shot), rather than to be healthy.
fn is_one_shot(compose: &Value, name: &str) -> bool {
    services(compose).values().any(|s| {
        depends_on(s)
            .iter()
            .any(|(n, c, _)| n == name && c == "service_completed_successfully")
    })
}

/// The variables `vigil serve --help` says it reads.
fn serve_variables() -> BTreeSet<String> {
    let help = Command::new(vigil_binary())
        .args(["serve", "--help"])
        .output()
        .expect("vigil runs");
    let help = String::from_utf8_lossy(&help.stdout);
    help.split("[env: ")
        .skip(1)
        .map(|rest| rest[..rest.find(['=', ']']).unwrap()].to_owned())
        .collect()
}

/// Runs a tool the test command installs from PyPI; fails (never skips) without it.
fn tool(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(repository())
        .output()
        .unwrap_or_else(|e| panic!("{program} runs (scripts/test.sh installs it): {e}"));
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{program} {args:?}:\n{printed}");
    printed
}

#[test]
fn the_compose_file_follows_the_specification_and_its_references_resolve() {
    tool(
        "check-jsonschema",
        &[
            "--builtin-schema",
            "vendor.compose-spec",
            "docker-compose.yml",
        ],
    );

    let compose = compose_file();
    let services = services(&compose);
    let declared_volumes: BTreeSet<&String> = compose["volumes"]
        .as_object()
        .map(|v| v.keys().collect())
        .unwrap_or_default();
    let known_profiles = ["scylla", "postgres", "single"];
    let variables = serve_variables();
    let mut used_volumes = BTreeSet::new();
    for (name, service) in services {
        // Pinned: a tag that names a version, never `latest` or none.
        let image = service["image"].as_str().unwrap_or_default();
        let tag = image.rsplit_once(':').map(|(_, t)| t).unwrap_or_default();
        assert!(
            tag.chars().next().is_some_and(|c| c.is_ascii_digit()),
            "{name}: image {image:?} is pinned by version"
        );
        let profiles = strings(&service["profiles"]);
        assert!(!profiles.is_empty(), "{name} belongs to a profile");
        for p in &profiles {
            assert!(known_profiles.contains(&p.as_str()), "{name}: profile {p}");
        }
        for (dep, condition, required) in depends_on(service) {
            let target = services
                .get(&dep)
                .unwrap_or_else(|| panic!("{name} depends on {dep}, which is not a service"));
            let target_profiles = strings(&target["profiles"]);
            // In each of this service's profiles a required dependency starts too.
            if required {
                for p in &profiles {
                    assert!(
                        target_profiles.contains(p),
                        "{name} needs {dep} in profile {p}"
                    );
                }
            } else {
                assert!(
                    profiles.iter().any(|p| target_profiles.contains(p)),
                    "{name}'s optional {dep} shares none of its profiles"
                );
            }
            let waits = if is_one_shot(&compose, &dep) {
                "service_completed_successfully"
            } else {
                "service_healthy"
            };
            assert_eq!(condition, waits, "{name} waits for {dep}");
        }
        if !is_one_shot(&compose, name) {
            assert!(
                service["healthcheck"]["test"].is_array(),
                "{name} has a healthcheck"
            );
        }
        for mount in strings(&service["volumes"]) {
            let source = mount.split(':').next().unwrap().to_owned();
            if !source.starts_with(['/', '.']) {
                assert!(
                    declared_volumes.contains(&source),
                    "{name} mounts {source}, which is not declared"
                );
                used_volumes.insert(source);
            }
        }
        if is_vigil(service) {
            for variable in service["environment"]
                .as_object()
                .map(|e| e.keys().collect::<Vec<_>>())
                .unwrap_or_default()
            {
                assert!(
                    variables.contains(variable),
                    "{name}: `vigil serve` reads no {variable}"
                );
            }
            if !is_one_shot(&compose, name) {
                assert_eq!(
                    service["healthcheck"]["test"],
                    json!(["CMD", "vigil", "healthcheck"]),
                    "{name}"
                );
            }
        }
    }
    let declared: BTreeSet<String> = declared_volumes.into_iter().cloned().collect();
    assert_eq!(used_volumes, declared, "every declared volume is mounted");
    // Each profile has its store and every role.
    for profile in ["scylla", "postgres"] {
        let roles: BTreeSet<String> = services
            .values()
            .filter(|s| strings(&s["profiles"]).contains(&profile.to_owned()))
            .filter_map(|s| {
                let command = strings(&s["command"]);
                let at = command.iter().position(|a| a == "--roles")?;
                Some(
                    command[at + 1]
                        .split(',')
                        .map(str::to_owned)
                        .collect::<Vec<_>>(),
                )
            })
            .flatten()
            .collect();
        assert_eq!(
            roles,
            ["admin", "dispatcher", "ingest", "processor", "query"]
                .map(String::from)
                .into(),
            "{profile}"
        );
    }
}

#[test]
fn the_dockerfile_passes_hadolint_and_copies_what_exists() {
    tool("hadolint", &["Dockerfile"]);
    let dockerfile = std::fs::read_to_string(repository().join("Dockerfile")).unwrap();
    let mut copies = 0;
    for line in dockerfile.lines() {
        let Some(args) = line.strip_prefix("COPY ") else {
            continue;
        };
        if args.contains("--from=") {
            continue;
        }
        let parts: Vec<&str> = args.split_whitespace().collect();
        for source in &parts[..parts.len() - 1] {
            assert!(
                repository().join(source).exists(),
                "COPY {source}: not in the repository"
            );
            copies += 1;
        }
    }
    assert!(copies > 0, "the Dockerfile copies the sources");
    // The build context leaves out what would bloat it or leak local data.
    let ignored = std::fs::read_to_string(repository().join(".dockerignore")).unwrap();
    for entry in ["target", ".git", "vigil-data"] {
        assert!(
            ignored.lines().any(|l| l == entry),
            ".dockerignore: {entry}"
        );
    }
}

/// `${NAME:-default}` and `${NAME}` as compose interpolates them, from `vars`.
fn interpolate(value: &str, vars: &BTreeMap<&str, String>) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let end = rest[at..].find('}').expect("a closing brace") + at;
        let expr = &rest[at + 2..end];
        let (name, default) = expr.split_once(":-").unwrap_or((expr, ""));
        out.push_str(
            vars.get(name)
                .filter(|v| !v.is_empty())
                .map_or(default, String::as_str),
        );
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// A Vigil service running as a native process.
struct Process {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The native fleet: its processes, and where each published port landed.
struct Fleet {
    processes: Vec<Process>,
    published: BTreeMap<u16, String>,
    _dirs: Vec<tempfile::TempDir>,
}

impl Fleet {
    fn logs(&self) -> String {
        self.processes
            .iter()
            .map(|p| {
                let log = std::fs::read_to_string(&p.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {}:\n{}", p.name, tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// How a service's environment and arguments become a native process's: the engines' compose
/// host names to the local engines, each volume's mount point to a directory of its own, the
/// listen address to a free loopback port.
struct Rewrite {
    engines: Vec<(String, String)>,
    mounts: Vec<(String, PathBuf)>,
}

impl Rewrite {
    fn value(&self, value: &str) -> String {
        let mut value = value.to_owned();
        for (from, to) in &self.engines {
            value = value.replace(from, to);
        }
        for (from, to) in &self.mounts {
            if value == *from {
                value = to.to_str().unwrap().to_owned();
            }
        }
        value
    }
}

/// The command `CMD`-form `test` gives, with `vigil` the binary under test.
fn native(argv: &[String]) -> Command {
    assert_eq!(argv[0], "vigil", "a Vigil service runs vigil: {argv:?}");
    let mut command = Command::new(vigil_binary());
    command.args(&argv[1..]);
    command
}

/// Starts the Vigil services of `profile` from the compose file, in dependency order, each
/// once the services it depends on are healthy (or, for a one-shot, have completed).
fn start_fleet(
    compose: &Value,
    profile: &str,
    vars: &BTreeMap<&str, String>,
    rewrite: &mut Rewrite,
) -> Fleet {
    let services = services(compose);
    let active: Vec<(&String, &Value)> = services
        .iter()
        .filter(|(_, s)| strings(&s["profiles"]).contains(&profile.to_owned()))
        .collect();
    let mut fleet = Fleet {
        processes: Vec::new(),
        published: BTreeMap::new(),
        _dirs: Vec::new(),
    };
    let logs = tempfile::tempdir().unwrap();
    let logs_path = logs.path().to_owned();
    fleet._dirs.push(logs);
    // The engines are the local ones; the Vigil services start as their dependencies allow.
    let mut ready: BTreeSet<String> = active
        .iter()
        .filter(|(_, s)| !is_vigil(s))
        .map(|(n, _)| (*n).clone())
        .collect();
    while ready.len() < active.len() {
        let (name, service) = active
            .iter()
            .find(|(n, s)| {
                !ready.contains(*n)
                    && depends_on(s).iter().all(|(dep, _, required)| {
                        ready.contains(dep) || (!required && !active.iter().any(|(n, _)| *n == dep))
                    })
            })
            .unwrap_or_else(|| panic!("no service can start; ready: {ready:?}"));
        // One directory per mount point: every Vigil service of a profile mounts the same
        // volume there (the shared server secret).
        for mount in strings(&service["volumes"]) {
            let (_, target) = mount.split_once(':').unwrap();
            if !rewrite.mounts.iter().any(|(t, _)| t == target) {
                let dir = tempfile::tempdir().unwrap();
                rewrite
                    .mounts
                    .push((target.to_owned(), dir.path().to_owned()));
                fleet._dirs.push(dir);
            }
        }
        let port = free_port();
        let mut env: Vec<(String, String)> = Vec::new();
        for (key, value) in service["environment"].as_object().unwrap() {
            let value = match value {
                Value::String(s) => interpolate(s, vars),
                other => other.to_string(),
            };
            let value = match key.as_str() {
                "VIGIL_LISTEN" => format!("127.0.0.1:{port}"),
                "VIGIL_PUBLIC_URL" => format!("http://127.0.0.1:{port}"),
                _ => rewrite.value(&value),
            };
            env.push((key.clone(), value));
        }
        let mut command = native(&strings(&service["command"]).into_iter().fold(
            vec!["vigil".to_owned()],
            |mut argv, a| {
                argv.push(a);
                argv
            },
        ));
        let log = logs_path.join(format!("{name}.log"));
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let mut child = command.spawn().expect("vigil starts");
        if is_one_shot(compose, name) {
            let status = child.wait().unwrap();
            assert!(
                status.success(),
                "{name} failed: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        } else {
            fleet.processes.push(Process {
                name: (*name).clone(),
                child,
                log,
            });
            // Its healthcheck, as Docker runs it, until it passes.
            let check = strings(&service["healthcheck"]["test"]);
            assert_eq!(check[0], "CMD");
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let healthy = native(&check[1..])
                    .env_clear()
                    .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                    .output()
                    .unwrap()
                    .status
                    .success();
                if healthy {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{name} never became healthy:\n{}",
                    fleet.logs()
                );
                std::thread::sleep(Duration::from_millis(250));
            }
            for published in strings(&service["ports"]) {
                let host_port: u16 = published.split(':').rev().nth(1).unwrap().parse().unwrap();
                fleet
                    .published
                    .insert(host_port, format!("http://127.0.0.1:{port}"));
            }
        }
        ready.insert((*name).clone());
    }
    fleet
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compose_fleet_scores_a_browser_session_as_declared() {
    let store = postgres_database("compose").await;
    // postgres://vigil@127.0.0.1:PORT/DB: the host and database the compose names stand for.
    let (_, local_pg) = store.split_once('@').unwrap();
    // The postgres profile as the file's own comment says to run it: no variable set.
    let vars = BTreeMap::new();
    scores_a_browser_session(
        "postgres",
        &vars,
        ("postgres:5432/vigil".into(), local_pg.to_owned()),
    )
    .await;
}

/// The scylla profile as the file's comment says to run it, with `VIGIL_STORE` naming a
/// keyspace of this test's own on the run's CQL node (Apache Cassandra, docs/testing.md), which
/// `migrate` creates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compose_fleet_on_the_cql_node_scores_a_browser_session_as_declared() {
    let node = std::env::var("VIGIL_TEST_SCYLLA_URL").expect(
        "VIGIL_TEST_SCYLLA_URL is not set: run the tests with scripts/test.sh, which starts a CQL node",
    );
    let keyspace = format!("vigil_compose_{}", std::process::id());
    let vars = BTreeMap::from([("VIGIL_STORE", format!("scylla://scylla:9042/{keyspace}"))]);
    let local = node.trim_start_matches("scylla://").trim_end_matches('/');
    scores_a_browser_session("scylla", &vars, ("scylla:9042".into(), local.to_owned())).await;
}

/// Starts the Vigil services of `profile` on the local engines (the store's compose host name
/// rewritten by `store`), makes keys the documented way, and scores a headless Chromium
/// session through the declared ingest port, read back through the API's.
async fn scores_a_browser_session(
    profile: &str,
    vars: &BTreeMap<&str, String>,
    store: (String, String),
) {
    let compose = compose_file();
    // The run's broker in a namespace of this test's own (the compose's URL has no query).
    let kafka = vigil_tests::kafka_broker(&format!("compose-{profile}"));
    let redis = redis_url();
    let mut rewrite = Rewrite {
        engines: vec![
            store,
            (
                "kafka:9092".into(),
                kafka.trim_start_matches("kafka://").to_owned(),
            ),
            (
                "redis:6379".into(),
                redis.trim_start_matches("redis://").to_owned(),
            ),
        ],
        mounts: Vec::new(),
    };
    let fleet = tokio::task::block_in_place(|| start_fleet(&compose, profile, vars, &mut rewrite));
    let names: BTreeSet<&str> = fleet.processes.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from(["api", "dispatcher", "ingest-a", "ingest-b", "processor"])
    );

    // The keys, the documented way: `docker compose run --rm api bootstrap …`.
    let api_service = &services(&compose)["api"];
    let mut bootstrap = native(&["vigil".into(), "bootstrap".into()]);
    bootstrap
        .args(["--name", "Compose", "--slug", "compose"])
        .env_clear();
    for (key, value) in api_service["environment"].as_object().unwrap() {
        bootstrap.env(
            key,
            rewrite.value(&interpolate(value.as_str().unwrap(), vars)),
        );
    }
    let out = bootstrap.output().unwrap();
    assert!(
        out.status.success(),
        "bootstrap: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let creds: DevCredentials = serde_json::from_slice(&out.stdout).expect("bootstrap's JSON");
    let (pk, sk) = (&creds.keys.publishable_test, &creds.keys.secret_test);

    let ingest = &fleet.published[&8081];
    let api = &fleet.published[&8080];
    let (loaded, result) = visit_and_hand_off(ingest, pk).await;
    let client = http_client();
    let opened = client
        .post(format!("{api}/v1/handoffs/open"))
        .bearer_auth(sk)
        .json(&json!({ "handoff": result["handoff"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status(), 200);
    let opened: Value = opened.json().await.unwrap();
    assert_eq!(opened["data"]["session_id"], loaded["session_id"]);
    // The processor folds the batches into a stored, scored session the API reads.
    let sid = loaded["session_id"].as_str().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let session = loop {
        let r = client
            .get(format!("{api}/v1/sessions/{sid}"))
            .bearer_auth(sk)
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            let session: Value = r.json().await.unwrap();
            if session["data"]["decision"]["verdict"].is_string() {
                break session;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the session was never scored:\n{}",
            fleet.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(session["data"]["id"], sid);
    // The API's port serves the admin role too: the organization, read with the secret key.
    let organization = client
        .get(format!("{api}/v1/organizations/{}", creds.org_id()))
        .bearer_auth(sk)
        .send()
        .await
        .unwrap();
    assert_eq!(organization.status(), 200, "the admin role behind {api}");
    drop(fleet);
}
