//! Offers: a claimable payout handed to one executor is its alone until the offer lapses;
//! then it goes to whoever asks next.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use test_support::poll_until;

use crate::support::{EXECUTOR_TOKEN, create, proof, start, start_with};

async fn offer(base: &str, executor: &str, limit: i64, offer_ms: i64) -> Vec<i64> {
    offer_skipping(base, executor, limit, offer_ms, &[]).await
}

async fn offer_skipping(
    base: &str,
    executor: &str,
    limit: i64,
    offer_ms: i64,
    skip: &[i64],
) -> Vec<i64> {
    offer_as(EXECUTOR_TOKEN, base, executor, limit, offer_ms, skip).await
}

async fn offer_as(
    credential: &str,
    base: &str,
    executor: &str,
    limit: i64,
    offer_ms: i64,
    skip: &[i64],
) -> Vec<i64> {
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/offers"))
        .bearer_auth(credential)
        .json(&json!({"executor": executor, "limit": limit, "offer_ms": offer_ms, "skip": skip}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let payouts: Vec<Value> = response.json().await.unwrap();
    payouts
        .iter()
        .map(|p| p["payout_id"].as_i64().expect("payout_id"))
        .collect()
}

#[tokio::test]
async fn executors_asking_side_by_side_get_disjoint_payouts_until_an_offer_lapses() {
    let service = start().await;
    let base = &service.base;
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(create(base, &format!("offer-{i}")).await);
    }
    let a = offer_skipping(base, "executor-a", 3, 60_000, &[ids[0]]).await;
    assert_eq!(
        a,
        ids[1..4],
        "the oldest first, but none the executor skips"
    );
    assert_eq!(
        offer(base, "executor-a", 1, 60_000).await,
        [ids[0]],
        "a skipped payout stays free"
    );
    let b = offer(base, "executor-b", 4, 60_000).await;
    assert_eq!(b, ids[4..], "only what nobody holds an offer for");
    assert!(
        offer(base, "executor-a", 4, 60_000).await.is_empty(),
        "a live offer is not handed out again, not even to its holder"
    );
    // A short offer lapses, and the payout goes to the next executor that asks.
    let more = create(base, "offer-late").await;
    assert_eq!(offer(base, "executor-c", 1, 100).await, [more]);
    let taken = poll_until(
        "the short offer to lapse",
        Duration::from_secs(5),
        || async {
            let got = offer(base, "executor-b", 1, 60_000).await;
            (!got.is_empty()).then_some(got)
        },
    )
    .await;
    assert_eq!(taken, [more]);
}

#[tokio::test]
async fn concurrent_offers_never_hand_one_payout_to_two_executors() {
    // Eight executors with a credential each (each may hold 8 offers before it works).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials");
    let lines: Vec<String> = (0..8)
        .map(|e| {
            let (name, secret) = (format!("executor-{e}"), format!("secret-{e}"));
            lock_api::CredentialEntry::from_secret(&name, &["executor"], &secret).line()
        })
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let service = start_with(&["--credentials-file", file.to_str().unwrap()]).await;
    let base = service.base.clone();
    let mut ids = Vec::new();
    for i in 0..40 {
        ids.push(create(&base, &format!("race-{i}")).await);
    }
    let mut asks = tokio::task::JoinSet::new();
    for e in 0..8 {
        let base = base.clone();
        asks.spawn(async move {
            let (name, secret) = (format!("executor-{e}"), format!("secret-{e}"));
            offer_as(&secret, &base, &name, 10, 60_000, &[]).await
        });
    }
    let mut offered: Vec<i64> = asks.join_all().await.into_iter().flatten().collect();
    offered.sort_unstable();
    assert_eq!(offered, ids, "every payout offered once, to one executor");
}

/// One credential cannot hoard the queue: it holds at most 8 live offers plus 2 per payout it
/// is working on (claimed, not ended), whatever it asks and under whatever executor names;
/// the rest stay free for the others.
#[tokio::test]
async fn a_credential_holds_offers_in_proportion_to_its_work() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials");
    let hoarder = "hoarder-secret";
    let line = lock_api::CredentialEntry::from_secret("hoarder", &["executor"], hoarder).line();
    std::fs::write(&file, line).unwrap();
    let service = start_with(&["--credentials-file", file.to_str().unwrap()]).await;
    let base = &service.base;
    let mut ids = Vec::new();
    for i in 0..30 {
        ids.push(create(base, &format!("hoard-{i}")).await);
    }
    let mut taken = Vec::new();
    for name in ["h-1", "h-2", "h-3"] {
        taken.extend(offer_as(hoarder, base, name, 500, 60_000, &[]).await);
    }
    assert_eq!(taken, ids[..8], "8 live offers, under any executor name");
    // Working on two payouts (claimed) earns it four more, no more.
    for id in &ids[..2] {
        let claimed = reqwest::Client::new()
            .post(format!("{base}/v1/payouts/{id}/claim"))
            .bearer_auth(hoarder)
            .header("x-fencing-token", "1")
            .header("x-fencing-proof", proof(*id, 1))
            .send()
            .await
            .unwrap();
        assert_eq!(claimed.status(), StatusCode::OK);
    }
    let more = offer_as(hoarder, base, "h-4", 500, 60_000, &[]).await;
    assert_eq!(more, ids[8..12]);
    assert!(
        offer_as(hoarder, base, "h-5", 500, 60_000, &[])
            .await
            .is_empty()
    );
    // Everyone else still finds the other 18.
    let others = offer(base, "executor-1", 500, 60_000).await;
    assert_eq!(
        others,
        ids[12..20],
        "another credential's own share, from what is left"
    );
}
