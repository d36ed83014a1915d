//! One home per PL/pgSQL function. `sql/functions/<name>.sql` is the only text people edit
//! for function `<name>` (all its overloads, and the triggers that run it); migrations are
//! generated from those files, so sqlx's numbered, checksummed history stays as it is and a
//! change to a function is a diff of the lines that changed.
//!
//! The drift check: the newest migration that defines each function holds its file verbatim.
//! After editing a file, write the next migration from every file that drifted:
//! `NEW_MIGRATION=<what_changed> cargo test --workspace -- sql_functions`. A signature change
//! also needs a `DROP FUNCTION` of the old signature, written by hand above the generated text.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A function's one home.
#[derive(Debug, Clone)]
struct FunctionFile {
    name: String,
    text: String,
}

/// A numbered migration.
#[derive(Debug, Clone)]
struct Migration {
    number: u32,
    text: String,
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn functions_dir() -> PathBuf {
    crate_dir().join("sql/functions")
}

fn migrations_dir() -> PathBuf {
    crate_dir().join("migrations")
}

/// The names of the functions `sql` creates (`CREATE [OR REPLACE] FUNCTION name(`).
fn defined_names(sql: &str) -> BTreeSet<String> {
    sql.lines()
        .filter_map(|line| {
            let rest = line
                .strip_prefix("CREATE OR REPLACE FUNCTION ")
                .or_else(|| line.strip_prefix("CREATE FUNCTION "))?;
            Some(rest.split('(').next()?.trim().to_owned())
        })
        .collect()
}

fn function_files() -> Vec<FunctionFile> {
    let mut files: Vec<FunctionFile> = std::fs::read_dir(functions_dir())
        .expect("sql/functions/ is readable")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "sql"))
        .map(|path| read_function_file(&path))
        .collect();
    files.sort_by(|a, b| a.name.cmp(&b.name));
    files
}

fn read_function_file(path: &Path) -> FunctionFile {
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("a UTF-8 file name")
        .to_owned();
    let text = std::fs::read_to_string(path).expect("a readable function file");
    let defined = defined_names(&text);
    assert_eq!(
        defined,
        BTreeSet::from([name.clone()]),
        "{} defines exactly the function it is named after",
        path.display()
    );
    assert!(
        !text.contains("CREATE FUNCTION"),
        "{}: a function's home says CREATE OR REPLACE, so any migration can restate it",
        path.display()
    );
    FunctionFile { name, text }
}

fn migrations() -> Vec<Migration> {
    let mut migrations: Vec<Migration> = std::fs::read_dir(migrations_dir())
        .expect("migrations/ is readable")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "sql"))
        .map(|path| {
            let file = path
                .file_name()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            let number = file
                .split('_')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("migration {file} starts with its number"));
            let text = std::fs::read_to_string(&path).expect("a readable migration");
            Migration { number, text }
        })
        .collect();
    migrations.sort_by_key(|m| m.number);
    migrations
}

/// The function files whose text the newest migration defining them does not hold verbatim.
fn drifted<'a>(files: &'a [FunctionFile], migrations: &[Migration]) -> Vec<&'a FunctionFile> {
    files
        .iter()
        .filter(|file| {
            let newest = migrations
                .iter()
                .rev()
                .find(|m| defined_names(&m.text).contains(&file.name));
            newest.is_none_or(|m| !m.text.contains(file.text.trim_end()))
        })
        .collect()
}

/// The next migration: a header naming its sources, then each drifted file verbatim.
fn next_migration(files: &[&FunctionFile]) -> String {
    let mut text = String::from(
        "-- Generated from crates/lock-server/sql/functions/ by tests/it/sql_functions.rs: edit\n\
         -- those files, not this one. Restates:",
    );
    let mut line_chars = 39;
    for (i, file) in files.iter().enumerate() {
        let sep = if i + 1 == files.len() { "." } else { "," };
        if line_chars + file.name.len() + 2 > 96 {
            text.push_str("\n--");
            line_chars = 2;
        }
        text.push(' ');
        text.push_str(&file.name);
        text.push_str(sep);
        line_chars += file.name.len() + 2;
    }
    text.push('\n');
    for file in files {
        text.push('\n');
        text.push_str(file.text.trim_end());
        text.push('\n');
    }
    text
}

fn write_next_migration(slug: &str, files: &[&FunctionFile], migrations: &[Migration]) {
    assert!(
        !slug.is_empty()
            && slug
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
        "NEW_MIGRATION names what changed in lower_snake_case, got {slug:?}"
    );
    let number = migrations.last().map_or(1, |m| m.number + 1);
    let path = migrations_dir().join(format!("{number:04}_{slug}.sql"));
    std::fs::write(&path, next_migration(files)).expect("the migration is written");
    eprintln!("wrote {}", path.display());
}

#[test]
fn sql_functions_each_newest_migration_holds_its_home_verbatim() {
    let files = function_files();
    let mut all = migrations();
    let stale: Vec<FunctionFile> = drifted(&files, &all).into_iter().cloned().collect();
    if let Ok(slug) = std::env::var("NEW_MIGRATION")
        && !stale.is_empty()
    {
        write_next_migration(&slug, &stale.iter().collect::<Vec<_>>(), &all);
        all = migrations();
    }
    let names: Vec<&str> = drifted(&files, &all)
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert!(
        names.is_empty(),
        "sql/functions/ changed since the newest migration that defines {names:?}: run \
         NEW_MIGRATION=<what_changed> cargo test --workspace -- sql_functions and commit the \
         migration it writes"
    );
}

#[test]
fn sql_functions_every_function_the_migrations_define_has_a_home() {
    let homes: BTreeSet<String> = function_files().into_iter().map(|f| f.name).collect();
    let defined: BTreeSet<String> = migrations()
        .iter()
        .flat_map(|m| defined_names(&m.text))
        .collect();
    let homeless: Vec<&String> = defined.difference(&homes).collect();
    assert!(
        homeless.is_empty(),
        "functions {homeless:?} have no file under sql/functions/"
    );
}

#[test]
fn sql_functions_a_changed_line_drifts_and_its_generated_migration_holds_it() {
    let files = function_files();
    let mut all = migrations();
    // A baseline without drift, whatever the tree holds now.
    all.push(Migration {
        number: all.last().map_or(1, |m| m.number + 1),
        text: next_migration(&files.iter().collect::<Vec<_>>()),
    });
    assert!(
        drifted(&files, &all).is_empty(),
        "the baseline has no drift"
    );
    let mut edited = files.clone();
    let renew = edited
        .iter_mut()
        .find(|f| f.name == "lock_renew")
        .expect("lock_renew has a home");
    renew.text = renew.text.replacen("l.lease_ms", "2 * l.lease_ms", 1);
    let stale: Vec<&FunctionFile> = drifted(&edited, &all);
    assert_eq!(
        stale.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
        ["lock_renew"],
        "one edited line drifts exactly its function"
    );
    let generated = next_migration(&stale);
    assert_eq!(
        defined_names(&generated),
        BTreeSet::from(["lock_renew".to_owned()])
    );
    all.push(Migration {
        number: all.last().map_or(1, |m| m.number + 1),
        text: generated,
    });
    assert!(
        drifted(&edited, &all).is_empty(),
        "the generated migration is the newest home of the edit"
    );
    assert!(
        !drifted(&files, &all).is_empty(),
        "and the unedited file now drifts from it"
    );
}
