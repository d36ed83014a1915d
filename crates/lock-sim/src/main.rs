//! `lock-sim`: runs seeds of the deterministic simulation and reports violations, the seed
//! rate and the coverage counters, then shows each checker firing under its planted bug (a
//! checker that cannot fire proves nothing); `--seed N --trace` replays one seed event by
//! event.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use lock_sim::{BUG_NAMES, Bugs, DRIFT_BOUND, MUST_REACH, run_seed, run_seeds};

/// Seeds of the simulation of SDK, lock store and fenced resource under faults.
#[derive(Debug, Parser)]
#[command(name = "lock-sim", version)]
struct Cli {
    /// How many seeds to run.
    #[arg(long, default_value_t = 1_000)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// Replay this one seed (with --trace, print its events).
    #[arg(long)]
    seed: Option<u64>,
    /// Print the replayed seed's event trace.
    #[arg(long, requires = "seed")]
    trace: bool,
    /// Largest clock-rate drift of a client (default: the bound the safety margin covers).
    #[arg(long, default_value_t = DRIFT_BOUND)]
    drift: f64,
    /// Plant a bug: zero-margin, ignore-fence, rail-retry, retry-ambiguous, ledger-on-reject,
    /// skip-post, keep-abandoned, split-store, tell-longer-lease. The run then succeeds when a
    /// checker catches it.
    #[arg(long)]
    bug: Vec<String>,
}

fn main() -> ExitCode {
    let cli: Cli = process_kit::parse_or_exit("lock-sim");
    let mut bugs = Bugs::default();
    for name in &cli.bug {
        bugs = match bugs.with(name) {
            Ok(bugs) => bugs,
            Err(err) => {
                eprintln!("lock-sim: {err}");
                return ExitCode::from(2);
            }
        };
    }
    if !(0.0..1.0).contains(&cli.drift) {
        eprintln!("lock-sim: --drift must lie in [0, 1)");
        return ExitCode::from(2);
    }
    if let Some(seed) = cli.seed {
        let report = run_seed(seed, cli.drift, bugs, cli.trace);
        print!("{}", report.trace);
        println!("seed {seed}: {} events", report.events);
        return match report.violation {
            Some(v) => {
                println!("seed {seed}: {v}");
                ExitCode::FAILURE
            }
            None => {
                println!("seed {seed}: no violation");
                ExitCode::SUCCESS
            }
        };
    }
    let bar = ProgressBar::new(cli.seeds);
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} seeds  {per_sec}  {msg}")
    {
        bar.set_style(style);
    }
    let started = Instant::now();
    let summary = run_seeds(cli.first, cli.seeds, cli.drift, bugs, |_| bar.inc(1));
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} seeds ({}..{}) in {secs:.1} s: {:.0} seeds/s, {} events ({:.0} events/s), drift ≤ {}",
        summary.seeds,
        cli.first,
        cli.first + cli.seeds,
        summary.seeds as f64 / secs,
        summary.events,
        summary.events as f64 / secs,
        cli.drift
    );
    println!("coverage (over all seeds):");
    for (what, n) in &summary.coverage.0 {
        let must = if MUST_REACH.contains(what) { "*" } else { " " };
        println!("  {must} {what:<45} {n}");
    }
    let planted = bugs != Bugs::default();
    match (&summary.first_failure, planted) {
        (Some((seed, v)), true) => {
            println!(
                "planted bug {:?} caught: {} of {} seeds failed (by invariant: seeds, first seed: {:?}); first at seed {seed}:\n{v}",
                cli.bug, summary.failures, summary.seeds, summary.failed_by
            );
            ExitCode::SUCCESS
        }
        (None, true) => {
            println!(
                "planted bug {:?} NOT caught in {} seeds",
                cli.bug, summary.seeds
            );
            ExitCode::FAILURE
        }
        (Some((seed, v)), false) => {
            println!(
                "{} of {} seeds violated an invariant (by invariant: seeds, first seed: {:?}); first, seed {seed} (replay: lock-sim --seed {seed} --trace):\n{v}",
                summary.failures, summary.seeds, summary.failed_by
            );
            ExitCode::FAILURE
        }
        (None, false) => {
            let missing = summary.coverage.missing();
            if !missing.is_empty() {
                println!("0 violations, but never reached: {missing:?}");
                return ExitCode::FAILURE;
            }
            println!("0 violations; every * counter reached");
            prove_checkers(cli.drift)
        }
    }
}

/// Seeds a planted bug must be caught within.
const PROOF_SEEDS: u64 = 100;

/// Each planted bug, run until a checker catches it: the checkers this run relied on can fire.
fn prove_checkers(drift: f64) -> ExitCode {
    println!("each checker under its planted bug ({PROOF_SEEDS} seeds at most):");
    let mut blind = Vec::new();
    for name in BUG_NAMES {
        let Ok(bugs) = Bugs::default().with(name) else {
            blind.push(name);
            continue;
        };
        match run_seeds(0, PROOF_SEEDS, drift, bugs, |_| {}).first_failure {
            Some((seed, v)) => println!("  {name:<18} fired {} at seed {seed}", v.invariant),
            None => {
                println!("  {name:<18} NOT caught");
                blind.push(name);
            }
        }
    }
    if blind.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!("checkers blind to: {blind:?}");
        ExitCode::FAILURE
    }
}
