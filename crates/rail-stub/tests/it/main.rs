//! rail-stub tests: the witness records, faults apply, bad input is refused.
#![allow(clippy::unwrap_used)]

use clap::Parser;
use reqwest::Method;
use serde_json::{Value, json};
use test_support::bad_input::{BadRequest, check_all};

const PROXY: &str = "proxy-cred";
const ADMIN: &str = "admin-tok";

async fn start() -> String {
    let config = rail_stub::Config::parse_from([
        "rail-stub",
        "--bind",
        "127.0.0.1:0",
        "--proxy-credential",
        PROXY,
        "--admin-token",
        ADMIN,
        "--unsafe-plaintext-http",
    ]);
    let server = rail_stub::build(&config).await.unwrap();
    let base = format!("http://{}", server.local_addr().unwrap());
    tokio::spawn(server.run_until(std::future::pending()));
    base
}

fn transfer(payout_id: i64) -> Value {
    json!({"payout_id": payout_id, "amount_minor": 100, "currency": "EUR", "beneficiary": "B", "presented_token": 3})
}

async fn send(base: &str, payout_id: i64) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/transfers"))
        .bearer_auth(PROXY)
        .json(&transfer(payout_id))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn received(base: &str) -> Vec<Value> {
    reqwest::Client::new()
        .get(format!("{base}/v1/received"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn fault(base: &str, body: Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/faults"))
        .bearer_auth(ADMIN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
}

#[tokio::test]
async fn every_request_is_recorded_without_dedupe_and_faults_apply() {
    let base = start().await;
    let (status, answer) = send(&base, 1).await;
    assert_eq!((status, answer["status"].as_str()), (200, Some("accepted")));
    send(&base, 1).await;
    assert_eq!(received(&base).await.len(), 2, "the witness never dedupes");
    fault(&base, json!({"payout_id": 2, "fault": {"kind": "reject"}})).await;
    fault(&base, json!({"payout_id": 3, "fault": {"kind": "error"}})).await;
    assert_eq!(send(&base, 2).await.1["status"], "rejected");
    assert_eq!(send(&base, 3).await.0, 503);
    assert_eq!(
        send(&base, 4).await.1["status"],
        "accepted",
        "faults are per payout"
    );
    assert_eq!(
        received(&base).await.len(),
        5,
        "refused and failed requests are recorded too"
    );
}

#[tokio::test]
async fn bad_requests_are_refused_and_recorded_nowhere() {
    let base = start().await;
    let (post, get) = (Method::POST, Method::GET);
    let good = transfer(1).to_string();
    let t = |body: &str| {
        BadRequest::new("transfer", post.clone(), "/v1/transfers", body)
            .header("authorization", format!("Bearer {PROXY}"))
    };
    let admin = format!("Bearer {ADMIN}");
    let invalid = "INVALID_ARGUMENT";
    let cases = vec![
        t(&good).without("authorization").expect(401, "UNAUTHENTICATED", "bearer"),
        t(&good).header("authorization", "Bearer nope").expect(401, "UNAUTHENTICATED", "bearer"),
        t(r#"{"payout_id":"#).expect(400, invalid, "EOF"),
        t(r#"{"amount_minor":1,"currency":"EUR","beneficiary":"B","presented_token":1}"#).expect(400, invalid, "payout_id"),
        t(r#"{"payout_id":1,"amount_minor":"x","currency":"EUR","beneficiary":"B","presented_token":1}"#).expect(400, invalid, "amount_minor"),
        t(r#"{"payout_id":1,"amount_minor":1,"currency":"EUR","beneficiary":"B","presented_token":1,"x":1}"#).expect(400, invalid, "x"),
        t(&good).without("content-type").expect(415, "UNSUPPORTED_MEDIA_TYPE", "Content-Type"),
        BadRequest::new("received without admin", get.clone(), "/v1/received", "").expect(401, "UNAUTHENTICATED", "bearer"),
        BadRequest::new("received with a bad filter", get.clone(), "/v1/received?payout_id=abc", "")
            .header("authorization", admin.clone())
            .expect(400, invalid, "query"),
        BadRequest::new("fault without admin", post.clone(), "/v1/faults", r#"{"fault":{"kind":"reject"}}"#).expect(401, "UNAUTHENTICATED", "bearer"),
        BadRequest::new("fault of an unknown kind", post.clone(), "/v1/faults", r#"{"fault":{"kind":"explode"}}"#)
            .header("authorization", admin.clone())
            .expect(400, invalid, "fault"),
        BadRequest::new("fault hold above the limit", post.clone(), "/v1/faults", r#"{"fault":{"kind":"timeout","hold_ms":99999999}}"#)
            .header("authorization", admin)
            .expect(400, invalid, "hold_ms"),
        BadRequest::new("wrong method", get.clone(), "/v1/transfers", "").expect(405, "METHOD_NOT_ALLOWED", "Method"),
        BadRequest::new("unknown route", get, "/v2", "").expect(404, "NOT_FOUND", "route"),
    ];
    let failures = check_all(&base, &cases).await;
    assert!(
        failures.is_empty(),
        "bad-input cases failed:\n{}",
        failures.join("\n")
    );
    assert!(
        received(&base).await.is_empty(),
        "no bad request reached the witness log"
    );
}
