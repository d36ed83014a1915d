//! The M2 end-to-end suite (SYSTEM.md §5) on real processes and a real PostgreSQL: S1 happy
//! path, S2 contention, S3 rail ambiguity, S4 the zombie, a loss before P3 and a clean
//! shutdown. Each scenario checks invariants I1-I7: I1, I2, I5-I7 through the services' own
//! APIs and metrics, I3 and I4 from the lock-server's audit trail and the SDK's loss lines.

use std::time::Duration;

use harness::stack::{Stack, StackOptions};
use lock_api::LockKey;
use lock_client::AcquirePolicy;
use nix::sys::signal::Signal;
use payment_api::{Fault, FaultKind, Payout, PayoutState, SubmissionOutcome};
use test_support::poll_until;

const SETTLE_DEADLINE: Duration = Duration::from_secs(60);
/// How long an executor may take to stop after SIGTERM: the payout in hand's remaining steps
/// (a submit within the hop budget, at most 3 s; a P3 within the request timeout, 5 s), then
/// its releases and L3.
const SHUTDOWN_BOUND: Duration = Duration::from_secs(10);

/// I1-I7 over `payouts` (all terminal, I7), with `expected_duplicates` refused submits.
/// Returns how many client-declared losses I4 checked.
async fn check_invariants(stack: &Stack, payouts: &[Payout], expected_duplicates: f64) -> usize {
    let audit = stack.audit().unwrap();
    audit.check_tokens().unwrap(); // I3 per key, over both replicas
    for payout in payouts {
        let id = payout.payout_id;
        assert!(
            payout.state.is_terminal(),
            "I7: payout {id} ended {:?}",
            payout.state
        );
        let received = stack.rail_received(id).await.unwrap();
        assert!(
            received.len() <= 1,
            "I1: the rail saw payout {id} {} times",
            received.len()
        );
        let submission = stack.submission(id).await.unwrap();
        match payout.state {
            PayoutState::Settled | PayoutState::Rejected | PayoutState::RailAmbiguous => {
                assert_eq!(
                    received.len(),
                    1,
                    "payout {id} ({:?}) reached the rail once",
                    payout.state
                );
                let submission =
                    submission.expect("a terminal payout has its submission on record");
                let token = received[0].transfer.presented_token;
                assert_eq!(
                    submission.presented_token, token,
                    "the rail saw the reserving token"
                );
                assert!(
                    token <= payout.fence,
                    "I2: fence {} is at least the token {token} used",
                    payout.fence
                );
                let granted = audit.tokens(&format!("payout:{id}"));
                for (what, used) in [("the fence", payout.fence), ("the rail's token", token)] {
                    assert!(
                        granted.contains(&used),
                        "I3: {what} of payout {id} ({used}) was granted by the lock-server: {granted:?}"
                    );
                }
                if payout.state == PayoutState::RailAmbiguous {
                    assert_eq!(
                        submission.outcome,
                        SubmissionOutcome::Timeout,
                        "I5: ambiguous means TIMEOUT on record"
                    );
                }
            }
            other => panic!("payout {id} is {other:?}"),
        }
    }
    let ledger = stack.ledger().await.unwrap();
    assert!(
        ledger.balance_by_currency.iter().all(|(_, sum)| *sum == 0),
        "I6: the ledger balances: {ledger:?}"
    );
    assert_eq!(
        ledger.postings, ledger.settled_payouts,
        "I6: one posting per settled payout"
    );
    assert_eq!(ledger.payouts_with_extra_postings, 0);
    let duplicates = stack
        .metric(&stack.proxy_url, "rail_duplicate_attempted_total", &[])
        .await
        .unwrap();
    assert_eq!(
        duplicates, expected_duplicates,
        "rail_duplicate_attempted_total"
    );
    let losses = stack.declared_losses().unwrap();
    audit.check_conservative(&losses).unwrap() // I4
}

async fn outcomes(stack: &Stack, executor: usize, outcome: &str) -> f64 {
    let url = &stack.executors[executor].url;
    stack
        .metric(url, "payout_execute_seconds_count", &[("outcome", outcome)])
        .await
        .unwrap()
}

/// Starts executor `name` armed to stop its whole process (SIGSTOP) right after it claimed
/// `payout` and passed its guard, and waits until it has: a holder frozen with its lock.
async fn start_frozen_on(stack: &mut Stack, name: &str, payout: i64) {
    stack
        .spawn_executor(
            name,
            &[("EXECUTOR_FAULT_SIGSTOP_PAYOUT", payout.to_string())],
            false,
        )
        .await
        .unwrap();
    let frozen = stack.executors.last().unwrap();
    frozen
        .process
        .wait_stopped(
            &format!("{name} to stop itself holding payout {payout}'s lock"),
            SETTLE_DEADLINE,
        )
        .await;
}

/// The names of the process's threads (from /proc).
fn threads(pid: i32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .map(|n| n.trim().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s1_happy_path_settles_every_payout_once() {
    let mut stack = Stack::start(StackOptions::default(), None).await.unwrap();
    let ids = stack.create_payouts("s1", 20).await.unwrap();
    stack.start_executor("executor-a", &[]).await.unwrap();
    let pid = stack.executors[0].process.pid().as_raw();
    let heartbeat_threads = threads(pid)
        .into_iter()
        .filter(|n| n.starts_with("lock-hb-"))
        .count();
    assert_eq!(
        heartbeat_threads, 1,
        "exactly one LockClient (one heartbeat thread) per executor process"
    );
    let payouts = stack.wait_terminal(&ids, SETTLE_DEADLINE).await.unwrap();
    assert!(
        payouts.iter().all(|p| p.state == PayoutState::Settled),
        "{payouts:?}"
    );
    check_invariants(&stack, &payouts, 0.0).await;
    // An attempt is counted after its release, a moment after P3 made the payout terminal.
    poll_until(
        "the executor to count 20 payouts acked",
        SETTLE_DEADLINE,
        || async { (outcomes(&stack, 0, "acked").await == 20.0).then_some(()) },
    )
    .await;
    let lost = stack
        .metric(&stack.executors[0].url, "lock_session_lost_total", &[])
        .await
        .unwrap();
    assert_eq!(lost, 0.0, "no lock was lost on the happy path");
}

/// One snapshot of the claimable list (one query, with the executors' credential, as they
/// list it): the payouts past `PENDING` and not
/// terminal — with a single executor and no faults, exactly those it has in flight — and all
/// the non-terminal ones.
async fn in_flight_snapshot(stack: &Stack) -> (usize, usize) {
    let url = format!("{}/v1/payouts?claimable=true&limit=500", stack.payment_url);
    let page: Vec<serde_json::Value> = reqwest::Client::new()
        .get(url)
        .bearer_auth(&stack.secrets.executor)
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .json()
        .await
        .unwrap();
    let in_flight = page.iter().filter(|p| p["state"] != "PENDING").count();
    (in_flight, page.len())
}

/// S1 with `EXECUTOR_CONCURRENCY=4`: a slow rail keeps submits in flight;
/// snapshots of the payouts taken until all are terminal show several claimed by the one
/// executor at once, never more than four; every payout settles once, in one session, with
/// one heartbeat thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s1_at_concurrency_4_one_executor_works_on_several_payouts_at_once() {
    let mut stack = Stack::start(StackOptions::default(), None).await.unwrap();
    let ids = stack.create_payouts("s1c", 24).await.unwrap();
    stack
        .rail_fault(&Fault {
            payout_id: None,
            fault: FaultKind::Delay { delay_ms: 200 },
        })
        .await
        .unwrap();
    stack
        .start_executor("executor-a", &[("EXECUTOR_CONCURRENCY", "4".to_owned())])
        .await
        .unwrap();
    let pid = stack.executors[0].process.pid().as_raw();
    let heartbeat_threads = threads(pid)
        .into_iter()
        .filter(|n| n.starts_with("lock-hb-"))
        .count();
    assert_eq!(heartbeat_threads, 1, "one LockClient, however many payouts");
    let most = std::cell::Cell::new(0);
    poll_until("every payout terminal", SETTLE_DEADLINE, || async {
        let (in_flight, open) = in_flight_snapshot(&stack).await;
        most.set(most.get().max(in_flight));
        (open == 0).then_some(())
    })
    .await;
    let most = most.get();
    assert!(
        (3..=4).contains(&most),
        "several payouts in flight at once, never more than 4: at most {most} in one snapshot"
    );
    let payouts = stack.wait_terminal(&ids, SETTLE_DEADLINE).await.unwrap();
    assert!(
        payouts.iter().all(|p| p.state == PayoutState::Settled),
        "{payouts:?}"
    );
    check_invariants(&stack, &payouts, 0.0).await;
    poll_until(
        "the executor to count 24 payouts acked",
        SETTLE_DEADLINE,
        || async { (outcomes(&stack, 0, "acked").await == 24.0).then_some(()) },
    )
    .await;
    let audit = stack.audit().unwrap();
    let sessions = audit
        .sessions_by_owner
        .get("executor-a")
        .map_or(0, Vec::len);
    assert_eq!(sessions, 1, "one session: {:?}", audit.sessions_by_owner);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s2_two_executors_share_the_work_without_paying_twice() {
    // A's session outlives its freeze with room to spare (the freeze lasts until B has given
    // up, about 4 s, longer on a loaded machine): the run checks that each executor keeps
    // one session, which a freeze past the session's TTL would rightly end.
    let options = StackOptions {
        session_ttl: "10s",
        ..StackOptions::default()
    };
    let mut stack = Stack::start(options, None).await.unwrap();
    // The executors meet on a payout: A claims it and stops right there (its whole process,
    // heartbeat too, while its lease runs). Its offer of the payout lapses at a quarter of the lease;
    // then B is offered it, waits its whole acquire budget (2 s) behind A's lock, and answers
    // `contended`. Then A goes on, and both share the work that arrives.
    let held = stack.create_payouts("s2-met", 1).await.unwrap()[0];
    start_frozen_on(&mut stack, "executor-a", held).await;
    stack.start_executor("executor-b", &[]).await.unwrap();
    let mut ids = vec![held];
    ids.extend(stack.create_payouts("s2", 39).await.unwrap());
    poll_until(
        "B to give up waiting for A's lock",
        SETTLE_DEADLINE,
        || async { (outcomes(&stack, 1, "contended").await >= 1.0).then_some(()) },
    )
    .await;
    stack.executors[0].process.signal(Signal::SIGCONT);
    // Work that arrives once both run is shared: each takes the payouts offered to it alone.
    ids.extend(stack.create_payouts("s2-both", 40).await.unwrap());
    let payouts = stack.wait_terminal(&ids, SETTLE_DEADLINE).await.unwrap();
    assert!(
        payouts.iter().all(|p| p.state == PayoutState::Settled),
        "{payouts:?}"
    );
    check_invariants(&stack, &payouts, 0.0).await;
    // Attempts are counted after their release, a moment after P3.
    let total = ids.len() as f64;
    let (a, b) = poll_until(
        "the executors to count every payout acked between them",
        SETTLE_DEADLINE,
        || async {
            let (a, b) = (
                outcomes(&stack, 0, "acked").await,
                outcomes(&stack, 1, "acked").await,
            );
            (a + b >= total).then_some((a, b))
        },
    )
    .await;
    assert_eq!(a + b, total, "every payout settled by exactly one executor");
    assert!(a > 0.0 && b > 0.0, "both did work: {a} and {b}");
    // The executors meet: at least one attempt ended `contended` (the
    // executor's own outcome), after waits that really waited: the SDK's wait histogram for
    // those acquires averages most of the 2 s budget, not a refused try.
    let (mut contended, mut waited_secs) = (0.0, 0.0);
    for (i, executor) in stack.executors.iter().enumerate() {
        contended += outcomes(&stack, i, "contended").await;
        let metrics = stack.metrics(&executor.url).await.unwrap();
        let labels = [("outcome", "contended")];
        waited_secs += metrics
            .sum("lock_client_acquire_wait_seconds_sum", &labels)
            .unwrap_or_else(|e| panic!("the SDK's wait histogram is exported: {e}"));
    }
    assert!(
        contended > 0.0,
        "the executors met: some attempt answered `contended` ({a} + {b} acked)"
    );
    let mean_wait = waited_secs / contended;
    assert!(
        mean_wait > 1.5,
        "a contended acquire waited its budget (2 s), not a refused try: {mean_wait:.3} s on average over {contended}"
    );
    // The lock service saw the same: waits that parked behind A's lock and ran out (an
    // acquire granted by its first try is no wait, and is not counted).
    let mut timed_out = 0.0;
    for server in &stack.lock_servers {
        let metrics = stack.metrics(&server.url).await.unwrap();
        timed_out += metrics
            .sum("lock_waits_total", &[("outcome", "timed_out")])
            .unwrap_or_else(|e| panic!("the lock-server's wait counter is exported: {e}"));
    }
    assert!(
        timed_out >= 1.0,
        "a replica parked B's acquire behind A's lock until its wait ran out: {timed_out}"
    );
    // One LockClient session per executor process over the whole run.
    let audit = stack.audit().unwrap();
    for name in ["executor-a", "executor-b"] {
        let sessions = audit.sessions_by_owner.get(name).map_or(0, Vec::len);
        assert_eq!(
            sessions, 1,
            "{name} opened {sessions} sessions: {:?}",
            audit.sessions_by_owner
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_rail_timeouts_end_ambiguous_and_are_never_resubmitted() {
    let mut stack = Stack::start(StackOptions::default(), None).await.unwrap();
    let ids = stack.create_payouts("s3", 10).await.unwrap();
    let ambiguous = [ids[2], ids[5], ids[7]];
    for id in ambiguous {
        stack
            .rail_fault(&Fault {
                payout_id: Some(id),
                fault: FaultKind::Timeout { hold_ms: 3_000 },
            })
            .await
            .unwrap();
    }
    stack.start_executor("executor-a", &[]).await.unwrap();
    let payouts = stack.wait_terminal(&ids, SETTLE_DEADLINE).await.unwrap();
    for payout in &payouts {
        let expected = if ambiguous.contains(&payout.payout_id) {
            PayoutState::RailAmbiguous
        } else {
            PayoutState::Settled
        };
        assert_eq!(payout.state, expected, "payout {}", payout.payout_id);
    }
    // Another worker runs and scans many times: nothing is submitted again.
    stack.start_executor("executor-b", &[]).await.unwrap();
    let before = scans(&stack).await;
    poll_until(
        "both executors to rescan the payouts many times",
        Duration::from_secs(20),
        || async { (scans(&stack).await >= before + 40.0).then_some(()) },
    )
    .await;
    assert_eq!(
        outcomes(&stack, 1, "acked").await + outcomes(&stack, 1, "fenced").await,
        0.0,
        "B found nothing to submit"
    );
    for id in ambiguous {
        assert_eq!(
            stack.rail_received(id).await.unwrap().len(),
            1,
            "I5: payout {id} reached the rail once"
        );
    }
    assert!(outcomes(&stack, 0, "ambiguous").await >= 3.0);

    // Whoever takes a fresh lock later, with a higher token, is refused at the resource and
    // at the proxy: ambiguity is terminal (I5), and the rail never sees the payouts again.
    let client = stack.lock_client_builder().build().unwrap();
    let session = client.open_session("s3-prober").await.unwrap();
    for id in ambiguous {
        let before = stack.payout(id).await.unwrap();
        let used = stack.submission(id).await.unwrap().unwrap().presented_token;
        let key = LockKey::parse(format!("payout:{id}")).unwrap();
        let handle = session
            .acquire(&key, Duration::from_secs(5), &AcquirePolicy::DEFAULT)
            .await
            .unwrap()
            .expect("nobody holds an ambiguous payout's lock");
        let token = i64::try_from(handle.fencing_token().0).unwrap();
        assert!(token > used, "a fresh, higher token: {token} > {used}");
        let claim = stack.try_claim(id, token).await.unwrap();
        assert_eq!(
            claim,
            (409, Some("ALREADY_TERMINAL".to_owned())),
            "I5: payout {id} cannot be claimed again"
        );
        let submit = stack.try_submit(id, token).await.unwrap();
        assert_eq!(
            submit.0, 409,
            "I5: payout {id} cannot be submitted again: {submit:?}"
        );
        let after = stack.payout(id).await.unwrap();
        assert_eq!(
            (after.state, after.fence),
            (before.state, before.fence),
            "nothing changed"
        );
        assert_eq!(
            stack.rail_received(id).await.unwrap().len(),
            1,
            "I5: payout {id} reached the rail once"
        );
        session.release(handle).await.unwrap();
    }
    session.close().await;
    client.close();
    // Each probe's submit was refused before the rail and counted as a duplicate attempt.
    check_invariants(&stack, &payouts, ambiguous.len() as f64).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_a_frozen_zombie_is_fenced_and_the_rail_sees_the_payout_once() {
    let mut stack = Stack::start(StackOptions::default(), None).await.unwrap();
    let ids = stack.create_payouts("s4", 1).await.unwrap();
    let id = ids[0];
    start_frozen_on(&mut stack, "executor-a", id).await;
    let claimed = stack.payout(id).await.unwrap();
    assert_eq!(
        claimed.state,
        PayoutState::Claimed,
        "A claimed, passed check_still_held, then froze"
    );
    let a_token = claimed.fence;

    stack.start_executor("executor-b", &[]).await.unwrap();
    let settled = stack.wait_terminal(&ids, SETTLE_DEADLINE).await.unwrap();
    assert_eq!(settled[0].state, PayoutState::Settled);
    assert!(
        settled[0].fence > a_token,
        "B settled with a higher token: {} > {a_token}",
        settled[0].fence
    );

    stack.executors[0].process.signal(Signal::SIGCONT);
    poll_until(
        "A's stale submit to be refused",
        Duration::from_secs(20),
        || async {
            let fenced = stack
                .metric(
                    &stack.executors[0].url,
                    "payout_execute_seconds_count",
                    &[("outcome", "fenced")],
                )
                .await
                .ok()?;
            (fenced >= 1.0).then_some(())
        },
    )
    .await;
    let final_state = stack.wait_terminal(&ids, SETTLE_DEADLINE).await.unwrap();
    let received = stack.rail_received(id).await.unwrap();
    assert_eq!(
        received[0].transfer.presented_token, settled[0].fence,
        "the rail saw B's token, never A's"
    );
    poll_until(
        "A to report the lost lock",
        Duration::from_secs(20),
        || async {
            let lost = stack
                .metric(
                    &stack.executors[0].url,
                    "lock_session_lost_total",
                    &[("backend", stack.lock_backend())],
                )
                .await
                .ok()?;
            (lost >= 1.0).then_some(())
        },
    )
    .await;
    let checked = check_invariants(&stack, &final_state, 1.0).await;
    assert!(
        checked >= 1,
        "I4 checked A's declared loss against the server's expiry"
    );
}

/// How many executor scans (offer requests) payment-resource has served.
async fn scans(stack: &Stack) -> f64 {
    let labels = [("route", "/v1/offers"), ("method", "POST")];
    stack
        .metric(&stack.payment_url, "http_requests_total", &labels)
        .await
        .unwrap()
}

/// Starts executor A armed to stop itself (SIGSTOP) before posting payout `id`, and waits
/// until it has: the payout submitted, nothing posted.
async fn freeze_a_before_posting(stack: &mut Stack, id: i64) {
    let fault = [
        ("EXECUTOR_FAULT_SIGSTOP_PAYOUT", id.to_string()),
        ("EXECUTOR_FAULT_SIGSTOP_STEP", "post".to_owned()),
    ];
    stack
        .spawn_executor("executor-a", &fault, false)
        .await
        .unwrap();
    stack.executors[0]
        .process
        .wait_stopped(
            "executor A to stop itself before posting",
            Duration::from_secs(20),
        )
        .await;
    assert_eq!(
        stack.payout(id).await.unwrap().state,
        PayoutState::Submitted,
        "A submitted, then froze"
    );
    assert_eq!(stack.ledger().await.unwrap().postings, 0);
}

/// Wakes the frozen executor A (after B settled payout `id`): it abandons the payout as lost
/// and tries no write; the listener counted the loss once and `session_lost` is logged once
/// with its fields.
async fn assert_woken_a_abandons_the_payout(stack: &Stack, id: i64) {
    stack.executors[0].process.signal(Signal::SIGCONT);
    poll_until(
        "A to abandon the payout as lost",
        Duration::from_secs(20),
        || async {
            (stack
                .metric(
                    &stack.executors[0].url,
                    "payout_execute_seconds_count",
                    &[("outcome", "lost")],
                )
                .await
                .ok()?
                >= 1.0)
                .then_some(())
        },
    )
    .await;
    let a = &stack.executors[0];
    assert_eq!(
        stack
            .metric(
                &a.url,
                "payout_execute_seconds_count",
                &[("outcome", "fenced")]
            )
            .await
            .unwrap(),
        0.0,
        "A tried no write"
    );
    let lost = stack
        .metric(
            &a.url,
            "lock_session_lost_total",
            &[("backend", stack.lock_backend())],
        )
        .await
        .unwrap();
    assert_eq!(lost, 1.0, "lock_session_lost_total counted the loss once");
    let log = a.process.log();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| l.contains("\"event\":\"session_lost\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "one session_lost line:\n{log}");
    for field in ["owner", "session", "key", "token", "backend", "reason"] {
        assert!(
            !lines[0][field].is_null(),
            "session_lost lacks {field}: {}",
            lines[0]
        );
    }
    assert_eq!(lines[0]["key"], format!("payout:{id}"));
}

/// A's session is gone for good: it opens a new one and works again once B (executor 1) is
/// gone.
async fn assert_a_works_again_once_b_is_gone(stack: &mut Stack) {
    drop(stack.executors.remove(1));
    let more = stack.create_payouts("after-loss", 3).await.unwrap();
    let done = stack.wait_terminal(&more, SETTLE_DEADLINE).await.unwrap();
    assert!(
        done.iter().all(|p| p.state == PayoutState::Settled),
        "{done:?}"
    );
    // An attempt is counted after its release, a moment after P3 made the payout terminal.
    let a_url = stack.executors[0].url.clone();
    poll_until(
        "A to count the 3 new payouts acked (it settled them on a new session)",
        SETTLE_DEADLINE,
        || async {
            let acked = stack
                .metric(
                    &a_url,
                    "payout_execute_seconds_count",
                    &[("outcome", "acked")],
                )
                .await
                .ok()?;
            (acked == 3.0).then_some(())
        },
    )
    .await;
}

/// A worker frozen between the rail's answer and P3 loses its lock;
/// on waking it writes nothing (no P3, no ledger row, no rail call), `session_lost` is logged
/// once with its fields, the listener counted it, and the next holder posts the recorded
/// outcome (crash recovery).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_loses_its_lock_before_posting_writes_nothing_more() {
    let mut stack = Stack::start(StackOptions::default(), None).await.unwrap();
    let ids = stack.create_payouts("lost", 1).await.unwrap();
    let id = ids[0];
    freeze_a_before_posting(&mut stack, id).await;

    stack.start_executor("executor-b", &[]).await.unwrap();
    let settled = stack.wait_terminal(&ids, SETTLE_DEADLINE).await.unwrap();
    assert_eq!(
        settled[0].state,
        PayoutState::Settled,
        "B posted the recorded outcome"
    );

    assert_woken_a_abandons_the_payout(&stack, id).await;
    let final_state = stack.wait_terminal(&ids, SETTLE_DEADLINE).await.unwrap();
    // B saw SUBMITTED and went straight to P3; A's loss was declared before the server's expiry.
    let checked = check_invariants(&stack, &final_state, 0.0).await;
    assert!(
        checked >= 1,
        "I4 checked A's declared loss against the server's expiry"
    );
    assert_eq!(
        stack.ledger().await.unwrap().postings,
        1,
        "one posting, by B"
    );

    assert_a_works_again_once_b_is_gone(&mut stack).await;
}

/// The shutdown: SIGTERM to a working executor stops it taking
/// payouts; it finishes the one in hand (none is left CLAIMED or SUBMITTED), releases its
/// locks, closes its session (L3 at the lock-server) and exits 0 within [`SHUTDOWN_BOUND`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_payout_in_hand_releases_closes_and_exits_zero() {
    let mut stack = Stack::start(StackOptions::default(), None).await.unwrap();
    let ids = stack.create_payouts("term", 30).await.unwrap();
    // Every transfer takes a while at the rail, so SIGTERM lands with a payout in hand.
    stack
        .rail_fault(&Fault {
            payout_id: None,
            fault: FaultKind::Delay { delay_ms: 150 },
        })
        .await
        .unwrap();
    stack.start_executor("executor-a", &[]).await.unwrap();
    poll_until(
        "executor A to settle a few payouts",
        SETTLE_DEADLINE,
        || async { (outcomes(&stack, 0, "acked").await >= 3.0).then_some(()) },
    )
    .await;
    stack.executors[0].process.signal(Signal::SIGTERM);
    let started = std::time::Instant::now();
    let code = stack.executors[0]
        .process
        .wait_exit(SHUTDOWN_BOUND)
        .await
        .unwrap();
    assert_eq!(code, 0, "exit code after SIGTERM");
    eprintln!("executor A stopped {:?} after SIGTERM", started.elapsed());

    let mut settled = 0;
    for id in &ids {
        let payout = stack.payout(*id).await.unwrap();
        assert!(
            matches!(payout.state, PayoutState::Settled | PayoutState::Pending),
            "payout {id} was left {:?}: the one in hand is finished, the rest untouched",
            payout.state
        );
        settled += usize::from(payout.state == PayoutState::Settled);
        assert_eq!(
            stack.lock_holder(&format!("payout:{id}")).await.unwrap(),
            None,
            "payout:{id} is released"
        );
    }
    assert!(settled < ids.len(), "A stopped taking payouts");
    let audit = stack.audit().unwrap();
    let sessions = &audit.sessions_by_owner["executor-a"];
    assert_eq!(sessions.len(), 1, "one session per executor process");
    assert!(
        audit.closed.contains(&sessions[0]),
        "A closed its session (L3) before exiting"
    );
    let log = stack.executors[0].process.log();
    assert!(log.contains("\"event\":\"stopped\""), "A logged its stop");

    // Another executor finishes the rest.
    stack.start_executor("executor-b", &[]).await.unwrap();
    let payouts = stack.wait_terminal(&ids, SETTLE_DEADLINE).await.unwrap();
    assert!(payouts.iter().all(|p| p.state == PayoutState::Settled));
    check_invariants(&stack, &payouts, 0.0).await;
}
