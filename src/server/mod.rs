//! Starting and stopping the service: bind the listener, open the store, the server secret and
//! the limiter, write the development organization on first start, and serve (plain or TLS,
//! `connections`) until the shutdown token is cancelled, finishing requests in flight.

pub mod app;
pub mod connections;
pub mod demo;
pub mod log_roles;
pub mod openapi;
pub mod retention;
pub mod web_bot_auth_keys;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use edge::Authenticator;
use edge::limiter::Limiter;
use ingest::web_bot_auth::{Directories, TrustedAgents};
use schemas::ErrorCode;
use secrets::{ServerSecret, write_private};
use store::Store;
use tokio_util::sync::CancellationToken;

use crate::config::{ServeArgs, StoreArgs, redact_url};
use crate::server::connections::{ConnectionLimits, Transport};

/// The most threads a runtime runs blocking work on (tokio's default is 512): the server's and
/// the processor's. The embedded store's writes run there and take turns on one writer lock, so
/// under load hundreds of threads piled up waiting for it, each with its own allocator heap: the
/// many-sessions soak's server passed 2 GB with 520 threads. A few dozen keep the store's writer
/// busy and the rest (file and DNS work) served.
pub const BLOCKING_THREADS: usize = 32;

/// How long start-up waits for Kafka's topics before serving without them.
const LOG_READY_BOUND: std::time::Duration = std::time::Duration::from_secs(1);
/// How long it waits for the embedded log's first preparation: it needs no network, only this
/// machine, so a busy machine's seconds are waited out rather than answered with 503s.
const EMBEDDED_LOG_READY_BOUND: std::time::Duration = std::time::Duration::from_secs(30);

/// The settings row that records the development organization, once it is fully written.
const DEVELOPMENT_ORGANIZATION: &str = "development_organization";

/// A running server; tests hold one per case.
pub struct RunningServer {
    pub addr: SocketAddr,
    pub store: Store,
    pub log: log::Log,
    pub secret: ServerSecret,
    /// Where the development organization's keys were written, if this start created them.
    pub credentials_path: PathBuf,
    /// The whole API as served, for in-process tests that drive it without a socket.
    pub router: axum::Router,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl RunningServer {
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Waits until the server has stopped.
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("server task")?
    }

    /// Stops accepting, finishes requests in flight, and waits.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.wait().await
    }
}

pub async fn open_store(args: &StoreArgs) -> anyhow::Result<(Store, ServerSecret)> {
    private_directory(&args.data_dir)?;
    let secret = match &args.server_secret {
        Some(hex) => ServerSecret::from_hex(hex).map_err(anyhow::Error::msg)?,
        None => ServerSecret::load_or_create(&args.data_dir.join("server-secret"))
            .with_context(|| format!("reading the server secret in {}", args.data_dir.display()))?,
    };
    let store = store::open(&args.store_url())
        .await
        .context("opening the store")?;
    // Every role's store calls are timed and their failures counted, whatever the backend.
    Ok((store::instrumented::instrument(store), secret))
}

/// Makes the data directory (the embedded store and log, the server secret, the development
/// keys) its owner's alone: created, or narrowed, to mode 0700. Files the process creates are
/// 0600 besides (`main` sets the umask), but a directory nobody else may enter keeps even a
/// file an older build made readable to its owner only.
fn private_directory(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("making {} private", dir.display()))
}

/// On first start with an empty embedded store: an organization with four keys, written to
/// `credentials.json` (mode 0600). Only the path is logged, never the keys.
pub async fn ensure_development_organization(
    store: &Store,
    secret: &ServerSecret,
    path: &Path,
) -> anyhow::Result<()> {
    if store.get_setting(DEVELOPMENT_ORGANIZATION).await?.is_some() {
        return Ok(());
    }
    let mut slug = "development".to_owned();
    let out = loop {
        match admin_api::bootstrap::bootstrap(store, secret, "Development", &slug).await {
            Ok(out) => break out,
            // A start that crashed half-way left the slug taken but no credentials file.
            Err(e) if e.code == ErrorCode::Conflict => {
                slug = format!(
                    "development-{}",
                    ulid::Ulid::generate().to_string().to_lowercase()
                )
            }
            Err(e) => bail!("creating the development organization: {}", e.message),
        }
    };
    write_private(path, serde_json::to_string_pretty(&out)?.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    store
        .put_setting_if_absent(
            DEVELOPMENT_ORGANIZATION,
            out.organization.id.to_string().as_bytes(),
        )
        .await?;
    tracing::info!(path = %path.display(), organization = %out.organization.id, "created the development organization; its keys are in this file");
    Ok(())
}

/// Wraps the backends once opened: tests inject faults through it (a store that fails some
/// calls, a log that refuses some records); `vigil serve` wraps nothing.
#[derive(Default)]
pub struct Wrap {
    pub store: Option<Box<dyn FnOnce(Store) -> Store + Send>>,
    pub log: Option<Box<dyn FnOnce(log::Log) -> log::Log + Send>>,
}

pub async fn start(args: ServeArgs) -> anyhow::Result<RunningServer> {
    start_wrapped(args, Wrap::default()).await
}

/// `start`, with the opened store passed through `wrap` before any role gets it: tests wrap it
/// in a store that fails on demand (a full disk, say).
pub async fn start_wrapping_store(
    args: ServeArgs,
    wrap: impl FnOnce(Store) -> Store + Send + 'static,
) -> anyhow::Result<RunningServer> {
    let wrap = Wrap {
        store: Some(Box::new(wrap)),
        log: None,
    };
    start_wrapped(args, wrap).await
}

/// The operator's IP data (docs/detection.md#network-identity), opened and watched for changes;
/// `None` when no database or address list is configured (the shipped hosting list alone says
/// nothing without an ASN).
fn open_network_data(args: &ServeArgs) -> anyhow::Result<Option<Arc<ipdata::NetworkData>>> {
    let paths = ipdata::NetworkPaths {
        ip_databases: args.ip_database.clone(),
        hosting_asns: args.hosting_asns.clone(),
        tor_exit_list: args.tor_exit_list.clone(),
        relay_list: args.relay_list.clone(),
    };
    let network = ipdata::NetworkData::open(&paths).context("opening the IP data")?;
    if !network.is_configured() {
        return Ok(None);
    }
    network.watch(args.ip_data_poll);
    Ok(Some(Arc::new(network)))
}

/// [`start`], with the opened backends wrapped by `wrap`.
pub async fn start_wrapped(args: ServeArgs, wrap: Wrap) -> anyhow::Result<RunningServer> {
    args.validate().map_err(anyhow::Error::msg)?;
    // Bound first: with `--listen …:0` the default public URL needs the port.
    let std_listener = std::net::TcpListener::bind(args.listen)
        .with_context(|| format!("binding {}", args.listen))?;
    std_listener.set_nonblocking(true)?;
    let addr = std_listener.local_addr()?;
    // Bound before anything starts, so an address taken stops the start cleanly.
    let metrics_listener = match args.metrics_listen {
        Some(at) => {
            let listener = std::net::TcpListener::bind(at)
                .with_context(|| format!("binding --metrics-listen {at}"))?;
            listener.set_nonblocking(true)?;
            Some(listener)
        }
        None => None,
    };
    let public_urls = args.public_urls(addr);
    edge::context::set_public_url(&public_urls[0]);
    let (store, secret) = open_store(&args.store).await?;
    let store = match wrap.store {
        Some(wrap) => wrap(store),
        None => store,
    };
    let credentials_path = args.store.data_dir.join("credentials.json");
    if args.store.is_embedded() {
        ensure_development_organization(&store, &secret, &credentials_path).await?;
    }
    let limiter = Limiter::from_url(&args.limiter).map_err(anyhow::Error::msg)?;
    let auth = Arc::new(Authenticator {
        store: store.clone(),
        secret: secret.clone(),
        limiter,
        trusted_proxies: args.trusted_proxy.clone(),
        client_fingerprint_header: args.client_fingerprint_header.clone(),
        anonymous_rate_limit: args.anonymous_rate_limit,
        last_used: Default::default(),
    });
    let rotation_grace =
        chrono::Duration::from_std(args.rotation_grace).context("--rotation-grace is too large")?;
    let shutdown = CancellationToken::new();
    let agents = trusted_agents(&args, &public_urls, &shutdown)?;
    // Opening makes clients only (Kafka's connect in the background); the topics and the
    // processor wait for the log in the background, so the server answers without it.
    let log = log::open(&args.log_url())
        .await
        .context("opening the log")?;
    // Every role's log calls (and its consumers' polls and commits) are timed and counted.
    let log = log::instrumented::instrument(log);
    let log = match wrap.log {
        Some(wrap) => wrap(log),
        None => log,
    };
    let roles = args.role_set();
    // The IP data is the processor's; a file that cannot be read stops the start, naming it.
    let network = if roles.processor {
        open_network_data(&args)?
    } else {
        None
    };
    let (log_preparation, processor) = crate::server::log_roles::start(
        log.clone(),
        roles
            .processor
            .then(|| crate::server::log_roles::ProcessorSettings {
                store: store.clone(),
                log: log.clone(),
                secret: secret.clone(),
                idle_after: args.session_idle,
                retention: args.retention,
                cache_bytes: args.processor_cache_mb * 1024 * 1024,
                replay_memory: args.replay_memory,
                network,
            }),
        roles.dispatcher.then(|| dispatcher::Settings {
            store: store.clone(),
            log: log.clone(),
            secret: secret.clone(),
            schedule: args.webhook_retry_schedule.clone(),
            allow_private: args.allow_private_webhooks,
            attempt_timeout: args.webhook_timeout,
        }),
        shutdown.clone(),
    );
    let ready = if args.log_url().starts_with("embedded:") {
        log_preparation
            .wait_first_attempt(EMBEDDED_LOG_READY_BOUND)
            .await
    } else {
        log_preparation.wait_ready(LOG_READY_BOUND).await
    };
    if !ready {
        tracing::warn!(log = %redact_url(&args.log_url()), "the log is not ready; serving without it until it is (see /readyz)");
    }
    let batches = log::Topic::from_static(schemas::collect::BATCHES_TOPIC);
    // Retention (docs/architecture.md#retention): expired rows are dropped in small steps beside
    // every role.
    let sweep = tokio::spawn(crate::server::retention::sweep(
        store.clone(),
        args.retention,
        shutdown.clone(),
    ));
    // And the embedded log's old records (Kafka's brokers expire their topics themselves).
    let log_sweep = args.log_url().starts_with("embedded:").then(|| {
        tokio::spawn(crate::server::retention::sweep_log(
            log.clone(),
            args.log_retention,
            shutdown.clone(),
        ))
    });
    // The demo exists only beside the embedded development organization
    // (docs/architecture.md#demo-page).
    let demo = match args.demo && args.store.is_embedded() && roles.admin {
        true => crate::server::demo::router(auth.clone(), &credentials_path).await,
        false => None,
    };
    let demo_served = demo.is_some();
    let app = crate::server::app::router(crate::server::app::AppParts {
        roles,
        demo,
        log: log.clone(),
        log_preparation,
        batches,
        auth,
        rotation_grace,
        allow_private_webhooks: args.allow_private_webhooks,
        agents,
        export_concurrency: args.export_concurrency,
        metrics_on_api: args.metrics_listen.is_none(),
    });

    let router = app.clone();
    let transport = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let config = axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key)
                .await
                .context("loading --tls-cert and --tls-key")?;
            Transport::Tls(config)
        }
        _ => Transport::Plain,
    };
    let scheme = match &transport {
        Transport::Tls(_) => "https",
        Transport::Plain => "http",
    };
    let listener = tokio::net::TcpListener::from_std(std_listener)?;
    let limits = ConnectionLimits {
        header_read_timeout: args.header_read_timeout,
        keep_alive_timeout: args.keep_alive_timeout,
        max_connections: args.max_connections,
    };
    let metrics = match metrics_listener {
        Some(listener) => Some(serve_metrics(listener, limits, &shutdown)?),
        None => None,
    };
    let token = shutdown.clone();
    let task = tokio::spawn(async move {
        crate::server::connections::serve(listener, transport, app, limits, token)
            .await
            .context("serving")
    });
    // The server's task ends when both the listener and the processor have stopped, so that a
    // stopped server holds no store or log handle.
    let task = tokio::spawn(async move {
        let served = task.await.context("server task")?;
        if let Some(metrics) = metrics {
            let _ = metrics.await;
        }
        let _ = processor.await;
        let _ = sweep.await;
        if let Some(log_sweep) = log_sweep {
            let _ = log_sweep.await;
        }
        served
    });
    tracing::info!(
        %addr,
        roles = %roles.names().join(","),
        store = %redact_url(&args.store.store_url()),
        limiter = %redact_url(&args.limiter),
        log = %redact_url(&args.log_url()),
        public_urls = %public_urls.iter().map(|u| redact_url(u)).collect::<Vec<_>>().join(","),
        "vigil is serving"
    );
    // The start-up log's last line: what a newcomer does next.
    // Only an embedded store's development organization has its keys in that file (one left by
    // an earlier embedded run is not this store's).
    let keys = (args.store.is_embedded() && credentials_path.is_file()).then(|| {
        format!(
            "; the development organization's keys are in {}",
            credentials_path.display()
        )
    });
    match (demo_served, keys) {
        (true, Some(keys)) => {
            tracing::info!("next: open {scheme}://{addr}/demo to see a visit scored{keys}")
        }
        (false, Some(keys)) => tracing::info!("next: call {scheme}://{addr}{keys}"),
        (_, None) => tracing::info!(
            "next: call {scheme}://{addr}; `vigil bootstrap` makes an organization and prints its keys"
        ),
    }
    Ok(RunningServer {
        addr,
        store,
        log,
        secret,
        credentials_path,
        router,
        shutdown,
        task,
    })
}

/// Serves `/metrics` on `--metrics-listen`'s listener, with the API's connection limits, until
/// `shutdown`.
fn serve_metrics(
    listener: std::net::TcpListener,
    limits: ConnectionLimits,
    shutdown: &CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<()>>> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "serving /metrics apart from the API");
    let token = shutdown.clone();
    Ok(tokio::spawn(async move {
        crate::server::connections::serve(
            listener,
            Transport::Plain,
            crate::server::app::metrics_router(),
            limits,
            token,
        )
        .await
        .context("serving /metrics")
    }))
}

/// The agents trusted for Web Bot Auth, for signatures made for one of `public_urls`; their
/// keys file is kept current until `shutdown`.
fn trusted_agents(
    args: &ServeArgs,
    public_urls: &[String],
    shutdown: &CancellationToken,
) -> anyhow::Result<Arc<TrustedAgents>> {
    let authorities = public_urls
        .iter()
        .map(|url| ingest::web_bot_auth::authority_of(url))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("--public-url: {e}"))?;
    let Some(path) = &args.web_bot_auth_keys else {
        return Ok(Arc::new(TrustedAgents::new(
            Directories::default(),
            authorities,
        )));
    };
    let directories =
        Directories::from_file(path).map_err(|e| anyhow::anyhow!("--web-bot-auth-keys: {e}"))?;
    let agents = Arc::new(TrustedAgents::new(directories, authorities));
    tokio::spawn(crate::server::web_bot_auth_keys::keep_current(
        agents.clone(),
        path.clone(),
        args.web_bot_auth_refresh,
        shutdown.clone(),
    ));
    Ok(agents)
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
