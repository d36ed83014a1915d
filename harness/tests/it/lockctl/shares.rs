//! `lockctl run --permits N` and `--shared` as users run them (ADR 0007): runs on a
//! semaphore of two share it two at a time in distinct slots and never three; readers share a
//! key while a writer waits for the last of them and runs alone, with a token above theirs.

use super::*;

/// `start|end SCOPE TOKEN NANOS` lines: each CMD's span.
fn spans(text: &str) -> Vec<(String, u64, u128, u128)> {
    let mut open: Vec<(String, u64, u128)> = Vec::new();
    let mut spans = Vec::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [what, scope, token, at] = parts[..] else {
            panic!("{line:?}");
        };
        let (token, at): (u64, u128) = (token.parse().unwrap(), at.parse().unwrap());
        match what {
            "start" => open.push((scope.to_owned(), token, at)),
            "end" => {
                let i = open
                    .iter()
                    .position(|(_, t, _)| *t == token)
                    .expect("a start");
                let (scope, token, from) = open.remove(i);
                spans.push((scope, token, from, at));
            }
            other => panic!("{other:?} in {line:?}"),
        }
    }
    assert!(open.is_empty(), "every CMD ended: {open:?}");
    spans
}

/// The most spans running at once, and the scopes of each such moment.
fn most_at_once(spans: &[(String, u64, u128, u128)]) -> (usize, Vec<Vec<String>>) {
    let mut most = (0, Vec::new());
    for (_, _, from, _) in spans {
        let running: Vec<String> = spans
            .iter()
            .filter(|(_, _, a, b)| a <= from && from < b)
            .map(|(scope, ..)| scope.clone())
            .collect();
        if running.len() > most.0 {
            most = (running.len(), vec![running]);
        } else if running.len() == most.0 {
            most.1.push(running);
        }
    }
    most
}

fn recording(record: &Path, sleep: &str) -> String {
    format!(
        "echo start $LOCK_SCOPE $LOCK_FENCING_TOKEN $(date +%s%N) >> {r}; sleep {sleep}; \
         echo end $LOCK_SCOPE $LOCK_FENCING_TOKEN $(date +%s%N) >> {r}",
        r = record.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_on_a_semaphore_of_two_share_it_two_at_a_time_in_their_own_slots() {
    let fx = fixture().await;
    let record = fx.file("record");
    let script = recording(&record, "0.6");
    const RUNS: usize = 4;
    let mut runs: Vec<ServiceProcess> = (0..RUNS)
        .map(|i| {
            let args = [
                "run",
                "pool",
                "--permits",
                "2",
                "--wait",
                "30s",
                "--",
                "sh",
                "-c",
                &script,
            ];
            fx.spawn(&format!("permit-run-{i}"), &args)
        })
        .collect();
    for run in &mut runs {
        let status = wait_exit(run).await;
        assert_eq!(status.code(), Some(0), "{}", run.log());
    }
    let spans = spans(&read(&record));
    assert_eq!(spans.len(), RUNS, "{spans:?}");
    let (most, moments) = most_at_once(&spans);
    assert_eq!(
        most, 2,
        "two permits: never more, and shared when both were free: {spans:?}"
    );
    for running in moments {
        assert!(
            running[0] != running[1],
            "two at once hold two slots: {running:?}"
        );
        assert!(
            running.iter().all(|s| s == "permit-0" || s == "permit-1"),
            "{running:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_a_key_and_its_writer_runs_alone_after_them() {
    let fx = fixture().await;
    let record = fx.file("record");
    let reading = recording(&record, "0.8");
    let mut readers: Vec<ServiceProcess> = (0..2)
        .map(|i| {
            let args = [
                "run", "doc", "--shared", "--wait", "30s", "--", "sh", "-c", &reading,
            ];
            fx.spawn(&format!("reader-{i}"), &args)
        })
        .collect();
    poll_until("both readers to start", Duration::from_secs(20), || async {
        (read(&record)
            .lines()
            .filter(|l| l.starts_with("start"))
            .count()
            == 2)
            .then_some(())
    })
    .await;
    let out = fx.ctl(&["--json", "inspect", "doc"], &[]).await;
    let info = json_line(&out.stdout);
    let holders = info["holders"].as_str().unwrap_or_else(|| panic!("{info}"));
    assert_eq!(holders.matches("shared:").count(), 2, "{info}");
    let writing = recording(&record, "0.1");
    let mut writer = fx.spawn(
        "writer",
        &["run", "doc", "--wait", "30s", "--", "sh", "-c", &writing],
    );
    for run in readers.iter_mut().chain(std::iter::once(&mut writer)) {
        let status = wait_exit(run).await;
        assert_eq!(status.code(), Some(0), "{}", run.log());
    }
    let spans = spans(&read(&record));
    let (shared, alone): (Vec<_>, Vec<_>) = spans.iter().partition(|(s, ..)| s == "shared");
    let [(_, _, w_from, _)] = alone[..] else {
        panic!("one writer: {spans:?}");
    };
    let [r1, r2] = shared[..] else {
        panic!("two readers: {spans:?}");
    };
    assert!(
        r1.2 < r2.3 && r2.2 < r1.3,
        "the readers overlapped: {spans:?}"
    );
    assert!(
        shared.iter().all(|(_, _, _, end)| end <= w_from),
        "the writer ran after every reader: {spans:?}"
    );
    assert_eq!(alone[0].0, "exclusive");
    assert!(shared.iter().all(|(_, t, ..)| *t < alone[0].1), "{spans:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_cannot_be_is_one_line_and_a_usage_exit() {
    let fx = fixture().await;
    for (args, mentions) in [
        (&["run", "k", "--permits", "0", "--", "true"][..], "permits"),
        (
            &["run", "k", "--permits", "2", "--shared", "--", "true"][..],
            "--shared",
        ),
        (&["run", "a", "b", "--shared", "--", "true"][..], "one key"),
    ] {
        let out = fx.ctl(args, &[]).await;
        assert_fails(&out, 64, mentions);
    }
}
