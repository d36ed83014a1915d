//! A campaign's set-up: which faults run, the timings that follow from the lease, the stack
//! (on a PostgreSQL cluster of the campaign's own, or the compose stack) and its executors.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use std::time::Duration;

use nix::unistd::Pid;
use payment_api::{Fault as RailFault, FaultKind};
use test_support::ThrowawayCluster;
use tokio::sync::Mutex;

use super::options::{ChaosOptions, FaultChoice};
use crate::stack::{LogSource, Stack, StackOptions};

/// The lease and session TTL of the campaign's executors: short, so pauses outlive it often.
const LEASE: &str = "2s";
const LEASE_MS: u64 = 2_000;
/// The lease in compose mode: its services run a 3 s hop budget, which needs ≥ 8.4 s.
const COMPOSE_LEASE_MS: u64 = 10_000;
/// Probability an executor stops itself at a step of a payout (before its claim, and between
/// a guard and its submit or its post).
const SELF_STOP_RATE: f64 = 0.05;
/// Every rail transfer's delay (the rail timeout is 300 ms).
const RAIL_DELAY_MS: u64 = 200;
/// Faults that need the campaign's own processes (not the compose stack's containers).
const LOCAL_ONLY: [FaultChoice; 4] = [
    FaultChoice::ReplicaKill,
    FaultChoice::StoreRestart,
    FaultChoice::StoreStall,
    FaultChoice::ProxyKill,
];

/// How long the nemesis's faults last, from the lease.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timings {
    /// The executors' lease.
    pub lease_ms: u64,
    /// Pauses last `pause_min_ms ..= pause_max_ms` (0.1 to 3 × the lease; 1.5 × in compose).
    pub pause_min_ms: u64,
    pub pause_max_ms: u64,
    /// A self-stopped executor is continued after at least this long: it stopped between a
    /// guard and its write, so it wakes a zombie whose grant expired and, most often, whose
    /// key another executor took over meanwhile. Its write must be fenced.
    pub zombie_pause_min_ms: u64,
    /// A store stall lasts up to this long (2 × the lease).
    pub stall_max_ms: u64,
}

impl Timings {
    fn new(compose: bool) -> Self {
        if compose {
            Self {
                lease_ms: COMPOSE_LEASE_MS,
                pause_min_ms: COMPOSE_LEASE_MS / 10,
                pause_max_ms: COMPOSE_LEASE_MS * 3 / 2,
                zombie_pause_min_ms: COMPOSE_LEASE_MS * 11 / 10,
                stall_max_ms: 2 * COMPOSE_LEASE_MS,
            }
        } else {
            Self {
                lease_ms: LEASE_MS,
                pause_min_ms: LEASE_MS / 10,
                pause_max_ms: 3 * LEASE_MS,
                zombie_pause_min_ms: LEASE_MS * 3 / 2,
                stall_max_ms: 2 * LEASE_MS,
            }
        }
    }
}

/// A running campaign's stack and what the nemesis needs to reach it.
pub(super) struct Campaign {
    /// Which faults the nemesis injects (those the stack's mode allows).
    pub faults_on: Vec<FaultChoice>,
    pub timings: Timings,
    /// Where the services log and the pictures go.
    pub logs: PathBuf,
    /// The campaign's own PostgreSQL cluster (`None` in compose mode).
    pub cluster: Option<Arc<ThrowawayCluster>>,
    pub stack: Arc<Mutex<Stack>>,
    /// Executors are signalled by pid, never through the stack's lock (a create or a restart
    /// may hold it for seconds while a process waits to be continued).
    pub executor_pids: Vec<Pid>,
    /// Where each executor logs, to see which payout a self-stop froze.
    pub executor_logs: Vec<LogSource>,
    pub payouts_api: PayoutsApi,
}

impl Campaign {
    /// Starts the stack and `options.executors` executors that stop themselves at random
    /// steps, and slows every rail transfer so that pauses land while holding.
    pub async fn start(options: &ChaosOptions) -> anyhow::Result<Self> {
        // Compose mode (`HARNESS_STACK=compose`), the short form: the compose stack's own
        // PostgreSQL and services, executor containers paused, self-stopped and cut off the
        // network; no kills or store faults.
        let compose = crate::compose::selected();
        let faults_on = faults_on(options, compose);
        let logs = options.logs.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("payout-chaos-{}", std::process::id()))
        });
        std::fs::create_dir_all(&logs)?;
        println!(
            "Starting the stack{} (logs in {}) ...",
            if compose {
                " (compose)"
            } else {
                " on a PostgreSQL cluster of the campaign's own"
            },
            logs.display()
        );
        let (cluster, mut stack) = if compose {
            (None, Stack::start(StackOptions::default(), None).await?)
        } else {
            let cluster = tokio::task::spawn_blocking(|| {
                ThrowawayCluster::start(test_support::TEST_SETTINGS)
            })
            .await?
            .map_err(anyhow::Error::msg)?;
            let stack_options = StackOptions {
                session_ttl: LEASE,
                lease: LEASE,
                rail_timeout: "300ms",
                hop_budget: "500ms",
                tls: false,
            };
            let url = cluster.url("postgres");
            let stack = Stack::start_on(stack_options, Some(logs.clone()), &url).await?;
            (Some(Arc::new(cluster)), stack)
        };
        for i in 0..options.executors {
            // Executors also stop themselves at random steps of a payout (between a guard
            // and its write, too): the nemesis continues them after a pause of its choosing.
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
        let executor_pids = stack.executors.iter().map(|e| e.process.pid()).collect();
        let executor_logs = stack
            .executors
            .iter()
            .map(|e| e.process.log_source())
            .collect();
        let payouts_api = PayoutsApi::new(&stack);
        Ok(Self {
            faults_on,
            timings: Timings::new(compose),
            logs,
            cluster,
            stack: Arc::new(Mutex::new(stack)),
            executor_pids,
            executor_logs,
            payouts_api,
        })
    }

    /// The stack back from the nemesis's tasks (all ended), with the cluster it runs on and
    /// the logs' directory.
    pub fn finish(self) -> anyhow::Result<(Stack, Option<Arc<ThrowawayCluster>>, PathBuf)> {
        let stack = Arc::try_unwrap(self.stack)
            .map_err(|_| anyhow::anyhow!("a nemesis task still holds the stack"))
            .context("finishing the campaign")?
            .into_inner();
        Ok((stack, self.cluster, self.logs))
    }
}

/// The faults asked for (all by default) that the stack's mode allows.
fn faults_on(options: &ChaosOptions, compose: bool) -> Vec<FaultChoice> {
    let asked = if options.faults.is_empty() {
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
    asked
        .into_iter()
        .filter(|f| {
            if compose {
                !LOCAL_ONLY.contains(f)
            } else {
                *f != FaultChoice::Partition
            }
        })
        .collect()
}

/// Reads payouts without the stack's lock (a restart may hold it while an executor waits to
/// be continued).
#[derive(Debug, Clone)]
pub(super) struct PayoutsApi {
    http: reqwest::Client,
    url: String,
    reader: String,
}

impl PayoutsApi {
    pub(super) fn new(stack: &Stack) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: stack.payment_url.clone(),
            reader: stack.secrets.reader.clone(),
        }
    }

    /// The payout's fence, if it can be read now.
    pub(super) async fn fence(&self, id: i64, timeout: Duration) -> Option<i64> {
        let payout: payment_api::Payout = self
            .http
            .get(format!("{}/v1/payouts/{id}", self.url))
            .bearer_auth(&self.reader)
            .timeout(timeout)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        Some(payout.fence)
    }
}
