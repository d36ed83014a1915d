//! `payout-executor` binary: one lock client and one session for the process, the payout
//! loop (up to `EXECUTOR_CONCURRENCY` payouts at once) until SIGTERM/SIGINT, then the payouts
//! in flight finished and the session and client closed.

use std::sync::Arc;

use lock_client::ClientBuilder;
use payout_executor::{Config, Executor, telemetry};

#[tokio::main]
async fn main() {
    let config: Config = lock_client::service::parse_or_exit("payout-executor");
    lock_client::service::logging::init(config.log_format);
    if let Err(err) = run(config).await {
        eprintln!("payout-executor: {err:#}");
        std::process::exit(1);
    }
}

async fn run(config: Config) -> anyhow::Result<()> {
    let metrics = lock_client::service::recorder::install();
    let lock_config = ClientBuilder::from_env(|k| std::env::var(k).ok())?;
    let tls = lock_client::service::ServerTls::chosen(
        config.tls.cert.as_deref(),
        config.tls.key.as_deref(),
        None,
        config.tls.unsafe_plaintext_http,
    )
    .map_err(anyhow::Error::msg)?;
    let listener = tokio::net::TcpListener::bind(config.bind).await?;
    let executor = Arc::new(Executor::start(config, lock_config).await?);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut server_stop = stopped.clone();
    let server = tokio::spawn(async move {
        telemetry::serve(listener, telemetry::router(metrics), tls, async move {
            let _ = server_stop.changed().await;
        })
        .await
    });
    // A signal stops new attempts; the payouts in flight finish, then the loop returns. The
    // handlers are installed here, before the loop starts.
    let signalled = lock_client::service::shutdown::signal();
    tokio::spawn(async move {
        signalled.await;
        tracing::info!(
            event = "draining",
            "shutdown requested: finishing the payouts in flight"
        );
        let _ = stop.send(true);
    });
    executor.run(stopped).await;
    executor.shutdown().await;
    let _ = server.await;
    tracing::info!(event = "stopped", "payout-executor stopped");
    Ok(())
}
