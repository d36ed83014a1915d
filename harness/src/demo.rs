//! `harness demo`: the whole stack as local processes, payouts driven through it by two
//! executors, one of them frozen mid-payout on purpose (SIGSTOP after `check_still_held`),
//! then a short report proving nothing was paid twice.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use nix::sys::signal::Signal;

use crate::stack::{Stack, StackOptions};

/// Options of `harness demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoOptions {
    /// Payouts to create.
    #[arg(long, default_value_t = 200)]
    pub payouts: usize,
    /// Leave the stack running after the report (Ctrl-C stops it).
    #[arg(long)]
    pub keep: bool,
    /// Where the services log (default: a fresh directory under the system temp dir).
    #[arg(long)]
    pub logs: Option<PathBuf>,
}

/// How long the demo waits for every payout to end.
const SETTLE_DEADLINE: Duration = Duration::from_secs(300);

/// Runs the demo.
pub async fn run(options: &DemoOptions) -> anyhow::Result<()> {
    if options.payouts < 2 {
        bail!("--payouts must be at least 2");
    }
    let logs = options.logs.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("payout-demo-{}", std::process::id()))
    });
    println!(
        "Starting PostgreSQL and the stack (logs in {}) ...",
        logs.display()
    );
    let mut stack = Stack::start(StackOptions::default(), Some(logs)).await?;
    let ids = stack
        .create_payouts(&format!("demo-{}", std::process::id()), options.payouts)
        .await?;
    let frozen_payout = ids[ids.len() / 4];
    println!(
        "Created {} payouts. Executor A will freeze itself on payout {frozen_payout}.",
        ids.len()
    );
    stack
        .spawn_executor(
            "executor-a",
            &[("EXECUTOR_FAULT_SIGSTOP_PAYOUT", frozen_payout.to_string())],
            false,
        )
        .await?;
    stack.start_executor("executor-b", &[]).await?;

    let started = Instant::now();
    let bar = ProgressBar::new(ids.len() as u64);
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} payouts terminal  {msg}",
    )?);
    let a_pid = stack.executors[0].process.pid().as_raw();
    let mut resumed = false;
    loop {
        let mut done = 0;
        for id in &ids {
            done += usize::from(stack.payout(*id).await?.state.is_terminal());
        }
        bar.set_position(done as u64);
        let a_stopped = process_stopped(a_pid);
        bar.set_message(if a_stopped {
            "executor A is frozen (SIGSTOP)"
        } else {
            ""
        });
        if done == ids.len() {
            if a_stopped && !resumed {
                bar.println(format!("All terminal. Waking executor A: its stale submit for payout {frozen_payout} must be fenced."));
                stack.executors[0].process.signal(Signal::SIGCONT);
                resumed = true;
                continue;
            }
            if resumed || !a_stopped {
                break;
            }
        }
        if started.elapsed() > SETTLE_DEADLINE {
            bail!("payouts still open after {SETTLE_DEADLINE:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if resumed {
        wait_for_fenced(&stack).await?;
    }
    bar.finish();
    report(&stack, &ids, started.elapsed()).await?;
    if options.keep {
        println!("\nThe stack is up. Metrics:");
        for server in &stack.lock_servers {
            println!("  {} {}/metrics", server.process.describe(), server.url);
        }
        for (name, url) in [
            ("payment-resource", &stack.payment_url),
            ("rail-proxy", &stack.proxy_url),
            ("rail-stub", &stack.rail_url),
        ] {
            println!("  {name}: {url}/metrics");
        }
        for executor in &stack.executors {
            println!("  {}: {}/metrics", executor.name, executor.url);
        }
        println!("Press Ctrl-C to stop everything.");
        tokio::signal::ctrl_c().await?;
    }
    Ok(())
}

fn process_stopped(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

async fn wait_for_fenced(stack: &Stack) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let url = &stack.executors[0].url;
        if stack
            .metric(
                url,
                "payout_execute_seconds_count",
                &[("outcome", "fenced")],
            )
            .await
            .unwrap_or(0.0)
            >= 1.0
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("executor A's stale submit was not refused within 30 s")
}

/// The quantile `q` of a Prometheus histogram from its cumulative buckets (upper bound of the
/// bucket the quantile falls in).
pub fn histogram_quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    buckets
        .iter()
        .find(|(_, count)| *count >= total * q)
        .map(|(le, _)| *le)
}

async fn report(stack: &Stack, ids: &[i64], elapsed: Duration) -> anyhow::Result<()> {
    let mut by_state: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut max_submissions = 0;
    for id in ids {
        let payout = stack.payout(*id).await?;
        *by_state.entry(payout.state.as_str()).or_default() += 1;
        max_submissions = max_submissions.max(stack.rail_received(*id).await?.len());
    }
    let duplicates = stack
        .metric(&stack.proxy_url, "rail_duplicate_attempted_total", &[])
        .await?;
    let mut fenced = 0.0;
    let mut buckets: BTreeMap<String, f64> = BTreeMap::new();
    for executor in &stack.executors {
        fenced += stack
            .metric(
                &executor.url,
                "payout_execute_seconds_count",
                &[("outcome", "fenced")],
            )
            .await?;
        let text = reqwest::get(format!("{}/metrics", executor.url))
            .await?
            .text()
            .await?;
        for line in text.lines().filter(|l| {
            l.starts_with("payout_execute_seconds_bucket{") && l.contains("outcome=\"acked\"")
        }) {
            let le = line
                .split("le=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .context("bucket without le")?;
            let count: f64 = line
                .rsplit_once(' ')
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0.0);
            *buckets.entry(le.to_owned()).or_default() += count;
        }
    }
    let mut cumulative: Vec<(f64, f64)> = buckets
        .iter()
        .map(|(le, n)| (le.parse().unwrap_or(f64::INFINITY), *n))
        .collect();
    cumulative.sort_by(|a, b| a.0.total_cmp(&b.0));
    let ledger = stack.ledger().await?;
    println!("\n== Report ({:.1} s) ==", elapsed.as_secs_f64());
    for (state, count) in &by_state {
        println!("  {state:<15} {count}");
    }
    println!("  rail submissions per payout: max {max_submissions} (must be 1)");
    println!("  fenced attempts (stale tokens refused): {fenced}");
    println!("  submits refused before the rail (rail_duplicate_attempted_total): {duplicates}");
    let fmt = |q| {
        histogram_quantile(&cumulative, q)
            .map_or("n/a".to_owned(), |s| format!("<= {:.0} ms", s * 1000.0))
    };
    println!(
        "  payout latency (acked, histogram upper bounds): p50 {}, p99 {}",
        fmt(0.50),
        fmt(0.99)
    );
    println!(
        "  ledger: balances {:?}, postings {} for {} settled",
        ledger.balance_by_currency, ledger.postings, ledger.settled_payouts
    );
    if max_submissions > 1 {
        bail!("a payout reached the rail more than once");
    }
    println!("Nothing was paid twice.");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_cumulative_buckets() {
        let buckets = [
            (0.01, 50.0),
            (0.1, 99.0),
            (1.0, 100.0),
            (f64::INFINITY, 100.0),
        ];
        assert_eq!(histogram_quantile(&buckets, 0.5), Some(0.01));
        assert_eq!(histogram_quantile(&buckets, 0.99), Some(0.1));
        assert_eq!(histogram_quantile(&[], 0.5), None);
    }
}
