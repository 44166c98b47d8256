use clap::Parser;

/// mimalloc (Cargo.toml says why); the benchmarks (`benches/figures.rs`) use the same.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GPUPLANE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = gpuplane::cli::Cli::parse();
    std::process::exit(gpuplane::cli::run(cli));
}
