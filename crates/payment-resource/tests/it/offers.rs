//! Offers: a claimable payout handed to one executor is its alone until the offer lapses;
//! then it goes to whoever asks next.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use test_support::poll_until;

use crate::support::{EXECUTOR_TOKEN, create, start};

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
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/offers"))
        .bearer_auth(EXECUTOR_TOKEN)
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
    let service = start().await;
    let base = service.base.clone();
    let mut ids = Vec::new();
    for i in 0..40 {
        ids.push(create(&base, &format!("race-{i}")).await);
    }
    let mut asks = tokio::task::JoinSet::new();
    for e in 0..8 {
        let base = base.clone();
        asks.spawn(async move { offer(&base, &format!("executor-{e}"), 10, 60_000).await });
    }
    let mut offered: Vec<i64> = asks.join_all().await.into_iter().flatten().collect();
    offered.sort_unstable();
    assert_eq!(offered, ids, "every payout offered once, to one executor");
}
