//! The nemesis: payouts arrive over the whole run while a seeded schedule pauses executors
//! (and continues those that stopped themselves), kills a replica or rail-proxy, restarts or
//! stalls PostgreSQL, cuts an executor off the network and scripts rail faults. Every fault
//! it injects is recorded with its start and end for the history's checks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Utc};
use indicatif::{ProgressBar, ProgressStyle};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use payment_api::{Fault as RailFault, FaultKind};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use super::options::{ChaosOptions, FaultChoice};
use super::setup::Campaign;
use crate::history::Fault;
use crate::stack::{Stack, pid_stopped};

/// How often a batch of payouts is retried while the store restarts or stalls (~20 s).
const CREATE_RETRIES: u32 = 80;
/// Payouts are created in batches this far apart.
const CREATE_EVERY: Duration = Duration::from_millis(250);
/// How often the nemesis looks around (and continues self-stopped executors).
const NEMESIS_TICK: Duration = Duration::from_millis(150);
/// On average one pause of its own every this many ticks (about 0.6 s).
const NEMESIS_TICKS_PER_PAUSE: u32 = 4;
/// On average one scripted rail fault every this many ticks (about 9 s).
const NEMESIS_TICKS_PER_RAIL_FAULT: u32 = 60;
/// How often a zombie's continuation looks whether its payout was taken over.
const TAKEOVER_POLL: Duration = Duration::from_millis(100);
/// A paused executor is not chosen again until this long after its pause ends.
const PAUSE_GAP: Duration = Duration::from_millis(200);

/// The faults recorded so far, shared with the tasks that end them.
type Faults = Arc<Mutex<Vec<Fault>>>;
/// A nemesis task: a fault that ends later.
type Task = JoinHandle<anyhow::Result<()>>;

/// Runs the nemesis for `options.duration` while payouts arrive; returns the payouts created
/// and every fault injected, once each fault has ended.
pub(super) async fn run(
    campaign: &Campaign,
    options: &ChaosOptions,
    started: Instant,
) -> anyhow::Result<(Vec<i64>, Vec<Fault>)> {
    let creator = create_payouts(campaign.stack.clone(), options.payouts, options.duration);
    let mut nemesis = Nemesis::new(campaign, options, started);
    let bar = ProgressBar::new(options.duration.as_secs());
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} s of faults  {msg}",
    )?);
    while started.elapsed() < options.duration {
        bar.set_position(started.elapsed().as_secs());
        bar.set_message(format!("{} faults", nemesis.faults.lock().await.len()));
        nemesis.tick().await?;
        tokio::time::sleep(NEMESIS_TICK).await;
    }
    bar.finish_and_clear();
    for task in nemesis.tasks {
        task.await??;
    }
    let ids = creator.await??;
    let faults = nemesis.faults.lock().await.clone();
    Ok((ids, faults))
}

/// Payouts arrive over the whole run, in batches; a store restart or stall may refuse a
/// create, so a batch is retried (the idempotency keys make a retry return the payouts
/// already created).
fn create_payouts(
    stack: Arc<Mutex<Stack>>,
    total: usize,
    duration: Duration,
) -> JoinHandle<anyhow::Result<Vec<i64>>> {
    tokio::spawn(async move {
        let batches = (duration.as_millis() / CREATE_EVERY.as_millis()).max(1) as usize;
        let mut ids = Vec::with_capacity(total);
        for b in 0..batches {
            let want = total * (b + 1) / batches - ids.len();
            if want > 0 {
                let prefix = format!("chaos-{b}");
                let mut tries = 0;
                let created = loop {
                    match stack.lock().await.create_payouts(&prefix, want).await {
                        Ok(created) => break created,
                        Err(_) if tries < CREATE_RETRIES => {
                            tries += 1;
                            tokio::time::sleep(CREATE_EVERY).await;
                        }
                        Err(err) => return Err(err),
                    }
                };
                ids.extend(created);
            }
            tokio::time::sleep(CREATE_EVERY).await;
        }
        Ok(ids)
    })
}

/// The nemesis's schedule and the faults it has running.
struct Nemesis<'a> {
    campaign: &'a Campaign,
    started: Instant,
    rng: fastrand::Rng,
    faults: Faults,
    tasks: Vec<Task>,
    next_replica_kill: Duration,
    next_store_restart: Duration,
    next_store_stall: Duration,
    next_proxy_kill: Duration,
    next_partition: Duration,
    /// Per executor: not paused (by the nemesis or itself) again before this instant.
    paused_until: Vec<Instant>,
    /// Per executor: not cut off again before this instant.
    partitioned_until: Vec<Instant>,
}

impl<'a> Nemesis<'a> {
    fn new(campaign: &'a Campaign, options: &ChaosOptions, started: Instant) -> Self {
        let executors = usize::from(options.executors);
        Self {
            campaign,
            started,
            rng: fastrand::Rng::with_seed(options.seed),
            faults: Arc::new(Mutex::new(Vec::new())),
            tasks: Vec::new(),
            next_replica_kill: Duration::from_secs(3),
            next_store_restart: Duration::from_secs(8),
            next_store_stall: Duration::from_secs(14),
            next_proxy_kill: Duration::from_secs(11),
            next_partition: Duration::from_secs(3),
            paused_until: vec![started; executors],
            partitioned_until: vec![started; executors],
        }
    }

    fn on(&self, fault: FaultChoice) -> bool {
        self.campaign.faults_on.contains(&fault)
    }

    /// One look around: each fault that is due is injected (or its task started).
    async fn tick(&mut self) -> anyhow::Result<()> {
        let now = self.started.elapsed();
        if self.on(FaultChoice::Pause) {
            self.continue_self_stopped();
            self.pause_one();
        }
        if self.on(FaultChoice::ReplicaKill) && now >= self.next_replica_kill {
            self.next_replica_kill = now + Duration::from_millis(self.rng.u64(6_000..12_000));
            self.kill_replica();
        }
        if self.on(FaultChoice::Partition) && now >= self.next_partition {
            self.next_partition = now + Duration::from_millis(self.rng.u64(3_000..6_000));
            self.partition_one();
        }
        if self.on(FaultChoice::StoreRestart) && now >= self.next_store_restart {
            self.next_store_restart = now + Duration::from_millis(self.rng.u64(12_000..20_000));
            self.restart_store().await?;
        }
        if self.on(FaultChoice::StoreStall) && now >= self.next_store_stall {
            self.next_store_stall = now + Duration::from_millis(self.rng.u64(12_000..20_000));
            self.stall_store().await;
        }
        if self.on(FaultChoice::ProxyKill) && now >= self.next_proxy_kill {
            self.next_proxy_kill = now + Duration::from_millis(self.rng.u64(12_000..20_000));
            self.kill_proxy().await?;
        }
        if self.on(FaultChoice::Rail) && self.rng.u32(0..NEMESIS_TICKS_PER_RAIL_FAULT) == 0 {
            self.script_rail_fault().await?;
        }
        Ok(())
    }

    /// Executors that stopped themselves at a step: continue them after a pause. A self-stop
    /// after its claim froze a holder between its guard and its write: wake it once another
    /// executor has claimed the payout over it (its write is then a zombie's, and must be
    /// fenced), or at the longest pause.
    fn continue_self_stopped(&mut self) {
        let timings = self.campaign.timings;
        for e in 0..self.paused_until.len() {
            let pid = self.campaign.executor_pids[e];
            if self.paused_until[e] > Instant::now() || !pid_stopped(pid) {
                continue;
            }
            let pause = Duration::from_millis(
                self.rng
                    .u64(timings.zombie_pause_min_ms..=timings.pause_max_ms),
            );
            let longest = Duration::from_millis(timings.pause_max_ms);
            self.paused_until[e] = Instant::now() + longest + PAUSE_GAP;
            let faults = self.faults.clone();
            let log = self.campaign.executor_logs[e].clone();
            let api = self.campaign.payouts_api.clone();
            self.tasks.push(tokio::spawn(async move {
                let start = Utc::now();
                let began = Instant::now();
                // Reading a log (a file, or `docker logs`) blocks: not on the nemesis loop.
                let frozen =
                    tokio::task::spawn_blocking(move || last_self_stop(&log.read())).await?;
                let fence_then = match frozen {
                    Some(id) => api.fence(id, TAKEOVER_POLL * 5).await,
                    None => None,
                };
                tokio::time::sleep(pause.min(longest)).await;
                if let (Some(id), Some(then)) = (frozen, fence_then) {
                    while began.elapsed() < longest {
                        if api
                            .fence(id, TAKEOVER_POLL * 5)
                            .await
                            .is_some_and(|now| now > then)
                        {
                            break;
                        }
                        tokio::time::sleep(TAKEOVER_POLL).await;
                    }
                }
                let end = Utc::now();
                signal_all(&[pid.as_raw()], Signal::SIGCONT);
                record_until(&faults, "pause", format!("executor-{e}"), start, end).await;
                Ok(())
            }));
        }
    }

    /// Now and then a pause of the nemesis's own choosing, of an executor not paused. At most
    /// half the executors are paused at once: the others must be free to take over a paused
    /// holder's payouts, or no pause ever makes a zombie (and the run does no work under
    /// faults).
    fn pause_one(&mut self) {
        let free: Vec<usize> = (0..self.paused_until.len())
            .filter(|i| self.paused_until[*i] <= Instant::now())
            .collect();
        let paused = self.paused_until.len() - free.len();
        if paused >= self.paused_until.len() / 2
            || free.is_empty()
            || self.rng.u32(0..NEMESIS_TICKS_PER_PAUSE) != 0
        {
            return;
        }
        let timings = self.campaign.timings;
        let e = free[self.rng.usize(0..free.len())];
        let pause =
            Duration::from_millis(self.rng.u64(timings.pause_min_ms..=timings.pause_max_ms));
        self.paused_until[e] = Instant::now() + pause + PAUSE_GAP;
        let (pid, faults) = (self.campaign.executor_pids[e], self.faults.clone());
        self.tasks.push(tokio::spawn(async move {
            let start = Utc::now();
            signal_all(&[pid.as_raw()], Signal::SIGSTOP);
            tokio::time::sleep(pause).await;
            let end = Utc::now();
            signal_all(&[pid.as_raw()], Signal::SIGCONT);
            record_until(&faults, "pause", format!("executor-{e}"), start, end).await;
            Ok(())
        }));
    }

    /// kill -9 of a lock-server replica, restarted 1 to 3 s later.
    fn kill_replica(&mut self) {
        let r = self.rng.usize(0..2);
        let down = Duration::from_millis(self.rng.u64(1_000..3_000));
        let (stack, faults) = (self.campaign.stack.clone(), self.faults.clone());
        self.tasks.push(tokio::spawn(async move {
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

    /// An executor container cut off the network for 0.1 to 1.5 × the lease (compose).
    fn partition_one(&mut self) {
        let free: Vec<usize> = (0..self.partitioned_until.len())
            .filter(|i| self.partitioned_until[*i] <= Instant::now())
            .collect();
        if free.is_empty() {
            return;
        }
        let lease_ms = self.campaign.timings.lease_ms;
        let e = free[self.rng.usize(0..free.len())];
        let cut = Duration::from_millis(self.rng.u64(lease_ms / 10..=lease_ms * 3 / 2));
        self.partitioned_until[e] = Instant::now() + cut + Duration::from_secs(1);
        let (stack, faults) = (self.campaign.stack.clone(), self.faults.clone());
        self.tasks.push(tokio::spawn(async move {
            let start = Utc::now();
            stack.lock().await.partition_executor(e, true)?;
            tokio::time::sleep(cut).await;
            stack.lock().await.partition_executor(e, false)?;
            record(&faults, "partition", format!("executor-{e}"), start).await;
            Ok(())
        }));
    }

    /// A fast restart of the campaign's PostgreSQL.
    async fn restart_store(&mut self) -> anyhow::Result<()> {
        let start = Utc::now();
        let cluster = self
            .campaign
            .cluster
            .clone()
            .context("store faults need the campaign's own cluster")?;
        tokio::task::spawn_blocking(move || cluster.restart_fast())
            .await?
            .map_err(anyhow::Error::msg)?;
        record(&self.faults, "store-restart", "postgres".into(), start).await;
        Ok(())
    }

    /// SIGSTOP of every PostgreSQL process, up to 2 × the lease.
    async fn stall_store(&mut self) {
        let stall = Duration::from_millis(self.rng.u64(300..=self.campaign.timings.stall_max_ms));
        let start = Utc::now();
        let pids = self
            .campaign
            .cluster
            .as_ref()
            .map(|c| c.pids())
            .unwrap_or_default();
        signal_all(&pids, Signal::SIGSTOP);
        tokio::time::sleep(stall).await;
        signal_all(&pids, Signal::SIGCONT);
        record(&self.faults, "store-stall", "postgres".into(), start).await;
    }

    /// kill -9 of rail-proxy, restarted 0.5 to 1.5 s later.
    async fn kill_proxy(&mut self) -> anyhow::Result<()> {
        let start = Utc::now();
        let stack = &self.campaign.stack;
        stack.lock().await.kill_service("rail-proxy")?;
        tokio::time::sleep(Duration::from_millis(self.rng.u64(500..1_500))).await;
        stack.lock().await.restart_service("rail-proxy").await?;
        record(&self.faults, "proxy-kill", "rail-proxy".into(), start).await;
        Ok(())
    }

    /// A timeout or a rejection at the rail for one of the next payouts to be created.
    async fn script_rail_fault(&mut self) -> anyhow::Result<()> {
        let stack = self.campaign.stack.lock().await;
        let next = stack.last_payout_id().await.unwrap_or(0) + self.rng.i64(1..10);
        let fault = if self.rng.bool() {
            FaultKind::Timeout { hold_ms: 800 }
        } else {
            FaultKind::Reject {}
        };
        stack
            .rail_fault(&RailFault {
                payout_id: Some(next),
                fault,
            })
            .await?;
        let now = Utc::now();
        record_until(
            &self.faults,
            "rail-fault",
            format!("payout {next}"),
            now,
            now,
        )
        .await;
        Ok(())
    }
}

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

/// Continues every executor that stops itself from now on (the drain after the nemesis),
/// until `done` is set.
pub(super) fn continue_stopped_until(
    pids: Vec<Pid>,
    done: Arc<std::sync::atomic::AtomicBool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            for pid in &pids {
                if pid_stopped(*pid) {
                    signal_all(&[pid.as_raw()], Signal::SIGCONT);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

fn signal_all(pids: &[i32], signal: Signal) {
    for pid in pids {
        let _ = nix::sys::signal::kill(Pid::from_raw(*pid), signal);
    }
}
