//! The workspace module rule (`ct5-modules` in `docs/contracts/C5-config-build-and-naming.md`),
//! checked on `cargo metadata` output so it holds where cargo-deny is not installed:
//! - among workspace crates, `payout-executor` and `lockctl` depend on `lock-api` and
//!   `lock-client` only: the SDK is their only door (what the executor needs of process and
//!   TLS plumbing comes through `lock-client`'s `service` feature), and nothing they reach
//!   through it is a service, the HTTP kit, the store or the harness;
//! - `lock-client` never depends on `lock-server` or the HTTP kit;
//! - `fence-kit` never depends on `lock-server`, `lock-store` or `lock-client`: a resource
//!   owner adopts it without the lock service's code;
//! - `lock-sim` never depends on `lock-server` or `lock-client`: it runs `lock-core` (the SDK's
//!   decisions) and `lock-store` (the contract, the memory store and the replica's pure
//!   decisions), not the SDK's or the service's I/O stack;
//! - `lock-core` depends on `lock-api` only among workspace crates, and neither it nor
//!   `lock-sim` reaches a crate that does I/O or needs a runtime ([`NO_IO_CRATES`], checked on
//!   `cargo tree` by [`io_crates_in`]).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// The workspace crates `payout-executor` depends on (any kind of dependency): the SDK only.
pub const EXECUTOR_ALLOWED: &[&str] = &["lock-api", "lock-client"];
/// The workspace crates `lockctl` depends on: the same, a client of the SDK.
pub const LOCKCTL_ALLOWED: &[&str] = &["lock-api", "lock-client"];
/// What the SDK's clients never reach, directly or through what they depend on: the
/// services, the HTTP kit, the store, the payment surface and the harness.
pub const CLIENTS_NEVER_REACH: &[&str] = &[
    "lock-server",
    "lock-store",
    "service-kit",
    "payment-api",
    "payment-resource",
    "rail-proxy",
    "rail-stub",
    "harness",
];

/// Crates whose dependency trees hold no I/O: the SDK's decisions and the simulation of them.
pub const NO_IO_CRATES: &[&str] = &["lock-core", "lock-sim"];
/// Third-party crates that do I/O or need an async runtime: none of them may be in the tree of
/// a crate of [`NO_IO_CRATES`].
pub const IO_DEPENDENCIES: &[&str] = &["tokio", "reqwest", "nix", "hyper", "mio", "rustls"];

/// The crates of [`IO_DEPENDENCIES`] named in `tree`, the output of `cargo tree -e normal
/// --prefix none --format {p}` (one `name vX.Y.Z ...` per line).
pub fn io_crates_in(tree: &str) -> BTreeSet<String> {
    tree.lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| IO_DEPENDENCIES.contains(name))
        .map(str::to_owned)
        .collect()
}

/// Every breach of the rule in `metadata` (the JSON of `cargo metadata --format-version 1`),
/// as human-readable lines. Empty means the rule holds.
pub fn violations(metadata: &Value) -> Vec<String> {
    let members: BTreeSet<String> = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    // Workspace-internal edges: of every kind (normal, dev, build) for the crate itself, and
    // of the kinds that reach its build (normal, build) for what it depends on: a
    // dependency's dev-dependencies are not part of the dependent's graph.
    let mut all_edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut build_edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let Some(name) = package["name"].as_str() else {
            continue;
        };
        all_edges.entry(name.to_owned()).or_default();
        build_edges.entry(name.to_owned()).or_default();
        for dep in package["dependencies"].as_array().into_iter().flatten() {
            let Some(dep_name) = dep["name"].as_str().filter(|d| members.contains(*d)) else {
                continue;
            };
            all_edges
                .entry(name.to_owned())
                .or_default()
                .insert(dep_name.to_owned());
            if dep["kind"].as_str() != Some("dev") {
                build_edges
                    .entry(name.to_owned())
                    .or_default()
                    .insert(dep_name.to_owned());
            }
        }
    }
    let reachable = |from: &str| -> BTreeSet<String> {
        let direct = all_edges.get(from).cloned().unwrap_or_default();
        let mut seen = direct.clone();
        let mut stack: Vec<String> = direct.into_iter().collect();
        while let Some(next) = stack.pop() {
            for dep in build_edges.get(&next).into_iter().flatten() {
                if seen.insert(dep.clone()) {
                    stack.push(dep.clone());
                }
            }
        }
        seen
    };
    let mut found = Vec::new();
    for (client, allowed) in [
        ("payout-executor", EXECUTOR_ALLOWED),
        ("lockctl", LOCKCTL_ALLOWED),
    ] {
        for dep in all_edges.get(client).into_iter().flatten() {
            if !allowed.contains(&dep.as_str()) {
                found.push(format!("{client} depends on {dep}; allowed: {allowed:?}"));
            }
        }
        for reached in reachable(client) {
            let direct = all_edges.get(client).is_some_and(|d| d.contains(&reached));
            if CLIENTS_NEVER_REACH.contains(&reached.as_str()) && !direct {
                found.push(format!(
                    "{client} depends on {reached} (through its dependencies)"
                ));
            }
        }
    }
    for (crate_name, never) in [
        ("lock-client", "lock-server"),
        ("lock-client", "service-kit"),
        ("lock-sim", "lock-server"),
        ("lock-sim", "lock-client"),
        ("fence-kit", "lock-server"),
        ("fence-kit", "lock-store"),
        ("fence-kit", "lock-client"),
    ] {
        if reachable(crate_name).contains(never) {
            found.push(format!("{crate_name} depends on {never}"));
        }
    }
    let core_allowed = ["lock-api"];
    for dep in all_edges.get("lock-core").into_iter().flatten() {
        if !core_allowed.contains(&dep.as_str()) {
            found.push(format!(
                "lock-core depends on {dep}; allowed: {core_allowed:?}"
            ));
        }
    }
    found
}
