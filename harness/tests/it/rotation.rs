//! Signing-key rotation under live traffic, without a stop: payment-resource and rail-proxy
//! trust the new key (keys file rewritten, SIGHUP), the replicas switch to it one at a time,
//! and once every grant signed before has ended or been renewed, the old key is retired.
//! Payouts keep settling through all of it with no write refused, and a grant held across the
//! whole rotation writes with the proof its renewals brought (its original proof, under the
//! retired key, is refused).

use std::time::Duration;

use harness::stack::{Stack, StackOptions};
use lock_api::{FenceSigner, LockKey};
use lock_client::AcquirePolicy;
use payment_api::PayoutState;
use test_support::poll_until;

const SETTLE_DEADLINE: Duration = Duration::from_secs(90);
/// The new key: id and secret (the base64 of 32 bytes of 42, a test value).
const NEW_KEY_ID: &str = "k2";
const NEW_KEY: &str = "KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=";

#[tokio::test(flavor = "multi_thread")]
async fn a_signing_key_rotates_under_live_traffic_without_a_refused_write() {
    let mut stack = Stack::start(StackOptions::default(), None).await.unwrap();
    for name in ["executor-1", "executor-2"] {
        stack.start_executor(name, &[]).await.unwrap();
    }
    let old_entry = stack.secrets.signer().unwrap().verifier_entry();
    let new_entry = FenceSigner::from_secret(NEW_KEY_ID, NEW_KEY)
        .unwrap()
        .verifier_entry();
    let before = stack.create_payouts("before", 20).await.unwrap();

    // A grant held across the whole rotation, renewed by the SDK's heartbeat. Its key guards
    // no payout, so a claim with a valid proof answers 404 and one without answers 403.
    let client = stack.lock_client_builder().build().unwrap();
    let session = client.open_session("rotation-witness").await.unwrap();
    let key = LockKey::parse("payout:999999").unwrap();
    let handle = session
        .acquire(&key, Duration::from_secs(6), &AcquirePolicy::DEFAULT)
        .await
        .unwrap()
        .expect("a free key");
    let first_proof = handle.fence_proof().unwrap().to_owned();
    assert!(first_proof.starts_with("v2.test-k1."), "{first_proof}");

    stack
        .trust_keys(&[old_entry, new_entry.clone()])
        .await
        .unwrap();
    stack.sign_with(NEW_KEY_ID, NEW_KEY).await.unwrap();
    let during = stack.create_payouts("during", 20).await.unwrap();
    stack.wait_terminal(&before, SETTLE_DEADLINE).await.unwrap();
    poll_until(
        "a renewal to bring the held grant a proof under the new key",
        Duration::from_secs(30),
        || async {
            let newest = session.fence_proof(&handle)?;
            newest.starts_with("v2.k2.").then_some(())
        },
    )
    .await;
    stack.trust_keys(&[new_entry]).await.unwrap();

    let claim = |proof: String| {
        let http = reqwest::Client::new();
        let url = format!("{}/v1/payouts/999999/claim", stack.payment_url);
        let request = http
            .post(url)
            .bearer_auth(&stack.secrets.executor)
            .header(
                lock_api::FENCING_TOKEN_HEADER,
                handle.fencing_token().0.to_string(),
            )
            .header(lock_api::FENCING_PROOF_HEADER, proof);
        async move {
            let answer = request.send().await.unwrap();
            let status = answer.status().as_u16();
            let body: serde_json::Value = answer.json().await.unwrap_or_default();
            (status, body["code"].as_str().unwrap_or_default().to_owned())
        }
    };
    let newest = session.fence_proof(&handle).unwrap();
    assert_eq!(
        claim(newest).await,
        (404, "PAYOUT_UNKNOWN".to_owned()),
        "the newest proof verifies after the old key is retired"
    );
    assert_eq!(
        claim(first_proof).await,
        (403, "PROOF_INVALID".to_owned()),
        "the grant's first proof is under the retired key"
    );
    session
        .check_still_held(&handle)
        .expect("held across the whole rotation");
    session.release(handle).await.unwrap();
    client.close();

    let after = stack.create_payouts("after", 20).await.unwrap();
    let all: Vec<i64> = before
        .iter()
        .chain(&during)
        .chain(&after)
        .copied()
        .collect();
    let payouts = stack.wait_terminal(&all, SETTLE_DEADLINE).await.unwrap();
    let unsettled: Vec<_> = payouts
        .iter()
        .filter(|p| p.state != PayoutState::Settled)
        .map(|p| (p.payout_id, p.state))
        .collect();
    assert!(unsettled.is_empty(), "every payout settles: {unsettled:?}");
    let refused: usize = ["payment-resource", "rail-proxy"]
        .iter()
        .map(|name| {
            stack
                .service_log(name)
                .unwrap()
                .matches("\"proof_refused\"")
                .count()
        })
        .sum();
    assert_eq!(refused, 1, "only the test's own retired proof was refused");
    let ledger = stack.ledger().await.unwrap();
    assert!(
        ledger.balance_by_currency.iter().all(|(_, b)| *b == 0),
        "{ledger:?}"
    );
}
