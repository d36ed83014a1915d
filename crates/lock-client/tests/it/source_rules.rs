//! Seed T-040 criterion 7: no blocking sleep in the SDK's sources and no wall clock in any
//! expiry decision (the only monotonic source is `SystemClock` in clock.rs).

use std::path::Path;

const BANNED: [&str; 5] = [
    "thread::sleep",
    "SystemTime",
    "Utc::now",
    "Local::now",
    "chrono::Local",
];

/// What `text` (the file `name`) does that the rule forbids.
fn violations(name: &str, text: &str) -> Vec<String> {
    let mut found: Vec<String> = BANNED
        .iter()
        .filter(|w| text.contains(*w))
        .map(|w| format!("{name} uses {w}"))
        .collect();
    if name != "clock.rs" && text.contains("Instant::now") {
        found.push(format!("{name} reads time outside the Clock seam"));
    }
    found
}

#[test]
fn no_blocking_sleep_and_no_wall_clock_in_the_sdk() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut checked = 0;
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            found.extend(violations(&name, &std::fs::read_to_string(&path).unwrap()));
            checked += 1;
        }
    }
    assert!(checked >= 8, "read the SDK sources ({checked} files)");
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn the_check_catches_planted_violations() {
    assert_eq!(
        violations("session.rs", "fn f() { std::thread::sleep(d) }").len(),
        1
    );
    assert_eq!(
        violations("session.rs", "let t = std::time::SystemTime::now();").len(),
        1
    );
    assert_eq!(violations("session.rs", "let t = Instant::now();").len(), 1);
    assert!(violations("clock.rs", "let t = Instant::now();").is_empty());
}
