//! The OpenAPI document: the checked-in `docs/openapi/lock-server.json` is what
//! the code generates, `/openapi.json` serves it, and every L1-L8 operation documents exactly
//! the statuses C3's tables and its common-answers paragraph give.
//!
//! After a deliberate change: `UPDATE_OPENAPI=1 cargo test -p lock-server --test it openapi`.

use std::collections::{BTreeMap, BTreeSet};

use lock_server::http::openapi;
use lock_server::store::MemoryStore;
use reqwest::{Method, StatusCode};

use test_support::openapi::{ContractOperation, assert_statuses_agree, repo_file, statuses_in};

use crate::support::TestServer;

#[test]
fn the_checked_in_document_is_the_generated_one() {
    test_support::openapi::assert_checked_in(
        "lock-server",
        &serde_json::to_value(openapi::document()).unwrap(),
        "cargo test -p lock-server --test it openapi",
    );
}

#[tokio::test]
async fn the_server_serves_its_document() {
    let server = TestServer::start(std::sync::Arc::new(MemoryStore::new()), &[]).await;
    let (status, body) = server.api.call(Method::GET, "/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, serde_json::to_value(openapi::document()).unwrap());
    assert_eq!(body["openapi"], "3.1.0");
    server.shutdown().await;
}

/// C3's L1-L8 sections: `(method, path)` → the statuses of its table and the success
/// status of its text, allowed besides: the common answers of the section's first paragraph.
fn c3_operations() -> BTreeMap<(String, String), ContractOperation> {
    let c3 =
        std::fs::read_to_string(repo_file("docs/contracts/C3-http-surfaces.md")).expect("read C3");
    let lock = &c3[c3.find("## L1–L8 lock surface").expect("the lock section")..];
    let lock = &lock[..lock
        .find("### Semantics of the lock surface")
        .expect("its end")];
    let preamble = &lock[..lock.find("### L1").expect("L1")];
    let common = statuses_in(&preamble[..preamble.find("**Session ids").expect("paragraph")]);
    assert!(
        common.is_superset(&[408, 500, 503, 401, 403, 413, 415].into()),
        "C3's common answers: {common:?}"
    );
    let mut operations = BTreeMap::new();
    for section in lock.split("\n### ").skip(1) {
        let heading = section.lines().next().unwrap_or_default();
        let Some(endpoint) = heading.split('`').nth(1) else {
            continue;
        };
        let (method, path) = endpoint.split_once(' ').expect("METHOD /path");
        let table: BTreeSet<u16> = section
            .lines()
            .filter_map(|l| l.strip_prefix("| "))
            .filter_map(|l| l.split(' ').next()?.parse().ok())
            .collect();
        // The success status is named in the section's text (200, 201 Created, 204).
        let successes = statuses_in(section)
            .into_iter()
            .filter(|s| (200..300).contains(s));
        let mut allowed = common.clone();
        allowed.extend(successes);
        operations.insert(
            (method.to_lowercase(), path.to_owned()),
            ContractOperation {
                listed: table,
                allowed,
            },
        );
    }
    operations
}

#[test]
fn every_operation_documents_the_statuses_c3_gives() {
    let c3 = c3_operations();
    assert_eq!(
        c3.len(),
        11,
        "C3's L1-L9, L4s and W1 sections: {:?}",
        c3.keys()
    );
    assert_statuses_agree(&serde_json::to_value(openapi::document()).unwrap(), &c3);
}
