//! The attack suite, continued: callers with credentials of their own. Each client holds its
//! own secret, bound to the lock owners it may act as and removable alone; one credential's
//! flood, sessions or parked acquires are refused (429) before they take a replica from the
//! others. Real binaries on a real PostgreSQL (A11-A13).

use std::path::Path;
use std::time::{Duration, Instant};

use harness::metrics::Metrics;
use harness::stack::{LockServer, Stack, StackOptions, lock_http, start_lock_server};
use lock_api::{CredentialEntry, LockError, LockKey, OwnerRule};
use lock_client::{AcquirePolicy, LockClient};
use serde_json::{Value, json};

const SETTLE_DEADLINE: Duration = Duration::from_secs(60);
/// Lease of the tests' own grants.
const LEASE: Duration = Duration::from_secs(10);

/// A random secret, as `lockctl credential` makes them.
fn secret() -> String {
    format!("{:032x}{:032x}", fastrand::u128(..), fastrand::u128(..))
}

/// A credential `name` with `roles`, bound to `owners`; its secret and its file line.
fn credential(name: &str, roles: &[&str], owners: OwnerRule) -> (String, CredentialEntry) {
    let secret = secret();
    let mut entry = CredentialEntry::from_secret(name, roles, &secret);
    entry.owners = owners;
    (secret, entry)
}

fn sdk(endpoints: Vec<String>, secret: &str) -> LockClient {
    LockClient::builder(endpoints)
        .credential(secret)
        .tls(lock_client::ClientTls::plaintext()) // the test's servers speak plain HTTP
        .build()
        .unwrap()
}

/// The `event` lines of a JSON log that name `credential`.
fn audited(log: &str, event: &str, credential: &str) -> usize {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| {
            line.get("event").and_then(Value::as_str) == Some(event)
                && line.get("credential").and_then(Value::as_str) == Some(credential)
        })
        .count()
}

/// executor-a's lock credential as an operator makes it, with `lockctl credential`, its
/// secret written into `dir`: the credentials-file line and the secret.
fn lockctl_made_credential(dir: &Path) -> (String, String) {
    let secret_file = dir.join("exec-a.secret");
    let made = std::process::Command::new(test_support::cargo_bin("lockctl").unwrap())
        .args([
            "credential",
            "exec-a",
            "--roles",
            "client",
            "--owners",
            "executor-a",
        ])
        .arg("--secret-file")
        .arg(&secret_file)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let line = String::from_utf8(made.stdout).unwrap().trim().to_owned();
    let secret = std::fs::read_to_string(&secret_file).unwrap();
    assert!(!line.contains(&secret), "the line holds no secret");
    (line, secret)
}

/// Both executors settle payouts, and each is audited in the lock-server's log under its own
/// credential's name.
async fn assert_each_executor_audited_under_its_name(stack: &Stack) {
    let first = stack.create_payouts("per-client", 20).await.unwrap();
    stack.wait_terminal(&first, SETTLE_DEADLINE).await.unwrap();
    let logs = stack.lock_server_logs().join("\n");
    for name in ["exec-a", "exec-b"] {
        assert!(
            audited(&logs, "session_created", name) >= 1,
            "{name} audited"
        );
    }
    assert!(
        audited(&logs, "lock_granted", "exec-a") + audited(&logs, "lock_granted", "exec-b") >= 1
    );
}

/// exec-a's lock credential `lock_a` cannot open a session as another owner, through the SDK
/// or (with an owner it merely prefixes) over HTTP with `http`, a client presenting it.
async fn assert_no_session_as_another_owner(stack: &Stack, lock_a: &str, http: &reqwest::Client) {
    let as_b = sdk(stack.lock_endpoints(), lock_a)
        .open_session("executor-b")
        .await;
    match as_b {
        Err(LockError::InvalidArgument { message }) => assert!(
            message.contains("credential exec-a may not open sessions as owner executor-b"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    let answer = http
        .post(format!("{}/v1/sessions", stack.lock_endpoints()[0]))
        .json(&json!({"owner_id": "executor-a-2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 403, "an exact owner is no prefix");
}

/// Once removed, exec-a's credentials are refused on every service (its lock credential by
/// `http`, the client presenting it; `pay_a` at payment-resource), and exec-b settles what
/// follows.
async fn assert_removed_credential_is_shut_out(stack: &Stack, http: &reqwest::Client, pay_a: &str) {
    let answer = http
        .get(format!("{}/v1/locks/payout:1", stack.lock_endpoints()[0]))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 401);
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/offers", stack.payment_url))
        .bearer_auth(pay_a)
        .json(&json!({"executor": "executor-a", "limit": 1, "offer_ms": 1_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        answer.status(),
        401,
        "exec-a is out at payment-resource too"
    );
    let second = stack.create_payouts("after-revoke", 20).await.unwrap();
    stack.wait_terminal(&second, SETTLE_DEADLINE).await.unwrap();
    let logs = stack.lock_server_logs().join("\n");
    assert!(
        audited(&logs, "session_created", "exec-b") >= 1,
        "exec-b kept working"
    );
}

/// A11: two executors, each with its own lock and payments credential (one made by
/// `lockctl credential`); each is audited under its name, neither can open a session as the
/// other, and removing one from the files (SIGHUP) shuts it out while the other settles every
/// payout.
#[tokio::test(flavor = "multi_thread")]
async fn a11_each_client_has_its_own_credential_bound_to_its_owners_and_is_revoked_alone() {
    let mut stack = Stack::start(StackOptions::default(), None).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (lock_a_line, lock_a) = lockctl_made_credential(dir.path());
    let (lock_b, lock_b_entry) = credential(
        "exec-b",
        &["client"],
        OwnerRule::Listed(vec!["executor-b".into()]),
    );
    let (pay_a, pay_a_entry) = credential("exec-a", &["executor"], OwnerRule::Nobody);
    let (pay_b, pay_b_entry) = credential("exec-b", &["executor"], OwnerRule::Nobody);
    let lock_b_line = lock_b_entry.line();
    stack
        .accept_credentials(
            &[lock_a_line.clone(), lock_b_line.clone()],
            &[pay_a_entry.line(), pay_b_entry.line()],
        )
        .await
        .unwrap();
    for (name, lock, pay) in [
        ("executor-a", &lock_a, &pay_a),
        ("executor-b", &lock_b, &pay_b),
    ] {
        stack
            .start_executor(
                name,
                &[
                    ("LOCK_CLIENT_TOKEN", lock.clone()),
                    ("PAYOUT_EXECUTOR_TOKEN", pay.clone()),
                ],
            )
            .await
            .unwrap();
    }
    assert_each_executor_audited_under_its_name(&stack).await;
    let http = lock_http(&lock_a).unwrap();
    assert_no_session_as_another_owner(&stack, &lock_a, &http).await;

    // Removing exec-a shuts it out on every service; exec-b settles what follows.
    stack
        .accept_credentials(&[lock_b_line], &[pay_b_entry.line()])
        .await
        .unwrap();
    assert_removed_credential_is_shut_out(&stack, &http, &pay_a).await;
}

/// A lock-server of its own with a credentials file.
async fn server_with(lines: &[String], env: &[(&str, String)], logs: &Path) -> LockServer {
    let mut servers = replicas_with(lines, env, logs, &["lock-server"]).await;
    servers.pop().unwrap()
}

/// Replicas `names` over one fresh database, sharing one credentials file.
async fn replicas_with(
    lines: &[String],
    env: &[(&str, String)],
    logs: &Path,
    names: &[&str],
) -> Vec<LockServer> {
    let db = test_support::fresh_database().await;
    let file = logs.join("credentials");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let mut env = env.to_vec();
    env.push(("LOCK_CREDENTIALS_FILE", file.display().to_string()));
    let mut servers = Vec::new();
    for name in names {
        servers.push(start_lock_server(name, &db.url, &env, logs).await.unwrap());
    }
    servers
}

async fn metrics(url: &str) -> Metrics {
    let text = reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    Metrics::parse(&text).unwrap()
}

async fn limit_count(url: &str, limit: &str, outcome: &str) -> f64 {
    metrics(url)
        .await
        .sum(
            "credential_limit_total",
            &[("limit", limit), ("outcome", outcome)],
        )
        .unwrap()
}

fn p99(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[(samples.len() * 99 / 100).min(samples.len() - 1)]
}

/// `steady`'s acquire-release cycles for `period`; their latencies (every one must succeed).
async fn cycles(client: &LockClient, owner: &str, period: Duration) -> Vec<Duration> {
    let session = client.open_session(owner).await.unwrap();
    let mut took = Vec::new();
    let started = Instant::now();
    let mut n = 0;
    while started.elapsed() < period {
        n += 1;
        let at = Instant::now();
        let key = LockKey::parse(format!("steady:{n}")).unwrap();
        let handle = session
            .acquire(&key, LEASE, &AcquirePolicy::TRY_ONCE)
            .await
            .unwrap_or_else(|e| panic!("steady was refused: {e}"))
            .expect("a key nobody else uses");
        session.release(handle).await.unwrap();
        took.push(at.elapsed());
    }
    session.close().await;
    took
}

/// A12: a flood from one credential is answered 429 `RATE_LIMITED` with `Retry-After`, and
/// another credential's cycles all go through meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a12_a_flood_from_one_credential_leaves_the_others_their_replica() {
    let logs = tempfile::tempdir().unwrap();
    let (flood, mut flood_entry) = credential("flood", &["client"], OwnerRule::Any);
    flood_entry.limits.requests_per_second = Some(100);
    flood_entry.limits.burst = Some(100);
    let (steady, steady_entry) = credential("steady", &["client"], OwnerRule::Any);
    let server = server_with(&[flood_entry.line(), steady_entry.line()], &[], logs.path()).await;
    let client = sdk(vec![server.url.clone()], &steady);
    let before = p99(cycles(&client, "steady", Duration::from_secs(1)).await);

    let flood_http = lock_http(&flood).unwrap();
    let started = Instant::now();
    let flooders: Vec<_> = (0..16)
        .map(|_| {
            let http = flood_http.clone();
            let url = format!("{}/v1/locks/flooded", server.url);
            tokio::spawn(async move {
                let (mut ok, mut limited) = (0u32, 0u32);
                while started.elapsed() < Duration::from_secs(3) {
                    let answer = http.get(&url).send().await.unwrap();
                    match answer.status().as_u16() {
                        404 => ok += 1,
                        429 => {
                            let retry_after: u64 = answer.headers()["retry-after"]
                                .to_str()
                                .unwrap()
                                .parse()
                                .unwrap();
                            assert!(retry_after >= 1);
                            let body: Value = answer.json().await.unwrap();
                            assert_eq!(body["code"], "RATE_LIMITED", "{body}");
                            limited += 1;
                        }
                        other => panic!("the flood got {other}"),
                    }
                }
                (ok, limited)
            })
        })
        .collect();
    let during = p99(cycles(&client, "steady", Duration::from_secs(2)).await);
    let (mut ok, mut limited) = (0, 0);
    for flooder in flooders {
        let (o, l) = flooder.await.unwrap();
        ok += o;
        limited += l;
    }
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!(
        "flood: {ok} let through, {limited} refused in {elapsed:.1} s; steady p99 {before:?} before, {during:?} during"
    );
    assert!(limited > 0, "the flood was never refused");
    // The burst, then the rate: never more (a little slack for the refill while counting).
    assert!(
        f64::from(ok) <= 100.0 + 100.0 * elapsed + 5.0,
        "{ok} let through in {elapsed:.1} s"
    );
    assert!(limit_count(&server.url, "requests", "refused").await >= f64::from(limited));
}

/// A raw open of a session for `owner` at `url` with `http`'s credential.
async fn open_raw(http: &reqwest::Client, url: &str, owner: &str) -> reqwest::Response {
    http.post(format!("{url}/v1/sessions"))
        .json(&json!({"owner_id": owner, "ttl_ms": 30_000}))
        .send()
        .await
        .unwrap()
}

/// A raw acquire of `contended` at `url` in `session`, parked for up to 20 s.
async fn park_acquire(http: reqwest::Client, url: String, session: String) -> reqwest::Response {
    http.post(format!("{url}/v1/locks/contended/acquire"))
        .json(&json!({"session_id": session, "wait_ms": 20_000}))
        .send()
        .await
        .unwrap()
}

/// Opens greedy's three sessions at `url` with `http`; the fourth is refused
/// `TOO_MANY_SESSIONS`. The three session ids.
async fn open_greedy_sessions_to_quota(http: &reqwest::Client, url: &str) -> Vec<String> {
    let mut sessions = Vec::new();
    for n in 0..3 {
        let answer = open_raw(http, url, &format!("greedy-{n}")).await;
        assert_eq!(answer.status(), 201);
        let body: Value = answer.json().await.unwrap();
        sessions.push(body["session_id"].as_str().unwrap().to_owned());
    }
    let refused = open_raw(http, url, "greedy-3").await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "5", "every 429 says when");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "TOO_MANY_SESSIONS", "{body}");
    sessions
}

/// Once `contended` is free, greedy's `parked` acquires are granted in turn: the first one
/// granted releases (with `http`, at `url`), then the other is granted.
async fn assert_parked_granted_in_turn(
    http: &reqwest::Client,
    url: &str,
    mut parked: Vec<tokio::task::JoinHandle<reqwest::Response>>,
) {
    let first = test_support::poll_until(
        "one parked acquire to be granted",
        Duration::from_secs(10),
        || {
            let done = parked.iter().position(|p| p.is_finished());
            async move { done }
        },
    )
    .await;
    let granted = parked.remove(first).await.unwrap();
    assert_eq!(granted.status(), 200);
    let grant: Value = granted.json().await.unwrap();
    let released = http
        .post(format!("{url}/v1/locks/contended/release"))
        .json(&json!({"session_id": grant["session_id"], "fencing_token": grant["fencing_token"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(released.status(), 200);
    let second = parked.pop().unwrap().await.unwrap();
    assert_eq!(second.status(), 200, "the other, next");
}

/// The SDK with greedy's credential (`greedy`, also presented by `http`) backs off a
/// throttled open (quota full) at `url` and gets in once `session` closes.
async fn assert_sdk_open_gets_in_once_a_place_is_free(
    http: &reqwest::Client,
    url: &str,
    greedy: &str,
    session: &str,
) {
    let refused_before = limit_count(url, "sessions", "refused").await;
    let greedy_client = sdk(vec![url.to_owned()], greedy);
    let opening = tokio::spawn(async move { greedy_client.open_session("greedy-sdk").await });
    test_support::poll_until(
        "the SDK's open to be refused once",
        Duration::from_secs(10),
        || async { (limit_count(url, "sessions", "refused").await > refused_before).then_some(()) },
    )
    .await;
    let closed = http
        .delete(format!("{url}/v1/sessions/{session}"))
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status(), 204);
    let opened = opening.await.unwrap();
    assert!(opened.is_ok(), "{opened:?}");
}

/// A13: one credential's sessions and parked acquires stop at its quota (429) while another
/// credential opens and waits; the SDK backs off a throttled open and gets in once a place is
/// free.
#[tokio::test(flavor = "multi_thread")]
async fn a13_sessions_and_waiters_stop_at_the_credentials_quota() {
    let logs = tempfile::tempdir().unwrap();
    let (greedy, mut greedy_entry) = credential("greedy", &["client"], OwnerRule::Any);
    greedy_entry.limits.sessions = Some(3);
    greedy_entry.limits.waiters = Some(2);
    let (steady, steady_entry) = credential("steady", &["client"], OwnerRule::Any);
    let server = server_with(
        &[greedy_entry.line(), steady_entry.line()],
        &[],
        logs.path(),
    )
    .await;
    let url = &server.url;
    let http = lock_http(&greedy).unwrap();
    let sessions = open_greedy_sessions_to_quota(&http, url).await;
    let steady_client = sdk(vec![server.url.clone()], &steady);
    let holder = steady_client.open_session("steady").await.unwrap();

    // Waiters: steady holds the key; greedy parks two acquires, the third is refused.
    let contended = LockKey::parse("contended").unwrap();
    let held = holder
        .acquire(&contended, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    let parked: Vec<_> = sessions[..2]
        .iter()
        .map(|s| tokio::spawn(park_acquire(http.clone(), url.clone(), s.clone())))
        .collect();
    test_support::poll_until(
        "greedy's two acquires to take their places",
        Duration::from_secs(10),
        || async { (limit_count(url, "waiters", "allowed").await >= 2.0).then_some(()) },
    )
    .await;
    let third = park_acquire(http.clone(), url.clone(), sessions[2].clone()).await;
    assert_eq!(third.status(), 429);
    assert_eq!(third.headers()["retry-after"], "1", "every 429 says when");
    let body: Value = third.json().await.unwrap();
    assert_eq!(body["code"], "TOO_MANY_WAITERS", "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("credential greedy"),
        "{body}"
    );
    // steady still waits: its quota is its own.
    let other = steady_client.open_session("steady-2").await.unwrap();
    let waiting = tokio::spawn(async move {
        other
            .acquire(&contended, LEASE, &AcquirePolicy::default())
            .await
            .map(|h| h.is_some())
    });
    test_support::poll_until(
        "steady's acquire to take a place",
        Duration::from_secs(10),
        || async { (limit_count(url, "waiters", "allowed").await >= 3.0).then_some(()) },
    )
    .await;
    // Released: greedy's parked acquires are granted in turn.
    holder.release(held).await.unwrap();
    assert_parked_granted_in_turn(&http, url, parked).await;
    waiting.abort();
    assert_sdk_open_gets_in_once_a_place_is_free(&http, url, &greedy, &sessions[0]).await;
}

/// A13b: a credential's session quota holds across replicas. Its sessions are counted in the
/// store, so sessions opened through one replica and kept alive through another still count
/// on both (counted per replica, the second replica let a fleet twice over the quota in).
#[tokio::test(flavor = "multi_thread")]
async fn a13b_the_session_quota_holds_across_replicas() {
    let logs = tempfile::tempdir().unwrap();
    let (greedy, mut greedy_entry) = credential("greedy", &["client"], OwnerRule::Any);
    greedy_entry.limits.sessions = Some(3);
    let names = ["lock-server-a", "lock-server-b"];
    let [a, b] = <[LockServer; 2]>::try_from(
        replicas_with(&[greedy_entry.line()], &[], logs.path(), &names).await,
    )
    .unwrap_or_else(|_| panic!("two replicas"));
    let http = lock_http(&greedy).unwrap();
    let open = |url: &str, n: usize| {
        http.post(format!("{url}/v1/sessions"))
            .json(&json!({"owner_id": format!("greedy-{n}"), "ttl_ms": 30_000}))
            .send()
    };
    let mut sessions = Vec::new();
    for (n, url) in [&a.url, &a.url, &b.url].into_iter().enumerate() {
        let answer = open(url, n).await.unwrap();
        assert_eq!(answer.status(), 201, "session {n}");
        let body: Value = answer.json().await.unwrap();
        sessions.push(body["session_id"].as_str().unwrap().to_owned());
    }
    // Kept alive through the other replica: still counted everywhere.
    for session in &sessions[..2] {
        let beat = http
            .post(format!("{}/v1/sessions/{session}/heartbeat", b.url))
            .send()
            .await
            .unwrap();
        assert_eq!(beat.status(), 200);
    }
    for url in [&a.url, &b.url] {
        let refused = open(url, 9).await.unwrap();
        assert_eq!(refused.status(), 429, "{url}");
        assert!(refused.headers().contains_key("retry-after"));
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["code"], "TOO_MANY_SESSIONS", "{body}");
    }
    // A close through either replica gives the place back on both.
    let closed = http
        .delete(format!("{}/v1/sessions/{}", a.url, sessions[2]))
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status(), 204);
    assert_eq!(open(&b.url, 10).await.unwrap().status(), 201);
}

/// `lockctl credential` invocations it must refuse, each with what its one-line error names;
/// `secret_arg` is an existing secret file.
fn refused_credential_args(secret_arg: &str) -> [(Vec<&str>, &'static str); 4] {
    [
        (
            vec![
                "credential",
                "ops",
                "--roles",
                "admin",
                "--secret-file",
                secret_arg,
            ],
            "must not exist yet",
        ),
        (
            vec![
                "credential",
                "x",
                "--roles",
                "superuser",
                "--secret-file",
                "/tmp/never",
            ],
            "role \"superuser\" is not one of",
        ),
        (
            vec![
                "credential",
                "x",
                "--roles",
                "client",
                "--owners",
                "a*b",
                "--secret-file",
                "/tmp/never",
            ],
            "owners: \"a*b\"",
        ),
        (
            vec![
                "credential",
                "a/b",
                "--roles",
                "client",
                "--secret-file",
                "/tmp/never",
            ],
            "name \"a/b\"",
        ),
    ]
}

/// A lock-server given a credentials file (`good_line`, then a line that does not parse,
/// written into `dir`) does not start, and says which line.
async fn assert_bad_credentials_file_stops_the_start(dir: &Path, good_line: &str) {
    let db = test_support::fresh_database().await;
    let bad = dir.join("credentials");
    std::fs::write(&bad, format!("{good_line}ops client * sha256:00\n")).unwrap();
    let mut env = test_support::keys::lock_server_env();
    env.push(("DATABASE_URL", db.url.clone()));
    env.push(("LOCK_SERVER_BIND", "127.0.0.1:0".into()));
    env.push(("LOCK_CREDENTIALS_FILE", bad.display().to_string()));
    let started = tokio::process::Command::new(test_support::cargo_bin("lock-server").unwrap())
        .envs(env)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), started)
        .await
        .expect("a bad file stops the start")
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("line 2: secret: expected sha256:"),
        "{stderr}"
    );
}

/// `lockctl credential` refuses what a service would refuse (one line, exit 64) and never
/// overwrites a secret; a lock-server given a file that does not parse does not start, and
/// says which line.
#[tokio::test(flavor = "multi_thread")]
async fn credential_lines_are_made_and_checked_before_any_service_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let lockctl = test_support::cargo_bin("lockctl").unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(&lockctl)
            .args(args)
            .output()
            .unwrap()
    };
    let secret_file = dir.path().join("ops.secret");
    let secret_arg = secret_file.display().to_string();
    let made = run(&[
        "credential",
        "ops",
        "--roles",
        "admin",
        "--secret-file",
        &secret_arg,
    ]);
    assert!(made.status.success(), "{made:?}");
    let line = String::from_utf8(made.stdout).unwrap();
    assert!(line.starts_with("ops admin - sha256:"), "{line}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&secret_file)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let secret = std::fs::read_to_string(&secret_file).unwrap();
    assert_eq!(secret.len(), 43, "32 bytes, base64url");
    for (args, wanted) in refused_credential_args(&secret_arg) {
        let out = run(&args);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(wanted), "{args:?}: {stderr}");
    }
    assert_eq!(
        std::fs::read_to_string(&secret_file).unwrap(),
        secret,
        "not overwritten"
    );
    assert!(!Path::new("/tmp/never").exists());

    assert_bad_credentials_file_stops_the_start(dir.path(), &line).await;
}
