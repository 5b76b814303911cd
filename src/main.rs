//! The `vigil` binary: parses the command line and runs the chosen command.

use clap::Parser;

/// mimalloc rather than the system allocator: under load the service allocates and frees small
/// buffers on both cores at once, and glibc's arenas spent a sixth of the CPU in the benchmark.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Everything the process creates (the embedded store's and log's files, the server secret,
    // an `.env` of `vigil gate`) is its owner's alone. Set before any thread starts: the mask is
    // the process's.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let cli = vigil::config::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .max_blocking_threads(vigil::server::BLOCKING_THREADS)
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
