//! The executor's input is its configuration: each bad value ends the process at start with
//! one line naming the key and a non-zero exit, before it touches any service.

use std::process::Command;

#[test]
fn bad_configuration_is_one_line_naming_the_key_and_a_non_zero_exit() {
    let binary = test_support::cargo_bin("payout-executor").unwrap();
    let closed = format!("http://127.0.0.1:{}", test_support::free_port());
    let cases: [(&str, &str, &str); 19] = [
        ("RAIL_HOP_BUDGET", "9s", "RAIL_HOP_BUDGET"),
        (
            "LOCK_CLIENT_SAFETY_MARGIN",
            "0",
            "LOCK_CLIENT_SAFETY_MARGIN",
        ),
        (
            "LOCK_CLIENT_SAFETY_MARGIN",
            "1",
            "LOCK_CLIENT_SAFETY_MARGIN",
        ),
        (
            "LOCK_CLIENT_SAFETY_MARGIN",
            "abc",
            "LOCK_CLIENT_SAFETY_MARGIN",
        ),
        ("LOCK_SESSION_TTL", "ten", "LOCK_SESSION_TTL"),
        ("LOCK_DEFAULT_TTL", "0s", "LOCK_DEFAULT_TTL"),
        (
            "LOCK_CLIENT_REQUEST_TIMEOUT",
            "0s",
            "LOCK_CLIENT_REQUEST_TIMEOUT",
        ),
        ("LOCK_ENDPOINTS", ",", "LOCK_ENDPOINTS"),
        ("EXECUTOR_BATCH", "0", "batch"),
        ("EXECUTOR_BATCH", "many", "batch"),
        ("EXECUTOR_CONCURRENCY", "0", "concurrency"),
        ("EXECUTOR_CONCURRENCY", "65", "concurrency"),
        ("EXECUTOR_CONCURRENCY", "four", "concurrency"),
        ("RAIL_HOP_BUDGET", "soon", "rail.hop-budget"),
        ("EXECUTOR_BIND", "nowhere", "bind"),
        (
            "EXECUTOR_FAULT_SIGSTOP_STEP",
            "middle",
            "fault-sigstop-step",
        ),
        ("LOG_FORMAT", "xml", "log-format"),
        // The metrics port: HTTPS, or plain HTTP said so (neither is no start).
        ("UNSAFE_PLAINTEXT_HTTP", "false", "UNSAFE_PLAINTEXT_HTTP"),
        ("TLS_CERT_FILE", "/nonexistent/cert.pem", "TLS_KEY_FILE"),
    ];
    let mut failures = Vec::new();
    for (key, value, mentions) in cases {
        let output = Command::new(&binary)
            .env("LOCK_ENDPOINTS", &closed)
            .env("EXECUTOR_BIND", "127.0.0.1:0")
            .env("UNSAFE_PLAINTEXT_HTTP", "true")
            .env(key, value)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let one_line = stderr.trim().lines().count() == 1;
        if output.status.success() || !one_line || !stderr.contains(mentions) {
            failures.push(format!(
                "{key}={value}: exit {:?}, stderr {stderr:?}",
                output.status.code()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every URL the executor would send its credentials to is `https://`, or plain `http://`
/// only with `UNSAFE_PLAINTEXT_HTTP`: without it the process ends at start with one line
/// naming the key and the way to opt in, before it calls anything.
#[test]
fn plain_http_urls_are_refused_without_the_opt_in() {
    let binary = test_support::cargo_bin("payout-executor").unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The metrics port on TLS, so that only the client side is left to refuse.
    let tls = harness::stack::TlsFiles::make(dir.path()).unwrap();
    let (cert, key) = tls.server.clone().unwrap();
    let port = test_support::free_port();
    let (https, http) = (
        format!("https://127.0.0.1:{port}"),
        format!("http://127.0.0.1:{port}"),
    );
    for key_name in ["LOCK_ENDPOINTS", "PAYMENT_URL", "RAIL_PROXY_URL"] {
        let mut command = Command::new(&binary);
        command
            .env_remove("UNSAFE_PLAINTEXT_HTTP")
            .env("TLS_CERT_FILE", &cert)
            .env("TLS_KEY_FILE", &key)
            .env("TLS_CA_FILE", &tls.ca)
            .env("EXECUTOR_BIND", "127.0.0.1:0");
        for other in ["LOCK_ENDPOINTS", "PAYMENT_URL", "RAIL_PROXY_URL"] {
            command.env(other, if other == key_name { &http } else { &https });
        }
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{key_name}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{key_name}: {stderr}");
        assert!(
            stderr.contains(key_name) && stderr.contains("UNSAFE_PLAINTEXT_HTTP=true"),
            "{key_name}: {stderr}"
        );
    }
}
