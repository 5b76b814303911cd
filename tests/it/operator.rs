//! The operator contract on the real `vigil` executable: the log names request ids and never
//! secrets, an unreachable Redis is logged and served around, SIGTERM stops the server cleanly,
//! every flag has its environment variable, and `vigil keys create` issues a first key for an
//! organization made over the API.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use vigil_tests::served::Served;
use vigil_tests::{http_client, vigil_binary};

#[tokio::test]
async fn the_log_names_request_ids_and_never_secrets_and_sigterm_stops_cleanly() {
    let mut s = Served::start(&[]);
    // The start-up log ends with what a newcomer does next: the demo, and where the keys are.
    let next = s.wait_for("next: ");
    assert!(
        next.contains(&format!("{}/demo", s.base)) && next.contains("credentials.json"),
        "{next}"
    );
    let client = http_client();
    let org = s.creds().organization["id"].as_str().unwrap().to_owned();
    let r = client
        .get(format!(
            "{}/v1/organizations/{org}/api-keys/key_bad",
            s.base
        ))
        .bearer_auth(&s.creds().keys.secret_live)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let request_id = r.headers()["x-request-id"].to_str().unwrap().to_owned();
    let line = s.wait_for(&request_id);
    assert!(line.contains("422"), "{line}");

    let status = s.terminate();
    assert!(status.success(), "SIGTERM is a clean stop: {status}");

    let logs = s.all_logs();
    assert!(logs.contains("credentials.json"));
    let keys = &s.creds().keys;
    for secret in [
        &keys.secret_live,
        &keys.secret_test,
        &keys.publishable_live,
        &keys.publishable_test,
    ] {
        assert!(!logs.contains(secret.as_str()), "a key reached the log");
    }
    assert!(logs.contains("shutting down"), "{logs}");
    // No Debug structure reaches the log at INFO (a list of partition fences did, twice).
    assert!(!logs.contains("=[") && !logs.contains(" { "), "{logs}");
}

#[tokio::test]
async fn an_unreachable_redis_is_logged_and_served_around() {
    let mut s = Served::start(&["--limiter", "redis://:hunter2-password@127.0.0.1:1"]);
    let client = http_client();
    let org = s.creds().organization["id"].as_str().unwrap().to_owned();
    let r = client
        .get(format!("{}/v1/organizations/{org}", s.base))
        .bearer_auth(&s.creds().keys.secret_live)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ratelimit-remaining"], "599");
    let line = s.wait_for("limiting in-process");
    assert!(
        line.contains("req_"),
        "the fall-back names the request: {line}"
    );
    let logs = s.all_logs();
    assert!(
        !logs.contains("hunter2-password"),
        "the Redis password reached the log"
    );
    s.terminate();
}

#[tokio::test]
async fn sighup_reloads_the_web_bot_auth_keys_and_a_broken_file_keeps_them() {
    const KEY: &str =
        r#"{"kty":"OKP","crv":"Ed25519","x":"JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"}"#;
    let keys_dir = tempfile::tempdir().unwrap();
    let keys = keys_dir.path().join("agents.json");
    std::fs::write(
        &keys,
        format!(r#"{{"https://one.test": {{"keys": [{KEY}]}}}}"#),
    )
    .unwrap();
    let mut s = Served::start(&[
        "--web-bot-auth-keys",
        keys.to_str().unwrap(),
        "--web-bot-auth-refresh",
        "0s",
    ]);
    let hangup = |s: &Served| {
        let pid = s.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-HUP", &pid])
                .status()
                .unwrap()
                .success()
        );
    };
    // A second agent, with RFC 8037's example key.
    const SECOND: &str =
        r#"{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#;
    std::fs::write(
        &keys,
        format!(r#"{{"https://one.test": {{"keys": [{KEY}]}}, "https://two.test": {{"keys": [{SECOND}]}}}}"#),
    )
    .unwrap();
    hangup(&s);
    let line = s.wait_for("web bot auth keys reloaded");
    assert!(line.contains("SIGHUP") && line.contains("keys=2"), "{line}");
    std::fs::write(&keys, "{ not json").unwrap();
    hangup(&s);
    let line = s.wait_for("web bot auth keys not reloaded");
    assert!(line.contains("keys in use stay"), "{line}");
    // Still serving, SIGHUP did not stop it.
    let r = http_client()
        .get(format!("{}/healthz", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(s.terminate().success());
}

/// Runs `vigil serve` with `args` on a fresh data dir until it exits, or for `within` when it
/// keeps serving (then it is killed), and returns its exit status (`None`: still serving) and
/// everything it wrote to stderr.
fn serve_for(args: &[&str], within: Duration) -> (Option<std::process::ExitStatus>, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(vigil_binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(args)
        .env("VIGIL_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vigil starts");
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let deadline = std::time::Instant::now() + within;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status, reader.join().unwrap())
}

#[test]
fn secrets_in_backend_urls_reach_neither_the_log_nor_an_error() {
    // Kafka SASL by user-info and by properties: the server serves without the unreachable
    // broker while librdkafka tries it (and logs it) in the background, so those runs are
    // stopped after a few seconds. A bad store and a bad limiter URL fail at once, echoing the
    // URL in their error.
    let runs: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "--bus",
                "kafka://app:hunter2@127.0.0.1:1?security.protocol=sasl_plaintext",
            ],
            "127.0.0.1:1",
        ),
        (
            vec![
                "--log",
                "kafka://127.0.0.1:1?security.protocol=sasl_plaintext&sasl.mechanism=PLAIN&sasl.username=u&sasl.password=hunter2",
            ],
            "127.0.0.1:1",
        ),
        (
            vec!["--log", "kafka://127.0.0.1:1?ssl.key.password=hunter2"],
            "ssl.key.password",
        ),
        (
            vec![
                "--store",
                "mongodb://app:hunter2@db:27017/vigil?token=hunter2",
            ],
            "mongodb://app:***@db:27017/vigil?token=***",
        ),
        (
            vec![
                "--limiter",
                "memcached://:hunter2@cache:11211?password=hunter2",
            ],
            "memcached://:***@cache:11211?password=***",
        ),
    ];
    let runs: Vec<_> = runs
        .into_iter()
        .map(|(args, expected)| {
            std::thread::spawn(move || {
                let (status, log) = serve_for(&args, Duration::from_secs(6));
                (args, expected, status, log)
            })
        })
        .collect();
    for run in runs {
        let (args, expected, status, log) = run.join().unwrap();
        // `--bus` is `--log`'s old name, kept.
        if !matches!(args[0], "--log" | "--bus") {
            assert!(
                status.is_some_and(|s| !s.success()),
                "{args:?} should not start:\n{log}"
            );
        }
        assert!(
            !log.contains("hunter2"),
            "a secret of {args:?} reached stderr:\n{log}"
        );
        assert!(
            log.contains(expected),
            "{args:?}: expected {expected:?} in:\n{log}"
        );
    }
}

#[test]
fn every_serve_flag_has_an_environment_variable() {
    let help = Command::new(vigil_binary())
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for (flag, env) in [
        ("--listen", "VIGIL_LISTEN"),
        ("--metrics-listen", "VIGIL_METRICS_LISTEN"),
        ("--data-dir", "VIGIL_DATA_DIR"),
        ("--store", "VIGIL_STORE"),
        ("--server-secret", "VIGIL_SERVER_SECRET"),
        ("--roles", "VIGIL_ROLES"),
        ("--limiter", "VIGIL_LIMITER"),
        ("--log", "VIGIL_LOG_URL"),
        ("--tls-cert", "VIGIL_TLS_CERT"),
        ("--tls-key", "VIGIL_TLS_KEY"),
        ("--trusted-proxy", "VIGIL_TRUSTED_PROXY"),
        ("--rotation-grace", "VIGIL_ROTATION_GRACE"),
        ("--allow-private-webhooks", "VIGIL_ALLOW_PRIVATE_WEBHOOKS"),
        ("--session-idle", "VIGIL_SESSION_IDLE"),
        ("--retention", "VIGIL_RETENTION"),
        ("--log-retention", "VIGIL_LOG_RETENTION"),
        ("--processor-cache-mb", "VIGIL_PROCESSOR_CACHE_MB"),
        ("--web-bot-auth-keys", "VIGIL_WEB_BOT_AUTH_KEYS"),
        ("--web-bot-auth-refresh", "VIGIL_WEB_BOT_AUTH_REFRESH"),
        ("--header-read-timeout", "VIGIL_HEADER_READ_TIMEOUT"),
        ("--keep-alive-timeout", "VIGIL_KEEP_ALIVE_TIMEOUT"),
        ("--max-connections", "VIGIL_MAX_CONNECTIONS"),
        ("--anonymous-rate-limit", "VIGIL_ANONYMOUS_RATE_LIMIT"),
        ("--export-concurrency", "VIGIL_EXPORT_CONCURRENCY"),
        ("--public-url", "VIGIL_PUBLIC_URL"),
        ("--log-format", "VIGIL_LOG_FORMAT"),
        ("--demo", "VIGIL_DEMO"),
        ("--webhook-retry-schedule", "VIGIL_WEBHOOK_RETRY_SCHEDULE"),
        ("--webhook-timeout", "VIGIL_WEBHOOK_TIMEOUT"),
        ("--replay-memory", "VIGIL_REPLAY_MEMORY"),
        (
            "--client-fingerprint-header",
            "VIGIL_CLIENT_FINGERPRINT_HEADER",
        ),
        ("--ip-database", "VIGIL_IP_DATABASE"),
        ("--hosting-asns", "VIGIL_HOSTING_ASNS"),
        ("--tor-exit-list", "VIGIL_TOR_EXIT_LIST"),
        ("--relay-list", "VIGIL_RELAY_LIST"),
    ] {
        // clap prints a flag on one line and its help, ending in `[env: NAME=…]`, on the next.
        let lines: Vec<&str> = help.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.trim_start().starts_with(flag))
            .unwrap_or_else(|| panic!("{flag} missing from --help:\n{help}"));
        let entry = lines[at..]
            .iter()
            .take(3)
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(entry.contains(&format!("[env: {env}")), "{flag}: {entry}");
    }
    let flags = help
        .lines()
        .filter(|l| l.trim_start().starts_with("--") && !l.contains("--help"))
        .count();
    assert_eq!(
        flags, 35,
        "a new flag needs its env var and a row here:\n{help}"
    );

    // An env var is honoured: a bad value in it is refused the same way a flag's would be.
    let out = Command::new(vigil_binary())
        .args(["serve"])
        .env("VIGIL_LIMITER", "memcached://x")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--limiter"));
    // A retention of nothing would drop what was just written: refused before anything starts.
    let out = Command::new(vigil_binary())
        .args(["serve", "--log-retention", "0s"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--log-retention must be above zero"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn keys_create_issues_the_first_key_of_an_organization_made_over_the_api() {
    let mut s = Served::start(&[]);
    let client = http_client();
    let created: serde_json::Value = client
        .post(format!("{}/v1/organizations", s.base))
        .bearer_auth(&s.creds().keys.secret_live)
        .json(&serde_json::json!({"name": "New", "slug": "new-org"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let org = created["data"]["id"].as_str().unwrap().to_owned();
    assert!(s.terminate().success());
    let dir = s.dir.as_ref().unwrap().path().to_str().unwrap().to_owned();
    let out = Command::new(vigil_binary())
        .args([
            "keys",
            "create",
            "--data-dir",
            &dir,
            "--organization",
            &org,
            "--type",
            "secret",
            "--environment",
            "test",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let secret = key["revealed_key"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("sk_test_"));
    let missing = Command::new(vigil_binary())
        .args([
            "keys",
            "create",
            "--data-dir",
            &dir,
            "--organization",
            "org_00000000000000000000000000",
        ])
        .output()
        .unwrap();
    assert!(!missing.status.success());

    let s2 = Served::start_in(Path::new(&dir));
    let r = client
        .get(format!("{}/v1/organizations/{org}", s2.base))
        .bearer_auth(&secret)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// The data directory holds the server secret, the development keys and every stored row: a
/// served process makes it its owner's alone (mode 0700), with every file in it 0600 and
/// every directory 0700, even a data directory that existed with looser modes before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_directory_is_its_owners_alone() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut served = Served::start_in(&data);
    served.wait_for("vigil is serving");
    // A request through the store and the log, so both have written files.
    let pk = served.creds().keys.publishable_test.clone();
    vigil_tests::collect::open_session_at(&http_client(), &served.base, &pk)
        .await
        .expect("a collect session opens");
    served.terminate();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700, "the data directory");
    let mut files = 0;
    let mut pending = vec![data.clone()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                assert_eq!(mode(&path), 0o700, "{}", path.display());
                pending.push(path);
            } else {
                assert_eq!(mode(&path), 0o600, "{}", path.display());
                files += 1;
            }
        }
    }
    assert!(
        files > 10,
        "the store, the log and the secrets wrote {files} files"
    );
}
