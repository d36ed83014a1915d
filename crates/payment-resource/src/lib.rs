//! payment-resource: the protected resource. It owns paydb: payouts and their fences, the one
//! rail submission per payout, and the double-entry ledger. Every write carries
//! `X-Fencing-Token` with the lock-server's signed `X-Fencing-Proof`, verified offline, and is
//! checked against the payout's fence in the transaction that writes.
//!
//! Map: [`config`] (flags and env), [`store`] (paydb, the fence rule), [`http`] (routes,
//! credentials, proof checks), [`stuck`] (the gauge of payouts stuck non-terminal).

pub mod config;
pub mod http;
pub mod store;
pub mod stuck;

pub use config::Config;
use service_kit::Service;

/// Connects paydb (running migrations) and binds: a service ready to run.
pub async fn build(config: &Config) -> anyhow::Result<Service> {
    let verifier = service_kit::trusted_keys(
        config.fence_public_keys.as_deref(),
        config.fence_public_keys_file.as_deref(),
    )
    .map_err(anyhow::Error::msg)?;
    let store = store::PayStore::connect(&config.database_url, config.db_max_connections).await?;
    service_kit::install_metrics();
    describe_metrics();
    let callers = service_kit::Callers::load(
        lock_api::PAYMENT_CREDENTIAL_ROLES,
        http::env_credentials(config),
        config.credentials_file.as_deref(),
        config.rate,
    )
    .map_err(anyhow::Error::msg)?;
    let state = http::AppState {
        store: store.clone(),
        callers,
        verifier,
        hop_budget: config.hop_budget,
    };
    tokio::spawn(stuck::watch(store, config.stuck_after));
    Ok(Service::bind(
        config.bind,
        http::router(state, config.request_timeout),
        config.http.clone(),
    )
    .await?)
}

/// HELP text of payment-resource's own families, each registered at zero at start (an absent
/// series is not a zero). The request families are described by `service_kit`.
fn describe_metrics() {
    use metrics::{counter, describe_counter, describe_gauge, gauge};
    describe_counter!(
        "payouts_created_total",
        "Payouts created (P0 201; idempotent repeats are not counted)."
    );
    describe_counter!(
        "payouts_posted_total",
        "Payouts moved to a terminal state by P3, by that state."
    );
    describe_counter!(
        "payouts_refenced_total",
        "Operator re-fences answered 200 (POST /v1/payouts/{id}/refence)."
    );
    describe_gauge!(
        stuck::STUCK,
        "Non-terminal payouts not updated for longer than PAYMENT_STUCK_AFTER."
    );
    describe_gauge!(
        stuck::OLDEST_OPEN_AGE,
        metrics::Unit::Seconds,
        "Seconds since the oldest non-terminal payout was created (0 when none)."
    );
    counter!("payouts_created_total").increment(0);
    counter!("payouts_refenced_total").increment(0);
    for state in [
        payment_api::PayoutState::Settled,
        payment_api::PayoutState::Rejected,
        payment_api::PayoutState::RailAmbiguous,
    ] {
        counter!("payouts_posted_total", "state" => state.as_str()).increment(0);
    }
    gauge!(stuck::STUCK).set(0.0);
    gauge!(stuck::OLDEST_OPEN_AGE).set(0.0);
}
