//! The OpenAPI document: the checked-in `docs/openapi/payment-resource.json` is
//! what the code generates, `/openapi.json` serves it, and every operation documents exactly
//! the statuses of its row in C3's ct3-payment table and the section's common answers.
//!
//! After a deliberate change: `UPDATE_OPENAPI=1 cargo test -p payment-resource --test it openapi`.

use std::collections::BTreeMap;

use payment_resource::http::openapi;
use test_support::openapi::{ContractOperation, assert_statuses_agree, repo_file, statuses_in};

#[test]
fn the_checked_in_document_is_the_generated_one() {
    test_support::openapi::assert_checked_in(
        "payment-resource",
        &serde_json::to_value(openapi::document()).unwrap(),
        "cargo test -p payment-resource --test it openapi",
    );
}

#[tokio::test]
async fn the_service_serves_its_document() {
    let running = crate::support::start().await;
    let body: serde_json::Value = reqwest::get(format!("{}/openapi.json", running.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body, serde_json::to_value(openapi::document()).unwrap());
    assert_eq!(body["openapi"], "3.1.0");
}

/// C3's ct3-payment table: `(method, path)` → the statuses of its success and errors cells;
/// allowed besides: the section's first paragraph (the answers every endpoint can give).
fn c3_operations() -> BTreeMap<(String, String), ContractOperation> {
    let c3 =
        std::fs::read_to_string(repo_file("docs/contracts/C3-http-surfaces.md")).expect("read C3");
    let section = &c3[c3
        .find("## payment-resource (ct3-payment)")
        .expect("the section")..];
    let section = &section[..section.find("\n## ").expect("its end")];
    let common = statuses_in(&section[..section.find("Records (JSON)").expect("paragraph")]);
    assert!(
        common.is_superset(&[400, 404, 408, 500, 503].into()),
        "C3's common answers: {common:?}"
    );
    let mut operations = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let Some(endpoint) = cells.get(2).and_then(|c| c.split('`').nth(1)) else {
            continue;
        };
        let Some((method, path)) = endpoint.split_once(' ') else {
            continue; // the header row
        };
        let path = path.split('?').next().unwrap_or(path);
        let listed = statuses_in(&format!("{} {}", cells[5], cells[6]));
        operations.insert(
            (method.to_lowercase(), path.to_owned()),
            ContractOperation {
                listed,
                allowed: common.clone(),
            },
        );
    }
    operations
}

#[test]
fn every_operation_documents_the_statuses_c3_gives() {
    let c3 = c3_operations();
    assert_eq!(c3.len(), 11, "C3's ct3-payment rows: {:?}", c3.keys());
    assert_statuses_agree(&serde_json::to_value(openapi::document()).unwrap(), &c3);
}
