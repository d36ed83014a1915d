//! payment-resource: the protected resource. It owns paydb: payouts and their fences, the one
//! rail submission per payout, and the double-entry ledger. Every write carries
//! `X-Fencing-Token` and is checked against the payout's fence in the transaction that writes.
//!
//! Map: [`config`] (flags and env), [`store`] (paydb, the fence rule), [`http`] (routes).

pub mod config;
pub mod http;
pub mod store;

pub use config::Config;
use service_kit::Service;

/// Connects paydb (running migrations) and binds: a service ready to run.
pub async fn build(config: &Config) -> anyhow::Result<Service> {
    let store = store::PayStore::connect(&config.database_url, config.db_max_connections).await?;
    service_kit::install_metrics();
    let state = http::AppState {
        store,
        proxy_token: config
            .proxy_token
            .as_deref()
            .filter(|t| !t.is_empty())
            .map(Into::into),
        hop_budget: config.hop_budget,
    };
    Ok(Service::bind(
        config.bind,
        http::router(state, config.request_timeout),
        config.http.clone(),
    )
    .await?)
}
