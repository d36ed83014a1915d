//! The house rules, each with its reason, in one file. Every rule has a test that reads the
//! tree and one that plants a breach and sees it caught.
//!
//! | rule | why |
//! |---|---|
//! | the module rule (`modules`; C5 `ct5-modules`, also `deny.toml`) | the executor and lockctl reach the lock service through the SDK only, so nothing bypasses its safety logic; the simulation and the fence kit stay free of the service's I/O |
//! | `lock-core` and `lock-sim` reach no crate that does I/O or needs a runtime (`modules`, on `cargo tree`) | the decisions every SDK runs are proven by a simulation that swaps only I/O; a runtime in the core would let a decision wait on the world |
//! | the map is true and short (`map`) | a newcomer reads `docs/ARCHITECTURE.md` first; a map that names missing files or grows into a manual misleads |
//! | one job per source file, at most 700 lines (`map`) | a file past that holds more than one room |
//! | no import circles among a crate's modules, through `crate::`, `super::`, `self::` paths and a parent's use of its child (`map`; resolver and fixtures in `harness::imports`) | a circle is one room split over files |
//! | no `use super::*` outside tests (`map`) | a glob of the parent lets every file touch every field: a room then is not one file, and its imports say nothing |
//! | no history in sources, tests, manifests, SQL function files and the migrations generated from them (`map`) | code says why; which issue asked is for the changelog and git (migrations before the first generated one are frozen by sqlx's checksums) |
//! | the SDK sleeps no thread and reads no wall clock; only `clock.rs` reads time (`sdk_sources`) | a deadline counts on the monotonic clock it was planned on, never on a clock that steps |
//! | the executor speaks the lock surface only through the SDK, passes tokens explicitly, and no held-check is a boolean (`executor_sources`; C2) | one door to the lock surface; a token in a thread-local follows the wrong task; a boolean check races its own answer |

mod map {
    //! The map is true and short: every crate has its section, every file it names exists, it
    //! stays under its length bound. No source file holds more than one job, no two modules of
    //! a crate import each other, and nothing tells history (the changelog and git do).

    use std::path::{Path, PathBuf};

    /// The map's length bound: a map, not a manual.
    const MAX_LINES: usize = 250;
    /// A source file's length bound: past it, a file holds more than one job.
    const SOURCE_LINES_MAX: usize = 700;
    /// Vendored forks: on the map, but held to their upstream's rules, not the house's (the etcd
    /// client keeps upstream's layout and lints, so that upstream fixes still apply).
    const VENDORED: &[&str] = &["vendor/etcd-client"];

    pub(super) fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the workspace root")
            .to_path_buf()
    }

    /// Every crate directory: `crates/*` and `harness`.
    fn crate_dirs() -> Vec<String> {
        let mut dirs: Vec<String> = std::fs::read_dir(root().join("crates"))
            .expect("read crates/")
            .filter_map(Result::ok)
            .filter(|e| e.path().join("Cargo.toml").exists())
            .map(|e| format!("crates/{}", e.file_name().to_string_lossy()))
            .collect();
        dirs.push("harness".into());
        dirs.sort();
        dirs
    }

    /// Whether `text` mentions history: the word for an issue and its number, or a seed task id.
    fn history_in(text: &str) -> Option<String> {
        let lower = text.to_lowercase();
        let bytes = lower.as_bytes();
        for (i, _) in lower.match_indices("issue ") {
            if bytes.get(i + 6).is_some_and(u8::is_ascii_digit) {
                return Some(lower[i..(i + 10).min(lower.len())].to_owned());
            }
        }
        for (i, _) in lower.match_indices("t-0") {
            if bytes.get(i + 3).is_some_and(u8::is_ascii_digit)
                && bytes.get(i + 4).is_some_and(u8::is_ascii_digit)
            {
                return Some(lower[i..i + 5].to_owned());
            }
        }
        None
    }

    /// The backticked spans of a line.
    fn code_spans(line: &str) -> impl Iterator<Item = &str> {
        line.split('`').skip(1).step_by(2)
    }

    /// A path the map names, if `span` is one: a workspace path or, inside a crate's section, a
    /// path relative to that crate. Trailing `::item`, `#anchor` and `:line` are not part of it.
    fn named_path(span: &str, section: Option<&str>) -> Option<PathBuf> {
        let path = span
            .split("::")
            .next()?
            .split('#')
            .next()?
            .split(':')
            .next()?
            .trim_end_matches(['.', ',', ';']);
        if path.contains(' ') || path.contains('*') || path.contains('{') {
            return None;
        }
        let workspace = [
            "crates/", "harness/", "docs/", "deploy/", "script/", "tasks/",
        ];
        let in_crate = ["src/", "tests/", "migrations/", "benches/"];
        if workspace.iter().any(|p| path.starts_with(p)) {
            return Some(root().join(path));
        }
        if in_crate.iter().any(|p| path.starts_with(p)) {
            return section.map(|dir| root().join(dir).join(path));
        }
        None
    }

    #[test]
    fn the_architecture_map_names_every_crate_and_only_files_that_exist() {
        let map = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).expect("the map");
        let lines: Vec<&str> = map.lines().collect();
        assert!(
            lines.len() < MAX_LINES,
            "docs/ARCHITECTURE.md has {} lines; the bound is {MAX_LINES}",
            lines.len()
        );
        let mut crates = crate_dirs();
        crates.extend(VENDORED.iter().map(|d| (*d).to_owned()));
        for dir in &crates {
            let header = format!("### `{dir}`");
            assert!(
                lines.iter().any(|l| l.trim_end() == header),
                "no section `{header}` for a crate of the workspace"
            );
        }
        let mut section: Option<&str> = None;
        let mut missing = Vec::new();
        for line in &lines {
            if let Some(header) = line.strip_prefix("### `") {
                section = crates
                    .iter()
                    .map(String::as_str)
                    .find(|dir| header.starts_with(&format!("{dir}`")));
                continue;
            }
            if line.starts_with("## ") {
                section = None;
            }
            for span in code_spans(line) {
                if let Some(path) = named_path(span, section)
                    && !path.exists()
                {
                    missing.push(format!("`{span}` (section {section:?})"));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "the map names what is not there: {missing:#?}"
        );
        assert_eq!(history_in(&map), None, "the map tells history");
    }

    /// Every `.rs` file under `dir`.
    pub(super) fn rust_files(dir: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir)
                .expect("read a source dir")
                .filter_map(Result::ok)
            {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
        }
        files
    }

    /// The first migration generated from the function files: the ones before it are frozen as
    /// applied (sqlx checks each applied migration's checksum, so their headers cannot change).
    const FIRST_GENERATED_MIGRATION: u32 = 9;

    /// Every file the history rule reads: each crate's sources, tests and manifest, the root
    /// manifest, the SQL function files and the migrations generated from them.
    fn files_that_say_why() -> Vec<PathBuf> {
        let mut files = vec![root().join("Cargo.toml")];
        for dir in crate_dirs() {
            let dir = root().join(dir);
            files.push(dir.join("Cargo.toml"));
            for part in ["src", "tests"] {
                if dir.join(part).is_dir() {
                    files.extend(rust_files(&dir.join(part)));
                }
            }
        }
        let sql = root().join("crates/lock-server");
        for entry in std::fs::read_dir(sql.join("sql/functions")).expect("sql/functions") {
            files.push(entry.expect("an entry").path());
        }
        for entry in std::fs::read_dir(sql.join("migrations")).expect("migrations") {
            let path = entry.expect("an entry").path();
            let number: u32 = path
                .file_name()
                .and_then(|n| n.to_str()?.split('_').next()?.parse().ok())
                .expect("a numbered migration");
            if number >= FIRST_GENERATED_MIGRATION {
                files.push(path);
            }
        }
        files
    }

    #[test]
    fn sources_tests_and_manifests_say_why_not_which_issue() {
        let mut found = Vec::new();
        let files = files_that_say_why();
        assert!(files.len() > 200, "read the house ({} files)", files.len());
        for path in files {
            let text = std::fs::read_to_string(&path).expect("a file of the house");
            if let Some(what) = history_in(&text) {
                found.push(format!("{}: {what}", path.display()));
            }
        }
        assert!(found.is_empty(), "history told: {found:#?}");
    }

    #[test]
    fn no_source_file_holds_more_than_one_room() {
        let mut long = Vec::new();
        for dir in crate_dirs() {
            for path in rust_files(&root().join(&dir).join("src")) {
                let lines = std::fs::read_to_string(&path)
                    .expect("a source file")
                    .lines()
                    .count();
                if lines > SOURCE_LINES_MAX {
                    long.push(format!("{}: {lines} lines", path.display()));
                }
            }
        }
        assert!(
            long.is_empty(),
            "source files over {SOURCE_LINES_MAX} lines (split them by job): {long:#?}"
        );
    }

    #[test]
    fn the_checks_bite() {
        // Built, not written: this file is read by the rule it tests.
        let issue = format!("as {} 13 asked", "issue");
        let task = format!("task {}-043", "T");
        assert_eq!(history_in(&issue), Some(format!("{} 13 a", "issue")));
        assert_eq!(history_in(&task), Some(format!("{}-043", "t")));
        assert_eq!(history_in("the issue is the clock"), None);
        assert!(named_path("src/nowhere.rs", Some("crates/lock-api")).is_some_and(|p| !p.exists()));
        assert!(named_path("src/lib.rs", Some("crates/lock-api")).is_some_and(|p| p.exists()));
        assert_eq!(named_path("LockStore::acquire", None), None);
    }

    /// The glob imports of a parent in `text`'s non-test code.
    fn parent_globs(text: &str) -> usize {
        // Test code starts at the first `#[cfg(...)]` that names `test`.
        text.lines()
            .take_while(|line| !(line.starts_with("#[cfg(") && line.contains("test")))
            .filter(|line| line.trim_start().starts_with("use super::*"))
            .count()
    }

    #[test]
    fn no_file_imports_its_parent_whole_outside_tests() {
        let mut found = Vec::new();
        for dir in crate_dirs() {
            for path in rust_files(&root().join(&dir).join("src")) {
                let text = std::fs::read_to_string(&path).expect("a source file");
                // A file of tests (`mod tests;` under `#[cfg(test)]`) imports what it tests.
                let tests_file = path.file_stem().is_some_and(|s| s == "tests");
                if !tests_file && parent_globs(&text) > 0 {
                    found.push(path.display().to_string());
                }
            }
        }
        assert!(found.is_empty(), "`use super::*` outside tests: {found:#?}");
        // The check bites, and spares tests.
        assert_eq!(parent_globs("use super::*;\nimpl Stack {}"), 1);
        assert_eq!(
            parent_globs("fn f() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n}"),
            0
        );
        assert_eq!(
            parent_globs("#[cfg(all(test, feature = \"x\"))]\nmod tests {\n    use super::*;\n}"),
            0
        );
    }

    #[test]
    fn no_two_modules_of_a_crate_import_each_other() {
        let mut found = Vec::new();
        for dir in crate_dirs() {
            let graph = harness::imports::graph(&root().join(&dir).join("src"));
            for circle in harness::imports::circles(&graph) {
                found.push(format!("{dir}: {}", circle.join(" <-> ")));
            }
        }
        assert!(found.is_empty(), "import circles: {found:#?}");
        // The check bites: a child that reaches up to a parent that re-exports it.
        let planted = std::collections::BTreeMap::from([
            (
                "store".to_owned(),
                "mod etcd;\npub use etcd::EtcdStore;".to_owned(),
            ),
            ("store::etcd".to_owned(), "use super::*;".to_owned()),
        ]);
        let graph = harness::imports::graph_of(&planted);
        assert_eq!(harness::imports::circles(&graph).len(), 1);
    }
}

mod modules {
    //! The module rule on the real workspace, and on a fixture graph that breaks it.

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

    /// The normal-dependency tree of `package`, features resolved for it alone.
    fn tree_of(package: &str) -> String {
        let output = std::process::Command::new(env!("CARGO"))
            .args(["tree", "-p", package, "-e", "normal", "--prefix", "none"])
            .args(["--format", "{p}", "--offline"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("run cargo tree");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "cargo tree -p {package}: {stderr}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    #[test]
    fn the_core_and_the_simulation_reach_no_io_crate() {
        for package in harness::module_rule::NO_IO_CRATES {
            let tree = tree_of(package);
            assert!(tree.lines().count() > 1, "read {package}'s tree: {tree}");
            let found = harness::module_rule::io_crates_in(&tree);
            assert!(found.is_empty(), "{package} reaches {found:?}:\n{tree}");
        }
        // The check bites: the SDK's own tree holds tokio, reqwest and nix.
        let sdk = harness::module_rule::io_crates_in(&tree_of("lock-client"));
        for io in ["tokio", "reqwest", "nix"] {
            assert!(sdk.contains(io), "lock-client's tree without {io}: {sdk:?}");
        }
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
}

mod sdk_sources {
    //! No blocking sleep in the SDK and no clock read outside its `Clock` seam.

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
        let files: Vec<_> = ["crates/lock-client/src", "crates/lock-core/src"]
            .iter()
            .flat_map(|dir| super::map::rust_files(&super::map::root().join(dir)))
            .collect();
        let mut found = Vec::new();
        for path in &files {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            found.extend(violations(&name, &std::fs::read_to_string(path).unwrap()));
        }
        assert!(
            files.len() >= 17,
            "read the SDK's sources and its core's ({} files)",
            files.len()
        );
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
}

mod executor_sources {
    //! The executor's sources: the SDK as its only door, explicit tokens, the guard rule.

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
        let files = sources(&super::map::root().join("crates/payout-executor/src"));
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
        let root = super::map::root();
        let mut files = sources(&root.join("crates/payout-executor/src"));
        let sdk = sources(&root.join("crates/lock-client/src"));
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
        // A boolean held-check, the shape the rule forbids.
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
}
