//! A campaign's report: the whole run's timeline and one picture per zombie episode, the
//! counts, and the summary printed at the end.

use std::path::Path;
use std::time::Duration;

use chrono::Utc;
use payment_api::{Payout, PayoutState};

use super::checks::Found;
use super::options::ChaosReport;
use crate::timeline;

/// Draws the pictures into `logs` and counts what the run did.
pub(super) fn write(found: Found, payouts: &[Payout], logs: &Path) -> anyhow::Result<ChaosReport> {
    let Found {
        history,
        faults,
        refused,
        pauses_while_holding,
        duplicates,
    } = found;
    let run_end = Utc::now();
    let run_start = timeline::first_event(&history).unwrap_or(run_end);
    let zombies = timeline::episodes(&history, &refused);
    let timeline_path = logs.join("timeline.svg");
    let whole_run = timeline::View {
        title: "chaos run",
        from: run_start,
        to: run_end,
        key: None,
        zombies: &zombies,
    };
    std::fs::write(&timeline_path, timeline::render(&history, &whole_run))?;
    let mut episodes = Vec::new();
    for zombie in &zombies {
        let write = zombie.write;
        let path = logs.join(zombie.file_name());
        let key = zombie.key();
        let title = format!(
            "zombie {}: {} token {} on payout {}",
            zombie.number, write.executor, write.token, write.payout_id
        );
        let view = timeline::View {
            title: &title,
            from: zombie.granted_at - chrono::Duration::milliseconds(500),
            to: write.at + chrono::Duration::milliseconds(500),
            key: Some(&key),
            zombies: std::slice::from_ref(zombie),
        };
        std::fs::write(&path, timeline::render(&history, &view))?;
        episodes.push(path);
    }
    let mut by_state: Vec<(PayoutState, usize)> = Vec::new();
    for p in payouts {
        match by_state.iter_mut().find(|(s, _)| *s == p.state) {
            Some((_, n)) => *n += 1,
            None => by_state.push((p.state, 1)),
        }
    }
    Ok(ChaosReport {
        faults,
        pauses_while_holding,
        stale_writes_fenced: refused.len(),
        fenced_writes: history
            .writes
            .iter()
            .filter(|w| w.result == "fenced")
            .count(),
        writes: history.writes.len(),
        declared_losses: history.losses.len(),
        failovers: history.failovers,
        by_state,
        duplicates,
        timeline: timeline_path,
        episodes,
    })
}

/// The summary printed at the end of a run.
pub(super) fn print(report: &ChaosReport, payouts: usize, seed: u64, elapsed: Duration) {
    println!(
        "\n== Chaos report ({:.0} s, {payouts} payouts, seed {seed}) ==",
        elapsed.as_secs_f64()
    );
    println!("  pauses (SIGSTOP/SIGCONT)       {}", report.count("pause"));
    println!(
        "  pauses while holding a lock    {}",
        report.pauses_while_holding
    );
    println!(
        "  replica kills (kill -9)        {}",
        report.count("replica-kill")
    );
    println!(
        "  store restarts (fast)          {}",
        report.count("store-restart")
    );
    println!(
        "  store stalls (SIGSTOP)         {}",
        report.count("store-stall")
    );
    println!(
        "  rail-proxy kills               {}",
        report.count("proxy-kill")
    );
    println!(
        "  scripted rail faults           {}",
        report.count("rail-fault")
    );
    println!(
        "  partitions (compose)           {}",
        report.count("partition")
    );
    println!("  failovers observed (SDK)       {}", report.failovers);
    println!("  writes                         {}", report.writes);
    println!("  fenced writes                  {}", report.fenced_writes);
    println!(
        "  declared losses                {}",
        report.declared_losses
    );
    println!(
        "  stale writes fenced after a pause that outlived the lease: {}",
        report.stale_writes_fenced
    );
    for (state, n) in &report.by_state {
        println!("  payouts {:<22} {n}", state.as_str());
    }
    println!(
        "  payouts the rail saw twice     {} (must be 0)",
        report.duplicates
    );
    println!(
        "  invariants I1-I7 (I4 at every write's guard and every declared loss), no superseded write accepted, mutual exclusion per key: hold"
    );
    println!("  timeline: {}", report.timeline.display());
    for path in &report.episodes {
        println!("  zombie episode: {}", path.display());
    }
}
