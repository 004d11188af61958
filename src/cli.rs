//! Command-line interface: `fvpoisson <command>`.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "fvpoisson", version, about = "Finite-volume pressure-Poisson solver for unstructured meshes")]
struct Cli {
    /// Log level (error, warn, info, debug, trace); RUST_LOG overrides it.
    #[arg(long, global = true, default_value = "info")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {}

/// Runs the command line and returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(&cli.log))
        .format_timestamp(None)
        .init();
    match cli.command {}
}
