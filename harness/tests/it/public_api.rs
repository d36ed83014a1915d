//! The Rust SDK's public API, pinned: every item a user of `lock-client` can name (with all
//! features on), listed from its sources and compared with `crates/lock-client/public-api.txt`.
//! A change to the API is then a deliberate diff of that file, reviewed like code; the root
//! stays small.
//!
//! The list follows the crate's module tree from `lib.rs`: `pub` items of public modules,
//! `pub use` re-exports (a local item under its exported name; another crate's item as its
//! path), and the `pub` methods and constants of every inherent `impl` of a listed type, in
//! any file. Doc comments and bodies are left out; `derive`, `cfg`, `non_exhaustive` and
//! `must_use` stay, since they are part of what a user may rely on.
//!
//! `UPDATE_PUBLIC_API=1 cargo test --workspace -- public_api` rewrites the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The crate whose API is pinned, and its snapshot.
const SDK_SRC: &str = "crates/lock-client/src";
const SDK_SNAPSHOT: &str = "crates/lock-client/public-api.txt";
/// How many names the SDK's root may export: what a user must learn first stays small. A
/// primitive beyond the lock earns a module there (`election`), never its types.
const ROOT_ITEMS_MAX: usize = 21;
/// Attributes that are part of an item's contract.
const KEPT_ATTRIBUTES: [&str; 4] = ["derive", "cfg", "non_exhaustive", "must_use"];

/// A crate's modules by path (`crate`, `crate::admin`), each with its items.
struct Sources {
    modules: BTreeMap<String, Vec<syn::Item>>,
}

impl Sources {
    fn read(src: &Path) -> Self {
        let mut sources = Self {
            modules: BTreeMap::new(),
        };
        sources.load("crate", &src.join("lib.rs"), src);
        sources
    }

    /// Reads the module `path` from `file`; its children's files are under `dir`.
    fn load(&mut self, path: &str, file: &Path, dir: &Path) {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        for item in &parsed.items {
            let syn::Item::Mod(module) = item else {
                continue;
            };
            if is_test_only(&module.attrs) {
                continue;
            }
            let child = format!("{path}::{}", module.ident);
            match &module.content {
                Some((_, items)) => {
                    self.modules.insert(child, items.clone());
                }
                None => {
                    let flat = dir.join(format!("{}.rs", module.ident));
                    let nested = dir.join(module.ident.to_string()).join("mod.rs");
                    let file = if flat.is_file() { flat } else { nested };
                    let child_dir: PathBuf = dir.join(module.ident.to_string());
                    self.load(&child, &file, &child_dir);
                }
            }
        }
        self.modules.insert(path.to_owned(), parsed.items);
    }

    /// The items of `module`.
    fn items(&self, module: &str) -> &[syn::Item] {
        self.modules
            .get(module)
            .unwrap_or_else(|| panic!("no module {module}"))
    }

    /// The `pub` methods and constants of every inherent impl of `type_name`, rendered.
    fn methods_of(&self, type_name: &str) -> Vec<String> {
        let mut methods = Vec::new();
        for items in self.modules.values() {
            for item in items {
                let syn::Item::Impl(block) = item else {
                    continue;
                };
                if block.trait_.is_some() || self_type(block).as_deref() != Some(type_name) {
                    continue;
                }
                for member in &block.items {
                    if let Some(line) = render_member(member) {
                        methods.push(line);
                    }
                }
            }
        }
        methods.sort();
        methods
    }

    /// `impl Trait for type_name` lines, for the traits the crate implements by hand.
    fn trait_impls_of(&self, type_name: &str) -> Vec<String> {
        let mut impls = Vec::new();
        for items in self.modules.values() {
            for item in items {
                let syn::Item::Impl(block) = item else {
                    continue;
                };
                if let (Some((_, path, _)), Some(name)) = (&block.trait_, self_type(block)) {
                    if name == type_name {
                        impls.push(format!("impl {} for {name}", tokens(path)));
                    }
                }
            }
        }
        impls.sort();
        impls
    }
}

/// The type an impl block is for, by its last path segment.
fn self_type(block: &syn::ItemImpl) -> Option<String> {
    match block.self_ty.as_ref() {
        syn::Type::Path(path) => path.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && tokens(&a.meta)
                .split(['(', ')', ',', ' '])
                .any(|w| w == "test")
    })
}

fn is_pub(vis: &syn::Visibility) -> bool {
    matches!(vis, syn::Visibility::Public(_))
}

/// A node's tokens, spaced as rustfmt would around paths and attributes.
fn tokens(node: &impl quote::ToTokens) -> String {
    node.to_token_stream()
        .to_string()
        .replace(" :: ", "::")
        .replace("# [", "#[")
        .replace(" (", "(")
}

fn keep_contract_attributes(attrs: &mut Vec<syn::Attribute>) {
    attrs.retain(|a| KEPT_ATTRIBUTES.iter().any(|kept| a.path().is_ident(kept)));
}

/// An item as one line of prettyplease output: contract attributes, no docs, no bodies, no
/// private fields.
fn render(item: &syn::Item) -> String {
    let mut item = item.clone();
    strip(&mut item);
    let file = syn::File {
        shebang: None,
        attrs: Vec::new(),
        items: vec![item],
    };
    prettyplease::unparse(&file)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn strip(item: &mut syn::Item) {
    match item {
        syn::Item::Fn(f) => {
            keep_contract_attributes(&mut f.attrs);
            f.block.stmts.clear();
        }
        syn::Item::Struct(s) => {
            keep_contract_attributes(&mut s.attrs);
            strip_fields(&mut s.fields);
        }
        syn::Item::Enum(e) => {
            keep_contract_attributes(&mut e.attrs);
            for variant in &mut e.variants {
                keep_contract_attributes(&mut variant.attrs);
                for field in variant.fields.iter_mut() {
                    field.attrs.retain(|a| a.path().is_ident("from"));
                }
            }
        }
        syn::Item::Trait(t) => {
            keep_contract_attributes(&mut t.attrs);
            for member in &mut t.items {
                if let syn::TraitItem::Fn(f) = member {
                    f.attrs.clear();
                    f.default = None;
                }
            }
        }
        syn::Item::Const(c) => keep_contract_attributes(&mut c.attrs),
        syn::Item::Type(t) => keep_contract_attributes(&mut t.attrs),
        _ => {}
    }
}

fn strip_fields(fields: &mut syn::Fields) {
    let kept: syn::punctuated::Punctuated<syn::Field, syn::Token![,]> = fields
        .iter()
        .filter(|f| is_pub(&f.vis))
        .cloned()
        .map(|mut f| {
            f.attrs.clear();
            f
        })
        .collect();
    match fields {
        syn::Fields::Named(named) => named.named = kept,
        syn::Fields::Unnamed(unnamed) => unnamed.unnamed = kept,
        syn::Fields::Unit => {}
    }
}

/// A `pub` method or constant of an impl block, as one line.
fn render_member(member: &syn::ImplItem) -> Option<String> {
    match member {
        syn::ImplItem::Fn(f) if is_pub(&f.vis) => {
            let item = syn::Item::Fn(syn::ItemFn {
                attrs: f.attrs.clone(),
                vis: f.vis.clone(),
                sig: f.sig.clone(),
                block: Box::new(f.block.clone()),
            });
            Some(render(&item))
        }
        syn::ImplItem::Const(c) if is_pub(&c.vis) => {
            let mut c = c.clone();
            keep_contract_attributes(&mut c.attrs);
            Some(format!("pub const {}: {}", c.ident, tokens(&c.ty)))
        }
        _ => None,
    }
}

/// The visibility and the name of an item that declares one.
fn declared(item: &syn::Item) -> Option<(&syn::Visibility, &syn::Ident)> {
    Some(match item {
        syn::Item::Const(i) => (&i.vis, &i.ident),
        syn::Item::Enum(i) => (&i.vis, &i.ident),
        syn::Item::Fn(i) => (&i.vis, &i.sig.ident),
        syn::Item::Mod(i) => (&i.vis, &i.ident),
        syn::Item::Static(i) => (&i.vis, &i.ident),
        syn::Item::Struct(i) => (&i.vis, &i.ident),
        syn::Item::Trait(i) => (&i.vis, &i.ident),
        syn::Item::Type(i) => (&i.vis, &i.ident),
        _ => return None,
    })
}

/// The name an item declares, if it has one.
fn ident_of(item: &syn::Item) -> Option<String> {
    declared(item).map(|(_, ident)| ident.to_string())
}

/// Where a `use` path starts: a module of this crate, or another crate.
fn resolve_module(sources: &Sources, module: &str, path: &[String]) -> Option<String> {
    let (first, rest) = path.split_first()?;
    let mut at = match first.as_str() {
        "crate" => "crate".to_owned(),
        "self" => module.to_owned(),
        "super" => module.rsplit_once("::")?.0.to_owned(),
        child if sources.modules.contains_key(&format!("{module}::{child}")) => {
            format!("{module}::{child}")
        }
        _ => return None,
    };
    for segment in rest {
        at = format!("{at}::{segment}");
    }
    sources.modules.contains_key(&at).then_some(at)
}

/// The public API: one line per item, method and re-export, sorted.
fn list(src: &Path) -> Vec<String> {
    let sources = Sources::read(src);
    let mut lines = Vec::new();
    walk(&sources, "crate", "lock_client", &mut lines);
    lines.sort();
    lines.dedup();
    lines
}

/// Lists module `module`'s public items under the exported path `exported`.
fn walk(sources: &Sources, module: &str, exported: &str, lines: &mut Vec<String>) {
    for item in sources.items(module) {
        match item {
            syn::Item::Mod(m) if is_pub(&m.vis) => {
                let child = format!("{module}::{}", m.ident);
                let cfg = m.attrs.iter().find(|a| a.path().is_ident("cfg"));
                let cfg = cfg.map(|a| format!("{} ", tokens(a))).unwrap_or_default();
                lines.push(format!("{exported}::{} : {cfg}pub mod", m.ident));
                walk(sources, &child, &format!("{exported}::{}", m.ident), lines);
            }
            syn::Item::Use(u) if is_pub(&u.vis) => {
                for (path, name) in leaves(&u.tree, Vec::new()) {
                    export(sources, module, exported, &path, &name, lines);
                }
            }
            syn::Item::Mod(_) | syn::Item::Use(_) => {}
            other => {
                if declared(other).is_some_and(|(vis, _)| is_pub(vis)) {
                    push_item(sources, other, exported, lines);
                }
            }
        }
    }
}

/// One listed item, its methods and its hand-written trait impls.
fn push_item(sources: &Sources, item: &syn::Item, exported: &str, lines: &mut Vec<String>) {
    let Some(name) = ident_of(item) else {
        return;
    };
    let path = format!("{exported}::{name}");
    lines.push(format!("{path} : {}", render(item)));
    for method in sources.methods_of(&name) {
        lines.push(format!("{path} : {method}"));
    }
    for trait_impl in sources.trait_impls_of(&name) {
        lines.push(format!("{path} : {trait_impl}"));
    }
}

/// A re-export: the local item under its exported name, or another crate's path.
fn export(
    sources: &Sources,
    module: &str,
    exported: &str,
    path: &[String],
    name: &str,
    lines: &mut Vec<String>,
) {
    let Some((leaf, prefix)) = path.split_last() else {
        return;
    };
    let Some(target) = resolve_module(sources, module, prefix) else {
        lines.push(format!("{exported}::{name} : pub use {}", path.join("::")));
        return;
    };
    let found = sources
        .items(&target)
        .iter()
        .find(|item| ident_of(item).as_deref() == Some(leaf.as_str()));
    match found {
        Some(item) => push_item(sources, item, exported, lines),
        None => {
            // A re-export of a re-export: follow it.
            for item in sources.items(&target) {
                if let syn::Item::Use(u) = item {
                    for (inner, inner_name) in leaves(&u.tree, Vec::new()) {
                        if inner_name == *leaf {
                            export(sources, &target, exported, &inner, name, lines);
                        }
                    }
                }
            }
        }
    }
}

/// Each leaf of a use tree: its full path and the name it is imported as.
fn leaves(tree: &syn::UseTree, prefix: Vec<String>) -> Vec<(Vec<String>, String)> {
    let with = |segment: String| {
        let mut path = prefix.clone();
        path.push(segment);
        path
    };
    match tree {
        syn::UseTree::Path(p) => leaves(&p.tree, with(p.ident.to_string())),
        syn::UseTree::Name(n) => vec![(with(n.ident.to_string()), n.ident.to_string())],
        syn::UseTree::Rename(r) => vec![(with(r.ident.to_string()), r.rename.to_string())],
        syn::UseTree::Group(g) => g
            .items
            .iter()
            .flat_map(|t| leaves(t, prefix.clone()))
            .collect(),
        syn::UseTree::Glob(_) => vec![(with("*".to_owned()), "*".to_owned())],
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Why: an SDK's API is a promise to every caller; a change must be seen and meant.
#[test]
fn the_sdk_public_api_matches_its_snapshot() {
    let listed = list(&repo().join(SDK_SRC)).join("\n") + "\n";
    let snapshot_path = repo().join(SDK_SNAPSHOT);
    if std::env::var_os("UPDATE_PUBLIC_API").is_some() {
        std::fs::write(&snapshot_path, &listed).unwrap();
    }
    let pinned = std::fs::read_to_string(&snapshot_path).unwrap_or_default();
    if listed != pinned {
        let added: Vec<&str> = listed.lines().filter(|l| !pinned.contains(l)).collect();
        let removed: Vec<&str> = pinned.lines().filter(|l| !listed.contains(l)).collect();
        panic!(
            "lock-client's public API differs from {SDK_SNAPSHOT}\nadded:\n  {}\nremoved:\n  {}\n\
             if the change is meant: UPDATE_PUBLIC_API=1 cargo test --workspace -- public_api",
            added.join("\n  "),
            removed.join("\n  ")
        );
    }
}

/// Why: the root is what a user reads first; each name there must earn its place.
#[test]
fn the_sdk_root_stays_small() {
    let listed = list(&repo().join(SDK_SRC));
    let root: Vec<&str> = listed
        .iter()
        .filter_map(|l| l.split(" : ").next())
        .filter(|path| path.matches("::").count() == 1)
        .collect();
    let mut names = root.clone();
    names.dedup();
    assert!(
        names.len() <= ROOT_ITEMS_MAX,
        "{} names at lock_client's root (at most {ROOT_ITEMS_MAX}): {names:?}",
        names.len()
    );
    for expected in ["lock_client::LockClient", "lock_client::LockHandle"] {
        assert!(names.contains(&expected), "{expected} missing: {names:?}");
    }
}

/// The lister on a crate made for it: private items, re-exports and methods.
#[test]
fn the_lister_sees_exactly_the_reachable_items() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(
        src.join("lib.rs"),
        "mod hidden;\npub mod open;\npub use hidden::Shown;\npub use other_crate::Borrowed;\n\
         pub(crate) fn internal() {}\n#[cfg(test)]\nmod tests { pub fn not_api() {} }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("hidden.rs"),
        "/// Doc.\n#[derive(Debug)]\npub struct Shown { pub a: u8, b: u8 }\npub struct Unshown;\n\
         impl Shown { pub fn new() -> Self { Self { a: 1, b: 2 } } fn private(&self) {} }\n",
    )
    .unwrap();
    std::fs::write(src.join("open.rs"), "pub const LIMIT_MS: u64 = 5;\n").unwrap();
    let listed = list(src);
    assert_eq!(
        listed,
        [
            "lock_client::Borrowed : pub use other_crate::Borrowed",
            "lock_client::Shown : #[derive(Debug)] pub struct Shown { pub a: u8, }",
            "lock_client::Shown : pub fn new() -> Self {}",
            "lock_client::open : pub mod",
            "lock_client::open::LIMIT_MS : pub const LIMIT_MS: u64 = 5;",
        ]
    );
}
