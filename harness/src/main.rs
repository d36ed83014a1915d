//! `harness` binary: `harness bench locks` (more commands arrive with the payout pipeline).

use clap::{Parser, Subcommand};
use harness::bench::{LockBenchOptions, run_locks};

#[derive(Debug, Parser)]
#[command(
    name = "harness",
    about = "End-to-end runs, demos and benchmarks of the lock service"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        which: Bench,
    },
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// lock-server acquire+release cycles over HTTP against pgbench running the same SQL.
    Locks(LockBenchOptions),
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench {
            which: Bench::Locks(options),
        } => run_locks(&options).await,
    };
    if let Err(err) = result {
        eprintln!("harness: {err:#}");
        std::process::exit(1);
    }
}
