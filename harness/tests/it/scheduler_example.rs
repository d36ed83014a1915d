//! The singleton scheduler example (`examples/scheduler`) on real processes: two copies
//! against a lock-server and the fenced-kv example. One leads and writes each run with its
//! term; frozen (SIGSTOP) past its lease, the other leads with a higher term; woken, the old
//! leader's guard or the fence stops it, and the record is never one of the old term again.

use std::path::Path;
use std::time::Duration;

use harness::stack::start_lock_server;
use nix::sys::signal::Signal;
use test_support::{ServiceProcess, poll_until};

const START_DEADLINE: Duration = Duration::from_secs(30);
const TAKEOVER_DEADLINE: Duration = Duration::from_secs(20);

/// The terms a scheduler's log shows for `event` (`leading`, `ran`, `lost`, `fenced`).
fn terms(log: &str, event: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.starts_with(&format!("event={event} ")))
        .filter_map(|l| {
            l.split("term=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// The term the stored record names (`run N by NODE in term T`).
fn record_term(record: &str) -> Option<u64> {
    record.rsplit(' ').next()?.parse().ok()
}

fn scheduler(node: &str, lock_url: &str, kv_url: &str, logs: &Path) -> ServiceProcess {
    let bin = test_support::cargo_bin("singleton-scheduler").unwrap();
    let env = [
        ("LOCK_ENDPOINTS", lock_url.to_owned()),
        (
            "LOCK_CLIENT_TOKEN",
            test_support::keys::LOCK_CLIENT_TOKEN.to_owned(),
        ),
        ("UNSAFE_PLAINTEXT_HTTP", "true".to_owned()),
        ("LOCK_SESSION_TTL", "1s".to_owned()),
        ("SCHEDULE_URL", format!("{kv_url}/kv/schedule")),
        ("SCHEDULE_EVERY_MS", "100".to_owned()),
        ("SCHEDULE_NODE", node.to_owned()),
    ];
    ServiceProcess::spawn(node, bin, &[], &env, logs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_runs_on_one_leader_and_a_frozen_one_never_writes_again() {
    let logs = tempfile::tempdir().unwrap();
    let lock_db = test_support::fresh_database().await;
    let server = start_lock_server(
        "lock-server",
        &lock_db.url,
        &[("LOCK_TTL_MIN", "50ms".into())],
        logs.path(),
    )
    .await
    .unwrap();
    let kv_db = test_support::fresh_database().await;
    let port = test_support::free_port();
    let kv_bin = test_support::cargo_bin("fenced-kv").unwrap();
    let kv_env = [
        ("DATABASE_URL", kv_db.url.clone()),
        ("FENCE_PUBLIC_KEYS", test_support::keys::public_keys()),
        ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
        ("UNSAFE_PLAINTEXT_HTTP", "true".to_owned()),
    ];
    let _kv = ServiceProcess::spawn("fenced-kv", &kv_bin, &[], &kv_env, logs.path());
    let kv_url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let record = || async {
        let answer = http
            .get(format!("{kv_url}/kv/schedule"))
            .send()
            .await
            .ok()?;
        answer
            .status()
            .is_success()
            .then_some(answer.text().await.ok()?)
    };
    let a = scheduler("node-a", &server.url, &kv_url, logs.path());
    let first = poll_until("node-a to lead and run", START_DEADLINE, || async {
        terms(&a.log(), "ran").first().copied()
    })
    .await;
    let b = scheduler("node-b", &server.url, &kv_url, logs.path());
    assert_eq!(record_term(&record().await.unwrap()), Some(first));

    a.signal(Signal::SIGSTOP);
    let second = poll_until("node-b to lead and run", TAKEOVER_DEADLINE, || async {
        terms(&b.log(), "ran").first().copied()
    })
    .await;
    assert!(second > first, "the new term {second} is above {first}");
    a.signal(Signal::SIGCONT);
    poll_until("node-a to stop leading", TAKEOVER_DEADLINE, || async {
        let log = a.log();
        let stopped =
            terms(&log, "lost").contains(&first) || terms(&log, "fenced").contains(&first);
        stopped.then_some(())
    })
    .await;
    let ran_by_a = terms(&a.log(), "ran").len();
    // A few more of b's runs: the record stays b's, and node-a writes nothing meanwhile.
    poll_until("node-b to run again", TAKEOVER_DEADLINE, || async {
        (terms(&b.log(), "ran").len() >= 3).then_some(())
    })
    .await;
    assert_eq!(
        record_term(&record().await.unwrap()),
        Some(second),
        "the record is b's"
    );
    assert_eq!(
        terms(&a.log(), "ran").len(),
        ran_by_a,
        "node-a ran nothing once stopped"
    );
    assert!(
        terms(&b.log(), "ran").iter().all(|t| *t == second),
        "{}",
        b.log()
    );
    // node-a, whose session the freeze ended, stands in line again: b's death (SIGKILL on
    // drop) hands it a third term.
    drop(b);
    let third = poll_until("node-a to lead again", TAKEOVER_DEADLINE, || async {
        terms(&a.log(), "ran").into_iter().find(|t| *t > second)
    })
    .await;
    let stored = record_term(&record().await.unwrap()).unwrap();
    assert!(
        stored >= third,
        "the record is the third term's: {stored} < {third}"
    );
}
