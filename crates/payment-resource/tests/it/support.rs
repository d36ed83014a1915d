//! An in-process payment-resource on a fresh database.

use clap::Parser;
use payment_resource::Config;

pub const PROXY_TOKEN: &str = "proxy-secret";
pub const CREATOR_TOKEN: &str = "creator-secret";
pub const EXECUTOR_TOKEN: &str = "executor-secret";
pub const ADMIN_TOKEN: &str = "admin-secret";
pub const READER_TOKEN: &str = "reader-secret";

/// The test lock service's proof of `payout:{payout_id}` with `token`.
pub fn proof(payout_id: i64, token: u64) -> String {
    test_support::test_proof(
        &payment_api::payout_lock_key(payout_id),
        lock_api::FencingToken(token),
    )
}

pub struct Running {
    pub base: String,
    pub db_url: String,
    _stop: tokio::sync::oneshot::Sender<()>,
}

pub async fn start() -> Running {
    start_with(&[]).await
}

/// [`start`] with more arguments.
pub async fn start_with(extra: &[&str]) -> Running {
    let db = test_support::fresh_database().await;
    let public_keys = test_support::public_keys();
    let mut args = vec![
        "payment-resource",
        "--bind",
        "127.0.0.1:0",
        "--unsafe-plaintext-http",
        "--database-url",
        &db.url,
        "--proxy-token",
        PROXY_TOKEN,
        "--creator-token",
        CREATOR_TOKEN,
        "--executor-token",
        EXECUTOR_TOKEN,
        "--admin-token",
        ADMIN_TOKEN,
        "--reader-token",
        READER_TOKEN,
        "--fence-public-keys",
        &public_keys,
        "--rail.hop-budget",
        "200ms",
    ];
    args.extend_from_slice(extra);
    let config = Config::parse_from(args);
    let server = payment_resource::build(&config).await.unwrap();
    let base = format!("http://{}", server.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run_until(async move {
        let _ = stopped.await;
    }));
    Running {
        base,
        db_url: db.url,
        _stop: stop,
    }
}

/// `GET {base}{path}` with the readers' credential, as JSON.
pub async fn read(base: &str, path: &str) -> serde_json::Value {
    reqwest::Client::new()
        .get(format!("{base}{path}"))
        .bearer_auth(READER_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Creates a payout and returns its id.
pub async fn create(base: &str, key: &str) -> i64 {
    let payout: serde_json::Value = reqwest::Client::new()
        .post(format!("{base}/v1/payouts"))
        .bearer_auth(CREATOR_TOKEN)
        .header("idempotency-key", key)
        .json(&serde_json::json!({"amount_minor": 500, "currency": "EUR", "beneficiary": "Ada"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    payout["payout_id"].as_i64().unwrap()
}
