//! The `vigil` binary: parses the command line and runs the chosen command.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = vigil::config::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("vigil: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(vigil::run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vigil: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
