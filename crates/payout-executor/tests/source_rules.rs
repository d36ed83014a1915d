//! Seed T-047 criteria 2-4 as tests: no temporary lock client, no module but lock-client
//! speaks the lock HTTP surface, and the fencing token is never propagated implicitly.
#![allow(clippy::unwrap_used)]

use std::path::Path;

/// What `text` does that the rules forbid.
fn violations(name: &str, text: &str) -> Vec<String> {
    let banned = [
        ("TemporaryLockServerClient", "a temporary lock client"),
        ("/v1/locks", "the lock HTTP surface"),
        ("/v1/sessions", "the lock HTTP surface"),
        ("/acquire", "the lock HTTP surface"),
        ("/renew", "the lock HTTP surface"),
        ("/release", "the lock HTTP surface"),
        ("thread_local!", "implicit token propagation"),
        ("task_local!", "implicit token propagation"),
    ];
    banned
        .iter()
        .filter(|(word, _)| text.contains(word))
        .map(|(word, why)| format!("{name}: {word} ({why})"))
        .collect()
}

#[test]
fn the_executor_speaks_locks_only_through_the_sdk_and_passes_tokens_explicitly() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    let mut files = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            found.extend(violations(&name, &std::fs::read_to_string(&path).unwrap()));
            files += 1;
        }
    }
    assert!(files >= 6, "read the executor's sources ({files})");
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn the_rules_catch_planted_violations() {
    assert_eq!(
        violations("x.rs", r#"http.post("/v1/locks/k/acquire")"#).len(),
        2
    );
    assert_eq!(
        violations("x.rs", "thread_local! { static T: u64 = 0; }").len(),
        1
    );
    assert_eq!(
        violations("x.rs", "struct TemporaryLockServerClient;").len(),
        1
    );
    assert!(violations("x.rs", "session.acquire(&key, lease, &policy)").is_empty());
}
