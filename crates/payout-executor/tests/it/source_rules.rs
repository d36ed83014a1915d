//! Seed T-047 criteria 2-4 as tests: no temporary lock client, no module but lock-client
//! speaks the lock HTTP surface, and the fencing token is never propagated implicitly. And
//! the guard rule (T-040's hazard, T-047, C2): no held-check returns a `bool`, in the
//! executor or the SDK, and `check_still_held` is never read as one.

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

/// Words that make a function a held-check.
const HELD_WORDS: [&str; 7] = ["held", "lost", "lease", "alive", "expired", "holds", "owns"];

/// Held-checks that answer a `bool`, and `check_still_held` read as one.
fn boolean_guards(name: &str, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("fn ") {
        let rest = &text[at + 3..];
        let fn_name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let signature = rest.split(['{', ';']).next().unwrap_or_default();
        let returns_bool = signature
            .rsplit_once("->")
            .is_some_and(|(_, ret)| ret.trim() == "bool");
        let lower = fn_name.to_lowercase();
        if returns_bool && HELD_WORDS.iter().any(|w| lower.contains(w)) {
            found.push(format!(
                "{name}: fn {fn_name} -> bool (a held-check must be a guard)"
            ));
        }
    }
    let flat: String = text.split_whitespace().collect();
    for (at, _) in flat.match_indices("check_still_held(") {
        let call = &flat[at..];
        let close = call.find(')').unwrap_or(call.len());
        let after = &call[close + 1..];
        if [".is_ok()", ".is_err()", ".ok()", ".err()", ".unwrap_or"]
            .iter()
            .any(|b| after.starts_with(b))
        {
            found.push(format!("{name}: check_still_held(..) read as a boolean"));
        }
    }
    found
}

/// The `.rs` files under `dir`, recursively, as (name, text).
fn sources(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {dir:?}: {e}")) {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
            out.push((path.display().to_string(), text));
        }
    }
    out
}

#[test]
fn the_executor_speaks_locks_only_through_the_sdk_and_passes_tokens_explicitly() {
    let files = sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        files.len() >= 6,
        "read the executor's sources ({})",
        files.len()
    );
    let found: Vec<String> = files
        .iter()
        .flat_map(|(name, text)| violations(name, text))
        .collect();
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn no_held_check_is_a_boolean_in_the_executor_or_the_sdk() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = sources(&root.join("src"));
    let sdk = sources(&root.join("../lock-client/src"));
    assert!(sdk.len() >= 8, "read the SDK's sources ({})", sdk.len());
    files.extend(sdk);
    let found: Vec<String> = files
        .iter()
        .flat_map(|(name, text)| boolean_guards(name, text))
        .collect();
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn the_guard_rule_catches_planted_booleans() {
    // The shape the executor had before issue 8.
    let planted = "fn still_held(session: &LockClientSession, handle: &LockHandle, lost: &AtomicBool) -> bool {
        session.check_still_held(handle).is_ok() && !lost.load(Ordering::SeqCst)
    }";
    assert_eq!(boolean_guards("x.rs", planted).len(), 2, "{planted}");
    assert_eq!(
        boolean_guards("x.rs", "pub fn is_lease_expired(&self) -> bool;").len(),
        1
    );
    assert_eq!(
        boolean_guards(
            "x.rs",
            "if session.check_still_held(&h)\n    .is_err() { return; }"
        )
        .len(),
        1
    );
    assert!(boolean_guards("x.rs", "session.check_still_held(handle)?;").is_empty());
    assert!(boolean_guards("x.rs", "pub fn is_closed(&self) -> bool {").is_empty());
    assert!(
        boolean_guards(
            "x.rs",
            "fn guard(s: &S) -> Result<(), LockLost> { s.check_still_held(h) }"
        )
        .is_empty()
    );
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
