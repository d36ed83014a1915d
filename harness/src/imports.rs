//! The import graph of one crate's modules, read from its sources, and the circles in it.
//!
//! A module names another through a path: `crate::a::b`, `super::x` (any number of
//! `super`s), `self::child`, or a bare `child::item` naming one of its own children; in a
//! `use` tree or in code. Each path resolves to the longest prefix that is a module of the
//! crate. Test code (from the first `#[cfg(test)]` on), comments and string literals are not
//! read; method calls are invisible (a graph of paths, not of calls). The crate root is left
//! out: it declares every module, so an edge to it is no circle worth a name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module by its path from the crate root (`"store::etcd"`; `""` is the root).
pub type Module = String;
/// Each module and the modules its non-test code names.
pub type Graph = BTreeMap<Module, BTreeSet<Module>>;

/// The graph of the crate whose sources are under `src`.
pub fn graph(src: &Path) -> Graph {
    let files: Vec<(Module, PathBuf)> = rust_files(src)
        .into_iter()
        .map(|file| (module_of(src, &file), file))
        .collect();
    let sources = files
        .iter()
        .map(|(module, file)| {
            let text = std::fs::read_to_string(file).expect("a source file");
            (module.clone(), text)
        })
        .collect();
    graph_of(&sources)
}

/// The graph of a crate given as its modules' texts.
pub fn graph_of(sources: &BTreeMap<Module, String>) -> Graph {
    let modules: BTreeSet<Vec<&str>> = sources.keys().map(|m| segments(m)).collect();
    let mut graph = Graph::new();
    for (module, text) in sources {
        let this = segments(module);
        let mut named: BTreeSet<Module> = paths(&code_of(text))
            .iter()
            .filter_map(|path| resolve(&this, path, &modules))
            .map(|target| target.join("::"))
            .collect();
        named.remove(module);
        named.remove("");
        graph.insert(module.clone(), named);
    }
    graph
}

/// The circles of `graph`: each a sorted set of two or more modules that reach each other.
pub fn circles(graph: &Graph) -> Vec<Vec<Module>> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_owned()];
        while let Some(next) = todo.pop() {
            for dep in graph.get(&next).into_iter().flatten() {
                if seen.insert(dep.clone()) {
                    todo.push(dep.clone());
                }
            }
        }
        seen
    };
    let mut found: Vec<Vec<Module>> = Vec::new();
    for module in graph.keys() {
        let reached = reach(module);
        if !reached.contains(module) {
            continue;
        }
        let circle: Vec<Module> = reached
            .into_iter()
            .filter(|other| reach(other).contains(module))
            .collect();
        if !found.contains(&circle) {
            found.push(circle);
        }
    }
    found
}

fn segments(module: &str) -> Vec<&str> {
    module.split("::").filter(|s| !s.is_empty()).collect()
}

fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file
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
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// The code of `text` before its tests, with comments and string literals blanked.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut code = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let next = chars.peek().copied();
        let char_literal = c == '\'' && (next == Some('\\') || chars.clone().nth(1) == Some('\''));
        match (c, next) {
            ('/', Some('/')) => {
                chars.by_ref().find(|&c| c == '\n');
                code.push('\n');
            }
            ('/', Some('*')) => {
                let mut last = ' ';
                chars
                    .by_ref()
                    .find(|&c| std::mem::replace(&mut last, c) == '*' && c == '/');
                code.push(' ');
            }
            ('"', _) => {
                let mut escaped = false;
                chars.by_ref().find(|&c| {
                    let end = c == '"' && !escaped;
                    escaped = c == '\\' && !escaped;
                    end
                });
                code.push_str("\"\"");
            }
            ('\'', _) if char_literal => {
                // A char literal ('"', '\n'), not a lifetime.
                let mut escaped = false;
                chars.by_ref().find(|&c| {
                    let end = c == '\'' && !escaped;
                    escaped = c == '\\' && !escaped;
                    end
                });
                code.push_str("' '");
            }
            _ => code.push(c),
        }
    }
    code
}

/// Every path of two or more segments in `code`: `use` trees expanded, then paths in code.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut rest = String::with_capacity(code.len());
    let mut tail = code;
    while let Some(at) = find_word(tail, "use") {
        rest.push_str(&tail[..at]);
        let after = &tail[at + "use".len()..];
        let end = after.find(';').unwrap_or(after.len());
        expand_use(&mut Vec::new(), &after[..end], &mut found);
        tail = &after[(end + 1).min(after.len())..];
    }
    rest.push_str(tail);
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut start = None;
    for (i, c) in rest.char_indices().chain([(rest.len(), ' ')]) {
        if is_ident(c) || c == ':' {
            let boundary = i == 0 || !rest[..i].ends_with(|p: char| is_ident(p) || p == ':');
            if start.is_none() && boundary && c != ':' {
                start = Some(i);
            }
        } else if let Some(from) = start.take() {
            let path: Vec<String> = rest[from..i].split("::").map(str::to_owned).collect();
            if path.len() > 1 && path.iter().all(|s| !s.is_empty()) {
                found.push(path);
            }
        }
    }
    found
}

/// The index of `word` in `text` standing alone (not part of a longer identifier).
fn find_word(text: &str, word: &str) -> Option<usize> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word)
        .map(|(i, _)| i)
        .find(|&i| !text[..i].ends_with(is_ident) && !text[i + word.len()..].starts_with(is_ident))
}

/// Each path of the `use` tree `tree`, under `prefix`.
fn expand_use(prefix: &mut Vec<String>, tree: &str, found: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or_default();
        let mut full = prefix.clone();
        full.extend(
            path.split("::")
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty()),
        );
        found.push(full);
        return;
    };
    let head: Vec<String> = tree[..open]
        .split("::")
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let depth_before = prefix.len();
    prefix.extend(head);
    let mut depth = 0;
    let mut from = 0;
    for (i, c) in inner.char_indices().chain([(inner.len(), ',')]) {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand_use(prefix, &inner[from..i], found);
                from = i + 1;
            }
            _ => {}
        }
    }
    prefix.truncate(depth_before);
}

/// The module of the crate that `path`, written in module `this`, names: the longest prefix
/// of its resolution that is a module; `None` when it names no module of the crate.
fn resolve<'a>(
    this: &[&'a str],
    path: &'a [String],
    modules: &BTreeSet<Vec<&'a str>>,
) -> Option<Vec<&'a str>> {
    let (mut target, rest): (Vec<&str>, &[String]) = match path.first()?.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (this.to_vec(), &path[1..]),
        "super" => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let up = this.len().checked_sub(ups)?;
            (this[..up].to_vec(), &path[ups..])
        }
        child => {
            let mut own = this.to_vec();
            own.push(child);
            if !modules.contains(&own) {
                return None;
            }
            (this.to_vec(), path)
        }
    };
    for segment in rest {
        target.push(segment);
        if !modules.contains(&target) {
            target.pop();
            break;
        }
    }
    Some(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_of(files: &[(&str, &str)]) -> Graph {
        graph_of(
            &files
                .iter()
                .map(|(m, t)| ((*m).to_owned(), (*t).to_owned()))
                .collect(),
        )
    }

    fn circle_names(files: &[(&str, &str)]) -> Vec<Vec<Module>> {
        circles(&crate_of(files))
    }

    #[test]
    fn a_child_reaching_up_to_a_parent_that_uses_it_is_a_circle() {
        let found = circle_names(&[
            ("", "mod store;"),
            (
                "store",
                "mod etcd;\npub use etcd::EtcdStore;\npub trait LockStore {}",
            ),
            (
                "store::etcd",
                "use super::LockStore;\npub struct EtcdStore;",
            ),
        ]);
        assert_eq!(
            found,
            vec![vec!["store".to_owned(), "store::etcd".to_owned()]]
        );
    }

    #[test]
    fn self_paths_globs_and_groups_resolve() {
        let found = circle_names(&[
            ("a", "mod b;\nfn f() { self::b::g() }"),
            ("a::b", "use super::*;"),
            ("c", "use crate::{a::b::{self, X}, d};"),
            ("d", "use super::c::Y;"),
        ]);
        assert_eq!(
            found,
            vec![
                vec!["a".to_owned(), "a::b".to_owned()],
                vec!["c".to_owned(), "d".to_owned()],
            ]
        );
    }

    #[test]
    fn siblings_through_a_shared_leaf_are_no_circle() {
        let found = circle_names(&[
            (
                "store",
                "mod contract;\nmod etcd;\npub use etcd::EtcdStore;",
            ),
            ("store::contract", "pub trait LockStore {}"),
            (
                "store::etcd",
                "use super::contract::LockStore;\npub struct EtcdStore;",
            ),
            (
                "store::etcd::keys",
                "use crate::store::contract::LockStore;",
            ),
        ]);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn comments_strings_tests_and_foreign_paths_are_not_read() {
        let graph = crate_of(&[
            (
                "a",
                "// super::b\nconst S: &str = \"crate::b\";\nfn f() { std::fs::read('\"') }",
            ),
            ("b", "fn g() {}\n#[cfg(test)]\nmod tests { use crate::a; }"),
        ]);
        assert!(graph.values().all(BTreeSet::is_empty), "{graph:?}");
    }
}
