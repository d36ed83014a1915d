//! The module rule holds on the real workspace, and the check bites on a graph that breaks it.

use harness::module_rule::violations;

#[test]
fn the_workspace_obeys_the_module_rule() {
    let output = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let names: Vec<&str> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(
        names.contains(&"payout-executor")
            && names.contains(&"lock-client")
            && names.contains(&"lockctl"),
        "{names:?}"
    );
    assert_eq!(violations(&metadata), Vec::<String>::new());
}

#[test]
fn the_check_fails_on_a_graph_that_breaks_the_rule() {
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("../fixtures/bad-graph.json")).unwrap();
    let found = violations(&fixture);
    let has = |needle: &str| found.iter().any(|v| v.contains(needle));
    assert!(
        has("payout-executor depends on payment-resource"),
        "{found:?}"
    );
    assert!(
        has("payout-executor depends on lock-server"),
        "transitive edge: {found:?}"
    );
    assert!(
        has("lock-client depends on lock-server"),
        "a dev edge counts for the crate itself: {found:?}"
    );
    assert!(
        !has("payout-executor depends on test-support"),
        "a dependency's dev edges do not: {found:?}"
    );
    assert!(
        has("payout-executor depends on harness"),
        "the harness is no door to every crate: {found:?}"
    );
    assert!(
        has("payout-executor depends on payment-api"),
        "nor is anything reached through it: {found:?}"
    );
    assert!(
        has("lockctl depends on test-support"),
        "lockctl is held to the SDK too, its own dev edges included: {found:?}"
    );
    assert!(
        !has("lockctl depends on lock-server"),
        "lock-client's dev edge to lock-server is not lockctl's: {found:?}"
    );
    assert!(
        has("lock-sim depends on lock-server"),
        "the simulation runs lock-store, never the service (here a dev edge): {found:?}"
    );
    assert!(
        has("fence-kit depends on lock-store"),
        "a resource owner adopts the fence kit without the lock service's code: {found:?}"
    );
    assert!(
        has("payout-executor depends on service-kit"),
        "nor the HTTP kit behind a crate it must not depend on: {found:?}"
    );
    assert!(
        has("payout-executor depends on process-kit"),
        "the process kit reaches the executor through lock-client only: {found:?}"
    );
    assert!(
        has("payout-executor depends on tls-kit"),
        "so does the TLS kit: {found:?}"
    );
    assert_eq!(found.len(), 11, "{found:?}");
}
