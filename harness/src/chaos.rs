//! `harness chaos`: a fault campaign on the real binaries. It starts the local
//! stack on a PostgreSQL cluster of its own (so it may restart and freeze it), at least four
//! executors, creates payouts while it runs, and drives a seeded nemesis: SIGSTOP/SIGCONT of
//! executors (0.1 to 3 × the lease), kill -9 and restart of a lock-server replica and of
//! rail-proxy, PostgreSQL fast restarts and stalls (SIGSTOP of every PostgreSQL process), and
//! scripted rail timeouts and rejections. When the nemesis stops, every payout must end
//! terminal within a bound; then the recorded history is checked (`history`) and drawn
//! (`timeline`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use indicatif::{ProgressBar, ProgressStyle};
use nix::sys::signal::Signal;
use payment_api::{Fault as RailFault, FaultKind, PayoutState};
use tokio::sync::Mutex;

use crate::history::{Fault, History, RailTransfer};
use crate::stack::{LogSource, Stack, StackOptions, pid_stopped};
use crate::timeline;

/// Every payout must be terminal this long after the nemesis stops (I7).
pub const LIVENESS_BOUND: Duration = Duration::from_secs(90);
/// The lease and session TTL of the campaign's executors: short, so pauses outlive it often.
const LEASE: &str = "2s";
const LEASE_MS: u64 = 2_000;
/// The lease in compose mode: its services run a 3 s hop budget, which needs ≥ 8.4 s.
const COMPOSE_LEASE_MS: u64 = 10_000;
/// Pauses last 0.1 to 3 × the lease.
const PAUSE_MIN_MS: u64 = LEASE_MS / 10;
const PAUSE_MAX_MS: u64 = 3 * LEASE_MS;
/// How often a batch of payouts is retried while the store restarts or stalls (~20 s).
const CREATE_RETRIES: u32 = 80;
/// How often the nemesis looks around (and continues self-stopped executors).
const NEMESIS_TICK: Duration = Duration::from_millis(150);
/// On average one pause of its own every this many ticks (about 0.6 s).
const NEMESIS_TICKS_PER_PAUSE: u32 = 4;
/// On average one scripted rail fault every this many ticks (about 9 s).
const NEMESIS_TICKS_PER_RAIL_FAULT: u32 = 60;
/// Probability an executor stops itself at a step of a payout (before its claim, and between
/// a guard and its submit or its post).
const SELF_STOP_RATE: f64 = 0.05;
/// A self-stopped executor is continued after 1.5 to 3 × the lease: it stopped between a
/// guard and its write, so it wakes a zombie whose grant expired and, most often, whose key
/// another executor took over meanwhile. Its write must be fenced.
const ZOMBIE_PAUSE_MIN_MS: u64 = LEASE_MS * 3 / 2;
/// Every rail transfer's delay (the rail timeout is 300 ms).
const RAIL_DELAY_MS: u64 = 200;
/// A store stall lasts up to 2 × the TTL.
const STALL_MAX_MS: u64 = 2 * LEASE_MS;

/// The faults the nemesis may inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FaultChoice {
    /// SIGSTOP/SIGCONT of executors.
    Pause,
    /// kill -9 of a lock-server replica, then a restart.
    ReplicaKill,
    /// PostgreSQL fast restart.
    StoreRestart,
    /// SIGSTOP of every PostgreSQL process, up to 2 × TTL.
    StoreStall,
    /// kill -9 of rail-proxy, then a restart.
    ProxyKill,
    /// Scripted rail timeouts and rejections.
    Rail,
    /// `docker network disconnect` of an executor container (compose mode only).
    Partition,
}

/// Options of `harness chaos`.
#[derive(Debug, Clone, clap::Args)]
pub struct ChaosOptions {
    /// How long the nemesis runs.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Payouts created over the run.
    #[arg(long, default_value_t = 200)]
    pub payouts: usize,
    /// Executor processes (at least 4).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(4..=32))]
    pub executors: u16,
    /// Seed of the nemesis schedule.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Which faults (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub faults: Vec<FaultChoice>,
    /// Where the services log and the pictures go (default: a fresh temp directory).
    #[arg(long)]
    pub logs: Option<PathBuf>,
    /// Fail unless at least this many pauses were injected.
    #[arg(long, default_value_t = 0)]
    pub expect_pauses: usize,
    /// Fail unless at least this many replica kills were injected.
    #[arg(long, default_value_t = 0)]
    pub expect_replica_kills: usize,
    /// Fail unless at least this many store restarts were injected.
    #[arg(long, default_value_t = 0)]
    pub expect_store_restarts: usize,
    /// Fail unless at least this many partitions were injected (compose mode).
    #[arg(long, default_value_t = 0)]
    pub expect_partitions: usize,
    /// Fail unless at least this many pauses began while the paused executor held a grant.
    #[arg(long, default_value_t = 1)]
    pub expect_pauses_holding: usize,
    /// Fail unless at least this many zombie writes were fenced: writes sent after a pause
    /// that outlived their grant, refused by the resource.
    #[arg(long, default_value_t = 1)]
    pub expect_zombies: usize,
    /// Fail unless the executors declared at least this many losses of a grant or session.
    #[arg(long, default_value_t = 1)]
    pub expect_losses: usize,
}

/// What a campaign did and found.
#[derive(Debug)]
pub struct ChaosReport {
    /// Faults by kind.
    pub faults: Vec<Fault>,
    /// Pauses that began while the paused executor held a grant.
    pub pauses_while_holding: usize,
    /// Stale writes refused after pauses that outlived their grant.
    pub stale_writes_fenced: usize,
    /// All fenced writes.
    pub fenced_writes: usize,
    /// Every write the executors logged.
    pub writes: usize,
    /// Losses of a grant or a session the executors declared.
    pub declared_losses: usize,
    /// Failovers the executors' SDKs logged.
    pub failovers: usize,
    /// Payouts by final state.
    pub by_state: Vec<(PayoutState, usize)>,
    /// Payouts the rail received more than once (must be 0).
    pub duplicates: usize,
    /// The whole run's picture.
    pub timeline: PathBuf,
    /// One picture per zombie episode.
    pub episodes: Vec<PathBuf>,
}

impl ChaosReport {
    /// Faults of `kind`.
    pub fn count(&self, kind: &str) -> usize {
        self.faults.iter().filter(|f| f.kind == kind).count()
    }
}

type Faults = Arc<Mutex<Vec<Fault>>>;

async fn record(faults: &Faults, kind: &'static str, target: String, start: DateTime<Utc>) {
    record_until(faults, kind, target, start, Utc::now()).await;
}

/// Records a fault that ended at `end` (for a pause: taken before the SIGCONT, so nothing the
/// continued process logs can seem to come before the pause's end).
async fn record_until(
    faults: &Faults,
    kind: &'static str,
    target: String,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) {
    faults.lock().await.push(Fault {
        kind,
        target,
        start,
        end,
    });
}

/// Runs a campaign and checks its history; `Err` on any violation.
pub async fn run(options: &ChaosOptions) -> anyhow::Result<ChaosReport> {
    let faults_on: Vec<FaultChoice> = if options.faults.is_empty() {
        vec![
            FaultChoice::Pause,
            FaultChoice::ReplicaKill,
            FaultChoice::StoreRestart,
            FaultChoice::StoreStall,
            FaultChoice::ProxyKill,
            FaultChoice::Rail,
            FaultChoice::Partition,
        ]
    } else {
        options.faults.clone()
    };
    let logs = options.logs.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("payout-chaos-{}", std::process::id()))
    });
    std::fs::create_dir_all(&logs)?;
    println!(
        "Starting the stack{} (logs in {}) ...",
        if crate::compose::selected() {
            " (compose)"
        } else {
            " on a PostgreSQL cluster of the campaign's own"
        },
        logs.display()
    );
    // Compose mode (`HARNESS_STACK=compose`), the short form: the compose stack's own
    // PostgreSQL and services (leases of 10 s, as its services' hop budget needs), executor
    // containers paused, self-stopped and cut off the network; no kills or store faults.
    let compose = crate::compose::selected();
    let lease_ms = if compose { COMPOSE_LEASE_MS } else { LEASE_MS };
    let (pause_min_ms, pause_max_ms) = if compose {
        (lease_ms / 10, lease_ms * 3 / 2)
    } else {
        (PAUSE_MIN_MS, PAUSE_MAX_MS)
    };
    let zombie_pause_min_ms = if compose {
        lease_ms * 11 / 10
    } else {
        ZOMBIE_PAUSE_MIN_MS
    };
    let (cluster, mut stack) = if compose {
        (None, Stack::start(StackOptions::default(), None).await?)
    } else {
        let cluster = tokio::task::spawn_blocking(|| {
            test_support::ThrowawayCluster::start(test_support::TEST_SETTINGS)
        })
        .await?
        .map_err(anyhow::Error::msg)?;
        let stack_options = StackOptions {
            session_ttl: LEASE,
            lease: LEASE,
            rail_timeout: "300ms",
            hop_budget: "500ms",
        };
        let url = cluster.url("postgres");
        let stack = Stack::start_on(stack_options, Some(logs.clone()), &url).await?;
        (Some(cluster), stack)
    };
    let local_only = [
        FaultChoice::ReplicaKill,
        FaultChoice::StoreRestart,
        FaultChoice::StoreStall,
        FaultChoice::ProxyKill,
    ];
    let faults_on: Vec<FaultChoice> = faults_on
        .into_iter()
        .filter(|f| {
            if compose {
                !local_only.contains(f)
            } else {
                *f != FaultChoice::Partition
            }
        })
        .collect();
    for i in 0..options.executors {
        // Executors also stop themselves at random steps of a payout (between a guard and
        // its write, too): the nemesis continues them after a pause of its choosing.
        let armed = [("EXECUTOR_FAULT_SIGSTOP_RATE", SELF_STOP_RATE.to_string())];
        stack
            .start_executor(&format!("executor-{i}"), &armed)
            .await?;
    }
    // Every transfer takes a while at the rail (below its hop timeout), so executors hold
    // their locks most of the time and pauses land while holding.
    stack
        .rail_fault(&RailFault {
            payout_id: None,
            fault: FaultKind::Delay {
                delay_ms: RAIL_DELAY_MS,
            },
        })
        .await?;
    // Executors are signalled by pid, never through the stack's lock (a create or a restart
    // may hold it for seconds while a process waits to be continued).
    let executor_pids: Vec<nix::unistd::Pid> =
        stack.executors.iter().map(|e| e.process.pid()).collect();
    // Where each executor logs, to see which payout a self-stop froze.
    let executor_logs: Vec<LogSource> = stack
        .executors
        .iter()
        .map(|e| e.process.log_source())
        .collect();
    let payouts_api = PayoutsApi::new(&stack);
    let stack = Arc::new(Mutex::new(stack));
    let cluster = cluster.map(Arc::new);
    let faults: Faults = Arc::new(Mutex::new(Vec::new()));
    let mut rng = fastrand::Rng::with_seed(options.seed);
    let started = Instant::now();
    let bar = ProgressBar::new(options.duration.as_secs());
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} s of faults  {msg}",
    )?);

    // Payouts arrive over the whole run.
    let creator = {
        let stack = stack.clone();
        let total = options.payouts;
        let duration = options.duration;
        tokio::spawn(async move {
            let batches = (duration.as_millis() / 250).max(1) as usize;
            let mut ids = Vec::with_capacity(total);
            for b in 0..batches {
                let want = total * (b + 1) / batches - ids.len();
                if want > 0 {
                    let prefix = format!("chaos-{b}");
                    // A store restart or stall may refuse a create: retry the batch (the
                    // idempotency keys make a retry return the payouts already created).
                    let mut tries = 0;
                    let created = loop {
                        match stack.lock().await.create_payouts(&prefix, want).await {
                            Ok(created) => break created,
                            Err(err) if tries < CREATE_RETRIES => {
                                tries += 1;
                                tokio::time::sleep(Duration::from_millis(250)).await;
                                let _ = err;
                            }
                            Err(err) => return Err(err),
                        }
                    };
                    ids.extend(created);
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            anyhow::Ok(ids)
        })
    };

    let mut tasks = Vec::new();
    let mut next_replica_kill = Duration::from_secs(3);
    let mut next_store_restart = Duration::from_secs(8);
    let mut next_store_stall = Duration::from_secs(14);
    let mut next_proxy_kill = Duration::from_secs(11);
    let mut next_partition = Duration::from_secs(3);
    let mut partitioned_until: Vec<Instant> = vec![started; usize::from(options.executors)];
    let mut paused_until: Vec<Instant> = vec![started; usize::from(options.executors)];
    while started.elapsed() < options.duration {
        let now = started.elapsed();
        bar.set_position(now.as_secs());
        bar.set_message(format!("{} faults", faults.lock().await.len()));
        if faults_on.contains(&FaultChoice::Pause) {
            // Executors that stopped themselves at a step: continue them after a pause.
            for (e, until) in paused_until.iter_mut().enumerate() {
                if *until > Instant::now() {
                    continue;
                }
                if !pid_stopped(executor_pids[e]) {
                    continue;
                }
                let pause = Duration::from_millis(rng.u64(zombie_pause_min_ms..=pause_max_ms));
                let longest = Duration::from_millis(pause_max_ms);
                *until = Instant::now() + longest + Duration::from_millis(200);
                let (pid, faults) = (executor_pids[e], faults.clone());
                let (log, api) = (executor_logs[e].clone(), payouts_api.clone());
                tasks.push(tokio::spawn(async move {
                    let start = Utc::now();
                    let began = Instant::now();
                    // Reading a log (a file, or `docker logs`) blocks: not on the nemesis loop.
                    let frozen =
                        tokio::task::spawn_blocking(move || last_self_stop(&log.read())).await?;
                    // A self-stop after its claim froze a holder between its guard and its
                    // write: wake it once another executor has claimed the payout over it (its
                    // write is then a zombie's, and must be fenced), or at the longest pause.
                    let fence_then = match frozen {
                        Some(id) => api.fence(id).await,
                        None => None,
                    };
                    tokio::time::sleep(pause.min(longest)).await;
                    if let (Some(id), Some(then)) = (frozen, fence_then) {
                        while began.elapsed() < longest {
                            if api.fence(id).await.is_some_and(|now| now > then) {
                                break;
                            }
                            tokio::time::sleep(TAKEOVER_POLL).await;
                        }
                    }
                    let end = Utc::now();
                    signal_all(&[pid.as_raw()], Signal::SIGCONT);
                    record_until(&faults, "pause", format!("executor-{e}"), start, end).await;
                    anyhow::Ok(())
                }));
            }
            let free: Vec<usize> = (0..paused_until.len())
                .filter(|i| paused_until[*i] <= Instant::now())
                .collect();
            // At most half the executors paused at once: the others must be free to take
            // over a paused holder's payouts, or no pause ever makes a zombie (and the run
            // does no work under faults).
            let paused = paused_until.len() - free.len();
            if paused < paused_until.len() / 2
                && !free.is_empty()
                && rng.u32(0..NEMESIS_TICKS_PER_PAUSE) == 0
            {
                let e = free[rng.usize(0..free.len())];
                let pause = Duration::from_millis(rng.u64(pause_min_ms..=pause_max_ms));
                paused_until[e] = Instant::now() + pause + Duration::from_millis(200);
                let (pid, faults) = (executor_pids[e], faults.clone());
                tasks.push(tokio::spawn(async move {
                    let name = format!("executor-{e}");
                    let start = Utc::now();
                    signal_all(&[pid.as_raw()], Signal::SIGSTOP);
                    tokio::time::sleep(pause).await;
                    let end = Utc::now();
                    signal_all(&[pid.as_raw()], Signal::SIGCONT);
                    record_until(&faults, "pause", name, start, end).await;
                    anyhow::Ok(())
                }));
            }
        }
        if faults_on.contains(&FaultChoice::ReplicaKill) && now >= next_replica_kill {
            next_replica_kill = now + Duration::from_millis(rng.u64(6_000..12_000));
            let r = rng.usize(0..2);
            let down = Duration::from_millis(rng.u64(1_000..3_000));
            let (stack, faults) = (stack.clone(), faults.clone());
            tasks.push(tokio::spawn(async move {
                let start = Utc::now();
                stack.lock().await.lock_servers[r]
                    .process
                    .signal(Signal::SIGKILL);
                tokio::time::sleep(down).await;
                let restarted = stack.lock().await.restart_lock_server(r).await;
                record(
                    &faults,
                    "replica-kill",
                    format!("lock-server-{}", r + 1),
                    start,
                )
                .await;
                restarted
            }));
        }
        if faults_on.contains(&FaultChoice::Partition) && now >= next_partition {
            next_partition = now + Duration::from_millis(rng.u64(3_000..6_000));
            let free: Vec<usize> = (0..partitioned_until.len())
                .filter(|i| partitioned_until[*i] <= Instant::now())
                .collect();
            if !free.is_empty() {
                let e = free[rng.usize(0..free.len())];
                let cut = Duration::from_millis(rng.u64(lease_ms / 10..=lease_ms * 3 / 2));
                partitioned_until[e] = Instant::now() + cut + Duration::from_secs(1);
                let (stack, faults) = (stack.clone(), faults.clone());
                tasks.push(tokio::spawn(async move {
                    let start = Utc::now();
                    stack.lock().await.partition_executor(e, true)?;
                    tokio::time::sleep(cut).await;
                    stack.lock().await.partition_executor(e, false)?;
                    record(&faults, "partition", format!("executor-{e}"), start).await;
                    anyhow::Ok(())
                }));
            }
        }
        if faults_on.contains(&FaultChoice::StoreRestart) && now >= next_store_restart {
            next_store_restart = now + Duration::from_millis(rng.u64(12_000..20_000));
            let start = Utc::now();
            let c = cluster
                .clone()
                .context("store faults need the campaign's own cluster")?;
            tokio::task::spawn_blocking(move || c.restart_fast())
                .await?
                .map_err(anyhow::Error::msg)?;
            record(&faults, "store-restart", "postgres".into(), start).await;
        }
        if faults_on.contains(&FaultChoice::StoreStall) && now >= next_store_stall {
            next_store_stall = now + Duration::from_millis(rng.u64(12_000..20_000));
            let stall = Duration::from_millis(rng.u64(300..=STALL_MAX_MS));
            let start = Utc::now();
            let pids = cluster.as_ref().map(|c| c.pids()).unwrap_or_default();
            signal_all(&pids, Signal::SIGSTOP);
            tokio::time::sleep(stall).await;
            signal_all(&pids, Signal::SIGCONT);
            record(&faults, "store-stall", "postgres".into(), start).await;
        }
        if faults_on.contains(&FaultChoice::ProxyKill) && now >= next_proxy_kill {
            next_proxy_kill = now + Duration::from_millis(rng.u64(12_000..20_000));
            let start = Utc::now();
            stack.lock().await.kill_service("rail-proxy")?;
            tokio::time::sleep(Duration::from_millis(rng.u64(500..1_500))).await;
            stack.lock().await.restart_service("rail-proxy").await?;
            record(&faults, "proxy-kill", "rail-proxy".into(), start).await;
        }
        if faults_on.contains(&FaultChoice::Rail) && rng.u32(0..NEMESIS_TICKS_PER_RAIL_FAULT) == 0 {
            // The next payouts to be created: a timeout or a rejection at the rail.
            let s = stack.lock().await;
            let next = s.last_payout_id().await.unwrap_or(0) + rng.i64(1..10);
            let fault = if rng.bool() {
                FaultKind::Timeout { hold_ms: 800 }
            } else {
                FaultKind::Reject {}
            };
            s.rail_fault(&RailFault {
                payout_id: Some(next),
                fault,
            })
            .await?;
            faults.lock().await.push(Fault {
                kind: "rail-fault",
                target: format!("payout {next}"),
                start: Utc::now(),
                end: Utc::now(),
            });
        }
        tokio::time::sleep(NEMESIS_TICK).await;
    }
    bar.finish_and_clear();
    for task in tasks {
        task.await??;
    }
    let ids = creator.await??;
    println!(
        "Nemesis stopped after {:.0} s; waiting for every payout to end (bound {LIVENESS_BOUND:?}) ...",
        started.elapsed().as_secs_f64()
    );
    // From here on, an executor that stops itself at a step is continued at once.
    let draining = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let continuer = {
        let (pids, draining) = (executor_pids.clone(), draining.clone());
        tokio::spawn(async move {
            while draining.load(std::sync::atomic::Ordering::SeqCst) {
                for pid in &pids {
                    if pid_stopped(*pid) {
                        signal_all(&[pid.as_raw()], Signal::SIGCONT);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let drained = async {
        let payouts = stack
            .lock()
            .await
            .wait_terminal(&ids, LIVENESS_BOUND)
            .await
            .context("I7: every payout terminal once the faults stopped")?;
        stack
            .lock()
            .await
            .all_ready()
            .await
            .context("a service did not recover")?;
        anyhow::Ok(payouts)
    }
    .await;
    draining.store(false, std::sync::atomic::Ordering::SeqCst);
    continuer.await?;
    let payouts = drained?;
    let stack = Arc::try_unwrap(stack)
        .map_err(|_| anyhow::anyhow!("a nemesis task still holds the stack"))?
        .into_inner();

    let mut rail = Vec::new();
    let mut duplicates = 0;
    for id in &ids {
        let received = stack.rail_received(*id).await?;
        duplicates += usize::from(received.len() > 1);
        rail.extend(received.iter().map(|r| RailTransfer {
            payout_id: *id,
            token: r.transfer.presented_token,
        }));
    }
    let ledger = stack.ledger().await?;
    if ledger.balance_by_currency.iter().any(|(_, sum)| *sum != 0)
        || ledger.postings != ledger.settled_payouts
        || ledger.payouts_with_extra_postings != 0
    {
        bail!("I6: the ledger does not balance: {ledger:?}");
    }
    let faults = faults.lock().await.clone();
    let history = History::read(
        &stack.lock_server_logs(),
        &stack.executor_logs(),
        rail,
        faults.clone(),
    )?;
    let refused = history.check()?;
    let pauses_while_holding = faults
        .iter()
        .filter(|f| f.kind == "pause")
        .filter(|f| {
            history
                .spans
                .values()
                .flatten()
                .any(|s| s.owner == f.target && s.granted_at <= f.start && f.start < s.ended_at)
        })
        .count();
    let run_end = Utc::now();
    let run_start = faults.iter().map(|f| f.start).min().unwrap_or(run_end);
    let timeline_path = logs.join("timeline.svg");
    std::fs::write(
        &timeline_path,
        timeline::render(&history, "chaos run", run_start, run_end, None),
    )?;
    let mut episodes = Vec::new();
    for (n, (write, start)) in timeline::episodes(&history, &refused)
        .into_iter()
        .enumerate()
    {
        let path = logs.join(format!("zombie-{n}-payout-{}.svg", write.payout_id));
        let from = start - chrono::Duration::milliseconds(500);
        let to = write.at + chrono::Duration::milliseconds(500);
        let key = format!("payout:{}", write.payout_id);
        let title = format!(
            "zombie: {} token {} on payout {}",
            write.executor, write.token, write.payout_id
        );
        std::fs::write(
            &path,
            timeline::render(&history, &title, from, to, Some(&key)),
        )?;
        episodes.push(path);
    }
    let mut by_state: Vec<(PayoutState, usize)> = Vec::new();
    for p in &payouts {
        match by_state.iter_mut().find(|(s, _)| *s == p.state) {
            Some((_, n)) => *n += 1,
            None => by_state.push((p.state, 1)),
        }
    }
    let report = ChaosReport {
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
    };
    print_report(&report, ids.len(), options.seed, started.elapsed());
    // A campaign that saw none of the events it checks proves nothing: each minimum is a
    // failure, never a quiet zero.
    let writes = report.writes;
    if writes < ids.len() {
        bail!(
            "the executors logged {writes} writes for {} payouts: the history went blind",
            ids.len()
        );
    }
    for (what, got, want) in [
        ("pauses", report.count("pause"), options.expect_pauses),
        (
            "pauses while holding a grant",
            report.pauses_while_holding,
            options.expect_pauses_holding,
        ),
        (
            "zombie writes fenced",
            report.stale_writes_fenced,
            options.expect_zombies,
        ),
        (
            "declared losses",
            report.declared_losses,
            options.expect_losses,
        ),
        (
            "replica kills",
            report.count("replica-kill"),
            options.expect_replica_kills,
        ),
        (
            "store restarts",
            report.count("store-restart"),
            options.expect_store_restarts,
        ),
        (
            "partitions",
            report.count("partition"),
            options.expect_partitions,
        ),
    ] {
        if got < want {
            bail!("the campaign saw {got} {what}, fewer than the {want} expected");
        }
    }
    drop(stack);
    drop(cluster);
    Ok(report)
}

/// How often a zombie's continuation looks whether its payout was taken over.
const TAKEOVER_POLL: Duration = Duration::from_millis(100);

/// The payout a self-stopped executor froze on, from its log's last `fault_point_sigstop`
/// line, when the stop came after its claim (between a guard and its write).
fn last_self_stop(log: &str) -> Option<i64> {
    let line = log
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["event"] == "fault_point_sigstop")?;
    (line["step"] != "Claim")
        .then(|| line["payout_id"].as_i64())
        .flatten()
}

/// Reads payouts without the stack's lock (a restart may hold it while an executor waits to
/// be continued).
#[derive(Debug, Clone)]
struct PayoutsApi {
    http: reqwest::Client,
    url: String,
}

impl PayoutsApi {
    fn new(stack: &Stack) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: stack.payment_url.clone(),
        }
    }

    /// The payout's fence, if it can be read now.
    async fn fence(&self, id: i64) -> Option<i64> {
        let payout: payment_api::Payout = self
            .http
            .get(format!("{}/v1/payouts/{id}", self.url))
            .timeout(TAKEOVER_POLL * 5)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        Some(payout.fence)
    }
}

fn signal_all(pids: &[i32], signal: Signal) {
    for pid in pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), signal);
    }
}

fn print_report(report: &ChaosReport, payouts: usize, seed: u64, elapsed: Duration) {
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
