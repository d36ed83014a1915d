//! The M2 end-to-end suite (SYSTEM.md §5) on real processes and a real PostgreSQL: S1 happy
//! path, S2 contention, S3 rail ambiguity, S4 the zombie. Each scenario checks invariants
//! I1-I7 through the services' own APIs and metrics.

use std::time::Duration;

use harness::stack::{Stack, StackOptions};
use nix::sys::signal::Signal;
use payment_api::{Fault, FaultKind, Payout, PayoutState, SubmissionOutcome};
use test_support::poll_until;

const SETTLE_DEADLINE: Duration = Duration::from_secs(60);

/// I1-I7 over `payouts` (all terminal, I7), with `expected_duplicates` refused submits.
async fn check_invariants(stack: &Stack, payouts: &[Payout], expected_duplicates: f64) {
    // I3 (tokens unique and rising per key, across restarts and replicas) and I4 (conservative
    // expiry) are proven where they live: lock-server's conformance, replica and restart
    // tests, and the SDK's deadline tests (unit and against a real server in sdk.rs).
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
}

async fn outcomes(stack: &Stack, executor: usize, outcome: &str) -> f64 {
    let url = &stack.executors[executor].url;
    stack
        .metric(url, "payout_execute_seconds_count", &[("outcome", outcome)])
        .await
        .unwrap()
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
    assert_eq!(outcomes(&stack, 0, "acked").await, 20.0);
    let lost = stack
        .metric(&stack.executors[0].url, "lock_session_lost_total", &[])
        .await
        .unwrap();
    assert_eq!(lost, 0.0, "no lock was lost on the happy path");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s2_two_executors_share_the_work_without_paying_twice() {
    let mut stack = Stack::start(StackOptions::default(), None).await.unwrap();
    // Both executors run before the payouts exist, so neither gets a head start (a container
    // takes a second or two to start).
    stack.start_executor("executor-a", &[]).await.unwrap();
    stack.start_executor("executor-b", &[]).await.unwrap();
    let ids = stack.create_payouts("s2", 40).await.unwrap();
    let payouts = stack.wait_terminal(&ids, SETTLE_DEADLINE).await.unwrap();
    assert!(
        payouts.iter().all(|p| p.state == PayoutState::Settled),
        "{payouts:?}"
    );
    check_invariants(&stack, &payouts, 0.0).await;
    let (a, b) = (
        outcomes(&stack, 0, "acked").await,
        outcomes(&stack, 1, "acked").await,
    );
    assert_eq!(a + b, 40.0, "every payout settled by exactly one executor");
    assert!(a > 0.0 && b > 0.0, "both did work: {a} and {b}");
    let contended = outcomes(&stack, 0, "contended").await
        + outcomes(&stack, 1, "contended").await
        + outcomes(&stack, 0, "already_terminal").await
        + outcomes(&stack, 1, "already_terminal").await;
    assert!(contended > 0.0, "the executors met on some payouts");
    assert!(
        outcomes(&stack, 0, "contended").await + outcomes(&stack, 1, "contended").await > 0.0,
        "contended observed"
    );
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
    check_invariants(&stack, &payouts, 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_a_frozen_zombie_is_fenced_and_the_rail_sees_the_payout_once() {
    let mut stack = Stack::start(StackOptions::default(), None).await.unwrap();
    let ids = stack.create_payouts("s4", 1).await.unwrap();
    let id = ids[0];
    stack
        .spawn_executor(
            "executor-a",
            &[("EXECUTOR_FAULT_SIGSTOP_PAYOUT", id.to_string())],
            false,
        )
        .await
        .unwrap();
    let a_pid = stack.executors[0].process.pid().as_raw();
    poll_until(
        "executor A to stop itself at the fault point",
        Duration::from_secs(20),
        || async {
            let stat = std::fs::read_to_string(format!("/proc/{a_pid}/stat")).ok()?;
            let state = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .to_owned();
            (state == "T").then_some(())
        },
    )
    .await;
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
    check_invariants(&stack, &final_state, 1.0).await;
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
                    &[("backend", "postgres")],
                )
                .await
                .ok()?;
            (lost >= 1.0).then_some(())
        },
    )
    .await;
}

/// How many claimable scans payment-resource has served.
async fn scans(stack: &Stack) -> f64 {
    let labels = [("route", "/v1/payouts"), ("method", "GET")];
    stack
        .metric(&stack.payment_url, "http_requests_total", &labels)
        .await
        .unwrap()
}

/// T-047 criteria 7 and 8: a worker frozen between the rail's answer and P3 loses its lock;
/// on waking it writes nothing (no P3, no ledger row, no rail call), `session_lost` is logged
/// once with its fields, the listener counted it, and the next holder posts the recorded
/// outcome (crash recovery).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_loses_its_lock_before_posting_writes_nothing_more() {
    let mut stack = Stack::start(StackOptions::default(), None).await.unwrap();
    let ids = stack.create_payouts("lost", 1).await.unwrap();
    let id = ids[0];
    let fault = [
        ("EXECUTOR_FAULT_SIGSTOP_PAYOUT", id.to_string()),
        ("EXECUTOR_FAULT_SIGSTOP_STEP", "post".to_owned()),
    ];
    stack
        .spawn_executor("executor-a", &fault, false)
        .await
        .unwrap();
    let a_pid = stack.executors[0].process.pid().as_raw();
    poll_until(
        "executor A to stop itself before posting",
        Duration::from_secs(20),
        || async {
            let stat = std::fs::read_to_string(format!("/proc/{a_pid}/stat")).ok()?;
            (stat.rsplit_once(')')?.1.split_whitespace().next()? == "T").then_some(())
        },
    )
    .await;
    assert_eq!(
        stack.payout(id).await.unwrap().state,
        PayoutState::Submitted,
        "A submitted, then froze"
    );
    assert_eq!(stack.ledger().await.unwrap().postings, 0);

    stack.start_executor("executor-b", &[]).await.unwrap();
    let settled = stack.wait_terminal(&ids, SETTLE_DEADLINE).await.unwrap();
    assert_eq!(
        settled[0].state,
        PayoutState::Settled,
        "B posted the recorded outcome"
    );

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
            &[("backend", "postgres")],
        )
        .await
        .unwrap();
    assert_eq!(
        lost, 1.0,
        "lock_session_lost_total{{backend=\"postgres\"}} counted the loss once"
    );
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
    let final_state = stack.wait_terminal(&ids, SETTLE_DEADLINE).await.unwrap();
    check_invariants(&stack, &final_state, 0.0).await; // B saw SUBMITTED and went straight to P3
    assert_eq!(
        stack.ledger().await.unwrap().postings,
        1,
        "one posting, by B"
    );

    // A's session is gone for good: it opens a new one and works again once B is gone.
    drop(stack.executors.remove(1));
    let more = stack.create_payouts("after-loss", 3).await.unwrap();
    let done = stack.wait_terminal(&more, SETTLE_DEADLINE).await.unwrap();
    assert!(
        done.iter().all(|p| p.state == PayoutState::Settled),
        "{done:?}"
    );
    let acked = stack
        .metric(
            &stack.executors[0].url,
            "payout_execute_seconds_count",
            &[("outcome", "acked")],
        )
        .await
        .unwrap();
    assert_eq!(acked, 3.0, "A settled the new payouts on a new session");
}
