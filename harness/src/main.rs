//! `harness` binary: `harness demo`, `harness chaos`, `harness bench locks`,
//! `harness bench pipeline`, `harness bench scale`, `harness bench python`,
//! `harness bench failover`, `harness bench watch`.

use clap::{Parser, Subcommand};
use harness::bench::{LockBenchOptions, run_locks};
use harness::bench_pipeline::{PipelineBenchOptions, run_pipeline};
use harness::bench_python::{PythonBenchOptions, run_python};
use harness::bench_scale::{ScaleBenchOptions, run_scale};
use harness::chaos::ChaosOptions;
use harness::demo::DemoOptions;

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
    /// Run the whole stack, drive payouts through it, freeze one executor, and report.
    Demo(DemoOptions),
    /// A fault campaign on the real binaries: pauses, kills, store restarts and stalls; the
    /// recorded history is checked and drawn.
    Chaos(ChaosOptions),
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        which: Bench,
    },
    /// One lock-server on a throwaway PostgreSQL for test suites outside Rust: prints its URL
    /// and credential as one JSON line, runs until stdin closes.
    ServeLock,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Granted locks per second, waits and fairness: the SDK, raw HTTP, pgbench on the same SQL
    /// and etcd's lock API, at 1, 8 and 32 clients, distinct keys and one hot key.
    Locks(LockBenchOptions),
    /// Payouts per second with 1, 2 and 4 executors, each working on 1 and on 4 payouts at
    /// once (`EXECUTOR_CONCURRENCY`).
    Pipeline(PipelineBenchOptions),
    /// How cost grows: 100,000 sessions and 1,000,000 held keys, the reaper's passes, and
    /// 1,000 concurrent clients at rest and while the reaper deletes a tenth of the grants.
    Scale(ScaleBenchOptions),
    /// Election failover: from a leader killed or frozen to its follower serving, p50/p99, on
    /// PostgreSQL and etcd.
    Failover(harness::bench_failover::FailoverBenchOptions),
    /// Watch delivery: latency from a grant's answer to its event at a watcher, and events
    /// per second, on PostgreSQL and etcd.
    Watch(harness::bench_watch::WatchBenchOptions),
    /// Lock cycles per second of the Python SDK (fencedlock) next to the Rust SDK, tooz on
    /// PostgreSQL and on etcd, and python-redis-lock on Redis, at 1 and 8 clients.
    Python(PythonBenchOptions),
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(options) => harness::demo::run(&options).await,
        Command::Chaos(options) => harness::chaos::run(&options).await.map(|_| ()),
        Command::ServeLock => harness::serve_lock::run().await,
        Command::Bench {
            which: Bench::Locks(options),
        } => run_locks(&options).await,
        Command::Bench {
            which: Bench::Pipeline(options),
        } => run_pipeline(&options).await,
        Command::Bench {
            which: Bench::Scale(options),
        } => run_scale(&options).await,
        Command::Bench {
            which: Bench::Python(options),
        } => run_python(&options).await,
        Command::Bench {
            which: Bench::Failover(options),
        } => harness::bench_failover::run_failover(&options).await,
        Command::Bench {
            which: Bench::Watch(options),
        } => harness::bench_watch::run_watch(&options).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("harness: {err:#}");
            // Returning (not `process::exit`) drops the runtime, its tasks and so every
            // stack they still share: the service processes are killed, not left behind.
            std::process::ExitCode::FAILURE
        }
    }
}
