//! The fence kit on real processes: `lockctl fence-check` against payment-resource,
//! rail-proxy and the fenced key-value example (every promise kept) and against a resource
//! with its fence check removed (the paused holder's write accepted: exit 1); the fenced
//! file writer under `lockctl run`, refusing an older holder.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::put;
use fence_kit::{FenceError, FenceVerifier, FencedWrite, LockKey};
use harness::stack::{LockServer, Stack, StackOptions, start_lock_server};
use serde_json::Value;
use test_support::{ServiceProcess, poll_until};

/// Budget of one fence-check run (about one lease of 2 s, plus the writes).
const CHECK_DEADLINE: Duration = Duration::from_secs(60);
/// How long a started service may take to answer.
const START_DEADLINE: Duration = Duration::from_secs(30);
/// The probes a fence-check makes without `--claim-url`: six refusals, the current holder's
/// write and the paused holder's.
const PROMISES: usize = 8;

/// Runs `lockctl --json fence-check ARGS` against `lock_url`; returns the output and the
/// promise lines.
async fn fence_check(
    lock_url: &str,
    client_token: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Output, Vec<Value>) {
    let bin = test_support::cargo_bin("lockctl").unwrap();
    let mut command = tokio::process::Command::new(bin);
    command
        .args(["--json", "fence-check"])
        .args(args)
        .env("LOCK_ENDPOINTS", lock_url)
        .env("LOCK_CLIENT_TOKEN", client_token)
        .env("UNSAFE_PLAINTEXT_HTTP", "true")
        .envs(env.iter().copied())
        .kill_on_drop(true);
    let out = tokio::time::timeout(CHECK_DEADLINE, command.output())
        .await
        .expect("fence-check ends")
        .unwrap();
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    (out, lines)
}

/// The promise lines (not the summary), as (promise, kept, answer).
fn promises(lines: &[Value]) -> Vec<(String, bool, String)> {
    lines
        .iter()
        .filter(|l| l.get("promise").is_some())
        .map(|l| {
            (
                l["promise"].as_str().unwrap().to_owned(),
                l["kept"].as_bool().unwrap(),
                l["answer"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Asserts that fence-check exited 0 with `count` promises, all kept, the paused holder
/// fenced out; returns the promises.
fn all_kept(out: &Output, lines: &[Value], count: usize) -> Vec<(String, bool, String)> {
    let kept = promises(lines);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(kept.len(), count, "{kept:?}");
    assert!(kept.iter().all(|p| p.1), "{kept:?}");
    assert_eq!(
        answer_of(
            &kept,
            "the paused holder's write after its lease is refused"
        ),
        "409 FENCED_OUT"
    );
    kept
}

fn answer_of<'a>(promises: &'a [(String, bool, String)], promise: &str) -> &'a str {
    &promises
        .iter()
        .find(|p| p.0 == promise)
        .unwrap_or_else(|| panic!("no promise {promise:?} in {promises:?}"))
        .2
}

#[tokio::test]
async fn payment_resource_and_rail_proxy_keep_every_promise_of_the_fence() {
    let stack = Stack::start(StackOptions::default(), None).await.unwrap();
    let ids = stack.create_payouts("fence-check", 2).await.unwrap();
    let lock_url = &stack.lock_servers[0].url;
    let client = &stack.secrets.lock_client;
    let env = [("EXECUTOR_CREDENTIAL", stack.secrets.executor.as_str())];

    let key = format!("payout:{}", ids[0]);
    let url = format!("{}/v1/payouts/{}/claim", stack.payment_url, ids[0]);
    let args = [
        "--method",
        "POST",
        "--bearer-env",
        "EXECUTOR_CREDENTIAL",
        &key,
        &url,
    ];
    let (out, lines) = fence_check(lock_url, client, &args, &env).await;
    let kept = all_kept(&out, &lines, PROMISES);
    assert_eq!(
        answer_of(&kept, "a forged signature is refused"),
        "403 PROOF_INVALID"
    );

    // rail-proxy's fence is raised by the claim at payment-resource, as the pipeline does.
    let key = format!("payout:{}", ids[1]);
    let url = format!("{}/v1/payouts/{}/submit", stack.proxy_url, ids[1]);
    let claim = format!("{}/v1/payouts/{}/claim", stack.payment_url, ids[1]);
    let args = [
        "--method",
        "POST",
        "--bearer-env",
        "EXECUTOR_CREDENTIAL",
        "--claim-url",
        &claim,
        &key,
        &url,
    ];
    let (out, lines) = fence_check(lock_url, client, &args, &env).await;
    all_kept(&out, &lines, PROMISES + 2);
    assert_eq!(
        stack.rail_received(ids[1]).await.unwrap().len(),
        1,
        "the rail saw the current holder's submit only"
    );
}

/// A lock-server of its own, on a fresh database, for the examples.
async fn lock_server(logs: &Path) -> LockServer {
    let db = test_support::fresh_database().await;
    start_lock_server("lock-server", &db.url, &[], logs)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_fenced_kv_example_keeps_every_promise_and_a_copy_without_its_fence_does_not() {
    let logs = tempfile::tempdir().unwrap();
    let server = lock_server(logs.path()).await;
    let db = test_support::fresh_database().await;
    let port = test_support::free_port();
    let kv_bin = test_support::cargo_bin("fenced-kv").unwrap();
    let _kv = ServiceProcess::spawn(
        "fenced-kv",
        &kv_bin,
        &[],
        &[
            ("DATABASE_URL", db.url.clone()),
            ("FENCE_PUBLIC_KEYS", test_support::keys::public_keys()),
            ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
            ("UNSAFE_PLAINTEXT_HTTP", "true".to_owned()),
        ],
        logs.path(),
    );
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    poll_until("fenced-kv answers", START_DEADLINE, || async {
        let answer = http.get(format!("{base}/kv/doc")).send().await.ok()?;
        (answer.status() == 404).then_some(())
    })
    .await;
    let client = test_support::keys::LOCK_CLIENT_TOKEN;
    let url = format!("{base}/kv/doc");
    let (out, lines) = fence_check(&server.url, client, &["kv:doc", &url], &[]).await;
    all_kept(&out, &lines, PROMISES);

    let broken = without_fence().await;
    let (out, lines) = fence_check(&server.url, client, &["kv:doc", &broken], &[]).await;
    let kept = promises(&lines);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a broken promise is exit 1: {out:?}"
    );
    let failed: Vec<&str> = kept.iter().filter(|p| !p.1).map(|p| p.0.as_str()).collect();
    assert_eq!(
        failed,
        ["the paused holder's write after its lease is refused"],
        "{kept:?}"
    );
    assert_eq!(lines.last().unwrap()["broken"], 1);
}

/// A resource that verifies proofs but never checks its fence: the holder check removed.
async fn without_fence() -> String {
    async fn write(
        State(verifier): State<Arc<FenceVerifier>>,
        write: FencedWrite,
    ) -> Result<&'static str, FenceError> {
        write.verify(&verifier, &LockKey::parse("kv:doc").unwrap())?;
        Ok("written")
    }
    let verifier = Arc::new(FenceVerifier::parse(&test_support::keys::public_keys()).unwrap());
    let app = Router::new()
        .route("/kv/doc", put(write))
        .with_state(verifier);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/kv/doc", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test]
async fn the_fenced_file_writer_under_lockctl_run_refuses_an_older_holder() {
    let logs = tempfile::tempdir().unwrap();
    let server = lock_server(logs.path()).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.txt");
    let writer = test_support::cargo_bin("fenced-file").unwrap();
    let lockctl = test_support::cargo_bin("lockctl").unwrap();
    let keys = test_support::keys::public_keys();
    let run = |content: &'static str, grant: PathBuf| {
        let script =
            r#"echo "$LOCK_FENCING_TOKEN $LOCK_FENCING_PROOF" > "$3"; echo "$1" | "$0" "$2""#;
        let mut command = tokio::process::Command::new(&lockctl);
        command
            .args([
                "run",
                "file:report",
                "--ttl",
                "5s",
                "--",
                "sh",
                "-c",
                script,
            ])
            .arg(&writer)
            .arg(content)
            .arg(&file)
            .arg(grant)
            .env("LOCK_ENDPOINTS", &server.url)
            .env("LOCK_CLIENT_TOKEN", test_support::keys::LOCK_CLIENT_TOKEN)
            .env("UNSAFE_PLAINTEXT_HTTP", "true")
            .env("FENCE_PUBLIC_KEYS", &keys)
            .kill_on_drop(true);
        command
    };
    let first_grant = dir.path().join("first");
    for (content, grant) in [
        ("first", first_grant.clone()),
        ("second", dir.path().join("second")),
    ] {
        let out = tokio::time::timeout(CHECK_DEADLINE, run(content, grant).output())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(read(&file), format!("{content}\n"));
    }
    let first = read(&first_grant);
    let (token, proof) = first.trim().split_once(' ').unwrap();

    // The first holder, woken after the second wrote: fenced out, the file unchanged.
    let stale = |token: &str, proof: &str| {
        let mut command = std::process::Command::new(&writer);
        command
            .arg(&file)
            .env("LOCK_KEY", "file:report")
            .env("LOCK_FENCING_TOKEN", token)
            .env("LOCK_FENCING_PROOF", proof)
            .env("FENCE_PUBLIC_KEYS", &keys)
            .stdin(std::process::Stdio::null());
        command.output().unwrap()
    };
    let out = stale(token, proof);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("FENCED_OUT"),
        "{out:?}"
    );
    let out = stale("999999", proof);
    assert_eq!(out.status.code(), Some(1), "a relabelled token: {out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("PROOF_INVALID"),
        "{out:?}"
    );
    assert_eq!(read(&file), "second\n", "no refused write touched the file");
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
