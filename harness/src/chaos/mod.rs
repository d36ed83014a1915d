//! `harness chaos`: a fault campaign on the real binaries. It starts the local
//! stack on a PostgreSQL cluster of its own (so it may restart and freeze it), at least four
//! executors, creates payouts while it runs, and drives a seeded nemesis: SIGSTOP/SIGCONT of
//! executors (0.1 to 3 × the lease), kill -9 and restart of a lock-server replica and of
//! rail-proxy, PostgreSQL fast restarts and stalls (SIGSTOP of every PostgreSQL process), and
//! scripted rail timeouts and rejections. When the nemesis stops, every payout must end
//! terminal within a bound; then the recorded history is checked (`history`) and drawn
//! (`timeline`).
//!
//! One file per part of a run: `setup` (the stack, the executors, the campaign's timings),
//! `options` (what a run is asked and reports), `nemesis` (payouts arriving and faults injected), `checks` (the drain, the rail, the
//! ledger, the history, the minimums) and `report` (pictures and the printed summary).

mod checks;
mod nemesis;
mod options;
mod report;
mod setup;

pub use options::{ChaosOptions, ChaosReport, FaultChoice, LIVENESS_BOUND};

use std::time::Instant;

/// Runs a campaign and checks its history; `Err` on any violation.
pub async fn run(options: &ChaosOptions) -> anyhow::Result<ChaosReport> {
    let campaign = setup::Campaign::start(options).await?;
    let started = Instant::now();
    let (ids, faults) = nemesis::run(&campaign, options, started).await?;
    println!(
        "Nemesis stopped after {:.0} s; waiting for every payout to end (bound {LIVENESS_BOUND:?}) ...",
        started.elapsed().as_secs_f64()
    );
    let payouts = checks::drain(&campaign, &ids).await?;
    let (stack, cluster, logs) = campaign.finish()?;
    let found = checks::check(&stack, &ids, faults).await?;
    let report = report::write(found, &payouts, &logs)?;
    report::print(&report, ids.len(), options.seed, started.elapsed());
    checks::minimums(&report, ids.len(), options)?;
    drop(stack);
    drop(cluster);
    Ok(report)
}
