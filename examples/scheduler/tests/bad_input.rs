//! Bad settings are one line on stderr and exit 2, before anything connects.

use std::process::Command;

fn run(env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_singleton-scheduler"))
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("the scheduler runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_settings_are_one_line_and_exit_2() {
    let endpoint = ("LOCK_ENDPOINTS", "http://127.0.0.1:9");
    let plain = ("UNSAFE_PLAINTEXT_HTTP", "true");
    let url = ("SCHEDULE_URL", "http://127.0.0.1:9/kv/schedule");
    let long = "n".repeat(4097);
    let cases: [(&[(&str, &str)], &str); 4] = [
        (&[endpoint, plain], "SCHEDULE_URL"),
        (
            &[endpoint, plain, url, ("SCHEDULE_EVERY_MS", "soon")],
            "invalid digit",
        ),
        (
            &[endpoint, plain, url, ("SCHEDULE_NODE", &long)],
            "limit is 4096",
        ),
        (
            &[endpoint, plain, url, ("SCHEDULE_ELECTION", "has space")],
            "lock_key",
        ),
    ];
    for (env, names) in cases {
        let (code, stderr) = run(env);
        assert_eq!(code, Some(2), "{env:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr:?}");
        assert!(stderr.starts_with("singleton-scheduler: "), "{stderr:?}");
        assert!(stderr.contains(names), "{stderr:?} names {names:?}");
    }
}
