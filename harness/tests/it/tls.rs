//! TLS on the lock surface, on real processes: a lock-server given the certificate
//! `lock-server --generate-tls` made serves HTTPS, and the SDK trusting that CA takes locks
//! through it; plain HTTP to the TLS port is answered 400 naming the scheme; a client of
//! another CA, an expired certificate and a certificate for another name are refused; a new
//! certificate is presented after SIGHUP; a service with neither a certificate nor
//! `UNSAFE_PLAINTEXT_HTTP` does not start; a client certificate is a credential without a
//! secret (A14).

use std::path::{Path, PathBuf};
use std::time::Duration;

use lock_api::{LockError, LockKey};
use lock_client::{AcquirePolicy, ClientTls, LockClient};
use nix::sys::signal::Signal;
use test_support::ServiceProcess;
use tls_kit::LocalCa;

const READY_DEADLINE: Duration = Duration::from_secs(30);

/// Writes `issued` as `{name}.pem` and `{name}-key.pem` in `dir`; their paths.
fn write_pair(dir: &Path, name: &str, issued: &tls_kit::Issued) -> (PathBuf, PathBuf) {
    let cert = dir.join(format!("{name}.pem"));
    let key = dir.join(format!("{name}-key.pem"));
    std::fs::write(&cert, &issued.cert_pem).unwrap();
    std::fs::write(&key, &issued.key_pem).unwrap();
    (cert, key)
}

fn https_client(ca: &Path) -> reqwest::Client {
    ClientTls {
        ca_file: Some(ca.to_owned()),
        identity: None,
        plaintext: false,
    }
    .apply(reqwest::Client::builder().timeout(Duration::from_secs(2)))
    .unwrap()
    .build()
    .unwrap()
}

/// A lock-server on `db_url` serving HTTPS with `cert` and `key`, ready.
async fn tls_server(
    name: &str,
    db_url: &str,
    cert: &Path,
    key: &Path,
    logs: &Path,
    extra: &[(&str, String)],
) -> (ServiceProcess, String) {
    let port = test_support::free_port();
    let mut env = test_support::keys::lock_server_env();
    env.extend([
        ("DATABASE_URL", db_url.to_owned()),
        ("LOCK_SERVER_BIND", format!("127.0.0.1:{port}")),
        ("UNSAFE_PLAINTEXT_HTTP", "false".to_owned()),
        ("TLS_CERT_FILE", cert.display().to_string()),
        ("TLS_KEY_FILE", key.display().to_string()),
    ]);
    env.extend(extra.iter().cloned());
    let bin = test_support::cargo_bin("lock-server").unwrap();
    let process = ServiceProcess::spawn(name, bin, &[], &env, logs);
    let log = || process.log();
    test_support::poll_until(&format!("{name} to listen"), READY_DEADLINE, || async {
        log().contains("\"listening\"").then_some(())
    })
    .await;
    (process, format!("https://127.0.0.1:{port}"))
}

fn sdk(url: &str, ca: &Path) -> LockClient {
    let tls = ClientTls {
        ca_file: Some(ca.to_owned()),
        ..ClientTls::default()
    };
    LockClient::builder([url.to_owned()])
        .credential(test_support::keys::LOCK_CLIENT_TOKEN)
        .tls(tls)
        .build()
        .unwrap()
}

async fn tls_refusals(url: &str, ca: &Path, reason: &str) -> f64 {
    let text = https_client(ca)
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    harness::metrics::Metrics::parse(&text)
        .unwrap()
        .sum("http_tls_refused_total", &[("reason", reason)])
        .unwrap()
}

/// The deployment's CA and certificate for `lock-server-1`, as an operator makes them with
/// `lock-server --generate-tls`, in `dir/tls`: that directory.
fn generate_tls(dir: &Path) -> PathBuf {
    let made = std::process::Command::new(test_support::cargo_bin("lock-server").unwrap())
        .arg("--generate-tls")
        .arg(dir.join("tls"))
        .args(["--tls-names", "lock-server-1"])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    dir.join("tls")
}

/// The SDK trusting `ca` over HTTPS to `url`: a session, a grant with its proof, a release.
async fn assert_sdk_takes_locks_over_https(url: &str, ca: &Path) {
    let client = sdk(url, ca);
    let session = client.open_session("tls-client").await.unwrap();
    let key = LockKey::parse("tls:1").unwrap();
    let handle = session
        .acquire(&key, Duration::from_secs(10), &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .expect("a free key");
    assert!(handle.fence_proof().is_some(), "a signed grant over TLS");
    session.release(handle).await.unwrap();
}

/// Plain HTTP to the TLS port `url`: 400 naming the scheme, as JSON, and counted.
async fn assert_plain_http_refused(url: &str, ca: &Path) {
    let plain = reqwest::get(url.replace("https://", "http://") + "/health/live")
        .await
        .unwrap();
    assert_eq!(plain.status(), 400);
    let body: serde_json::Value = plain.json().await.unwrap();
    assert_eq!(body["code"], "INVALID_ARGUMENT", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("use https://"),
        "{body}"
    );
    assert!(tls_refusals(url, ca, "plaintext").await >= 1.0);
}

/// A client that trusts another CA (written into `dir`) does not get in to `url` (nor does
/// the server think it did).
async fn assert_another_cas_client_refused(dir: &Path, url: &str, ca: &Path) {
    let stranger = LocalCa::new("another CA").unwrap();
    let stranger_ca = dir.join("stranger-ca.pem");
    std::fs::write(&stranger_ca, stranger.cert_pem()).unwrap();
    let refused = sdk(url, &stranger_ca).open_session("stranger").await;
    assert!(
        matches!(refused, Err(LockError::Unavailable { .. })),
        "{refused:?}"
    );
    test_support::poll_until(
        "the failed handshake to be counted",
        Duration::from_secs(10),
        || async { (tls_refusals(url, ca, "handshake").await >= 1.0).then_some(()) },
    )
    .await;
}

/// A new certificate from `local`, written into `tls_dir`, is presented by `server` (at `url`)
/// after SIGHUP: clients of the old CA `ca` are refused from then on, clients of the new one
/// (`local_ca`) get in.
async fn assert_new_certificate_presented_after_sighup(
    server: &ServiceProcess,
    url: &str,
    tls_dir: &Path,
    ca: &Path,
    local_ca: &Path,
    local: &LocalCa,
) {
    let renewed = local.issue(&["localhost", "127.0.0.1"]).unwrap();
    std::fs::write(tls_dir.join("lock-server-1.pem"), &renewed.cert_pem).unwrap();
    std::fs::write(tls_dir.join("lock-server-1-key.pem"), &renewed.key_pem).unwrap();
    server.signal(Signal::SIGHUP);
    test_support::poll_until(
        "the certificate to be read again",
        Duration::from_secs(10),
        || async { server.log().contains("\"tls_reloaded\"").then_some(()) },
    )
    .await;
    let now = https_client(local_ca)
        .get(format!("{url}/health/live"))
        .send()
        .await
        .unwrap();
    assert_eq!(now.status(), 200);
    assert!(
        https_client(ca)
            .get(format!("{url}/health/live"))
            .send()
            .await
            .is_err(),
        "the old CA no longer vouches for this server"
    );
}

/// A key (`wrong_key_pem`, written into `tls_dir`) that is not the certificate's is refused
/// on SIGHUP, and the certificate in force (of `local_ca`) stays.
async fn assert_mismatched_key_refused_on_sighup(
    server: &ServiceProcess,
    url: &str,
    tls_dir: &Path,
    local_ca: &Path,
    wrong_key_pem: &str,
) {
    std::fs::write(tls_dir.join("lock-server-1-key.pem"), wrong_key_pem).unwrap();
    server.signal(Signal::SIGHUP);
    test_support::poll_until(
        "the bad pair to be refused",
        Duration::from_secs(10),
        || async { server.log().contains("\"tls_reload_failed\"").then_some(()) },
    )
    .await;
    let still = https_client(local_ca)
        .get(format!("{url}/health/live"))
        .send()
        .await
        .unwrap();
    assert_eq!(still.status(), 200);
}

/// A14: the lock surface on TLS, and each way a connection to it is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a14_the_lock_surface_on_tls_refuses_plain_http_strangers_and_stale_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let tls_dir = generate_tls(dir.path());
    let ca = tls_dir.join("ca.pem");
    let db = test_support::fresh_database().await;
    let (server, url) = tls_server(
        "lock-server-tls",
        &db.url,
        &tls_dir.join("lock-server-1.pem"),
        &tls_dir.join("lock-server-1-key.pem"),
        logs.path(),
        &[],
    )
    .await;

    assert_sdk_takes_locks_over_https(&url, &ca).await;
    assert_plain_http_refused(&url, &ca).await;
    assert_another_cas_client_refused(dir.path(), &url, &ca).await;

    // An expired certificate and one for another name, each on a replica of its own.
    let local = LocalCa::new("deployment CA, second set").unwrap();
    let local_ca = dir.path().join("local-ca.pem");
    std::fs::write(&local_ca, local.cert_pem()).unwrap();
    let long_ago = time::OffsetDateTime::now_utc() - time::Duration::days(30);
    let expired = local
        .issue_valid(
            &["localhost", "127.0.0.1"],
            long_ago,
            long_ago + time::Duration::days(1),
        )
        .unwrap();
    let other_name = local.issue(&["other.example"]).unwrap();
    for (name, issued, why) in [
        ("expired", &expired, "expired"),
        ("wrong-name", &other_name, "not valid for"),
    ] {
        let (cert, key) = write_pair(dir.path(), name, issued);
        let (_replica, replica_url) =
            tls_server(name, &db.url, &cert, &key, logs.path(), &[]).await;
        let err = https_client(&local_ca)
            .get(format!("{replica_url}/health/live"))
            .send()
            .await
            .unwrap_err();
        let chain = format!("{:?}", anyhow::Error::from(err));
        assert!(
            chain.to_lowercase().contains(why),
            "{name}: the client says why: {chain}"
        );
    }

    assert_new_certificate_presented_after_sighup(&server, &url, &tls_dir, &ca, &local_ca, &local)
        .await;
    assert_mismatched_key_refused_on_sighup(&server, &url, &tls_dir, &local_ca, &expired.key_pem)
        .await;
}

/// A service given neither a certificate nor `UNSAFE_PLAINTEXT_HTTP` does not start, and
/// says what it needs; half a pair is refused too.
#[tokio::test(flavor = "multi_thread")]
async fn a_service_without_tls_or_the_plaintext_setting_does_not_start() {
    let db = test_support::fresh_database().await;
    let bin = test_support::cargo_bin("lock-server").unwrap();
    for (extra, wanted) in [
        (
            vec![("UNSAFE_PLAINTEXT_HTTP", "false")],
            "TLS_CERT_FILE and TLS_KEY_FILE are required",
        ),
        (
            vec![
                ("UNSAFE_PLAINTEXT_HTTP", "false"),
                ("TLS_CERT_FILE", "/nonexistent.pem"),
            ],
            "TLS_CERT_FILE and TLS_KEY_FILE go together",
        ),
        (
            vec![("TLS_CERT_FILE", "/a.pem"), ("TLS_KEY_FILE", "/b.pem")],
            "both set: choose one",
        ),
    ] {
        let mut env = test_support::keys::lock_server_env();
        env.push(("DATABASE_URL", db.url.clone()));
        env.push(("LOCK_SERVER_BIND", "127.0.0.1:0".to_owned()));
        let run = tokio::process::Command::new(&bin)
            .envs(env)
            .envs(extra.iter().copied())
            .output();
        let out = tokio::time::timeout(READY_DEADLINE, run)
            .await
            .expect("it stops")
            .unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(wanted), "{extra:?}: {stderr}");
    }
}

/// Every hop between the services on TLS (lock-servers, payment-resource, rail-proxy,
/// rail-stub; the executors and rail-proxy trusting only the stack's CA): payouts settle,
/// once each, every service said it listens on TLS, and the executors' metrics are read over
/// HTTPS only.
#[tokio::test(flavor = "multi_thread")]
async fn payouts_settle_with_every_service_on_tls() {
    let options = harness::stack::StackOptions {
        tls: true,
        ..harness::stack::StackOptions::default()
    };
    let mut stack = harness::stack::Stack::start(options, None).await.unwrap();
    assert!(stack.payment_url.starts_with("https://"));
    stack.start_executor("executor-1", &[]).await.unwrap();
    stack.start_executor("executor-2", &[]).await.unwrap();
    let ids = stack.create_payouts("tls", 20).await.unwrap();
    stack
        .wait_terminal(&ids, Duration::from_secs(60))
        .await
        .unwrap();
    for id in &ids {
        assert_eq!(
            stack.rail_received(*id).await.unwrap().len(),
            1,
            "payout {id}"
        );
    }
    let ledger = stack.ledger().await.unwrap();
    assert_eq!(ledger.payouts_with_extra_postings, 0);
    let listening_on_tls =
        |log: &str| log.contains("\"listening\"") && log.contains("\"tls\":true");
    for name in ["payment-resource", "rail-proxy", "rail-stub"] {
        assert!(
            listening_on_tls(&stack.service_log(name).unwrap()),
            "{name}"
        );
    }
    for log in stack.lock_server_logs() {
        assert!(listening_on_tls(&log));
    }
    // The executors' metrics port too: read over HTTPS, and not at all in clear.
    let mut attempts = 0.0;
    for executor in &stack.executors {
        assert!(executor.url.starts_with("https://"), "{}", executor.url);
        assert!(
            listening_on_tls(&executor.process.log()),
            "{}",
            executor.name
        );
        attempts += stack
            .metric(&executor.url, "payout_execute_seconds_count", &[])
            .await
            .unwrap();
        let plain = executor.url.replacen("https://", "http://", 1);
        assert!(
            reqwest::get(format!("{plain}/metrics")).await.is_err(),
            "{} answered plain HTTP",
            executor.name
        );
    }
    assert!(attempts >= 20.0, "{attempts} attempts counted");
}

/// Mutual TLS: a client certificate the server's client CA verified is the credential that
/// names it (`cert:app-m.clients`), with no bearer secret, bound to its owners and audited by
/// name; a certificate of another CA fails the handshake; a client that sends the verified
/// name as a header itself proves nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_certificate_is_a_credential_without_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let ca = LocalCa::new("deployment CA").unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap();
    let (cert, key) = write_pair(
        dir.path(),
        "server",
        &ca.issue(&["localhost", "127.0.0.1"]).unwrap(),
    );
    let client = write_pair(dir.path(), "app-m", &ca.issue(&["app-m.clients"]).unwrap());
    let stranger = LocalCa::new("another CA").unwrap();
    let forged = write_pair(
        dir.path(),
        "forged",
        &stranger.issue(&["app-m.clients"]).unwrap(),
    );
    let credentials = dir.path().join("credentials");
    std::fs::write(&credentials, "app-m client app-m-* cert:app-m.clients\n").unwrap();
    let db = test_support::fresh_database().await;
    let (server, url) = tls_server(
        "lock-server-mtls",
        &db.url,
        &cert,
        &key,
        logs.path(),
        &[
            ("TLS_CLIENT_CA_FILE", ca_file.display().to_string()),
            ("LOCK_CREDENTIALS_FILE", credentials.display().to_string()),
        ],
    )
    .await;
    let sdk_as = |identity: Option<(PathBuf, PathBuf)>| {
        let tls = ClientTls {
            ca_file: Some(ca_file.clone()),
            identity,
            plaintext: false,
        };
        LockClient::builder([url.clone()]).tls(tls).build().unwrap()
    };
    let session = sdk_as(Some(client.clone()))
        .open_session("app-m-1")
        .await
        .expect("the certificate is the credential");
    let key = LockKey::parse("mtls:1").unwrap();
    let handle = session
        .acquire(&key, Duration::from_secs(10), &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .expect("a free key");
    session.release(handle).await.unwrap();
    assert!(
        server
            .log()
            .lines()
            .any(|l| l.contains("\"session_created\"") && l.contains("\"credential\":\"app-m\"")),
        "audited by the certificate's credential"
    );
    match sdk_as(Some(client)).open_session("someone-else").await {
        Err(LockError::InvalidArgument { message }) => {
            assert!(
                message.contains("may not open sessions as owner"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
    // Neither a certificate nor a secret: 401.
    match sdk_as(None).open_session("app-m-2").await {
        Err(LockError::InvalidArgument { message }) => {
            assert!(message.contains("bearer token is required"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // The right name from the wrong CA: no handshake.
    let refused = sdk_as(Some(forged)).open_session("app-m-3").await;
    assert!(
        matches!(refused, Err(LockError::Unavailable { .. })),
        "{refused:?}"
    );
    // The verified name sent as a header by the client itself is removed before anyone reads it.
    let smuggled = https_client(&ca_file)
        .post(format!("{url}/v1/sessions"))
        .header("x-verified-client-certificate", "app-m.clients") // service_kit::VERIFIED_CLIENT_HEADER
        .json(&serde_json::json!({"owner_id": "app-m-4"}))
        .send()
        .await
        .unwrap();
    assert_eq!(smuggled.status(), 401);
}
