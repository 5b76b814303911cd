//! The `vigil` binary's library: its configuration (`config`), the server and the wiring of its
//! roles (`server`), the operator's commands on the store (`commands`: bootstrap, migrate, keys),
//! and the client commands that call a running Vigil or read its store (`client`: export, gate,
//! healthcheck). Tests start the same server in-process through [`server::start`].

pub mod client;
pub mod commands;
pub mod config;
pub mod server;

use config::{Cli, Command};

/// Runs one command of the CLI to completion.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            args.validate().map_err(anyhow::Error::msg)?;
            init_logging(&args.log_format);
            let running = server::start(args).await?;
            let shutdown = running.shutdown_token();
            tokio::spawn(async move {
                server::shutdown_signal().await;
                tracing::info!("shutting down: finishing requests in flight");
                shutdown.cancel();
            });
            running.wait().await
        }
        Command::Bootstrap(args) => commands::bootstrap(args).await,
        Command::Migrate(args) => commands::migrate(args).await,
        Command::Keys(config::KeysCommand::SetRateLimit(args)) => {
            commands::set_rate_limit(args).await
        }
        Command::Keys(config::KeysCommand::Create(args)) => commands::create_key(args).await,
        Command::Gate(config::GateCommand::Signup(args)) => client::gate::signup(args).await,
        Command::Gate(config::GateCommand::Login(args)) => client::gate::login(args).await,
        Command::Export(args) => client::export::run(args).await,
        Command::Healthcheck(args) => client::healthcheck::run(args).await,
    }
}

fn init_logging(format: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("VIGIL_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,fjall=warn,lsm_tree=warn"));
    use std::io::IsTerminal;
    // Colours only for a person at a terminal; files and collectors get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = if format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
