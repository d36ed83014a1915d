//! Serving a router until shutdown, then draining in-flight requests.

use std::future::Future;

use axum::Router;
use tokio::net::TcpListener;

/// Serves `app` on `listener` until `shutdown` completes; in-flight requests finish first.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(event = "listening", addr = %addr);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    tracing::info!(event = "stopped", addr = %addr);
    Ok(())
}
