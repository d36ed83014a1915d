//! `docs/ARCHITECTURE.md` stays a true, short map: every crate of the workspace has its
//! section, every file it names exists, it stays under its length bound, and neither it nor
//! any source file tells history ("issue 13", "T-043": that is what the changelog and git
//! are for). The rooms stay small too: no source file over its own length bound, and no two
//! modules of a crate importing each other.

use std::path::{Path, PathBuf};

/// The map's length bound: a map, not a manual.
const MAX_LINES: usize = 250;
/// A source file's length bound: past it, a file holds more than one job.
const SOURCE_LINES_MAX: usize = 700;
/// Vendored forks: on the map, but held to their upstream's rules, not the house's (the etcd
/// client keeps upstream's layout and lints, so that upstream fixes still apply).
const VENDORED: &[&str] = &["vendor/etcd-client"];

fn root() -> PathBuf {
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

/// Whether `text` mentions history: "issue N" or a seed task id "T-0NN".
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
fn rust_files(dir: &Path) -> Vec<PathBuf> {
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

#[test]
fn source_comments_say_why_not_which_issue() {
    let mut found = Vec::new();
    for dir in crate_dirs() {
        for path in rust_files(&root().join(dir).join("src")) {
            let text = std::fs::read_to_string(&path).expect("a source file");
            if let Some(what) = history_in(&text) {
                found.push(format!("{}: {what}", path.display()));
            }
        }
    }
    assert!(found.is_empty(), "history in source comments: {found:#?}");
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
    assert_eq!(history_in("as issue 13 asked"), Some("issue 13 a".into()));
    assert_eq!(history_in("task T-043"), Some("t-043".into()));
    assert_eq!(history_in("the issue is the clock"), None);
    assert!(named_path("src/nowhere.rs", Some("crates/lock-api")).is_some_and(|p| !p.exists()));
    assert!(named_path("src/lib.rs", Some("crates/lock-api")).is_some_and(|p| p.exists()));
    assert_eq!(named_path("LockStore::acquire", None), None);
}

/// A crate's modules (by path, `""` for the root) and the modules each one's non-test code
/// names through `crate::` or `super::`.
fn module_edges(
    src: &Path,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let files = rust_files(src);
    let module_of = |path: &Path| -> String {
        let rel = path
            .strip_prefix(src)
            .expect("under src")
            .with_extension("");
        let mut parts: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        if parts
            .last()
            .is_some_and(|p| ["mod", "lib", "main"].contains(&p.as_str()))
        {
            parts.pop();
        }
        parts.join("::")
    };
    let modules: std::collections::BTreeSet<String> = files.iter().map(|f| module_of(f)).collect();
    let mut edges = std::collections::BTreeMap::new();
    for file in &files {
        let this = module_of(file);
        let text = std::fs::read_to_string(file).expect("a source file");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut named = std::collections::BTreeSet::new();
        let mut note = |path: Vec<&str>| {
            // The longest prefix of the path that is a module of the crate.
            if let Some(module) = (1..=path.len())
                .rev()
                .map(|k| path[..k].join("::"))
                .find(|m| modules.contains(m))
            {
                named.insert(module);
            }
        };
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            let path: Vec<&str> = rest
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .next()
                .unwrap_or_default()
                .split("::")
                .filter(|p| p.starts_with(|c: char| c.is_ascii_lowercase()))
                .collect();
            note(path);
        }
        if code.contains("super::") && !this.is_empty() {
            let is_mod_file = file.file_stem().is_some_and(|s| s == "mod");
            let mut parent: Vec<&str> = this.split("::").collect();
            parent.pop();
            if !is_mod_file || !parent.is_empty() {
                named.insert(parent.join("::"));
            }
        }
        named.remove(&this);
        // The crate root declares every module; an edge to it is no circle worth a name.
        named.remove("");
        edges.insert(this, named);
    }
    edges
}

/// The circles among `edges`: each a set of two or more modules that reach each other.
fn circles(
    edges: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) -> Vec<Vec<String>> {
    let reach = |from: &str| {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo = vec![from.to_owned()];
        while let Some(next) = todo.pop() {
            for dep in edges.get(&next).into_iter().flatten() {
                if seen.insert(dep.clone()) {
                    todo.push(dep.clone());
                }
            }
        }
        seen
    };
    let mut found: Vec<Vec<String>> = Vec::new();
    for module in edges.keys() {
        let reached = reach(module);
        if !reached.contains(module) {
            continue;
        }
        let mut circle: Vec<String> = reached
            .into_iter()
            .filter(|other| reach(other).contains(module))
            .collect();
        circle.sort();
        if !found.contains(&circle) {
            found.push(circle);
        }
    }
    found
}

#[test]
fn no_two_modules_of_a_crate_import_each_other() {
    let mut found = Vec::new();
    for dir in crate_dirs() {
        for circle in circles(&module_edges(&root().join(&dir).join("src"))) {
            found.push(format!("{dir}: {}", circle.join(" -> ")));
        }
    }
    assert!(found.is_empty(), "import circles: {found:#?}");
    // The check bites: two modules naming each other are a circle.
    let planted = std::collections::BTreeMap::from([
        ("stack".to_owned(), ["compose".to_owned()].into()),
        ("compose".to_owned(), ["stack".to_owned()].into()),
        ("audit".to_owned(), std::collections::BTreeSet::new()),
    ]);
    assert_eq!(
        circles(&planted),
        vec![vec!["compose".to_owned(), "stack".to_owned()]]
    );
}
