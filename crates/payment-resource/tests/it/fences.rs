//! The fence rules at the resource: claims only rise, later writes only from the current
//! holder, one submission per payout, TIMEOUT is terminal, posting is idempotent.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{EXECUTOR_TOKEN, PROXY_TOKEN, create, proof, read, start};

/// A fenced write to `path` (`/v1/payouts/{id}/…`) with `token` and its genuine proof, under
/// the credential of the role the endpoint names.
async fn call(base: &str, path: &str, token: u64, body: Option<Value>) -> (StatusCode, Value) {
    let id: i64 = path.split('/').nth(3).and_then(|s| s.parse().ok()).unwrap();
    let role = if path.contains("submission") {
        PROXY_TOKEN
    } else {
        EXECUTOR_TOKEN
    };
    let mut request = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .header("x-fencing-token", token.to_string())
        .header("x-fencing-proof", proof(id, token))
        .bearer_auth(role);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    (
        response.status(),
        response.json().await.unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn a_stale_token_is_fenced_out_and_the_holder_completes_once() {
    let service = start().await;
    let base = &service.base;
    let id = create(base, "fence-1").await;
    let path = |step: &str| format!("/v1/payouts/{id}/{step}");
    assert_eq!(call(base, &path("claim"), 5, None).await.0, StatusCode::OK);
    let (status, body) = call(base, &path("claim"), 4, None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("FENCED_OUT")),
        "I2: fences only rise"
    );
    assert_eq!(
        call(base, &path("claim"), 7, None).await.0,
        StatusCode::OK,
        "a newer holder takes over"
    );
    let (status, body) = call(base, &path("submissions"), 5, None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("FENCED_OUT")),
        "only the current holder reserves"
    );
    assert_eq!(
        call(base, &path("submissions"), 7, None).await.0,
        StatusCode::CREATED
    );
    let (status, body) = call(base, &path("submissions"), 7, None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("ALREADY_SUBMITTED")),
        "I1: one submission"
    );
    let (status, body) = call(base, &path("post"), 7, None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("SUBMISSION_IN_FLIGHT"))
    );
    let outcome = json!({"outcome": "ACKED", "rail_reference": "R-1"});
    assert_eq!(
        call(base, &path("submission/outcome"), 7, Some(outcome.clone()))
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        call(base, &path("submission/outcome"), 7, Some(outcome))
            .await
            .0,
        StatusCode::OK,
        "recording is idempotent"
    );
    let (status, body) = call(base, &path("post"), 7, None).await;
    assert_eq!(
        (status, body["state"].as_str()),
        (StatusCode::OK, Some("SETTLED"))
    );
    let (status, body) = call(base, &path("post"), 7, None).await;
    assert_eq!(
        (status, body["state"].as_str()),
        (StatusCode::OK, Some("SETTLED")),
        "posting twice is a no-op"
    );
    let summary = read(base, "/v1/ledger/summary").await;
    assert_eq!(summary["postings"], 1, "I6: exactly one posting: {summary}");
    assert_eq!(summary["balance_by_currency"], json!([["EUR", 0]]));
}

#[tokio::test]
async fn a_timeout_is_terminal_and_an_overdue_in_flight_submission_becomes_ambiguous() {
    let service = start().await;
    let base = &service.base;
    let (a, b) = (create(base, "t-1").await, create(base, "t-2").await);
    for id in [a, b] {
        call(base, &format!("/v1/payouts/{id}/claim"), 3, None).await;
        call(base, &format!("/v1/payouts/{id}/submissions"), 3, None).await;
    }
    let (_, sub) = call(
        base,
        &format!("/v1/payouts/{a}/submission/outcome"),
        3,
        Some(json!({"outcome": "TIMEOUT"})),
    )
    .await;
    assert_eq!(sub["outcome"], "TIMEOUT");
    let payout = read(base, &format!("/v1/payouts/{a}")).await;
    assert_eq!(payout["state"], "RAIL_AMBIGUOUS", "I5: terminal at once");
    let (status, body) = call(base, &format!("/v1/payouts/{a}/claim"), 9, None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("ALREADY_TERMINAL")),
        "no token can take it again"
    );
    // b's rail call never came back: past the 200 ms hop budget, P3 ends it ambiguous.
    let (status, body) = test_support::poll_until(
        "the hop budget to pass",
        std::time::Duration::from_secs(5),
        || async {
            let (status, body) = call(base, &format!("/v1/payouts/{b}/post"), 3, None).await;
            (status == StatusCode::OK).then_some((status, body))
        },
    )
    .await;
    assert_eq!(
        (status, body["state"].as_str()),
        (StatusCode::OK, Some("RAIL_AMBIGUOUS"))
    );
}
