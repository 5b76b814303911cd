//! Benchmark: authenticated `GET /v1/organizations/{id}` through the whole stack (request id,
//! metrics, credential lookup, rate limiter, scope check, store read, envelope) over loopback
//! HTTP, against a bare axum handler answering the same bytes, measured in the same run with
//! the same load generator (wrk). Prints requests/s and p99 for each, the ratio to the bare
//! handler, and the server's CPU time per request, once with the in-process limiter, once with
//! Redis, and once on the PostgreSQL store (its authentication cache on: keys and organizations
//! kept while the store listens for changes to them, store/src/postgres/credentials.rs). Two
//! rows between show where the cost lies: the bare handler behind Vigil's connection layer,
//! and Vigil's probe route, which takes no credential. The goal's figure is the median of three
//! more runs of the in-process target, each right after a ceiling run of its own.
//!
//! Run with `scripts/bench.sh` (it installs wrk and starts Redis). Settings:
//! `VIGIL_BENCH_SECONDS` (default 10), `VIGIL_BENCH_CONNECTIONS` (default 64).

use std::process::Command;

use axum::Router;
use axum::http::header;
use axum::routing::get;
use vigil_tests::TestServer;

#[path = "common/goals.rs"]
mod goals;
use goals::goal;

/// The same allocator as the `vigil` binary, so the in-process server is measured as it ships.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Figures {
    requests_per_sec: f64,
    p99_ms: f64,
    non_2xx: u64,
    /// CPU time this process spent per request: every server under test runs in it (the idle
    /// ones too); wrk, Redis and PostgreSQL do not.
    server_cpu_us: f64,
}

fn wrk(url: &str, auth: Option<&str>, seconds: u32, connections: u32) -> Figures {
    let mut cmd = Command::new("wrk");
    cmd.args([
        "-t2",
        &format!("-c{connections}"),
        &format!("-d{seconds}s"),
        "--latency",
    ]);
    if let Some(key) = auth {
        cmd.args(["-H", &format!("Authorization: Bearer {key}")]);
    }
    let out = cmd
        .arg(url)
        .output()
        .expect("wrk runs (scripts/bench.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "wrk failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests_per_sec = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Requests/sec in wrk output:\n{text}"));
    let p99 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("99%"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no p99 in wrk output:\n{text}"));
    let non_2xx = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Non-2xx or 3xx responses:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Figures {
        requests_per_sec,
        p99_ms: parse_duration_ms(p99),
        non_2xx,
        server_cpu_us: 0.0,
    }
}

/// wrk prints latencies as `812.00us`, `3.12ms` or `1.02s`.
fn parse_duration_ms(s: &str) -> f64 {
    let (number, factor) = if let Some(v) = s.strip_suffix("us") {
        (v, 0.001)
    } else if let Some(v) = s.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1000.0)
    } else {
        (s, 1.0)
    };
    number.parse::<f64>().expect("a wrk latency") * factor
}

/// A server whose development live key has a limit so high the benchmark never hits it: the
/// limiter still runs on every request, which is what is measured.
async fn full_stack(limiter: Option<String>) -> TestServer {
    full_stack_on(limiter, None).await
}

async fn full_stack_on(limiter: Option<String>, store: Option<String>) -> TestServer {
    let s = TestServer::start_with(move |a| {
        if let Some(url) = &limiter {
            a.limiter = url.clone();
        }
        if let Some(url) = &store {
            a.store.store = Some(url.clone());
        }
    })
    .await;
    s.unlimit(&s.creds.keys.secret_live).await;
    s
}

/// A handler answering `body` on the organization route, and nothing else.
fn bare_router(body: Vec<u8>) -> Router {
    Router::new().route(
        "/v1/organizations/{organizationId}",
        get(move || {
            let body = body.clone();
            async move { ([(header::CONTENT_TYPE, "application/json")], body) }
        }),
    )
}

async fn bare_handler(body: Vec<u8>) -> String {
    let app = bare_router(body);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// The bare handler served by Vigil's own accept loop (connection cap, header-read and idle
/// watchdog): what the connection layer costs, apart from the router and the handlers.
async fn bare_behind_connections(body: Vec<u8>) -> String {
    let app = bare_router(body);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = vigil::server::connections::ConnectionLimits {
        header_read_timeout: std::time::Duration::from_secs(10),
        keep_alive_timeout: std::time::Duration::from_secs(75),
        max_connections: 10_000,
    };
    tokio::spawn(async move {
        vigil::server::connections::serve(
            listener,
            vigil::server::connections::Transport::Plain,
            app,
            limits,
            Default::default(),
        )
        .await
        .unwrap()
    });
    format!("http://{addr}")
}

fn main() {
    let seconds: u32 = std::env::var("VIGIL_BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let connections: u32 = std::env::var("VIGIL_BENCH_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let redis = std::env::var("VIGIL_BENCH_REDIS_URL").ok();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    runtime.block_on(async {
        let local = full_stack(None).await;
        let path = local.org_path();
        let sample = local.get(&path).key(&local.creds.keys.secret_live).send().await;
        assert_eq!(sample.status, 200);
        let body = serde_json::to_vec(&sample.body).unwrap();
        let bare = bare_handler(body.clone()).await;
        let redis_stack = match &redis {
            Some(url) => Some(full_stack(Some(url.clone())).await),
            None => None,
        };
        let postgres_stack = match std::env::var("VIGIL_TEST_POSTGRES_URL") {
            Ok(_) => Some(
                full_stack_on(None, Some(vigil_tests::postgres_database("bench").await)).await,
            ),
            Err(_) => None,
        };

        println!("GET /v1/organizations/{{id}}: {} B responses, wrk -t2 -c{connections} -d{seconds}s, loopback, 2 cores shared by server and wrk", body.len());
        let run = |url: String, key: Option<String>| {
            tokio::task::spawn_blocking(move || {
                let before = vigil_tests::process_cpu_seconds();
                let mut f = wrk(&url, key.as_deref(), seconds, connections);
                let used = vigil_tests::process_cpu_seconds() - before;
                f.server_cpu_us = used * 1e6 / (f.requests_per_sec * f64::from(seconds));
                f
            })
        };
        // Warm each target briefly so first-touch costs do not land in the measurement.
        let _ = run(format!("{bare}{path}"), None).await;
        let ceiling = run(format!("{bare}{path}"), None).await.unwrap();
        let row = |name: &str, f: &Figures| {
            println!(
                "{:<44} {:>10.0} {:>9.2} {:>7.0}% {:>14.1}",
                name,
                f.requests_per_sec,
                f.p99_ms,
                100.0 * f.requests_per_sec / ceiling.requests_per_sec,
                f.server_cpu_us
            )
        };
        println!("{:<44} {:>10} {:>9} {:>8} {:>14}", "target", "req/s", "p99 ms", "ratio", "server us/req");
        row("bare axum JSON handler (ceiling)", &ceiling);
        // Where Vigil's cost lies: its connection layer alone, then its router, request id and
        // metrics without a credential (the probe route), then the whole authenticated request.
        let behind = bare_behind_connections(body.clone()).await;
        let _ = run(format!("{behind}{path}"), None).await;
        row("bare handler, Vigil's connection layer", &run(format!("{behind}{path}"), None).await.unwrap());
        let probe = format!("{}/healthz", local.base);
        let _ = run(probe.clone(), None).await;
        row("vigil GET /healthz (no credential)", &run(probe, None).await.unwrap());
        let mut targets = vec![("vigil, in-process limiter", &local)];
        if let Some(r) = &redis_stack {
            targets.push(("vigil, redis limiter", r));
        }
        if let Some(p) = &postgres_stack {
            targets.push(("vigil, PostgreSQL store", p));
        }
        for (name, server) in targets {
            let url = format!("{}{}", server.base, server.org_path());
            let key = server.creds.keys.secret_live.clone();
            let _ = run(url.clone(), Some(key.clone())).await;
            let f = run(url, Some(key)).await.unwrap();
            if f.non_2xx > 0 {
                let metrics = server.get("/metrics").send().await.body;
                let counts: Vec<&str> = metrics.as_str().unwrap_or("").lines().filter(|l| l.starts_with("vigil_http_requests_total")).collect();
                panic!("{name}: {} requests failed; every request must succeed for the figure to mean anything:\n{}", f.non_2xx, counts.join("\n"));
            }
            row(name, &f);
        }
        // The goal, measured as the median of three paired runs: the ceiling, then the
        // in-process target right after it, so that the machine's swings between runs (the
        // ceiling alone ranges over a fifth) move both figures of a pair alike.
        let url = format!("{}{}", local.base, local.org_path());
        let key = local.creds.keys.secret_live.clone();
        let mut pairs = Vec::new();
        for _ in 0..3 {
            let c = run(format!("{bare}{path}"), None).await.unwrap();
            let v = run(url.clone(), Some(key.clone())).await.unwrap();
            assert_eq!(v.non_2xx, 0, "in-process limiter: every request must succeed");
            pairs.push((v.requests_per_sec / c.requests_per_sec, v, c));
        }
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let shown: Vec<String> = pairs
            .iter()
            .map(|(r, v, c)| {
                format!(
                    "{:.0}% ({:.0} of {:.0} req/s, {:.1} us/req)",
                    100.0 * r,
                    v.requests_per_sec,
                    c.requests_per_sec,
                    v.server_cpu_us
                )
            })
            .collect();
        println!("in-process limiter against the ceiling, three paired runs: {}", shown.join(", "));
        let median = pairs[1].0;
        goal(
            "authenticated GET /v1/organizations/{id}, in-process limiter",
            // One decimal, so that a median just under the goal does not print as the goal.
            format!("median of three paired runs: {:.1}% of the ceiling", 100.0 * median),
            ">= 70% of the ceiling",
            median >= 0.70,
        );
        if postgres_stack.is_none() {
            println!("(PostgreSQL store not measured: VIGIL_TEST_POSTGRES_URL is not set; scripts/bench.sh sets it)");
        }
        if redis_stack.is_none() {
            println!("(redis limiter not measured: VIGIL_BENCH_REDIS_URL is not set; scripts/bench.sh sets it)");
        }
    });
}
