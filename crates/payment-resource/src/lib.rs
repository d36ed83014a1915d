//! payment-resource: the protected resource. It owns paydb: payouts and their fences, the one
//! rail submission per payout, and the double-entry ledger. Every write carries
//! `X-Fencing-Token` and is checked against the payout's fence in the transaction that writes.
//!
//! Map: [`config`] (flags and env), [`store`] (paydb, the fence rule), [`http`] (routes).

pub mod config;
pub mod http;
pub mod store;

use std::future::Future;
use std::net::SocketAddr;

use tokio::net::TcpListener;

pub use config::Config;

/// A bound, not yet serving payment-resource.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    app: axum::Router,
}

impl Server {
    /// Connects paydb (running migrations) and binds.
    pub async fn build(config: &Config) -> anyhow::Result<Self> {
        let store =
            store::PayStore::connect(&config.database_url, config.db_max_connections).await?;
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
        let listener = TcpListener::bind(config.bind).await?;
        Ok(Self {
            listener,
            app: http::router(state, config.request_timeout),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        service_kit::serve(self.listener, self.app, shutdown).await
    }
}
