//! Deterministic simulation of the SDK, the lock store and the fenced resource.
//!
//! Each seed is one single-threaded, discrete-event run in virtual time of: N clients, each
//! the SDK's real sans-IO core (`lock_core`: the session core and the acquire loop)
//! running the executor's protocol (acquire → claim → guard → remaining covers the hop →
//! submit → guard → post → release, with a scheduling point between every guard and its
//! write); two lock-server replicas over lock-store's `MemoryStore` on virtual time; the
//! fenced resource with fence-kit's `check_fence` (the function payment-resource runs) and a
//! rail that records every transfer. A nemesis delays, loses, duplicates and reorders
//! messages, partitions parties, pauses clients (0-3 × TTL, some aimed between a guard and its
//! write), crashes replicas, opens store `NOT_LEADER` windows, revokes grants and skews each
//! client's clock rate. Some jobs take their payout's key together with an account's as one key
//! set (ADR 0007), through the store's `acquire_set`; others hold a share of a key instead of
//! settling a payout (ADR 0007): one of a semaphore key's permits, or a read/write key as a
//! reader or as its writer, each through the store's acquire with its claim and the SDK core's
//! registration, renewal, guard, loss and release. Checkers run after every event (every
//! invariant of the domain contract, an accepted superseded write, and exclusion of the
//! clients' beliefs in true time: mutual exclusion of locks, a semaphore's bound, readers
//! beside no writer), after every grant (tokens rise per key; a writer's token is above every
//! reader's before it), after every set's store call (a set is never partly held) and after
//! every permit's (the store holds no more permits than the key has). Some jobs campaign in
//! an election instead (C2 §2.4c): they acquire its key, proclaim and write while the core
//! says they lead, and resign; observers poll its leader through the replicas with the SDK
//! observer's rule ([`observe`]), and checkers hold the election to one leader by belief,
//! terms that never go backwards at an observer, values shown only under the term that
//! proclaimed them, and proclaims accepted only from the live term. Watchers (C3 W1) follow
//! the store's events under a prefix, reading pages through the replicas with the lock-server
//! watch reader's rule ([`watch`]), reconnecting and resuming after their position; a checker
//! holds what each was sent to the store's whole log (every event under its prefix, in order,
//! once, or a gap over events the store forgot), each watcher to catching up once the faults
//! stop, and the log to the store's grants. `docs/simulation.md` says what is production code
//! and what is a model.
//!
//! Map: [`sched`] (time, queue), [`config`] (fault model, planted deployment mistakes),
//! [`service`] (replicas over the store; the lock surface's calls in `service/calls.rs`, key
//! sets in `service/sets.rs`, permits read back in `service/shares.rs`, the election's calls
//! in `service/elections.rs`, a watcher's reads in `service/watch.rs`), [`bank`] (resource,
//! rail and the election's register), [`observe`] (the SDK observer's rule), [`watch`] (the
//! lock-server watch reader's rule), [`world`] (the run: one file each for the clients'
//! protocol, their key sets, their share jobs, their election jobs, the observers, the
//! watchers, the network, the nemesis, the service nodes, their key sets, their shares' store
//! calls, the election's calls and the checkers), [`check`] (violations, coverage).

pub mod bank;
pub mod check;
pub mod config;
pub mod observe;
pub mod sched;
pub mod service;
pub mod watch;
pub mod world;

pub use check::{Coverage, MUST_REACH, Violation};
pub use config::{BUG_NAMES, Bugs, Config, DRIFT_BOUND, SAFETY_MARGIN};
pub use world::{RunReport, World};

/// Runs one seed.
pub fn run_seed(seed: u64, drift: f64, bugs: Bugs, trace: bool) -> RunReport {
    World::new(Config::for_seed(seed, drift, bugs), trace).run()
}

/// The result of many seeds.
#[derive(Debug, Default)]
pub struct Summary {
    /// How many seeds failed, by the invariant each failed first, and the first such seed.
    pub failed_by: std::collections::BTreeMap<&'static str, (u64, u64)>,
    /// Seeds run.
    pub seeds: u64,
    /// Events processed over all seeds.
    pub events: u64,
    /// Coverage summed over all seeds.
    pub coverage: Coverage,
    /// The first failing seed and its violation.
    pub first_failure: Option<(u64, Violation)>,
    /// How many seeds failed.
    pub failures: u64,
}

/// Runs `count` seeds from `first`, calling `progress` after each.
pub fn run_seeds(
    first: u64,
    count: u64,
    drift: f64,
    bugs: Bugs,
    mut progress: impl FnMut(u64),
) -> Summary {
    let mut summary = Summary::default();
    for seed in first..first + count {
        let report = run_seed(seed, drift, bugs, false);
        summary.seeds += 1;
        summary.events += report.events;
        summary.coverage.add(&report.coverage);
        if let Some(v) = report.violation {
            summary.failures += 1;
            summary.failed_by.entry(v.invariant).or_insert((0, seed)).0 += 1;
            if summary.first_failure.is_none() {
                summary.first_failure = Some((seed, v));
            }
        }
        progress(seed);
    }
    summary
}
