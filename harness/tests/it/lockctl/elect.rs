//! Leader election on real processes: `lockctl elect` candidates writing through the fenced
//! file writer, and `lockctl leader --follow` observing. The leader's lockctl is frozen
//! (SIGSTOP) past its lease: the follower takes over, the frozen leader's CMD (a process of
//! its own, running on unaware) has its next write refused by the fence, the observer saw
//! both terms in order, and on SIGCONT the old leader's CMD is stopped (exit 70).

use super::*;

/// A candidate's CMD: writes `NAME TOKEN` to FILE through fenced-file every 100 ms and
/// records each write `NAME TOKEN ok|fenced` in RECORD, until SIGTERM (at most 30 s).
fn candidate(name: &str, writer: &Path, file: &Path, record: &Path) -> String {
    format!(
        "trap 'echo {name} $LOCK_FENCING_TOKEN term >> {r}; exit 0' TERM; i=0; \
         while [ $i -lt 300 ]; do \
           if echo {name} $LOCK_FENCING_TOKEN | {w} {f} 2>/dev/null; \
           then echo {name} $LOCK_FENCING_TOKEN ok >> {r}; \
           else echo {name} $LOCK_FENCING_TOKEN fenced >> {r}; fi; \
           sleep 0.1; i=$((i+1)); done",
        r = record.display(),
        w = writer.display(),
        f = file.display(),
    )
}

/// The record's `(name, token, outcome)` lines.
fn writes(record: &Path) -> Vec<(String, u64, String)> {
    read(record)
        .lines()
        .filter_map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            Some((
                parts[0].to_owned(),
                parts.get(1)?.parse().ok()?,
                parts.get(2)?.to_string(),
            ))
        })
        .collect()
}

fn wrote(record: &Path, name: &str, outcome: &str) -> Option<u64> {
    (writes(record).into_iter())
        .find(|(n, _, o)| n == name && o == outcome)
        .map(|(_, token, _)| token)
}

/// The `(term, value)` of each `leader --follow --json` line naming a leader with its value
/// (a new term may be seen once before its value lands).
fn observed(log: &str) -> Vec<(u64, String)> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["leader"] == true && l["value"].is_string())
        .map(|l| {
            (
                l["term"].as_u64().unwrap(),
                l["value"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_is_fenced_and_the_follower_takes_over_in_order() {
    let fx = fixture().await;
    let writer = test_support::cargo_bin("fenced-file").unwrap();
    let (file, record) = (fx.file("schedule.txt"), fx.file("writes"));
    let observer = fx.spawn("observer", &["--json", "leader", "sched", "--follow"]);
    let elect = |name: &str| {
        let script = candidate(name, &writer, &file, &record);
        let args = [
            "--json", "elect", "sched", "--value", name, "--ttl", "1s", "--grace", "100ms", "--",
            "sh", "-c", &script,
        ];
        let keys = [("FENCE_PUBLIC_KEYS", test_support::keys::public_keys())];
        fx.spawn_with(&format!("candidate-{name}"), &args, &keys)
    };
    let mut a = elect("a");
    let first = poll_until("a to lead and write", Duration::from_secs(20), || async {
        wrote(&record, "a", "ok")
    })
    .await;
    let mut b = elect("b");
    poll_until("b to wait in line", Duration::from_secs(10), || async {
        let out = fx.ctl(&["--json", "inspect", "sched"], &[]).await;
        (json_line(&out.stdout)["waiters"] == 1).then_some(())
    })
    .await;

    // Freeze a's lockctl (its heartbeat with it): its lease lapses and b leads, while a's
    // CMD runs on and keeps writing with the old term.
    a.signal(Signal::SIGSTOP);
    let frozen = Instant::now();
    let second = poll_until("b to lead and write", Duration::from_secs(20), || async {
        wrote(&record, "b", "ok")
    })
    .await;
    let failover = frozen.elapsed();
    assert!(second > first, "b's term {second} is above a's {first}");
    let fenced = poll_until(
        "a's next write to be fenced",
        Duration::from_secs(10),
        || async { wrote(&record, "a", "fenced") },
    )
    .await;
    assert_eq!(fenced, first, "the frozen leader wrote with its old term");
    let content = read(&file);
    assert!(
        content.starts_with(&format!("b {second}")),
        "the file holds b's write: {content:?}"
    );

    a.signal(Signal::SIGCONT);
    let status = wait_exit(&mut a).await;
    assert_eq!(status.code(), Some(70), "a's loss: {}", a.log());
    assert_eq!(lost_event(&a.log())["fencing_token"], first);
    assert!(
        read(&record).contains(&format!("a {first} term")),
        "a's CMD was stopped"
    );
    let after_stop = writes(&record).iter().filter(|(n, ..)| n == "a").count();

    poll_until(
        "the observer to see b's term",
        Duration::from_secs(10),
        || async {
            observed(&observer.log())
                .iter()
                .any(|(t, _)| *t == second)
                .then_some(())
        },
    )
    .await;
    let terms = observed(&observer.log());
    assert_eq!(terms.first(), Some(&(first, "a".to_owned())), "{terms:?}");
    assert_eq!(terms.last(), Some(&(second, "b".to_owned())), "{terms:?}");
    assert!(
        terms.windows(2).all(|w| w[0].0 <= w[1].0),
        "terms never go back: {terms:?}"
    );

    b.signal(Signal::SIGTERM);
    assert_eq!(
        wait_exit(&mut b).await.code(),
        Some(0),
        "b resigned: {}",
        b.log()
    );
    let a_writes = writes(&record).iter().filter(|(n, ..)| n == "a").count();
    assert_eq!(a_writes, after_stop, "a wrote nothing once stopped");
    eprintln!("failover after a frozen leader: {failover:?} (lease 1 s)");
}
