//! A bound service and the body of every service binary's `main`.

use std::future::Future;
use std::net::SocketAddr;

use axum::Router;
use tokio::net::TcpListener;

use crate::logging::{self, LogFormat};

/// A router bound to its listener, not yet serving.
#[derive(Debug)]
pub struct Service {
    listener: TcpListener,
    app: Router,
}

impl Service {
    /// Binds `app` to `addr`.
    pub async fn bind(addr: SocketAddr, app: Router) -> std::io::Result<Self> {
        Ok(Self {
            listener: TcpListener::bind(addr).await?,
            app,
        })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes; in-flight requests finish first.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        serve(self.listener, self.app, shutdown).await
    }
}

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

/// The body of a service's `main`: logs, build, serve until SIGTERM/SIGINT. A failure is one
/// line on stderr (`{program}: ...`) and exit code 1.
pub async fn run_main<E, Fut>(program: &str, log_format: LogFormat, build: Fut)
where
    E: std::fmt::Display,
    Fut: Future<Output = Result<Service, E>>,
{
    logging::init(log_format);
    let result = match build.await {
        Ok(service) => service
            .run_until(crate::shutdown::signal())
            .await
            .map_err(|e| e.to_string()),
        Err(err) => Err(err.to_string()),
    };
    if let Err(err) = result {
        eprintln!("{program}: {err}");
        std::process::exit(1);
    }
}
