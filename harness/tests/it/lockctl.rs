//! `lockctl` as its users run it: the real binary against a real lock-server
//! process on a real PostgreSQL. Two `run`s on one key never overlap and their tokens rise; a
//! frozen `run` (SIGSTOP past its TTL, then SIGCONT) has its CMD stopped once the SDK
//! declares the loss and exits 70; the exit codes; `--json` output; inspect and revoke.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Output};
use std::time::{Duration, Instant};

use harness::stack::{LockServer, start_lock_server};
use lock_api::{FenceVerifier, FencingToken, LockKey};
use nix::sys::signal::Signal;
use serde_json::Value;
use test_support::{ServiceProcess, poll_until};

mod elect;
mod shares;
mod watch;

/// The operators' credential of the test lock-server (L8).
const ADMIN_TOKEN: &str = "test-lockctl-admin-token";
/// Budget of one one-shot lockctl command.
const COMMAND_DEADLINE: Duration = Duration::from_secs(30);
/// How long a `lockctl run` may take to end once its CMD has.
const RUN_DEADLINE: Duration = Duration::from_secs(60);

/// A lock-server and the lockctl binary.
struct Fixture {
    server: LockServer,
    bin: PathBuf,
    dir: tempfile::TempDir,
    _logs: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let db = test_support::fresh_database().await;
    let logs = tempfile::tempdir().unwrap();
    let server = start_lock_server(
        "lock-server",
        &db.url,
        &[
            ("LOCK_TTL_MIN", "50ms".into()),
            ("LOCK_ADMIN_TOKEN", ADMIN_TOKEN.into()),
        ],
        logs.path(),
    )
    .await
    .unwrap();
    let bin = test_support::cargo_bin("lockctl").unwrap();
    Fixture {
        server,
        bin,
        dir: tempfile::tempdir().unwrap(),
        _logs: logs,
    }
}

impl Fixture {
    /// The environment every lockctl invocation gets: this server, the client credential.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("LOCK_ENDPOINTS", self.server.url.clone()),
            // The test's lock-server serves plain HTTP on loopback, said so.
            ("UNSAFE_PLAINTEXT_HTTP", "true".to_owned()),
            (
                "LOCK_CLIENT_TOKEN",
                test_support::keys::LOCK_CLIENT_TOKEN.to_owned(),
            ),
        ]
    }

    /// Runs `lockctl ARGS` to its end with `extra` environment (no LOCK_ADMIN_TOKEN unless
    /// given there).
    async fn ctl(&self, args: &[&str], extra: &[(&str, &str)]) -> Output {
        let mut command = tokio::process::Command::new(&self.bin);
        command
            .args(args)
            .env_remove("LOCK_ADMIN_TOKEN")
            .envs(self.env())
            .envs(extra.iter().copied())
            .kill_on_drop(true);
        tokio::time::timeout(COMMAND_DEADLINE, command.output())
            .await
            .unwrap_or_else(|_| panic!("lockctl {args:?} did not end within {COMMAND_DEADLINE:?}"))
            .unwrap()
    }

    /// `lockctl ARGS` in the background (`lockctl run`), logging to `NAME.log`.
    fn spawn(&self, name: &str, args: &[&str]) -> ServiceProcess {
        self.spawn_with(name, args, &[])
    }

    /// [`Self::spawn`] with `extra` environment.
    fn spawn_with(&self, name: &str, args: &[&str], extra: &[(&str, String)]) -> ServiceProcess {
        let mut env = self.env();
        env.extend(extra.iter().cloned());
        ServiceProcess::spawn(name, &self.bin, args, &env, self.dir.path())
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `session open` with `--json`: the session id.
    async fn open_session(&self, owner: &str, ttl: &str) -> String {
        let out = self
            .ctl(
                &["--json", "session", "open", "--owner", owner, "--ttl", ttl],
                &[],
            )
            .await;
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        json_line(&out.stdout)["session_id"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

/// The one JSON object `bytes` holds on one line.
fn json_line(bytes: &[u8]) -> Value {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {text:?}");
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{text:?} is not JSON: {e}"))
}

/// Asserts `out` failed with `code` and one line on stderr naming `mentions`.
fn assert_fails(out: &Output, code: i32, mentions: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr {stderr:?}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.starts_with("lockctl: "), "{stderr:?}");
    assert!(stderr.contains(mentions), "{stderr:?} names {mentions:?}");
    assert!(!stderr.contains("panicked"), "{stderr:?}");
}

async fn wait_exit(process: &mut ServiceProcess) -> ExitStatus {
    tokio::time::timeout(RUN_DEADLINE, process.wait())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "lockctl did not exit within {RUN_DEADLINE:?}; its log:\n{}",
                process.log()
            )
        })
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A CMD that writes `start` to `record`, then runs until SIGTERM (writing `term`), at most
/// 30 s.
fn until_stopped(record: &Path) -> String {
    format!(
        "echo start >> {r}; trap 'echo term >> {r}; exit 0' TERM; i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        r = record.display()
    )
}

/// The `lost` event of a `run --json` log.
fn lost_event(log: &str) -> Value {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["event"] == "lost")
        .unwrap_or_else(|| panic!("a lost event: {log}"))
}

/// One `start TOKEN NANOS` / `end TOKEN NANOS` line of the overlap test's record.
fn parse_record(text: &str) -> Vec<(String, u64, u128)> {
    text.lines()
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(parts.len(), 3, "{line:?}");
            (
                parts[0].to_owned(),
                parts[1].parse().unwrap(),
                parts[2].parse().unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_on_one_key_never_overlap_and_their_tokens_rise() {
    let fx = fixture().await;
    let record = fx.file("record");
    let script = format!(
        "echo start $LOCK_FENCING_TOKEN $(date +%s%N) >> {r}; sleep 0.3; echo end $LOCK_FENCING_TOKEN $(date +%s%N) >> {r}",
        r = record.display()
    );
    const RUNS: usize = 3;
    let started = Instant::now();
    let mut runs: Vec<ServiceProcess> = (0..RUNS)
        .map(|i| {
            fx.spawn(
                &format!("run-{i}"),
                &["run", "batch:1", "--wait", "30s", "--", "sh", "-c", &script],
            )
        })
        .collect();
    let mut statuses = Vec::new();
    for run in &mut runs {
        statuses.push(wait_exit(run).await);
    }
    let took = started.elapsed();
    let events = parse_record(&read(&record));
    assert_eq!(events.len(), 2 * RUNS, "{events:?}");
    // In time order, each CMD's start is followed by its own end before anyone starts again.
    let mut by_time = events.clone();
    by_time.sort_by_key(|(_, _, at)| *at);
    let mut tokens = Vec::new();
    for pair in by_time.chunks(2) {
        let [(first, t1, a1), (second, t2, a2)] = pair else {
            panic!("{by_time:?}");
        };
        assert_eq!(
            (first.as_str(), second.as_str(), t1),
            ("start", "end", t2),
            "CMDs overlapped: {by_time:?}"
        );
        assert!(a1 < a2, "{by_time:?}");
        tokens.push(*t1);
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens strictly rise in the order the CMDs ran: {tokens:?}"
    );
    for (run, status) in runs.iter().zip(&statuses) {
        assert_eq!(status.code(), Some(0), "{}", run.log());
    }
    eprintln!("{RUNS} runs, one after another, tokens {tokens:?}, in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_on_key_sets_that_share_keys_never_overlap() {
    let fx = fixture().await;
    let record = fx.file("record");
    let seen = fx.file("seen");
    let script = format!(
        "echo start $LOCK_FENCING_TOKEN_0 $(date +%s%N) >> {r}; \
         echo \"$LOCK_KEYS|$LOCK_KEY_1|${{LOCK_FENCING_PROOF_1:+proof}}\" >> {s}; sleep 0.3; \
         echo end $LOCK_FENCING_TOKEN_0 $(date +%s%N) >> {r}",
        r = record.display(),
        s = seen.display()
    );
    // Every two of these sets share a key: no two CMDs may run at once.
    let sets = [
        ["acct:2", "acct:1"],
        ["acct:2", "acct:3"],
        ["acct:3", "acct:1"],
    ];
    let mut runs: Vec<ServiceProcess> = sets
        .iter()
        .enumerate()
        .map(|(i, [a, b])| {
            let args = ["run", a, b, "--wait", "30s", "--", "sh", "-c", &script];
            fx.spawn(&format!("set-run-{i}"), &args)
        })
        .collect();
    for run in &mut runs {
        let status = wait_exit(run).await;
        assert_eq!(status.code(), Some(0), "{}", run.log());
    }
    let mut events = parse_record(&read(&record));
    assert_eq!(events.len(), 2 * sets.len(), "{events:?}");
    events.sort_by_key(|(_, _, at)| *at);
    for pair in events.chunks(2) {
        let [(first, t1, _), (second, t2, _)] = pair else {
            panic!("{events:?}");
        };
        assert_eq!(
            (first.as_str(), second.as_str(), t1),
            ("start", "end", t2),
            "{events:?}"
        );
    }
    let seen = read(&seen);
    let mut lines: Vec<&str> = seen.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "acct:1 acct:2|acct:2|proof",
            "acct:1 acct:3|acct:3|proof",
            "acct:2 acct:3|acct:3|proof"
        ],
        "each CMD saw its set, sorted, with every member's proof"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_run_whose_key_is_held_exits_75_naming_its_keys_and_holds_nothing() {
    let fx = fixture().await;
    let session = fx.open_session("holder", "30s").await;
    let held = fx
        .ctl(&["--json", "acquire", "acct:9", "--session", &session], &[])
        .await;
    assert_eq!(held.status.code(), Some(0), "{held:?}");
    let out = fx
        .ctl(
            &["run", "acct:9", "acct:8", "--wait", "0s", "--", "true"],
            &[],
        )
        .await;
    assert_fails(&out, 75, "a key of the set acct:8, acct:9");
    let inspect = fx.ctl(&["--json", "inspect", "acct:8"], &[]).await;
    assert_eq!(json_line(&inspect.stdout)["held"], false, "{inspect:?}");
    let bad = fx
        .ctl(&["run", "acct:1", "acct:1", "--", "true"], &[])
        .await;
    assert_fails(&bad, 64, "named twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_run_is_stopped_when_any_one_of_its_keys_is_lost() {
    let fx = fixture().await;
    let record = fx.file("set-revoked");
    let script = until_stopped(&record);
    let args = [
        "--json", "run", "pair:a", "pair:b", "--ttl", "2s", "--", "sh", "-c", &script,
    ];
    let mut run = fx.spawn("set-revoked-run", &args);
    poll_until("CMD to start", Duration::from_secs(20), || async {
        read(&record).contains("start").then_some(())
    })
    .await;
    let admin = [("LOCK_ADMIN_TOKEN", ADMIN_TOKEN)];
    // The second key of the set, not the first: each member is guarded.
    let out = fx.ctl(&["--json", "revoke", "pair:b"], &admin).await;
    assert_eq!(json_line(&out.stdout)["revoked"], true, "{out:?}");
    let status = wait_exit(&mut run).await;
    let log = run.log();
    assert_eq!(status.code(), Some(70), "the lost code: {log}");
    assert!(read(&record).contains("term"), "CMD was stopped");
    let lost = lost_event(&log);
    assert_eq!(
        (&lost["lock_key"], &lost["reason"]),
        (&"pair:b".into(), &"revoked".into())
    );
    let inspect = fx.ctl(&["--json", "inspect", "pair:a"], &[]).await;
    assert_eq!(
        json_line(&inspect.stdout)["held"],
        false,
        "the other key released: {inspect:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_run_has_its_cmd_stopped_once_the_sdk_declares_the_loss() {
    let fx = fixture().await;
    let record = fx.file("frozen");
    let script = format!(
        "echo start >> {r}; trap 'echo term >> {r}; exit 0' TERM; i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; echo finished >> {r}",
        r = record.display()
    );
    let mut run = fx.spawn(
        "frozen-run",
        &[
            "--json", "run", "zombie:1", "--ttl", "1s", "--grace", "100ms", "--", "sh", "-c",
            &script,
        ],
    );
    poll_until("CMD to start", Duration::from_secs(20), || async {
        read(&record).contains("start").then_some(())
    })
    .await;
    let held = fx.ctl(&["--json", "inspect", "zombie:1"], &[]).await;
    let first = json_line(&held.stdout)["fencing_token"].as_u64().unwrap();

    // Freeze lockctl itself (its heartbeat thread with it) past its TTL: the server expires
    // the grant, and a new holder takes the key with a higher token, while CMD, a process
    // of its own, runs on unaware.
    run.signal(Signal::SIGSTOP);
    let frozen_at = Instant::now();
    poll_until(
        "the server to expire the frozen holder's grant",
        Duration::from_secs(10),
        || async {
            let out = fx.ctl(&["--json", "inspect", "zombie:1"], &[]).await;
            (json_line(&out.stdout)["held"] == false).then_some(())
        },
    )
    .await;
    let next = fx
        .ctl(
            &[
                "run",
                "zombie:1",
                "--wait",
                "5s",
                "--",
                "sh",
                "-c",
                "echo $LOCK_FENCING_TOKEN",
            ],
            &[],
        )
        .await;
    assert_eq!(next.status.code(), Some(0), "{next:?}");
    let second: u64 = String::from_utf8_lossy(&next.stdout)
        .trim()
        .parse()
        .unwrap();
    assert!(second > first, "the new holder's token {second} > {first}");
    assert!(
        !read(&record).contains("term"),
        "nothing stopped CMD while lockctl was frozen"
    );

    run.signal(Signal::SIGCONT);
    let woke = Instant::now();
    poll_until(
        "CMD to get SIGTERM once the SDK declares the loss",
        Duration::from_secs(5),
        || async { read(&record).contains("term").then_some(()) },
    )
    .await;
    let reaction = woke.elapsed();
    let status = wait_exit(&mut run).await;
    let log = run.log();
    assert_eq!(status.code(), Some(70), "the lost code: {log}");
    assert!(
        !read(&record).contains("finished"),
        "CMD did not run to its end"
    );
    let lines: Vec<Value> = log
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let lost = lines
        .iter()
        .find(|l| l["event"] == "lost")
        .unwrap_or_else(|| panic!("a lost event: {log}"));
    assert_eq!(lost["fencing_token"], first);
    assert_eq!(lost["reason"], "deadline_passed");
    assert!(
        lines
            .iter()
            .any(|l| l["error"] == "lost" && l["exit_code"] == 70),
        "{log}"
    );
    eprintln!(
        "frozen {:?}; CMD stopped {reaction:?} after SIGCONT",
        woke - frozen_at
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoke_with_a_reason_stops_run_and_says_who_and_why_everywhere() {
    let fx = fixture().await;
    let record = fx.file("revoked");
    let script = until_stopped(&record);
    let mut run = fx.spawn(
        "revoked-run",
        &[
            "--json",
            "run",
            "revoked:1",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    poll_until("CMD to start", Duration::from_secs(20), || async {
        read(&record).contains("start").then_some(())
    })
    .await;
    let admin = [("LOCK_ADMIN_TOKEN", ADMIN_TOKEN)];
    let out = fx
        .ctl(&["revoke", "revoked:1", "--reason", ""], &admin)
        .await;
    assert_fails(&out, 64, "reason");
    let reason = "maintenance: rotating disks";
    let out = fx
        .ctl(
            &["--json", "revoke", "revoked:1", "--reason", reason],
            &admin,
        )
        .await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(json_line(&out.stdout)["revoked"], true);

    let status = wait_exit(&mut run).await;
    let log = run.log();
    assert_eq!(status.code(), Some(70), "the lost code: {log}");
    assert!(read(&record).contains("term"), "CMD was stopped");
    let lost = lost_event(&log);
    assert_eq!(lost["reason"], "revoked", "{lost}");
    let told = lost["detail"].as_str().unwrap_or_default();
    assert!(
        told.contains("revoked by lock-admin: maintenance: rotating disks"),
        "{lost}"
    );
    let audit = std::fs::read_to_string(fx._logs.path().join("lock-server.log")).unwrap();
    let line: Value = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["event"] == "lock_revoked")
        .unwrap_or_else(|| panic!("no lock_revoked audit line: {audit}"));
    assert_eq!(
        (&line["credential"], &line["reason"]),
        (&Value::from("lock-admin"), &Value::from(reason)),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_are_distinct_and_cmds_own_code_passes_through() {
    let fx = fixture().await;
    // Another holder: a session kept open by lockctl, holding the key for 30 s.
    let holder = fx.open_session("holder", "30s").await;
    let held = fx
        .ctl(
            &["acquire", "busy:1", "--session", &holder, "--ttl", "30s"],
            &[],
        )
        .await;
    assert_eq!(held.status.code(), Some(0), "{held:?}");
    let waited = Instant::now();
    let out = fx
        .ctl(&["run", "busy:1", "--wait", "300ms", "--", "true"], &[])
        .await;
    assert_fails(&out, 75, "not acquired within 300ms");
    assert!(waited.elapsed() < Duration::from_secs(10));
    let other = fx.open_session("other", "30s").await;
    let out = fx
        .ctl(
            &["acquire", "busy:1", "--session", &other, "--wait", "200ms"],
            &[],
        )
        .await;
    assert_fails(&out, 75, "held by another session");

    // Bad usage, clap's own errors included: 64, one line.
    let uuid = "2ecaa738-b900-41d0-baf4-f8ebc6068fed";
    let usage: [&[&str]; 9] = [
        &["frobnicate"],
        &[],
        &["run", "k"],
        &["run", "k", "--ttl", "ten", "--", "true"],
        &["run", "k", "--wait", "5", "--", "true"],
        &["acquire", "bad key", "--session", uuid],
        &["release", "k", "--session", uuid, "--token", "0"],
        &["session", "close", "not-a-uuid"],
        &["inspect", "k", "--no-such-flag"],
    ];
    for args in usage {
        let out = fx.ctl(args, &[]).await;
        assert_fails(&out, 64, "");
    }
    let out = fx.ctl(&["inspect", "k"], &[("LOCK_ENDPOINTS", "")]).await;
    assert_fails(&out, 64, "LOCK_ENDPOINTS");
    let help = fx.ctl(&["session", "open", "--help"], &[]).await;
    assert_eq!(help.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("Nothing heartbeats it"),
        "--help says a kept session is not heartbeated"
    );

    // CMD's own code passes through; a signal-killed CMD is 128 + signal.
    for (script, code) in [("exit 0", 0), ("exit 3", 3), ("kill -TERM $$", 143)] {
        let out = fx
            .ctl(&["run", "own:1", "--", "sh", "-c", script], &[])
            .await;
        assert_eq!(out.status.code(), Some(code), "{script}: {out:?}");
    }
    let out = fx.ctl(&["run", "own:1", "--", "/no/such/cmd"], &[]).await;
    assert_fails(&out, 127, "cannot run /no/such/cmd");

    // No lock service: 69.
    let closed = format!("http://127.0.0.1:{}", test_support::free_port());
    let out = fx
        .ctl(&["run", "k", "--", "true"], &[("LOCK_ENDPOINTS", &closed)])
        .await;
    assert_fails(&out, 69, "unavailable");
    let out = fx.ctl(&["inspect", "k", "--endpoints", &closed], &[]).await;
    assert_fails(&out, 69, "unavailable");
    // A bad SDK setting in the environment: 78, naming the key.
    let out = fx
        .ctl(&["inspect", "k"], &[("LOCK_CLIENT_SAFETY_MARGIN", "2")])
        .await;
    assert_fails(&out, 78, "LOCK_CLIENT_SAFETY_MARGIN");
    // An unknown session: refused, 1.
    let out = fx.ctl(&["acquire", "k", "--session", uuid], &[]).await;
    assert_fails(&out, 1, "session unknown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_parses_and_inspect_and_revoke_work() {
    let fx = fixture().await;
    let verifier = FenceVerifier::parse(&test_support::public_keys()).unwrap();
    let session = check_session_open_json(&fx).await;
    let token = check_acquire_json(&fx, &session, &verifier).await;
    check_inspect_shows_the_grant(&fx, token).await;
    check_revoke(&fx, token).await;
    check_release_after_revoke(&fx, &session, token).await;
    check_run_json(&fx, &verifier).await;
}

/// `--json session open` prints the session: the session id.
async fn check_session_open_json(fx: &Fixture) -> String {
    let out = fx
        .ctl(
            &[
                "--json", "session", "open", "--owner", "ops", "--ttl", "30s",
            ],
            &[],
        )
        .await;
    let opened = json_line(&out.stdout);
    let session = opened["session_id"].as_str().unwrap().to_owned();
    assert_eq!(opened["ttl_ms"], 30_000);
    assert_eq!(opened["owner_id"], "ops");
    assert_eq!(opened["backend"], "postgres");
    session
}

/// `acquire json:1 --json` in `session` prints the grant and its verifiable proof: the token.
async fn check_acquire_json(fx: &Fixture, session: &str, verifier: &FenceVerifier) -> u64 {
    let out = fx
        .ctl(
            &[
                "acquire",
                "json:1",
                "--session",
                session,
                "--ttl",
                "20s",
                "--json",
            ],
            &[],
        )
        .await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let grant = json_line(&out.stdout);
    let token = grant["fencing_token"].as_u64().unwrap();
    assert_eq!(grant["lock_key"], "json:1");
    assert_eq!(grant["lease_ms"], 20_000);
    let key = LockKey::parse("json:1").unwrap();
    verifier
        .verify(&key, FencingToken(token), grant["proof"].as_str().unwrap())
        .expect("acquire prints the lock-server's proof of the token");
    token
}

/// `inspect json:1`, in JSON and text, shows the grant of `token` and no session id.
async fn check_inspect_shows_the_grant(fx: &Fixture, token: u64) {
    let out = fx.ctl(&["--json", "inspect", "json:1"], &[]).await;
    let info = json_line(&out.stdout);
    assert_eq!(
        (&info["held"], &info["fencing_token"], &info["owner_id"]),
        (&Value::Bool(true), &Value::from(token), &Value::from("ops"))
    );
    assert!(
        info.get("session_id").is_none(),
        "L7 never shows a session id"
    );
    // Text form: key=value pairs.
    let out = fx.ctl(&["inspect", "json:1"], &[]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("lock_key=json:1 held=true fencing_token="),
        "{text:?}"
    );
}

/// Revoke of json:1 (held with `token`): no admin credential is a clear one-line error; a
/// wrong one is refused; the right one revokes, once.
async fn check_revoke(fx: &Fixture, token: u64) {
    let out = fx.ctl(&["revoke", "json:1"], &[]).await;
    assert_fails(&out, 78, "LOCK_ADMIN_TOKEN is not set");
    let out = fx.ctl(&["--json", "revoke", "json:1"], &[]).await;
    let error = json_line(&out.stderr);
    assert_eq!(
        (&error["error"], &error["exit_code"]),
        (&Value::from("config"), &Value::from(78))
    );
    let client_token = test_support::keys::LOCK_CLIENT_TOKEN;
    let out = fx
        .ctl(&["revoke", "json:1"], &[("LOCK_ADMIN_TOKEN", client_token)])
        .await;
    assert_fails(&out, 1, "refused");
    let out = fx
        .ctl(
            &["--json", "revoke", "json:1"],
            &[("LOCK_ADMIN_TOKEN", ADMIN_TOKEN)],
        )
        .await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let revoked = json_line(&out.stdout);
    assert_eq!(
        (&revoked["revoked"], &revoked["fencing_token"]),
        (&Value::Bool(true), &Value::from(token))
    );
    let out = fx.ctl(&["--json", "inspect", "json:1"], &[]).await;
    assert_eq!(json_line(&out.stdout)["held"], false);
    let out = fx
        .ctl(
            &["--json", "revoke", "json:1"],
            &[("LOCK_ADMIN_TOKEN", ADMIN_TOKEN)],
        )
        .await;
    let again = json_line(&out.stdout);
    assert_eq!(
        (&again["revoked"], &again["fencing_token"]),
        (&Value::Bool(false), &Value::Null)
    );
}

/// `--json release json:1` in `session` with `token`: the exit code and its JSON output.
async fn release_json(fx: &Fixture, session: &str, token: u64) -> Output {
    let token_arg = token.to_string();
    fx.ctl(
        &[
            "--json",
            "release",
            "json:1",
            "--session",
            session,
            "--token",
            &token_arg,
        ],
        &[],
    )
    .await
}

/// The revoked grant of `token` is gone: release finds nothing (exit 1), and says so in
/// JSON; a fresh grant in the same session is released; a closed session is unknown.
async fn check_release_after_revoke(fx: &Fixture, session: &str, token: u64) {
    let out = release_json(fx, session, token).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(json_line(&out.stdout)["released"], false);
    assert_eq!(json_line(&out.stderr)["error"], "not_released");
    let out = fx
        .ctl(&["--json", "acquire", "json:1", "--session", session], &[])
        .await;
    let regrant = json_line(&out.stdout)["fencing_token"].as_u64().unwrap();
    assert!(regrant > token, "a revoked token is never reused");
    let out = release_json(fx, session, regrant).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(json_line(&out.stdout)["released"], true);
    let out = fx.ctl(&["--json", "session", "close", session], &[]).await;
    assert_eq!(json_line(&out.stdout)["closed"], true);
    let out = fx
        .ctl(&["acquire", "json:1", "--session", session], &[])
        .await;
    assert_fails(&out, 1, "session unknown");
}

/// run --json: its events on stderr, one object per line; CMD's output on stdout. CMD gets
/// the key, token and proof, and neither of lockctl's credentials.
async fn check_run_json(fx: &Fixture, verifier: &FenceVerifier) {
    let out = fx
        .ctl(
            &[
                "--json",
                "run",
                "json:2",
                "--",
                "sh",
                "-c",
                "echo \"$LOCK_KEY $LOCK_FENCING_TOKEN $LOCK_FENCING_PROOF ${LOCK_CLIENT_TOKEN:-none} ${LOCK_ADMIN_TOKEN:-none}\"",
            ],
            &[("LOCK_ADMIN_TOKEN", ADMIN_TOKEN)],
        )
        .await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let seen = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let parts: Vec<&str> = seen.split(' ').collect();
    assert_eq!(parts.len(), 5, "{seen:?}");
    assert_eq!((parts[0], parts[3], parts[4]), ("json:2", "none", "none"));
    let run_token = FencingToken(parts[1].parse().unwrap());
    verifier
        .verify(&LockKey::parse("json:2").unwrap(), run_token, parts[2])
        .expect("CMD gets a proof that verifies for its key and token");
    let events: Vec<Value> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(names, ["acquired", "exited"], "{events:?}");
    assert_eq!(events[0]["fencing_token"], run_token.0);
    assert_eq!(events[1]["exit_code"], 0);
    let out = fx.ctl(&["--json", "inspect", "json:2"], &[]).await;
    assert_eq!(
        json_line(&out.stdout)["held"],
        false,
        "run released the key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_to_run_is_forwarded_to_cmd_and_the_lock_released() {
    let fx = fixture().await;
    let record = fx.file("forwarded");
    let script = format!(
        "echo start >> {r}; trap 'echo term >> {r}; exit 7' TERM; i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        r = record.display()
    );
    let mut run = fx.spawn(
        "forward-run",
        &["run", "forward:1", "--", "sh", "-c", &script],
    );
    poll_until("CMD to start", Duration::from_secs(20), || async {
        read(&record).contains("start").then_some(())
    })
    .await;
    run.signal(Signal::SIGTERM);
    let status = wait_exit(&mut run).await;
    assert_eq!(status.code(), Some(7), "CMD's own code: {}", run.log());
    assert!(read(&record).contains("term"));
    let out = fx.ctl(&["--json", "inspect", "forward:1"], &[]).await;
    assert_eq!(
        json_line(&out.stdout)["held"],
        false,
        "released on the way out"
    );
}

#[test]
fn lockctl_speaks_the_lock_surface_only_through_the_sdk() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/lockctl/src");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        // fence-check is an HTTP client of the resource under test, never of the lock service:
        // it may link reqwest, and like every file it names no lock route.
        let prober = path.ends_with("fence_check.rs");
        let banned: &[&str] = if prober {
            &["/v1/"]
        } else {
            &["/v1/", "reqwest"]
        };
        for banned in banned {
            assert!(
                !text.contains(banned),
                "{} contains {banned:?}: only lock-client speaks the lock surface (C5 ct5-modules)",
                path.display()
            );
        }
        checked += 1;
    }
    assert!(checked >= 5, "read lockctl's sources ({checked} files)");
}

/// lockctl sends its credential to no `http://` URL unless told: without
/// `UNSAFE_PLAINTEXT_HTTP` (or `--unsafe-plaintext-http`) an `http://` endpoint, or a
/// fence-check resource URL, is one line and exit 64 before any call; with it, it works.
#[tokio::test]
async fn plain_http_is_refused_unless_told() {
    let f = fixture().await;
    let open = ["session", "open", "--owner", "plain", "--ttl", "5s"];
    let refused = f.ctl(&open, &[("UNSAFE_PLAINTEXT_HTTP", "false")]).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(64), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&f.server.url) && stderr.contains("UNSAFE_PLAINTEXT_HTTP=true"),
        "{stderr}"
    );
    let check = ["fence-check", "kv:doc", "http://127.0.0.1:9/kv/doc"];
    let refused = f
        .ctl(
            &check,
            &[
                ("UNSAFE_PLAINTEXT_HTTP", "false"),
                ("LOCK_ENDPOINTS", "https://127.0.0.1:9"),
            ],
        )
        .await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("http://127.0.0.1:9/kv/doc"), "{stderr}");

    let mut told = vec!["--unsafe-plaintext-http"];
    told.extend(open);
    let opened = f.ctl(&told, &[("UNSAFE_PLAINTEXT_HTTP", "false")]).await;
    assert_eq!(opened.status.code(), Some(0), "{opened:?}");
    let opened = f.ctl(&open, &[]).await;
    assert_eq!(opened.status.code(), Some(0), "{opened:?}");
}
