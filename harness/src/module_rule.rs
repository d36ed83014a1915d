//! The workspace module rule (C5 `ct5-modules`), checked on `cargo metadata` output so it
//! holds where cargo-deny is not installed:
//! - among workspace crates, `payout-executor` depends on `lock-api` and `lock-client` only
//!   (directly or through them);
//! - `lock-client` never depends on `lock-server`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// The crates `payout-executor` may reach among workspace crates.
pub const EXECUTOR_ALLOWED: &[&str] = &["lock-api", "lock-client"];

/// Every breach of the rule in `metadata` (the JSON of `cargo metadata --format-version 1`),
/// as human-readable lines. Empty means the rule holds.
pub fn violations(metadata: &Value) -> Vec<String> {
    let members: BTreeSet<String> = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    // Workspace-internal edges of every kind (normal, dev, build).
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let Some(name) = package["name"].as_str() else {
            continue;
        };
        let deps = package["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d["name"].as_str())
            .filter(|d| members.contains(*d))
            .map(str::to_owned);
        edges.entry(name.to_owned()).or_default().extend(deps);
    }
    let mut found = Vec::new();
    for reached in reachable(&edges, "payout-executor") {
        if !EXECUTOR_ALLOWED.contains(&reached.as_str()) {
            found.push(format!(
                "payout-executor depends on {reached}; allowed: {EXECUTOR_ALLOWED:?}"
            ));
        }
    }
    if reachable(&edges, "lock-client").contains("lock-server") {
        found.push("lock-client depends on lock-server".to_owned());
    }
    found
}

fn reachable(edges: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack: Vec<&str> = vec![from];
    while let Some(next) = stack.pop() {
        for dep in edges.get(next).into_iter().flatten() {
            if seen.insert(dep.clone()) {
                stack.push(dep);
            }
        }
    }
    seen
}
