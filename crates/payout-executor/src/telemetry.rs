//! The executor's small HTTP surface: `/metrics`, `/health/live`, `/health/ready`, served on
//! HTTPS (`TLS_CERT_FILE`, `TLS_KEY_FILE`, read again on SIGHUP) or, only when
//! `UNSAFE_PLAINTEXT_HTTP` says so, plain HTTP: the services' rule (`lock_client::service::ServerTls::chosen`).
//! Logs, the recorder and flag parsing are the process kit's (`process-kit`).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::header;
use axum::routing::get;
use lock_client::service::{JsonParseErrors, ServerTls, TlsStream};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};

/// A client has this long to finish its handshake; then its connection is closed.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once: a metrics port has one scraper and an operator or two; a
/// connection beyond this is closed at once, so a flood of half-open hellos costs little.
const HANDSHAKES_MAX: usize = 64;

/// Serves `router` on `listener` until `stop` completes: HTTPS with `tls`, else plain HTTP.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<ServerTls>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let Some(tls) = tls else {
        tracing::warn!(
            event = "plaintext_http",
            addr = %addr,
            "UNSAFE_PLAINTEXT_HTTP: serving the metrics port on plain HTTP"
        );
        return axum::serve(PlainListener(listener), router)
            .with_graceful_shutdown(stop)
            .await;
    };
    let tls = Arc::new(tls);
    reload_on_sighup(Arc::clone(&tls))?;
    tracing::info!(event = "listening", addr = %addr, tls = true);
    let listener = TlsListener::start(listener, tls);
    axum::serve(listener, router)
        .with_graceful_shutdown(stop)
        .await
}

/// Reads the certificate and key again on every SIGHUP; a pair that does not load leaves the
/// one in force. Registered before the port serves, so an early SIGHUP never ends the process.
fn reload_on_sighup(tls: Arc<ServerTls>) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            match tls.reload() {
                Ok(()) => tracing::info!(
                    event = "tls_reloaded",
                    "presenting the certificate read now"
                ),
                Err(err) => {
                    tracing::error!(event = "tls_reload_failed", error = %err, "kept the certificate in force")
                }
            }
        }
    });
    Ok(())
}

/// Plain connections, each answering a request hyper cannot parse as every service does
/// (`{"code","message"}`, tls-kit's [`JsonParseErrors`]).
struct PlainListener(TcpListener);

impl axum::serve::Listener for PlainListener {
    type Io = JsonParseErrors<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, addr) = axum::serve::Listener::accept(&mut self.0).await;
        (JsonParseErrors::new(stream), addr)
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// Connections whose handshake finished, in the order they finished: each handshake runs on
/// its own task, so a slow client never holds up the next.
struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    addr: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    fn start(listener: TcpListener, tls: Arc<ServerTls>) -> Self {
        let addr = listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let (done, ready) = mpsc::channel(HANDSHAKES_MAX);
        let slots = Arc::new(Semaphore::new(HANDSHAKES_MAX));
        let accepting = tokio::spawn(async move {
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(pair) => pair,
                    Err(err) => {
                        tracing::warn!(event = "accept_failed", error = %err);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                    continue; // dropped: too many handshakes at once
                };
                let (tls, done) = (Arc::clone(&tls), done.clone());
                tokio::spawn(async move {
                    if let Ok(Ok(stream)) =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await
                    {
                        let _ = done.send((stream, peer)).await;
                    }
                    drop(slot);
                });
            }
        });
        Self {
            ready,
            addr,
            accepting,
        }
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = JsonParseErrors<TlsStream<TcpStream>>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some((stream, addr)) => (JsonParseErrors::new(stream), addr),
            // The accepting task ended (only when this listener is dropped): nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

/// The router of `/metrics` and health.
pub fn router(metrics: PrometheusHandle) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move {
                    (
                        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                        metrics.render(),
                    )
                }
            }),
        )
        .route("/health/live", get(|| async { "ok" }))
        .route("/health/ready", get(|| async { "ok" }))
        .method_not_allowed_fallback(|| async {
            error(
                lock_api::ErrorCode::MethodNotAllowed,
                "this route answers GET only",
            )
        })
        .fallback(|| async { error(lock_api::ErrorCode::NotFound, "no such route") })
}

/// An error as every service answers one: `{"code","message"}` with the code's status.
fn error(code: lock_api::ErrorCode, message: &str) -> axum::response::Response {
    use axum::response::IntoResponse;
    let status = axum::http::StatusCode::from_u16(code.http_status())
        .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    let body = lock_api::ErrorBody {
        code,
        message: message.into(),
    };
    (status, axum::Json(body)).into_response()
}
