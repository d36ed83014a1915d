//! The simulation's own evidence: runs replay byte for byte, the checkers catch each planted
//! mistake within 100 seeds by the invariant it breaks (every `--bug` switch; I1, I2, I4, I5,
//! I6, I7, mutual exclusion (or a semaphore's bound, or reader/writer exclusion) and the
//! orphan check each fire by name), drift beyond the bound the margin covers breaks I4, and
//! at the bound every invariant holds.
#![allow(clippy::unwrap_used)]

use lock_sim::{BUG_NAMES, Bugs, Config, DRIFT_BOUND, RunReport, World, run_seed, run_seeds};

/// Seeds a planted bug must be caught within.
const CATCH_WITHIN: u64 = 100;

/// Seed `seed` with no key sets, no share jobs, no election and no watchers (its other draws
/// are the seed's own): the run it was before jobs took key sets, so a seed kept for what
/// happened in it still shows it.
fn run_without_sets(seed: u64) -> RunReport {
    let cfg = Config {
        set_share: 0.0,
        share_jobs: 0.0,
        elect_jobs: 0.0,
        watchers: 0,
        ..Config::for_seed(seed, DRIFT_BOUND, Bugs::default())
    };
    World::new(cfg, true).run()
}

#[test]
fn a_seed_replays_to_a_byte_identical_trace() {
    let first = run_seed(42, DRIFT_BOUND, Bugs::default(), true);
    let second = run_seed(42, DRIFT_BOUND, Bugs::default(), true);
    assert!(first.trace.contains("Acquire") && first.trace.contains("bank"));
    assert!(
        first.trace.contains("AcquireSet"),
        "seed 42 takes key sets too"
    );
    assert!(
        first.trace.contains("claim: Permit") && first.trace.contains("claim: Shared"),
        "and holds permits and readers' shares"
    );
    assert!(
        first.trace.contains("Proclaim") && first.trace.contains("o0 yields"),
        "and campaigns in the election, observed"
    );
    assert_eq!(first.trace, second.trace);
    assert_eq!(first.events, second.events);
    let other = run_seed(43, DRIFT_BOUND, Bugs::default(), true);
    assert_ne!(first.trace, other.trace, "another seed is another run");
}

/// A seed whose reaper frees several keys at once: the order the store hands them over in
/// must not depend on a hash map's per-process order (it did, and this seed's schedule
/// varied from one run to the next). Each replay builds the store anew, so each map gets new
/// hash keys: eight replays that agree leave little room for a map order to hide in.
#[test]
fn a_seed_whose_reaper_frees_several_keys_replays_the_same() {
    const SEED: u64 = 8905;
    let first = run_without_sets(SEED);
    for _ in 0..8 {
        let again = run_without_sets(SEED);
        assert_eq!(again.events, first.events);
        assert_eq!(again.trace, first.trace);
    }
}

#[test]
fn each_planted_mistake_is_caught_within_100_seeds_by_the_invariant_it_breaks() {
    let planted = [
        // No margin: the client's deadline can lie after the store's expiry, and two
        // clients can then each believe they hold a key.
        (
            "zero-margin",
            &["I4 conservative expiry", "mutual exclusion"][..],
        ),
        // A resource that never calls the fence accepts a superseded holder's write (and
        // may lower the fence), whatever one submission per payout stops later.
        (
            "ignore-fence",
            &["I2 no superseded write accepted", "I2 fences only rise"][..],
        ),
        // rail-proxy calling the rail twice for one reservation: a payout paid twice.
        ("rail-retry", &["I1 at most once at the rail"][..]),
        // An ambiguous payout reopened by the next holder's claim: a second transfer of a
        // payout the bank may have paid.
        ("retry-ambiguous", &["I5 ambiguity is terminal"][..]),
        // Ledger rows for a payout the rail refused.
        ("ledger-on-reject", &["I6 the ledger balances"][..]),
        // Submitted payouts never posted: nothing ends them.
        (
            "skip-post",
            &["I7 every payout terminal once faults heal"][..],
        ),
        // A replica that leaves what the store made for an abandoned request: the grant
        // outlives its request, unknown to everyone, until its lease ends.
        ("keep-abandoned", &["no orphan grant"][..]),
        // Replicas over databases of their own: the same token drawn twice for one key, or a
        // watcher reading one replica's log, not the store's.
        (
            "split-store",
            &[
                "I3 tokens unique per key",
                "watchers see every event in order or are told of a gap",
                "a watcher catches up once the faults heal",
            ][..],
        ),
        // A replica telling a longer lease than the store granted: its holder believes past
        // the store's expiry while the next holder is granted (a lock's, a permit's slot, a
        // writer's key beside readers).
        (
            "tell-longer-lease",
            &[
                "mutual exclusion",
                "semaphore bound",
                "reader/writer exclusion",
            ][..],
        ),
    ];
    let named: Vec<&str> = planted.iter().map(|(name, _)| *name).collect();
    assert_eq!(named, BUG_NAMES, "every switch is shown caught");
    for (name, invariants) in planted {
        let bugs = Bugs::default().with(name).unwrap();
        let summary = run_seeds(0, CATCH_WITHIN, DRIFT_BOUND, bugs, |_| {});
        let (seed, violation) = summary
            .first_failure
            .unwrap_or_else(|| panic!("planted bug {name} not caught in {CATCH_WITHIN} seeds"));
        eprintln!("{name}: caught at seed {seed}: {}", violation.invariant);
        assert!(
            invariants.contains(&violation.invariant),
            "{name} must break one of {invariants:?}: {violation}"
        );
        assert!(!violation.detail.is_empty());
    }
}

#[test]
fn a_failing_seed_names_the_invariant_and_the_last_events_of_the_parties() {
    let bugs = Bugs::default().with("ignore-fence").unwrap();
    let summary = run_seeds(0, CATCH_WITHIN, DRIFT_BOUND, bugs, |_| {});
    let (seed, violation) = summary.first_failure.unwrap();
    assert!(violation.invariant.starts_with("I2"), "{violation}");
    assert!(violation.recent.contains("bank"), "{violation}");
    let replay = run_seed(seed, DRIFT_BOUND, bugs, false);
    assert_eq!(
        replay.violation,
        Some(violation),
        "the seed replays to the same failure"
    );
}

#[test]
fn drift_beyond_the_bound_the_margin_covers_breaks_conservative_expiry() {
    let summary = run_seeds(0, CATCH_WITHIN, 0.45, Bugs::default(), |_| {});
    let (_, violation) = summary.first_failure.unwrap();
    assert!(violation.invariant.starts_with("I4"), "{violation}");
}

#[test]
fn at_the_drift_bound_every_invariant_holds() {
    let summary = run_seeds(0, 300, DRIFT_BOUND, Bugs::default(), |_| {});
    if let Some((seed, violation)) = summary.first_failure {
        panic!("seed {seed}: {violation}");
    }
    let seen = |what: &str| summary.coverage.0.get(what).copied().unwrap_or(0);
    assert!(seen("a stale write fenced") > 0);
    // The store's clock steps forward in these seeds and lock-server's guard withholds the
    // grants that would have made a second holder: exclusion held above because of it.
    assert!(seen("fault: store clock stepped forward") > 0);
    assert!(
        seen("a grant withheld: the store's clock stepped") > 0,
        "{:?}",
        summary.coverage
    );
    // Key sets ran through the store's `acquire_set`, refused and granted whole, some after
    // waiting, and "a set is never partly held" held above after each call.
    // Shares ran through the store's readers and permits: permits beside each other and
    // refused when the pool was full, readers beside readers, writers after them, each kind
    // waiting for the other, and the belief checkers held above.
    for what in [
        "a key set granted",
        "a key set refused",
        "a waiting key set granted after parking",
        "two permits held at once",
        "a permit refused: every permit held",
        "a reader granted beside a reader",
        "a writer granted after readers",
        "a writer waited for readers",
        "a reader waited for a writer",
        // Elections ran, leadership changed hands, and observers yielded what the rule let
        // through: "one leader by belief", "terms never go backwards", "a term shows only its
        // leader's value" and "a stale term never proclaims" held above.
        "an election won",
        "a leadership change: another session won",
        "a leader proclaimed its value",
        "a deposed leader's proclaim refused",
        "a deposed leader's write fenced",
        "an observer saw the leader change",
        "an observer yielded a leader's value",
        "an observer yielded a term before its first proclaim",
        // Watchers read the store's events through the replicas, reconnected, resumed and were
        // told of gaps: "watchers see every event in order or are told of a gap", "the log
        // begins and ends each grant once" and "a watcher catches up once the faults heal"
        // held above.
        "a watcher was sent an event",
        "a watcher resumed after its position on a new connection",
        "a gap skipped events under the watcher's prefix",
        "a watcher caught up once the faults healed",
    ] {
        assert!(seen(what) > 0, "{what}: {:?}", summary.coverage);
    }
}

#[test]
fn bad_flags_are_one_line_and_exit_2() {
    for args in [["--drift", "1.5"], ["--bug", "nope"], ["--seeds", "many"]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lock-sim"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.starts_with("lock-sim: "), "{err}");
    }
}

/// A seed where the store's clock steps back 2.1 s and returns 1.6 s within a second, a lease
/// granted in between: before the guard held grants on a step back, a replica that read the
/// clock on neither side granted the key again after the return while the first holder still
/// held it by its own deadline (mutual exclusion). Found in seeds 10 000-70 000, beyond the
/// 10 000 every run covers, so kept here.
#[test]
fn a_step_back_and_a_return_within_a_second_leave_one_holder() {
    const SEED: u64 = 28_097;
    let run = run_without_sets(SEED);
    let steps: Vec<&str> = run
        .trace
        .lines()
        .filter(|l| l.contains("nemesis StoreClockStep("))
        .collect();
    assert!(
        steps.iter().any(|l| l.contains("StoreClockStep(-"))
            && steps.iter().any(|l| !l.contains("StoreClockStep(-")),
        "the premise: a step back and a return: {steps:?}"
    );
    assert!(run.violation.is_none(), "{}", run.violation.unwrap());
}
