//! Workspace binaries for end-to-end runs: built on demand with cargo, in the profile of
//! the calling executable, so `cargo test -p harness` works from a clean clone.

use std::path::PathBuf;
use std::process::Command;

/// Builds `name` (package and binary of the same name) and returns its path.
pub fn cargo_bin(name: &str) -> Result<PathBuf, String> {
    cargo_bins(&[name]).map(|mut paths| paths.remove(0))
}

/// Builds the workspace's binaries with one cargo call and returns the paths of those in
/// `names` (packages and binaries of the same names), in the same order.
///
/// Cargo resolves features per selection of packages and per command, and each resolution
/// builds the shared dependencies anew; so every caller of one kind asks for the same thing.
/// A test (its executable lives in `deps/`) asks for the workspace's test build,
/// `cargo test --workspace --no-run`, which also builds every package's binary and is what
/// `cargo test --workspace` has just built: nothing is compiled twice. A tool (the harness's
/// demo, campaign, benches) asks for `cargo build --workspace --bins`.
///
/// With `PREBUILT_BIN_DIR` set, nothing is built: the binaries are taken from that directory
/// (CI runs the demo and the campaigns on the binaries its one debug build made; a user can
/// point it at binaries built or installed elsewhere).
pub fn cargo_bins(names: &[&str]) -> Result<Vec<PathBuf>, String> {
    if let Some(dir) = std::env::var_os(PREBUILT_BIN_DIR) {
        return find_all(&PathBuf::from(dir), names);
    }
    let exe = std::env::current_exe().map_err(|e| format!("locate the running executable: {e}"))?;
    let mut dir = exe
        .parent()
        .ok_or("the executable has no parent directory")?
        .to_path_buf();
    let from_a_test = dir.ends_with("deps");
    if from_a_test {
        dir.pop();
    }
    let release = dir.file_name().is_some_and(|n| n == "release");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    // Not the variables cargo set for this test process: a build script that tracks one
    // (ring's tracks CARGO_MANIFEST_DIR) would see it change and rebuild, and the next
    // `cargo` from a shell would rebuild it back, under whatever else is running then.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if CARGO_SET_FOR_TESTS
            .iter()
            .any(|prefix| key.starts_with(prefix))
        {
            build.env_remove(key.as_ref());
        }
    }
    if from_a_test {
        build.args(["test", "--quiet", "--workspace", "--no-run"]);
    } else {
        build.args(["build", "--quiet", "--workspace", "--bins"]);
    }
    if release {
        build.arg("--release");
    }
    let status = build
        .status()
        .map_err(|e| format!("run cargo for {names:?}: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build of {names:?} failed with {status}"));
    }
    find_all(&dir, names)
}

/// Prefixes of the variables cargo sets for a test process it runs (never set by a user).
const CARGO_SET_FOR_TESTS: [&str; 8] = [
    "CARGO_MANIFEST_",
    "CARGO_PKG_",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_BIN_EXE_",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "CARGO_RUSTC_CURRENT_DIR",
];

/// Names the directory `cargo_bins` takes the binaries from instead of building them.
pub const PREBUILT_BIN_DIR: &str = "PREBUILT_BIN_DIR";

/// The path of each of `names` in `dir`, or which one is missing.
fn find_all(dir: &std::path::Path, names: &[&str]) -> Result<Vec<PathBuf>, String> {
    names
        .iter()
        .map(|name| {
            let path = dir.join(name);
            if path.exists() {
                Ok(path)
            } else {
                Err(format!("{} was not built", path.display()))
            }
        })
        .collect()
}
