//! The `vigil` binary: parses the command line and runs the chosen command.

use clap::Parser;

/// mimalloc rather than the system allocator: under load the service allocates and frees small
/// buffers on both cores at once, and glibc's arenas spent a sixth of the CPU in the benchmark.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
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
