//! What a campaign is asked (`ChaosOptions`, the faults it may inject) and what it reports.

use std::path::PathBuf;
use std::time::Duration;

use payment_api::PayoutState;

use crate::history::Fault;

/// Every payout must be terminal this long after the nemesis stops: nothing is lost.
pub const LIVENESS_BOUND: Duration = Duration::from_secs(90);

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
