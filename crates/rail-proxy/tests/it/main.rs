//! rail-proxy bad input: refused before payment-resource or the rail is called; an
//! unreachable payment-resource is a 503, never a 500.
#![allow(clippy::unwrap_used)]

use clap::Parser;
use reqwest::Method;
use test_support::bad_input::{BadRequest, check_all};

/// A rail-proxy whose payment-resource and rail are unreachable, serving: its base URL.
async fn start_proxy() -> String {
    let closed = format!("http://127.0.0.1:{}", test_support::free_port());
    let config = rail_proxy::Config::parse_from([
        "rail-proxy",
        "--bind",
        "127.0.0.1:0",
        "--payment-url",
        &closed,
        "--rail-url",
        &closed,
        "--rail-credential",
        "c",
        "--payment-token",
        "t",
        "--executor-token",
        "exec",
        "--unsafe-plaintext-http",
        "--fence-public-keys",
        &test_support::public_keys(),
    ]);
    let server = rail_proxy::build(&config).await.unwrap();
    let base = format!("http://{}", server.local_addr().unwrap());
    tokio::spawn(server.run_until(std::future::pending()));
    base
}

/// The lock-server's proof of `token` for payout `id`'s key.
fn proof(id: i64, token: u64) -> String {
    test_support::test_proof(
        &payment_api::payout_lock_key(id),
        lock_api::FencingToken(token),
    )
}

/// A submit to `path` with token 3, its genuine proof for payout 1, and the executors'
/// credential.
fn submit(path: &str) -> BadRequest {
    BadRequest::new("submit", Method::POST, path, "")
        .header("x-fencing-token", "3")
        .header("x-fencing-proof", proof(1, 3))
        .header("authorization", "Bearer exec")
}

/// Submits with a bad token, payout id or body, and a wrong method or route.
fn malformed_cases() -> Vec<BadRequest> {
    let invalid = "INVALID_ARGUMENT";
    vec![
        submit("/v1/payouts/1/submit")
            .without("x-fencing-token")
            .expect(400, invalid, "X-Fencing-Token"),
        submit("/v1/payouts/1/submit")
            .header("x-fencing-token", "three")
            .expect(400, invalid, "X-Fencing-Token"),
        submit("/v1/payouts/1/submit")
            .header("x-fencing-token", "-1")
            .expect(400, invalid, "X-Fencing-Token"),
        submit("/v1/payouts/1/submit")
            .header("x-fencing-token", "0")
            .expect(400, invalid, "X-Fencing-Token"),
        submit("/v1/payouts/1/submit")
            .header("x-fencing-token", "18446744073709551615")
            .expect(400, invalid, "X-Fencing-Token"),
        submit("/v1/payouts/abc/submit").expect(400, invalid, "payout_id"),
        submit("/v1/payouts/0/submit").expect(400, invalid, "payout_id"),
        submit("/v1/payouts/-4/submit").expect(400, invalid, "payout_id"),
        submit("/v1/payouts/1/submit")
            .body(vec![b'x'; 4096])
            .expect(413, "PAYLOAD_TOO_LARGE", "body"),
        submit("/v1/payouts/1/submit")
            .body(b"{}".to_vec())
            .expect(400, invalid, "body"),
        BadRequest::new("wrong method", Method::GET, "/v1/payouts/1/submit", "").expect(
            405,
            "METHOD_NOT_ALLOWED",
            "Method",
        ),
        BadRequest::new("unknown route", Method::POST, "/v1/submit", "").expect(
            404,
            "NOT_FOUND",
            "route",
        ),
    ]
}

/// Submits without the credential or with a missing or wrong proof, a signed payout id, and
/// a well-formed submit payment-resource cannot be asked about.
fn credential_proof_and_upstream_cases() -> Vec<BadRequest> {
    let rogue_proof = {
        let (key, token) = (payment_api::payout_lock_key(1), lock_api::FencingToken(3));
        test_support::keys::rogue_signer().sign(
            &key,
            token,
            &test_support::test_grant(1, &key, token),
        )
    };
    vec![
        submit("/v1/payouts/1/submit")
            .without("authorization")
            .expect(401, "UNAUTHENTICATED", "PAYOUT_EXECUTOR_TOKEN"),
        submit("/v1/payouts/1/submit")
            .without("x-fencing-proof")
            .expect(403, "PROOF_INVALID", "X-Fencing-Proof"),
        submit("/v1/payouts/1/submit")
            .header("x-fencing-proof", proof(2, 3))
            .expect(403, "PROOF_INVALID", "does not sign"),
        submit("/v1/payouts/1/submit")
            .header("x-fencing-proof", rogue_proof)
            .expect(403, "PROOF_INVALID", "does not sign"),
        submit("/v1/payouts/+1/submit").expect(400, "INVALID_ARGUMENT", "payout_id"),
        submit("/v1/payouts/1/submit").expect(503, "STORE_UNAVAILABLE", "payment-resource"),
    ]
}

/// Every outcome's series of `rail_calls_total` at `base` is exported from start (an absent
/// series is not a zero), and each is 0: the rail was never called.
async fn assert_rail_never_called(base: &str) {
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let calls: Vec<f64> = metrics
        .lines()
        .filter(|l| l.starts_with("rail_calls_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(calls.len(), 3, "one series per outcome:\n{metrics}");
    assert!(
        calls.iter().all(|c| *c == 0.0),
        "the rail was never called:\n{metrics}"
    );
}

#[tokio::test]
async fn bad_requests_are_refused_before_any_call() {
    let base = start_proxy().await;
    let mut cases = malformed_cases();
    cases.extend(credential_proof_and_upstream_cases());
    let failures = check_all(&base, &cases).await;
    assert!(
        failures.is_empty(),
        "bad-input cases failed:\n{}",
        failures.join("\n")
    );
    assert_rail_never_called(&base).await;
}
