//! Readers and permits over HTTP (L4 `mode` and `permits`, ADR 0007): each grant's scope
//! answered and signed in a v3 proof that a resource for mutexes refuses, a full semaphore
//! answered LOCK_HELD, a writer that waits for the readers and is woken when the last one
//! goes, a renewal that signs the scope again, and bad or conflicting claims refused by name.

use std::time::Duration;

use lock_api::{FenceVerifier, FencingToken, GrantScope, LockKey, ProofError};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{Api, StoreAt, TestServer, token};

async fn claim(api: &Api, key: &str, session: &str, extra: Value) -> (StatusCode, Value) {
    let mut body = json!({"session_id": session, "ttl_ms": 30_000});
    body.as_object_mut()
        .expect("an object")
        .extend(extra.as_object().expect("an object").clone());
    api.post(&format!("/v1/locks/{key}/acquire"), body).await
}

/// The scope a grant's v3 proof signs, checked against the test signing key.
fn signed_scope(key: &str, grant: &Value) -> Result<GrantScope, ProofError> {
    let verifier = FenceVerifier::parse(&test_support::public_keys()).unwrap();
    let key = LockKey::parse(key).unwrap();
    let proof = grant["proof"].as_str().expect("a proof");
    let (_, scope) = verifier.verify_scoped(&key, FencingToken(token(grant)), proof)?;
    // A resource written for mutexes takes only exclusive grants.
    if scope != GrantScope::Exclusive {
        let refused = verifier.verify(&key, FencingToken(token(grant)), proof);
        assert!(
            matches!(refused, Err(ProofError::NotExclusive(_))),
            "{refused:?}"
        );
    }
    Ok(scope)
}

async fn permits_are_granted_by_slot_with_a_signed_scope(at: StoreAt) {
    let a = TestServer::start(at.open().await, &[]).await;
    let [s1, s2, s3] = [
        a.api.session("w1", 30_000).await,
        a.api.session("w2", 30_000).await,
        a.api.session("w3", 30_000).await,
    ];
    let two = json!({"permits": 2});
    let (status, g1) = claim(&a.api, "pool", &s1, two.clone()).await;
    assert_eq!(status, StatusCode::OK, "{g1}");
    let (_, g2) = claim(&a.api, "pool", &s2, two.clone()).await;
    assert_eq!(
        (g1["scope"].as_str(), g2["scope"].as_str()),
        (Some("permit-0"), Some("permit-1"))
    );
    assert_eq!(
        signed_scope("pool", &g2).unwrap(),
        GrantScope::Permit { slot: 1 }
    );
    assert!(g2["proof"].as_str().unwrap().starts_with("v3."), "{g2}");
    let (status, full) = claim(&a.api, "pool", &s3, two.clone()).await;
    assert_eq!(
        (status, full["code"].as_str()),
        (StatusCode::CONFLICT, Some("LOCK_HELD"))
    );
    let (status, info) = a
        .api
        .call(reqwest::Method::GET, "/v1/locks/pool", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{info}");
    assert_eq!(info["permits"], 2, "{info}");
    assert_eq!(info["holders"].as_array().map(Vec::len), Some(2), "{info}");
    // Another count, a lock, a reader: the key's kind is named, nothing queued or granted.
    for extra in [json!({"permits": 3}), json!({}), json!({"mode": "shared"})] {
        let (status, body) = claim(&a.api, "pool", &s3, extra.clone()).await;
        assert_eq!(status, StatusCode::CONFLICT, "{extra}: {body}");
        assert_eq!(body["code"], "LOCK_KIND_CONFLICT", "{body}");
        assert!(
            body["message"].as_str().unwrap().contains("2 permits"),
            "{body}"
        );
    }
    assert!(a.api.release("pool", &s1, token(&g1)).await);
    let (status, g3) = claim(&a.api, "pool", &s3, two).await;
    assert_eq!(
        (status, g3["scope"].as_str()),
        (StatusCode::OK, Some("permit-0")),
        "{g3}"
    );
    assert!(token(&g3) > token(&g2), "tokens rise across slots");
}

async fn a_writer_waits_for_the_readers_and_is_woken_by_the_last(at: StoreAt) {
    let a = TestServer::start(at.open().await, &[]).await;
    let [r1, r2, w] = [
        a.api.session("r1", 30_000).await,
        a.api.session("r2", 30_000).await,
        a.api.session("w", 30_000).await,
    ];
    let read = json!({"mode": "shared"});
    let (_, g1) = claim(&a.api, "doc", &r1, read.clone()).await;
    let (status, g2) = claim(&a.api, "doc", &r2, read.clone()).await;
    assert_eq!(status, StatusCode::OK, "{g2}");
    assert_eq!(signed_scope("doc", &g1).unwrap(), GrantScope::Shared);
    // A renewal answers a proof that signs the scope again.
    let (status, renewed) = a
        .api
        .post(
            "/v1/locks/doc/renew",
            json!({"session_id": r1, "fencing_token": token(&g1)}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{renewed}");
    assert_eq!(signed_scope("doc", &renewed).unwrap(), GrantScope::Shared);
    let writer = {
        let api = a.api.clone();
        let w = w.clone();
        tokio::spawn(async move { claim(&api, "doc", &w, json!({"wait_ms": 8_000})).await })
    };
    // The writer is queued before the readers release (a reader after it would wait).
    test_support::poll_until("the writer to queue", Duration::from_secs(5), || async {
        let (_, info) = a
            .api
            .call(reqwest::Method::GET, "/v1/locks/doc", None)
            .await;
        (info["waiters"] == 1).then_some(())
    })
    .await;
    let started = std::time::Instant::now();
    assert!(a.api.release("doc", &r1, token(&g1)).await);
    assert!(a.api.release("doc", &r2, token(&g2)).await);
    let (status, granted) = writer.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{granted}");
    assert_eq!(granted.get("scope"), None, "a writer holds the whole key");
    assert!(token(&granted) > token(&g2), "above every reader before it");
    assert!(
        granted["proof"].as_str().unwrap().starts_with("v2."),
        "{granted}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "woken by the last release, not by its recheck: {:?}",
        started.elapsed()
    );
    // The writer asking to read its own key is the other mode: refused, not converted.
    let (status, body) = claim(&a.api, "doc", &w, read).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("LOCK_KIND_CONFLICT"))
    );
}

async fn a_bad_claim_is_refused_by_name(at: StoreAt) {
    let a = TestServer::start(at.open().await, &[]).await;
    let s = a.api.session("w", 30_000).await;
    let cases = [
        (json!({"permits": 0}), "permits"),
        (json!({"permits": 257}), "permits"),
        (json!({"permits": 2, "mode": "shared"}), "permits"),
        (json!({"mode": "both"}), "mode"),
        (json!({"permits": -1}), "permits"),
    ];
    for (extra, named) in cases {
        let (status, body) = claim(&a.api, "k", &s, extra.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra}: {body}");
        assert_eq!(body["code"], "INVALID_ARGUMENT", "{body}");
        assert!(
            body["message"].as_str().unwrap().contains(named),
            "{extra}: {body}"
        );
    }
    let (status, _) = a.api.call(reqwest::Method::GET, "/v1/locks/k", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "nothing granted");
}

crate::support::on_both_backends!(
    permits_are_granted_by_slot_with_a_signed_scope,
    a_writer_waits_for_the_readers_and_is_woken_by_the_last,
    a_bad_claim_is_refused_by_name,
);
