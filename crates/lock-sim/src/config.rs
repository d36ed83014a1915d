//! What a run simulates: sizes, timings and the fault model, drawn from the seed within fixed
//! bounds, and the planted bugs (simulation-only switches that break one safety mechanism
//! each, so the checkers can be shown to catch them).

use crate::sched::MS;

/// The SDK's default safety margin (`lock.client.safety-margin`).
pub const SAFETY_MARGIN: f64 = 0.30;
/// The clock-rate drift the margin is meant to cover: a client whose clock runs slow by `d`
/// sees `lease × (1 − margin)` last `lease × (1 − margin) / (1 − d)` of true time, which stays
/// under the store's `lease` while `d < margin`. 0.25 keeps a fifth of the margin for luck.
pub const DRIFT_BOUND: f64 = 0.25;

/// Simulation-only switches, each breaking one mechanism the simulation models instead of
/// running, so that every checker is seen to fire by name: the mistakes a deployment can make
/// (running the SDK with no safety margin, a resource that never calls the fence, replicas
/// over databases of their own), one rule each of the modelled resource, proxy and executor
/// (I1, I5, I6, I7), and two of the modelled replica (it abandons nothing; it tells longer
/// leases than granted). A bug in the code the simulation runs (the SDK's core, the store,
/// `check_fence`, the gatherer, the wait plan, the clock guard) is planted in that code
/// instead (docs/simulation.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bugs {
    /// The SDK's safety margin is 0.
    pub zero_margin: bool,
    /// The resource ignores the fence.
    pub ignore_fence: bool,
    /// rail-proxy retries its rail call (it must call the rail once per reservation).
    pub rail_retry: bool,
    /// `RAIL_AMBIGUOUS` is not terminal: a new holder's claim reopens the payout and its
    /// submission (payment-resource keeps it terminal, submittable by no token).
    pub retry_ambiguous: bool,
    /// A post writes ledger rows whatever the outcome (payment-resource writes them only
    /// for a settled payout, in the post's transaction).
    pub ledger_on_reject: bool,
    /// The executor never posts a submitted payout's outcome.
    pub skip_post: bool,
    /// A replica never gives back what the store made for a request that ended unanswered
    /// (lock-server's `waiting::Exposure` abandons it).
    pub keep_abandoned: bool,
    /// Replicas that do not share one store (each pointed at a database of its own): each
    /// draws tokens of its own.
    pub split_store: bool,
    /// A replica tells clients four times the leases and session TTLs the store granted (and
    /// later expiries): a holder believes past the store's expiry while another is granted.
    pub tell_longer_lease: bool,
}

/// The names `--bug` takes.
pub const BUG_NAMES: [&str; 9] = [
    "zero-margin",
    "ignore-fence",
    "rail-retry",
    "retry-ambiguous",
    "ledger-on-reject",
    "skip-post",
    "keep-abandoned",
    "split-store",
    "tell-longer-lease",
];

impl Bugs {
    /// Parses one bug name (the CLI's `--bug`).
    pub fn with(mut self, name: &str) -> Result<Self, String> {
        let switch = match name {
            "zero-margin" => &mut self.zero_margin,
            "ignore-fence" => &mut self.ignore_fence,
            "rail-retry" => &mut self.rail_retry,
            "retry-ambiguous" => &mut self.retry_ambiguous,
            "ledger-on-reject" => &mut self.ledger_on_reject,
            "skip-post" => &mut self.skip_post,
            "keep-abandoned" => &mut self.keep_abandoned,
            "split-store" => &mut self.split_store,
            "tell-longer-lease" => &mut self.tell_longer_lease,
            other => {
                return Err(format!("unknown bug {other:?}: {}", BUG_NAMES.join(", ")));
            }
        };
        *switch = true;
        Ok(self)
    }
}

/// One run's parameters.
#[derive(Debug, Clone)]
pub struct Config {
    /// The seed: every random choice of the run comes from it.
    pub seed: u64,
    /// Workers.
    pub clients: usize,
    /// Lock-server replicas over the one store.
    pub replicas: usize,
    /// Payouts to settle.
    pub payouts: usize,
    /// Session TTL asked for.
    pub ttl_ms: u64,
    /// Lease asked for.
    pub lease_ms: u64,
    /// The executor's hop budget (worst-case submit).
    pub hop_ms: u64,
    /// A request without an answer after this is given up.
    pub request_timeout_ms: u64,
    /// Clock-rate drift: each client's rate is drawn from `[1 − drift, 1 + drift]`.
    pub drift: f64,
    /// Faults are injected in `[0, fault_until)`.
    pub fault_until_ms: u64,
    /// Every payout must be terminal this long after the faults stop: nothing is lost.
    pub liveness_ms: u64,
    /// Pauses per client, at most (each 0 to 3 × TTL).
    pub max_pauses: usize,
    /// Probability a message is lost (during faults).
    pub loss: f64,
    /// Probability a message is duplicated (during faults).
    pub duplicate: f64,
    /// Probability a message is delayed past the usual 1-20 ms (during faults).
    pub delay_spike: f64,
    /// Longest delay of a delayed message.
    pub max_delay_ms: u64,
    /// Probability that the nemesis pauses a worker between a guard (or its grant) and the
    /// write it allows (during faults), for up to 3 × TTL: the zombie's window.
    pub guard_pause: f64,
    /// Probability that a wake-up of a parked request is lost, and (again) that one is late
    /// (during faults): the recheck timer bounds what a lost one costs.
    pub wake_loss: f64,
    /// Steps of the store host's wall clock (the first two forward, the rest either way),
    /// each 0.5 to 3 × TTL: the store times leases by that clock (PostgreSQL's `now()`).
    pub clock_steps: usize,
    /// The replicas' `lock.default.lock-delay` (the SDK names none): after a grant ends
    /// involuntarily (expiry, revocation) no other session gets its key for this long.
    pub lock_delay_ms: u64,
    /// Share of jobs that take their payout's key together with an account's, as one key
    /// set (ADR 0007), granted all or nothing.
    pub set_share: f64,
    /// Accounts the key sets draw from: a small pool, so that sets contend on it.
    pub accounts: usize,
    /// Share of jobs that hold a share of a key instead of settling a payout (ADR 0007):
    /// half of them one of the pool key's permits, half the doc key as a reader (two in
    /// three) or as its writer.
    pub share_jobs: f64,
    /// The pool key's permit count, the same for every permit job of the run.
    pub permits: u32,
    /// Share of jobs that campaign in the election instead of settling a payout: acquire
    /// the election's key, proclaim and write as its leader, resign. A run with election
    /// jobs also has observers polling the election's leader.
    pub elect_jobs: f64,
    /// Observers polling the election's leader (none in a run without election jobs).
    pub observers: usize,
    /// Watchers following the store's events (C3 W1), each under a prefix of its own: 0, 1
    /// or 2 (a run without draws nothing for them).
    pub watchers: usize,
    /// How many events the store's watch log keeps (`None`: the store's default, 10,000): a
    /// short window lets a watcher cut off for a while fall behind its floor (a gap).
    pub events_kept: Option<usize>,
    /// Planted bugs.
    pub bugs: Bugs,
}

impl Config {
    /// The run of `seed`, with the fault model's intensities drawn from it and clock drift
    /// up to `drift`.
    pub fn for_seed(seed: u64, drift: f64, bugs: Bugs) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x005e_ed0f_c0f1);
        Self {
            seed,
            clients: rng.usize(2..=4),
            replicas: 2,
            payouts: rng.usize(4..=8),
            ttl_ms: 1_000,
            lease_ms: 1_000,
            hop_ms: 200,
            // Room for the SDK's loop to ask for waits of up to 350 ms (timeout − the 250 ms
            // reply margin).
            request_timeout_ms: 600,
            drift,
            fault_until_ms: rng.u64(3_000..=8_000),
            liveness_ms: 15_000,
            max_pauses: rng.usize(0..=2),
            loss: [0.0, 0.01, 0.05][rng.usize(0..3)],
            duplicate: [0.0, 0.01, 0.05][rng.usize(0..3)],
            delay_spike: [0.0, 0.02, 0.05][rng.usize(0..3)],
            max_delay_ms: 600,
            guard_pause: [0.0, 0.02, 0.05][rng.usize(0..3)],
            wake_loss: [0.0, 0.1, 0.5][rng.usize(0..3)],
            clock_steps: [0, 0, 2, 4][rng.usize(0..4)],
            lock_delay_ms: [0, 0, 250, 1_000][rng.usize(0..4)],
            // Drawn after the rest: the draws above stay what they were for every seed.
            set_share: [0.0, 0.3, 0.6][rng.usize(0..3)],
            accounts: rng.usize(1..=2),
            share_jobs: [0.0, 0.25, 0.5][rng.usize(0..3)],
            permits: rng.u32(2..=3),
            elect_jobs: [0.0, 0.2, 0.4][rng.usize(0..3)],
            observers: rng.usize(1..=2),
            watchers: rng.usize(0..=2),
            events_kept: [None, None, Some(24), Some(12)][rng.usize(0..4)],
            bugs,
        }
    }

    /// The SDK's safety margin in this run.
    pub fn margin(&self) -> f64 {
        if self.bugs.zero_margin {
            0.0
        } else {
            SAFETY_MARGIN
        }
    }

    /// The fault window in nanoseconds.
    pub fn fault_until(&self) -> u64 {
        self.fault_until_ms * MS
    }
}
