//! `harness demo`: the whole stack as local processes, payouts driven through it by two
//! executors, one of them frozen mid-payout on purpose (SIGSTOP after its guard passed),
//! then a report of the zombie episode and of the run, proving nothing was paid twice. It
//! fails unless it shows exactly one fenced stale write.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;
use indicatif::{ProgressBar, ProgressStyle};
use nix::sys::signal::Signal;
use payment_api::{PayoutState, Received};

use crate::history::{Fault, History, RailTransfer};
use crate::stack::{Stack, StackOptions};
use crate::timeline;

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

/// The executor's writes, the `step` label of `payout_write_headroom_seconds` (C4).
const WRITE_STEPS: [&str; 3] = ["claim", "submit", "post"];
/// How long the demo waits for every payout to end.
const SETTLE_DEADLINE: Duration = Duration::from_secs(300);
/// How long executor A may take to reach its fault point and stop.
const FREEZE_DEADLINE: Duration = Duration::from_secs(60);
/// How long A's stale write may take to be refused once it is woken.
const FENCED_DEADLINE: Duration = Duration::from_secs(30);

/// The zombie episode, as observed.
#[derive(Debug)]
struct Episode {
    payout_id: i64,
    a_token: i64,
    b_token: i64,
    frozen_for: Duration,
    picture: PathBuf,
}

/// Draws the zombie episode (`timeline`): A's grant and pause, the declared loss, the
/// server's expiry, B's grant, A's fenced write.
async fn draw_zombie(
    stack: &Stack,
    payout_id: i64,
    frozen: chrono::DateTime<chrono::Utc>,
    woken: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<PathBuf> {
    let rail = stack
        .rail_received(payout_id)
        .await?
        .iter()
        .map(|r| RailTransfer {
            payout_id,
            token: r.transfer.presented_token,
        })
        .collect();
    let pause = Fault {
        kind: "pause",
        target: stack.executors[0].name.clone(),
        start: frozen,
        end: woken,
    };
    let history = History::read(
        &stack.lock_server_logs(),
        &stack.executor_logs(),
        rail,
        vec![pause],
    )?;
    let refused = history.check()?;
    let key = format!("payout:{payout_id}");
    let from = history
        .spans
        .get(&key)
        .and_then(|s| s.first())
        .map_or(frozen, |s| s.granted_at)
        - chrono::Duration::milliseconds(500);
    let to = chrono::Utc::now() + chrono::Duration::milliseconds(200);
    let path = stack.log_dir.join(format!("zombie-payout-{payout_id}.svg"));
    let title = format!("the demo's zombie: payout {payout_id}");
    let zombies: Vec<timeline::Zombie<'_>> = timeline::episodes(&history, &refused)
        .into_iter()
        .filter(|z| z.write.payout_id == payout_id)
        .collect();
    let view = timeline::View {
        title: &title,
        from,
        to,
        key: Some(&key),
        zombies: &zombies,
    };
    std::fs::write(&path, timeline::render(&history, &view))?;
    Ok(path)
}

/// Where the services log: `--logs`, or a fresh directory under the system temp dir.
fn log_dir(options: &DemoOptions) -> PathBuf {
    options
        .logs
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("payout-demo-{}", std::process::id())))
}

/// Polls until every payout of `ids` is terminal, showing progress on `bar`; an error past
/// the settle deadline (counted from `started`).
async fn wait_all_terminal(
    stack: &Stack,
    ids: &[i64],
    bar: &ProgressBar,
    started: Instant,
) -> anyhow::Result<()> {
    loop {
        let mut done = 0;
        for id in ids {
            done += usize::from(stack.payout(*id).await?.state.is_terminal());
        }
        bar.set_position(done as u64);
        if done == ids.len() {
            return Ok(());
        }
        if started.elapsed() > SETTLE_DEADLINE {
            bail!("payouts still open after {SETTLE_DEADLINE:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Prints where every service's metrics and logs are, for `--keep`.
fn print_endpoints(stack: &Stack) {
    println!("\nThe stack is up. Metrics:");
    for (i, server) in stack.lock_servers.iter().enumerate() {
        println!(
            "  lock-server-{}: {}/metrics (log: {})",
            i + 1,
            server.url,
            server.process.describe()
        );
    }
    for (name, url) in [
        ("payment-resource", &stack.payment_url),
        ("rail-proxy", &stack.proxy_url),
        ("rail-stub", &stack.rail_url),
    ] {
        println!("  {name}: {url}/metrics");
    }
    for executor in &stack.executors {
        println!(
            "  {}: {}/metrics (log: {})",
            executor.name,
            executor.url,
            executor.process.describe()
        );
    }
    println!("Logs: {}", stack.log_dir.display());
}

/// Runs the demo. Executor A starts alone on the first quarter of the payouts, armed to
/// freeze on one of them: with nobody else running it is certain to reach that payout, claim
/// it and stop (SIGSTOP) after its guard passes. Only then are the other payouts created and
/// executor B started, so B always finds the frozen payout held, waits out A's lease, and
/// settles it with a higher token. Once everything is terminal, A is woken: its stale submit
/// must be fenced, exactly once.
pub async fn run(options: &DemoOptions) -> anyhow::Result<()> {
    if options.payouts < 2 {
        bail!("--payouts must be at least 2");
    }
    let logs = log_dir(options);
    println!(
        "Starting PostgreSQL and the stack (logs in {}) ...",
        logs.display()
    );
    let mut stack = Stack::start(StackOptions::default(), Some(logs)).await?;
    let prefix = format!("demo-{}", std::process::id());
    let first = (options.payouts / 4).max(1);
    let mut ids = stack.create_payouts(&format!("{prefix}-a"), first).await?;
    let frozen_payout = ids[first - 1];
    println!(
        "Created {first} payouts. Executor A starts alone and will freeze itself on payout {frozen_payout}."
    );
    stack
        .spawn_executor(
            "executor-a",
            &[("EXECUTOR_FAULT_SIGSTOP_PAYOUT", frozen_payout.to_string())],
            false,
        )
        .await?;
    stack.executors[0]
        .process
        .wait_stopped("executor A to freeze at its fault point", FREEZE_DEADLINE)
        .await;
    let frozen_at = Instant::now();
    let frozen_wall = chrono::Utc::now();
    let claimed = stack.payout(frozen_payout).await?;
    if claimed.state != PayoutState::Claimed {
        bail!(
            "executor A froze, but payout {frozen_payout} is {:?}, not CLAIMED",
            claimed.state
        );
    }
    let a_token = claimed.fence;
    println!(
        "Executor A is frozen (SIGSTOP) holding payout {frozen_payout} with token {a_token}. Starting executor B."
    );
    ids.extend(
        stack
            .create_payouts(&format!("{prefix}-b"), options.payouts - first)
            .await?,
    );
    stack.start_executor("executor-b", &[]).await?;

    let started = Instant::now();
    let bar = ProgressBar::new(ids.len() as u64);
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} payouts terminal  {msg}",
    )?);
    bar.set_message("executor A is frozen (SIGSTOP)");
    wait_all_terminal(&stack, &ids, &bar, started).await?;
    let settled = stack.payout(frozen_payout).await?;
    bar.println(format!(
        "All terminal. Waking executor A: its stale submit for payout {frozen_payout} (token {a_token}) must be fenced."
    ));
    let frozen_for = frozen_at.elapsed();
    let woken_wall = chrono::Utc::now();
    stack.executors[0].process.signal(Signal::SIGCONT);
    bar.set_message("");
    wait_for_fenced(&stack).await?;
    bar.finish();
    let picture = draw_zombie(&stack, frozen_payout, frozen_wall, woken_wall).await?;
    let episode = Episode {
        payout_id: frozen_payout,
        a_token,
        b_token: settled.fence,
        frozen_for,
        picture,
    };
    report(&stack, &ids, &episode, started.elapsed()).await?;
    if options.keep {
        print_endpoints(&stack);
        println!("Press Ctrl-C to stop everything.");
        tokio::signal::ctrl_c().await?;
    }
    Ok(())
}

async fn wait_for_fenced(stack: &Stack) -> anyhow::Result<()> {
    let deadline = Instant::now() + FENCED_DEADLINE;
    while Instant::now() < deadline {
        let url = &stack.executors[0].url;
        // A is just waking: its /metrics may not answer for a moment.
        if let Ok(fenced) = stack
            .metric(
                url,
                "payout_execute_seconds_count",
                &[("outcome", "fenced")],
            )
            .await
            && fenced >= 1.0
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("executor A's stale submit was not refused within {FENCED_DEADLINE:?}")
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

/// Adds the cumulative buckets `more` into `into` (same `le`, counts summed), kept ascending.
fn add_buckets(into: &mut Vec<(f64, f64)>, more: Vec<(f64, f64)>) {
    for (le, count) in more {
        match into.iter_mut().find(|(l, _)| *l == le) {
            Some((_, n)) => *n += count,
            None => into.push((le, count)),
        }
    }
    into.sort_by(|a, b| a.0.total_cmp(&b.0));
}

/// How close `what` came to the grant's deadline, from a headroom histogram's cumulative
/// buckets: p01, p50 and the lowest bucket with a sample (upper bounds), and how many. Errs
/// when nothing was recorded: the demo's payouts pass guards, so an empty histogram means the
/// instrument is broken, not that there was room to spare.
fn headroom_line(what: &str, buckets: &[(f64, f64)]) -> anyhow::Result<String> {
    let total = buckets.last().map_or(0.0, |(_, n)| *n);
    let (Some(p01), Some(p50), Some((lowest, _))) = (
        histogram_quantile(buckets, 0.01),
        histogram_quantile(buckets, 0.50),
        buckets.iter().find(|(_, n)| *n > 0.0),
    ) else {
        bail!("{what}: no sample recorded");
    };
    let at_most = |s: f64| {
        if s.is_finite() {
            format!("<= {s} s")
        } else {
            let top = buckets.iter().rev().find(|(le, _)| le.is_finite());
            top.map_or("above every bucket".to_owned(), |(le, _)| {
                format!("> {le} s")
            })
        }
    };
    Ok(format!(
        "{what}: p01 {}, p50 {}, min {} over {total} (histogram upper bounds)",
        at_most(p01),
        at_most(p50),
        at_most(*lowest),
    ))
}

/// What the executors' `/metrics` say, summed over the executors.
struct ExecutorFigures {
    /// Stale writes refused by a fence.
    fenced: f64,
    /// The cumulative buckets of acked payouts' latency.
    latency: Vec<(f64, f64)>,
    /// One line per headroom histogram: the SDK's at every passed held-check, the executor's
    /// at every write.
    headroom: Vec<String>,
}

/// Reads every executor's `/metrics`; an error if a headroom histogram is empty.
async fn executor_figures(stack: &Stack) -> anyhow::Result<ExecutorFigures> {
    let mut fenced = 0.0;
    let mut cumulative: Vec<(f64, f64)> = Vec::new();
    // Headroom: the SDK's at every passed held-check, the executor's at every write.
    let mut checks: Vec<(f64, f64)> = Vec::new();
    let mut writes: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for executor in &stack.executors {
        let metrics = stack.metrics(&executor.url).await?;
        fenced += metrics.sum("payout_execute_seconds_count", &[("outcome", "fenced")])?;
        add_buckets(
            &mut cumulative,
            metrics.buckets("payout_execute_seconds", &[("outcome", "acked")])?,
        );
        add_buckets(
            &mut checks,
            metrics.buckets("lock_guard_headroom_seconds", &[])?,
        );
        for step in WRITE_STEPS {
            add_buckets(
                writes.entry(step).or_default(),
                metrics.buckets("payout_write_headroom_seconds", &[("step", step)])?,
            );
        }
    }
    let mut headroom = vec![headroom_line("guard headroom (held-checks)", &checks)?];
    for (step, buckets) in &writes {
        headroom.push(headroom_line(&format!("write headroom ({step})"), buckets)?);
    }
    Ok(ExecutorFigures {
        fenced,
        latency: cumulative,
        headroom,
    })
}

/// Prints the zombie episode: the tokens, the freeze, A's refused writes (`fenced_lines`),
/// what the rail saw of the payout (`zombie_rail`), and the run's fenced and duplicate counts.
fn print_zombie(
    episode: &Episode,
    fenced_lines: &[serde_json::Value],
    zombie_rail: &[Received],
    fenced: f64,
    duplicates: f64,
) {
    println!("\n== The zombie (payout {}) ==", episode.payout_id);
    println!(
        "  executor A's token:  {}  (claimed, passed its guard, then frozen)",
        episode.a_token
    );
    println!(
        "  A frozen for:        {:.1} s  (its lease ran out meanwhile)",
        episode.frozen_for.as_secs_f64()
    );
    println!(
        "  executor B's token:  {}  (took the payout over and settled it)",
        episode.b_token
    );
    for line in fenced_lines {
        println!(
            "  A's stale write:     {} with token {} -> refused: {}",
            line["step"].as_str().unwrap_or("?"),
            episode.a_token,
            line["error"].as_str().unwrap_or("?")
        );
    }
    println!(
        "  the rail saw it:     {} time(s), token {:?}",
        zombie_rail.len(),
        zombie_rail
            .iter()
            .map(|r| r.transfer.presented_token)
            .collect::<Vec<_>>()
    );
    println!("  fenced stale writes (all executors): {fenced}");
    println!("  rail_duplicate_attempted_total: {duplicates}");
    println!("  picture:             {}", episode.picture.display());
}

async fn report(
    stack: &Stack,
    ids: &[i64],
    episode: &Episode,
    elapsed: Duration,
) -> anyhow::Result<()> {
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
    let ExecutorFigures {
        fenced,
        latency: cumulative,
        headroom,
    } = executor_figures(stack).await?;
    let zombie_rail = stack.rail_received(episode.payout_id).await?;
    let fenced_lines: Vec<serde_json::Value> = stack.executors[0]
        .process
        .log()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["event"] == "fenced" && l["payout_id"] == episode.payout_id)
        .collect();
    let ledger = stack.ledger().await?;
    println!("\n== Report ({:.1} s) ==", elapsed.as_secs_f64());
    for (state, count) in &by_state {
        println!("  {state:<15} {count}");
    }
    println!("  rail submissions per payout: max {max_submissions} (must be 1)");
    let fmt = |q| {
        histogram_quantile(&cumulative, q)
            .map_or("n/a".to_owned(), |s| format!("<= {:.0} ms", s * 1000.0))
    };
    println!(
        "  payout latency (acked, histogram upper bounds): p50 {}, p99 {}",
        fmt(0.50),
        fmt(0.99)
    );
    for line in &headroom {
        println!("  {line}");
    }
    println!(
        "  ledger: balances {:?}, postings {} for {} settled",
        ledger.balance_by_currency, ledger.postings, ledger.settled_payouts
    );
    print_zombie(episode, &fenced_lines, &zombie_rail, fenced, duplicates);
    if max_submissions > 1 {
        bail!("a payout reached the rail more than once");
    }
    if episode.b_token <= episode.a_token {
        bail!(
            "B's token {} is not above A's {}",
            episode.b_token,
            episode.a_token
        );
    }
    if fenced != 1.0 || fenced_lines.len() != 1 || duplicates != 1.0 {
        bail!(
            "the demo must show exactly one fenced stale write: fenced {fenced}, A's fenced lines {}, rail_duplicate_attempted_total {duplicates}",
            fenced_lines.len()
        );
    }
    if zombie_rail.len() != 1 || zombie_rail[0].transfer.presented_token != episode.b_token {
        bail!("the rail must have seen the zombie's payout once, with B's token");
    }
    println!(
        "\nNothing was paid twice: A's stale write was fenced, B's was the only one the rail saw."
    );
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

    #[test]
    fn headroom_reads_quantiles_and_the_lowest_bucket_and_refuses_an_empty_histogram() {
        let mut buckets = Vec::new();
        add_buckets(
            &mut buckets,
            vec![(5.0, 60.0), (0.5, 3.0), (f64::INFINITY, 100.0)],
        );
        add_buckets(
            &mut buckets,
            vec![(0.5, 0.0), (5.0, 20.0), (f64::INFINITY, 100.0)],
        );
        assert_eq!(buckets, [(0.5, 3.0), (5.0, 80.0), (f64::INFINITY, 200.0)]);
        assert_eq!(
            headroom_line("h", &buckets).ok().as_deref(),
            Some("h: p01 <= 0.5 s, p50 > 5 s, min <= 0.5 s over 200 (histogram upper bounds)")
        );
        let empty = [(0.5, 0.0), (f64::INFINITY, 0.0)];
        assert!(
            headroom_line("h", &empty).is_err(),
            "no sample is no headroom"
        );
        assert!(headroom_line("h", &[]).is_err());
    }
}
