//! Checks every service's OpenAPI document gets: the checked-in file under
//! `docs/openapi/` is what the code generates, and the statuses of each operation agree with
//! the tables of `docs/contracts/C3-http-surfaces.md`. The contract's readers (which differ per
//! surface) stay with each service's tests; what they produce is compared here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// A path from the repository root.
pub fn repo_file(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

/// Fails when `docs/openapi/{name}.json` differs from `generated` (pretty JSON); with
/// `UPDATE_OPENAPI` set, writes it first. `how` is the command that regenerates it.
pub fn assert_checked_in(name: &str, generated: &serde_json::Value, how: &str) {
    let path = repo_file(&format!("docs/openapi/{name}.json"));
    let mut text = serde_json::to_string_pretty(generated).expect("serialise the document");
    text.push('\n');
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &text).expect("write the document");
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == text,
        "{} differs from what the code generates; after a deliberate change run UPDATE_OPENAPI=1 {how}",
        path.display()
    );
}

/// The 3-digit HTTP statuses named in `text`: standalone 3-digit numbers in 100..600, but
/// not a code point (`U+202E`) nor a size or a duration (`140 bytes`, `500 ms`).
pub fn statuses_in(text: &str) -> BTreeSet<u16> {
    let mut found = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let before = &text[..start];
        let after = text[i..].trim_start();
        let glued = |b: Option<&u8>| {
            b.is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'.')
        };
        // A sentence's full stop ends a status; `1.250` or `v1.k1` glue it to more.
        let glued_after = |at: usize| match bytes.get(at) {
            Some(b'.') => glued(bytes.get(at + 1)),
            other => glued(other),
        };
        let unit = ["bytes", "ms", "s ", "KiB", "MB"]
            .iter()
            .any(|u| after.starts_with(u));
        if i - start == 3
            && !before.ends_with("U+")
            && !glued(start.checked_sub(1).and_then(|p| bytes.get(p)))
            && !glued_after(i)
            && !unit
            && let Ok(status) = text[start..i].parse::<u16>()
            && (100..600).contains(&status)
        {
            found.insert(status);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::statuses_in;

    #[test]
    fn statuses_are_read_but_not_code_points_sizes_or_numbers_in_words() {
        assert_eq!(
            statuses_in(
                "**201** `Payout`; 403/401 bearer; 415/413/400 body; ≤ 140 bytes, U+202E; 500 ms; v1.k1; 10^12; 1000"
            ),
            [201, 400, 401, 403, 413, 415].into()
        );
    }
}

/// What the HTTP contract says of one operation: the statuses it must document (`listed`), and the
/// statuses it may document besides (`allowed`: the contract's common answers).
#[derive(Debug, Clone, Default)]
pub struct ContractOperation {
    /// Statuses the contract names for this operation.
    pub listed: BTreeSet<u16>,
    /// Statuses the contract allows every operation of its group.
    pub allowed: BTreeSet<u16>,
}

/// Compares `doc`'s operations with `contract` (`(method, path)` → what the contract says): every
/// listed status is documented, and every documented status is listed or allowed. Also
/// fails when an operation of the contract is missing from the document.
pub fn assert_statuses_agree(
    doc: &serde_json::Value,
    contract: &BTreeMap<(String, String), ContractOperation>,
) {
    let mut failures = Vec::new();
    for ((method, path), op) in contract {
        let Some(responses) = doc["paths"][path][method]["responses"].as_object() else {
            failures.push(format!("{method} {path}: not in the document"));
            continue;
        };
        let documented: BTreeSet<u16> = responses.keys().filter_map(|s| s.parse().ok()).collect();
        for status in op.listed.difference(&documented) {
            failures.push(format!(
                "{method} {path}: C3 names {status}, the document does not"
            ));
        }
        for status in &documented {
            if !op.listed.contains(status) && !op.allowed.contains(status) {
                failures.push(format!(
                    "{method} {path}: the document has {status}, C3 does not"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
