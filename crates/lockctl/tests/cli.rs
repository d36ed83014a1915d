//! The binary as a user first meets it: `--help`, and a mistake answered in one line with
//! `EX_USAGE`. (The commands against a live lock-server are `harness/tests/it/lockctl.rs`.)
//! Being an integration test, it also has cargo build the `lockctl` binary with the
//! workspace's tests, which is where `test_support::cargo_bins` finds it.

#![allow(clippy::unwrap_used)]

use std::process::Command;

fn lockctl(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lockctl"))
        .args(args)
        .env_remove("LOCK_ENDPOINTS")
        .output()
        .unwrap()
}

#[test]
fn help_names_every_command_and_exits_zero() {
    let out = lockctl(&["--help"]);
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    for command in ["session", "acquire", "release", "inspect", "revoke", "run"] {
        assert!(help.contains(command), "--help names {command}: {help}");
    }
}

#[test]
fn an_unknown_flag_is_one_line_on_stderr_and_exit_64() {
    let out = lockctl(&["acquire", "payout:1", "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("lockctl: "), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing on stdout: {out:?}");
}

#[test]
fn a_grace_that_outlives_the_lease_margin_is_refused_before_anything_starts() {
    // 10 s at the default margin 0.3: the SDK stops CMD 3 s before the server's expiry, and
    // CMD may take at most half of that. Nothing listens on the endpoint: the refusal comes
    // first, and CMD never runs.
    let marker = std::env::temp_dir().join(format!("lockctl-grace-{}", std::process::id()));
    let touch = format!("touch {}", marker.display());
    let out = Command::new(env!("CARGO_BIN_EXE_lockctl"))
        .args(["--endpoints", "https://127.0.0.1:9", "run", "job:1"])
        .args(["--ttl", "10s", "--grace", "5s", "--", "sh", "-c", &touch])
        .env_remove("LOCK_CLIENT_SAFETY_MARGIN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("--grace 5s") && stderr.contains("1s 500ms"),
        "{stderr}"
    );
    assert!(!marker.exists(), "CMD must not have run");
}
