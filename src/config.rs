//! The operator contract's command line: every flag has an environment variable, defaults make
//! `vigil serve` run the whole service with nothing else installed, and cross-field rules are
//! checked once at start.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use ipnet::IpNet;

#[derive(Debug, Parser)]
#[command(
    name = "vigil",
    version,
    about = "Vigil: fraud signals and agent access, over HTTP and JSON"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// One of these is parsed per process; boxing the serve arguments would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the API (all roles on one listener by default).
    Serve(ServeArgs),
    /// Create an organization with a live and a test key of each type, and print them as JSON.
    Bootstrap(BootstrapArgs),
    /// Create or upgrade the PostgreSQL or ScyllaDB store's schema (idempotent; safe to run
    /// from several machines at once). The embedded store needs none.
    Migrate(MigrateArgs),
    /// Operator commands for API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// The developer-tool side of Gate: sign up to a service, log in to its dashboard.
    #[command(subcommand)]
    Gate(GateCommand),
    /// Write a window of sessions, fingerprints or events to a file for analysis: `.arrows`
    /// (an Arrow IPC stream), `.parquet` or `.ndjson`, from a running service or the store.
    Export(ExportArgs),
    /// Ask the `vigil serve` process on this host whether it is ready (`/readyz`): exit 0 when
    /// it is, 1 otherwise. For container healthchecks; it reads serve's own VIGIL_LISTEN.
    Healthcheck(HealthcheckArgs),
}

#[derive(Debug, Clone, Args)]
pub struct HealthcheckArgs {
    /// The address `vigil serve` listens on; an unspecified one (0.0.0.0) is probed on
    /// loopback.
    #[arg(long, env = "VIGIL_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The certificate serve presents, if any: the probe then speaks TLS.
    #[arg(long, env = "VIGIL_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// Probe this base URL instead (its certificate is then verified).
    #[arg(long)]
    pub url: Option<String>,
    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = 5)]
    pub timeout: u64,
}

/// The exports `vigil export` writes (docs/analysts.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportKind {
    Sessions,
    Fingerprints,
    Events,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// What to export.
    #[arg(value_enum)]
    pub export: ExportKind,
    /// The file to write; its extension picks the format: `.arrows` (an Arrow IPC stream),
    /// `.parquet` (zstd-compressed) or `.ndjson`. It appears only once complete; until then
    /// the rows are in `<out>.part`.
    #[arg(long)]
    pub out: PathBuf,
    /// The start of the window of creation times (RFC 3339); default: a day before --to.
    #[arg(long)]
    pub from: Option<String>,
    /// The end of the window, exclusive (RFC 3339); default: now.
    #[arg(long)]
    pub to: Option<String>,
    /// The columns to write, comma-separated; default: all of them.
    #[arg(long)]
    pub columns: Option<String>,
    /// Sessions only: those with this verdict (human, bot, verified_bot, suspicious).
    #[arg(long)]
    pub verdict: Option<String>,
    /// Sessions only: those whose id, visitor id or IP is this, or whose URL contains it.
    #[arg(long)]
    pub search: Option<String>,
    /// Rows per record batch and per page read (1 to 65,536); default 8,192.
    #[arg(long)]
    pub batch_size: Option<u32>,
    /// Continue a broken export after the last row its `<out>.part` file holds.
    #[arg(long)]
    pub resume: bool,
    /// A running Vigil to export from; the secret key is read from VIGIL_SECRET_KEY. Without
    /// it the export reads the store itself (the store flags below), on the store's host.
    #[arg(long, env = "VIGIL_URL")]
    pub url: Option<String>,
    /// The organization (org_...): the events export's, and whose rows a read of the store
    /// exports.
    #[arg(long)]
    pub organization: Option<String>,
    /// The environment a read of the store exports, live or test (over --url, the key's).
    #[arg(long, default_value = "live")]
    pub environment: String,
    #[command(flatten)]
    pub store: StoreArgs,
}

#[derive(Debug, Subcommand)]
pub enum GateCommand {
    /// Sign up to a service: approve in a browser, get its variables in an `.env` file.
    Signup(GateSignupArgs),
    /// Log in to a service's dashboard with the agent token a signup delivered.
    Login(GateLoginArgs),
}

#[derive(Debug, Args)]
pub struct GateSignupArgs {
    /// The service's id.
    pub service_id: String,
    /// The Vigil to talk to.
    #[arg(long, env = "VIGIL_ENDPOINT", default_value = "http://127.0.0.1:8080")]
    pub endpoint: String,
    /// Where the delivered variables are written (created readable by you only).
    #[arg(long, default_value = ".env")]
    pub env_file: PathBuf,
    /// The name the account is known by on its consent pages, so you recognise it at login.
    #[arg(long, default_value = "vigil gate")]
    pub client_name: String,
    /// Replace variables the `.env` file already holds (by default the signup stops before
    /// changing one, since another service's token or a `DATABASE_URL` may sit there).
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct GateLoginArgs {
    /// The service's id.
    pub service_id: String,
    /// The Vigil to talk to.
    #[arg(long, env = "VIGIL_ENDPOINT", default_value = "http://127.0.0.1:8080")]
    pub endpoint: String,
    /// The `.env` file the signup wrote, where the agent token is read from.
    #[arg(long, default_value = ".env")]
    pub env_file: PathBuf,
    /// The agent token, instead of reading it from the `.env` file.
    #[arg(long, env = "VIGIL_GATE_AGENT_TOKEN", hide_env_values = true)]
    pub agent_token: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct MigrateArgs {
    /// The store to migrate: `postgres://user@host:5432/db` or
    /// `scylla://host:9042[,host…]/keyspace` (the keyspace is created when missing).
    #[arg(long, env = "VIGIL_STORE", hide_env_values = true)]
    pub store: String,
}

/// Where the data lives; shared by every command.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// Directory for the embedded store, the server secret and credentials.json.
    #[arg(long, env = "VIGIL_DATA_DIR", default_value = "./vigil-data")]
    pub data_dir: PathBuf,
    /// Store URL: `embedded:<dir>` (default: embedded in --data-dir),
    /// `postgres://user@host:5432/db` or `scylla://host:9042[,host…]/keyspace` (a fleet's shared
    /// store; run `vigil migrate` first).
    #[arg(long, env = "VIGIL_STORE", hide_env_values = true)]
    pub store: Option<String>,
    /// The 32-byte server secret as 64 hex characters; default: `<data-dir>/server-secret`,
    /// created on first start. Every replica of a fleet needs the same one.
    #[arg(long, env = "VIGIL_SERVER_SECRET", hide_env_values = true)]
    pub server_secret: Option<String>,
}

impl StoreArgs {
    pub fn store_url(&self) -> String {
        self.store
            .clone()
            .unwrap_or_else(|| format!("embedded:{}", self.data_dir.join("store").display()))
    }

    pub fn is_embedded(&self) -> bool {
        self.store_url().starts_with("embedded:")
    }
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "VIGIL_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Serve `/metrics` on this address alone (plain HTTP), and no longer on --listen: the
    /// metrics stay on a private network while the API faces the internet.
    #[arg(long, env = "VIGIL_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Roles to run, comma-separated: `all`, or any of ingest, processor, query, admin,
    /// dispatcher. A process runs only those; with no HTTP role (ingest, query, admin) it
    /// serves only /healthz, /readyz and /metrics.
    #[arg(
        long,
        env = "VIGIL_ROLES",
        default_value = "all",
        value_delimiter = ','
    )]
    pub roles: Vec<String>,
    /// Log URL: `embedded` (default: a durable log in `<data-dir>/log`), `embedded:<dir>`, or
    /// `kafka://host:9092[,host...]`. `--bus` and `VIGIL_BUS` are its old names (`VIGIL_LOG`
    /// is the log level's filter).
    #[arg(
        long,
        alias = "bus",
        env = "VIGIL_LOG_URL",
        default_value = "embedded",
        hide_env_values = true
    )]
    pub log: String,
    /// Rate limiter: `local` (in-process), `redis://host:6379`, or `rediss://host:6380` over
    /// TLS (`?ca=<PEM>` for a CA of its own).
    #[arg(
        long,
        env = "VIGIL_LIMITER",
        default_value = "local",
        hide_env_values = true
    )]
    pub limiter: String,
    /// PEM certificate chain; with --tls-key, Vigil terminates TLS itself.
    #[arg(long, env = "VIGIL_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, env = "VIGIL_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CIDR of a proxy whose X-Forwarded-For and X-Forwarded-Proto are believed (repeatable,
    /// or comma-separated in the env var).
    #[arg(long, env = "VIGIL_TRUSTED_PROXY", value_delimiter = ',')]
    pub trusted_proxy: Vec<IpNet>,
    /// Behind a proxy that terminates TLS: the header in which it passes the client's JA4
    /// (docs/detection.md#transport-identity), believed from --trusted-proxy peers only.
    #[arg(long, env = "VIGIL_CLIENT_FINGERPRINT_HEADER", value_parser = parse_header_name)]
    pub client_fingerprint_header: Option<axum::http::HeaderName>,
    /// How long a rotated key keeps working.
    #[arg(long, env = "VIGIL_ROTATION_GRACE", default_value = "24h", value_parser = humantime::parse_duration)]
    pub rotation_grace: std::time::Duration,
    /// Let webhook endpoints use plain http and loopback or private addresses. For local stacks
    /// and tests only: it lets an organization make the server call its own network.
    #[arg(long, env = "VIGIL_ALLOW_PRIVATE_WEBHOOKS")]
    pub allow_private_webhooks: bool,
    /// The waits between webhook delivery attempts, comma-separated: a failed delivery is
    /// attempted again after each in turn (at least as long as a `Retry-After` asks), then
    /// fails. Empty: no retries.
    #[arg(long, env = "VIGIL_WEBHOOK_RETRY_SCHEDULE", default_value = dispatcher::attempts::DEFAULT_SCHEDULE, value_parser = dispatcher::attempts::RetrySchedule::parse)]
    pub webhook_retry_schedule: dispatcher::attempts::RetrySchedule,
    /// How long a webhook endpoint has to answer a delivery before the attempt fails and is
    /// retried.
    #[arg(long, env = "VIGIL_WEBHOOK_TIMEOUT", default_value = "15s", value_parser = humantime::parse_duration)]
    pub webhook_timeout: std::time::Duration,
    /// How long a session goes without a batch before its decision is made final.
    #[arg(long, env = "VIGIL_SESSION_IDLE", default_value = "30m", value_parser = humantime::parse_duration)]
    pub session_idle: std::time::Duration,
    /// How long sessions (with their decisions), events and visitors are kept after they were
    /// last written or seen; a background sweep drops older ones in small steps.
    #[arg(long, env = "VIGIL_RETENTION", default_value = "90days", value_parser = humantime::parse_duration)]
    pub retention: std::time::Duration,
    /// How long the embedded log keeps a record (a collect batch, an event, a dead letter) after
    /// it was appended; a background sweep drops older ones in small steps, short of what a
    /// consumer group still running has yet to read. On Kafka the topics' own `retention.ms`
    /// applies instead.
    #[arg(long, env = "VIGIL_LOG_RETENTION", default_value = "7days", value_parser = humantime::parse_duration)]
    pub log_retention: std::time::Duration,
    /// How long the replay record keeps the mark of a batch it saw, so a copy sent again in
    /// another session is caught (docs/detection.md#replayed-sessions); `0s` keeps no record
    /// (the session's challenge and the time its batches claim are still checked).
    #[arg(long, env = "VIGIL_REPLAY_MEMORY", default_value = "24h", value_parser = humantime::parse_duration)]
    pub replay_memory: std::time::Duration,
    /// A MaxMind DB file of IP data (repeatable, or comma-separated in the env var): GeoLite2 or
    /// GeoIP2 ASN, Country or City, DB-IP Lite, IPinfo Lite, ip-location-db. The first file
    /// that answers a member gives it. A file that changes on disk, or a SIGHUP, reopens it
    /// (docs/detection.md#network-identity).
    #[arg(long, env = "VIGIL_IP_DATABASE", value_delimiter = ',')]
    pub ip_database: Vec<PathBuf>,
    /// Hosting and cloud networks, one `asn,provider,source` a line, in place of the list
    /// shipped with Vigil.
    #[arg(long, env = "VIGIL_HOSTING_ASNS")]
    pub hosting_asns: Option<PathBuf>,
    /// The Tor Project's exit list (the bulk list, one address a line, or `exit-addresses`).
    #[arg(long, env = "VIGIL_TOR_EXIT_LIST")]
    pub tor_exit_list: Option<PathBuf>,
    /// Addresses and CIDRs of relays' egress (Apple's `egress-ip-ranges.csv` and the like), for
    /// the `relay` VPN method.
    #[arg(long, env = "VIGIL_RELAY_LIST")]
    pub relay_list: Option<PathBuf>,
    /// How often the IP data's files are checked for a change.
    #[arg(long, env = "VIGIL_IP_DATA_POLL", default_value = "30s", value_parser = humantime::parse_duration, hide = true)]
    pub ip_data_poll: std::time::Duration,
    /// Megabytes of session state the processor keeps in memory between batches (estimated);
    /// a session evicted past it has its state decoded from the store at its next batch.
    #[arg(long, env = "VIGIL_PROCESSOR_CACHE_MB", default_value_t = 256)]
    pub processor_cache_mb: u64,
    /// JSON file of the agents trusted for Web Bot Auth: each agent's origin mapped to its key
    /// directory (JWKS). Without it, signed requests are reported unverified. Read again on
    /// SIGHUP and every --web-bot-auth-refresh; a file that does not parse keeps the keys in use.
    #[arg(long, env = "VIGIL_WEB_BOT_AUTH_KEYS")]
    pub web_bot_auth_keys: Option<PathBuf>,
    /// How often --web-bot-auth-keys is read again (0s: only on SIGHUP).
    #[arg(long, env = "VIGIL_WEB_BOT_AUTH_REFRESH", default_value = "5m", value_parser = humantime::parse_duration)]
    pub web_bot_auth_refresh: std::time::Duration,
    /// Requests per minute from one client IP that presents no valid credential.
    #[arg(long, env = "VIGIL_ANONYMOUS_RATE_LIMIT", default_value_t = 120)]
    pub anonymous_rate_limit: u32,
    /// Exports (`/v1/.../export`) one organization may stream at once in one environment,
    /// whichever keys started them; one more is a 429.
    #[arg(long, env = "VIGIL_EXPORT_CONCURRENCY", default_value_t = query_api::export::DEFAULT_CONCURRENCY)]
    pub export_concurrency: usize,
    /// A URL clients reach this service at (repeatable, or comma-separated in the env var).
    /// The first is the base of links in responses; every one's host is an authority Web Bot
    /// Auth signatures may cover. Default: from --listen's bound address.
    #[arg(long, env = "VIGIL_PUBLIC_URL", value_delimiter = ',')]
    pub public_url: Vec<String>,
    /// How long a client may take to send a request's headers (from the first byte; for a new
    /// connection, from its opening, TLS handshake included) before it is disconnected.
    #[arg(long, env = "VIGIL_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub header_read_timeout: std::time::Duration,
    /// How long a connection may sit idle, with no request in flight and no traffic, before it
    /// is closed.
    #[arg(long, env = "VIGIL_KEEP_ALIVE_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub keep_alive_timeout: std::time::Duration,
    /// The most connections served at once; further clients wait in the listen queue until a
    /// connection closes.
    #[arg(long, env = "VIGIL_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,
    /// Serve the `/demo` page (only ever beside the embedded development organization, and
    /// only for its test-environment handoffs).
    #[arg(long, env = "VIGIL_DEMO", default_value_t = true, action = clap::ArgAction::Set)]
    pub demo: bool,
    /// Log format: text or json.
    #[arg(long, env = "VIGIL_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
}

/// The roles of one process (docs/architecture.md: #data-flow, #conv-roles): each is a part of the
/// service a fleet can run in its own processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Roles {
    /// The Collect API and the SDK's routes: writes batches to the log.
    pub ingest: bool,
    /// Folds batches into decisions, links visitors, records session events; the idle sweep.
    pub processor: bool,
    /// The customer backend's reads and the Gate registry.
    pub query: bool,
    /// Organizations, keys, events, webhook endpoints, Gate services and flows, the demo.
    pub admin: bool,
    /// Delivers events to webhook endpoints.
    pub dispatcher: bool,
}

impl Roles {
    pub const NAMES: [&'static str; 5] = ["ingest", "processor", "query", "admin", "dispatcher"];

    /// Whether a role that runs reads or writes the log: every one but the query API (the
    /// admin API appends endpoints' test events).
    pub fn use_log(&self) -> bool {
        self.ingest || self.processor || self.admin || self.dispatcher
    }

    /// `all`, or any of [`Roles::NAMES`] (`admin-api`, the earlier name, is `admin`).
    pub fn parse(names: &[String]) -> Result<Roles, String> {
        let mut roles = Roles::default();
        if names.is_empty() {
            return Err("--roles names no role".into());
        }
        for name in names {
            match name.trim() {
                "all" => {
                    roles = Roles {
                        ingest: true,
                        processor: true,
                        query: true,
                        admin: true,
                        dispatcher: true,
                    }
                }
                "ingest" => roles.ingest = true,
                "processor" => roles.processor = true,
                "query" => roles.query = true,
                "admin" | "admin-api" => roles.admin = true,
                "dispatcher" => roles.dispatcher = true,
                other => {
                    return Err(format!(
                        "unknown role `{other}`: the roles are all, {}",
                        Roles::NAMES.join(", ")
                    ));
                }
            }
        }
        Ok(roles)
    }

    /// The names of the roles that run, in [`Roles::NAMES`]'s order.
    pub fn names(&self) -> Vec<&'static str> {
        let on = [
            self.ingest,
            self.processor,
            self.query,
            self.admin,
            self.dispatcher,
        ];
        Roles::NAMES
            .iter()
            .zip(on)
            .filter_map(|(name, on)| on.then_some(*name))
            .collect()
    }

    /// Whether the process answers API routes at all.
    pub fn serves_http(&self) -> bool {
        self.ingest || self.query || self.admin
    }
}

/// 1 TiB: beyond any machine this runs on, and far from overflowing a byte count.
const MAX_PROCESSOR_CACHE_MB: u64 = 1 << 20;

/// The longest the replay record keeps a mark: a month holds a week's recordings several times
/// over, and ScyllaDB's TTLs (20 years at most) are far off.
const MAX_REPLAY_MEMORY: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// Beyond any sensible retention, and far inside what a timestamp can hold.
const MAX_RETENTION: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 24 * 3600);

/// Far above what one process can serve, and below what a semaphore can count.
const MAX_CONNECTIONS: usize = 10_000_000;

impl ServeArgs {
    /// Cross-field rules, checked once before anything starts.
    /// The roles this process runs (`--roles`, checked by `validate`).
    pub fn role_set(&self) -> Roles {
        Roles::parse(&self.roles).unwrap_or_default()
    }

    /// Whether this process runs the webhook dispatcher.
    pub fn runs_dispatcher(&self) -> bool {
        self.role_set().dispatcher
    }

    pub fn validate(&self) -> Result<(), String> {
        Roles::parse(&self.roles)?;
        if self.webhook_timeout.is_zero() {
            return Err("--webhook-timeout must be more than 0s".into());
        }
        if !(self.limiter == "local"
            || self.limiter.starts_with("redis://")
            || self.limiter.starts_with("rediss://"))
        {
            return Err(format!(
                "--limiter must be `local` or a redis:// URL, not `{}`",
                redact_url(&self.limiter)
            ));
        }
        if !matches!(self.log_format.as_str(), "text" | "json") {
            return Err("--log-format must be text or json".into());
        }
        if self.anonymous_rate_limit == 0 {
            return Err("--anonymous-rate-limit must be at least 1".into());
        }
        for url in &self.public_url {
            ingest::web_bot_auth::authority_of(url).map_err(|e| format!("--public-url: {e}"))?;
        }
        if self.ip_data_poll.is_zero() {
            return Err("--ip-data-poll must be above zero".into());
        }
        if self.header_read_timeout.is_zero() || self.keep_alive_timeout.is_zero() {
            return Err("--header-read-timeout and --keep-alive-timeout must be above zero".into());
        }
        if self.processor_cache_mb > MAX_PROCESSOR_CACHE_MB {
            return Err(format!(
                "--processor-cache-mb must be at most {MAX_PROCESSOR_CACHE_MB} (0 keeps no state in memory)"
            ));
        }
        if self.replay_memory > MAX_REPLAY_MEMORY {
            return Err("--replay-memory must be at most 30 days (0s keeps no record)".into());
        }
        if self.retention.is_zero() || self.retention > MAX_RETENTION {
            return Err("--retention must be above zero and at most 100 years".into());
        }
        if self.log_retention.is_zero() || self.log_retention > MAX_RETENTION {
            return Err("--log-retention must be above zero and at most 100 years".into());
        }
        if self.max_connections == 0 || self.max_connections > MAX_CONNECTIONS {
            return Err(format!(
                "--max-connections must be from 1 to {MAX_CONNECTIONS}"
            ));
        }
        Ok(())
    }

    /// The log's URL, with the bare `embedded` default placed in the data dir. `VIGIL_BUS`, the
    /// old name of `VIGIL_LOG_URL`, is read when neither it nor `--log` names another log.
    pub fn log_url(&self) -> String {
        let given = match std::env::var("VIGIL_BUS") {
            Ok(old) if self.log == "embedded" && std::env::var_os("VIGIL_LOG_URL").is_none() => old,
            _ => self.log.clone(),
        };
        if given == "embedded" {
            format!("embedded:{}", self.store.data_dir.join("log").display())
        } else {
            given
        }
    }

    /// The service's public URLs: those given, or the one `--listen`'s bound address (`bound`,
    /// which tells the port when listening on port 0) makes.
    pub fn public_urls(&self, bound: SocketAddr) -> Vec<String> {
        if !self.public_url.is_empty() {
            return self.public_url.clone();
        }
        let scheme = if self.tls_cert.is_some() {
            "https"
        } else {
            "http"
        };
        vec![format!("{scheme}://{bound}")]
    }

    /// Settings for an in-process test server: port 0, the given data dir, defaults otherwise.
    pub fn for_tests(data_dir: PathBuf) -> Self {
        let cli = Cli::parse_from(
            ["vigil", "serve", "--listen", "127.0.0.1:0", "--data-dir"]
                .iter()
                .copied()
                .chain([data_dir.to_str().unwrap_or(".")]),
        );
        match cli.command {
            Command::Serve(args) => args,
            _ => unreachable!("parsed as serve"),
        }
    }
}

#[derive(Debug, Args)]
pub struct BootstrapArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Organization name.
    #[arg(long, env = "VIGIL_BOOTSTRAP_NAME")]
    pub name: String,
    /// Organization slug (`^[a-z0-9]+(?:-[a-z0-9]+)*$`).
    #[arg(long, env = "VIGIL_BOOTSTRAP_SLUG")]
    pub slug: String,
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Set a key's rate limit (requests per minute), the operator's per-key override.
    SetRateLimit(SetRateLimitArgs),
    /// Issue a key for an existing organization (one made with `POST /v1/organizations` has
    /// none until an operator issues its first) and print it as JSON.
    Create(CreateKeyArgs),
}

#[derive(Debug, Args)]
pub struct CreateKeyArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The organization (`org_…`).
    #[arg(long, env = "VIGIL_ORGANIZATION")]
    pub organization: String,
    /// `secret` or `publishable`.
    #[arg(long = "type", env = "VIGIL_KEY_TYPE", default_value = "secret")]
    pub key_type: String,
    /// `live` or `test`.
    #[arg(long, env = "VIGIL_ENVIRONMENT", default_value = "test")]
    pub environment: String,
    /// A name for the key.
    #[arg(long, env = "VIGIL_KEY_NAME", default_value = "operator-issued")]
    pub name: String,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["key_id", "key"])))]
pub struct SetRateLimitArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The key's resource id (`key_…`).
    #[arg(long, env = "VIGIL_KEY_ID")]
    pub key_id: Option<String>,
    /// The credential itself (`sk_…` or `pk_…`).
    #[arg(long, env = "VIGIL_KEY", hide_env_values = true)]
    pub key: Option<String>,
    /// Requests per minute; the bucket holds this many.
    #[arg(long, env = "VIGIL_RATE_LIMIT")]
    pub limit: u32,
}

/// Backend URLs are shown and logged only through this (docs/architecture.md#secrets-in-logs); it
/// lives in `schemas` so the log and store crates redact their own error messages the same way.
pub use schemas::redact::redact_url;

fn parse_header_name(name: &str) -> Result<axum::http::HeaderName, String> {
    axum::http::HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| format!("{name:?} is not a header name"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `--bus`, the log flag's old name, still names the log.
    #[test]
    fn the_old_name_of_the_log_flag_still_names_the_log() {
        for flag in ["--log", "--bus"] {
            let cli = Cli::try_parse_from(["vigil", "serve", flag, "kafka://broker:9092"]).unwrap();
            let Command::Serve(args) = cli.command else {
                panic!("not serve");
            };
            assert_eq!(args.log, "kafka://broker:9092", "{flag}");
        }
    }
}
