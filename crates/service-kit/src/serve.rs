//! A bound service, the accept loop every service runs, and the body of every service
//! binary's `main`.
//!
//! Every service serves HTTPS (`TLS_CERT_FILE`, `TLS_KEY_FILE`, read again on SIGHUP) or,
//! only when `UNSAFE_PLAINTEXT_HTTP` says so, plain HTTP: a service given neither does not
//! start. On a TLS port a plain HTTP request is answered 400 naming the scheme, then closed.
//!
//! The accept loop is ours (not `axum::serve`) because a service on a hostile network needs
//! bounds `axum::serve` does not offer: a header-read timeout that also closes idle
//! keep-alive connections, a cap on open connections, logged accept failures (a process out
//! of file descriptors says so), and JSON bodies on the answers hyper's parser writes itself
//! (`tls_kit::JsonParseErrors`).

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use lock_api::Throttle;
use tls_kit::ServerTls;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::callers::VERIFIED_CLIENT_HEADER;
use crate::logging::{self, LogFormat};
use tls_kit::JsonParseErrors;

/// Default time a client has to send a request's head, counted from the moment the server
/// waits for one: a connection that opens and sends nothing, sends half a head, or idles
/// between keep-alive requests for longer is closed. Ten seconds is far above any SDK or
/// executor gap between requests on a busy connection and well below what an attacker
/// needs to hold many sockets cheaply.
pub const HEADER_READ_TIMEOUT_DEFAULT: &str = "10s";
/// Default cap on open connections per service. A full pipeline (two executors, the proxy,
/// the harness) uses a few dozen; 1,024 leaves room for benchmarks and stays under the usual
/// soft limit of open files.
pub const CONNECTIONS_MAX_DEFAULT: usize = 1024;
/// After an accept error (e.g. out of file descriptors) the loop waits this long before
/// accepting again, instead of spinning.
const ACCEPT_ERROR_BACKOFF_MS: u64 = 100;
/// At most one warning per this interval for refused connections and accept errors; the
/// rest are counted into the next one.
const WARN_INTERVAL_MS: u64 = 5_000;

/// Connection limits every service takes from its flags and environment (the same keys in
/// every service).
#[derive(Debug, Clone, clap::Args)]
pub struct HttpLimits {
    /// Time a client has to send a request head; also the idle timeout between keep-alive
    /// requests.
    #[arg(long = "http.header-read-timeout", env = "HTTP_HEADER_READ_TIMEOUT", default_value = HEADER_READ_TIMEOUT_DEFAULT, value_parser = humantime::parse_duration)]
    pub header_read_timeout: Duration,
    /// Most open connections; one more is closed at once (and counted).
    #[arg(long = "http.connections-max", env = "HTTP_CONNECTIONS_MAX", default_value_t = CONNECTIONS_MAX_DEFAULT)]
    pub connections_max: usize,
    /// HTTPS (`TLS_CERT_FILE`, `TLS_KEY_FILE`) or plain HTTP said so.
    #[command(flatten)]
    pub tls: process_kit::ServeTls,
    /// Mutual TLS: the CA (PEM) client certificates must chain to. A client that presents one
    /// is the credential naming its first DNS name (`cert:<name>` in a credentials file), with
    /// no bearer secret; a client without one still proves itself with its secret.
    #[arg(long = "tls.client-ca", env = "TLS_CLIENT_CA_FILE")]
    pub tls_client_ca: Option<PathBuf>,
}

impl HttpLimits {
    /// The TLS these settings ask for: `None` for plain HTTP, which only
    /// `UNSAFE_PLAINTEXT_HTTP` allows.
    pub fn server_tls(&self) -> Result<Option<ServerTls>, String> {
        ServerTls::chosen(
            self.tls.cert.as_deref(),
            self.tls.key.as_deref(),
            self.tls_client_ca.as_deref(),
            self.tls.unsafe_plaintext_http,
        )
    }
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: humantime::parse_duration(HEADER_READ_TIMEOUT_DEFAULT)
                .unwrap_or(Duration::from_secs(10)),
            connections_max: CONNECTIONS_MAX_DEFAULT,
            tls: process_kit::ServeTls::default(),
            tls_client_ca: None,
        }
    }
}

/// A router bound to its listener, not yet serving.
#[derive(Debug)]
pub struct Service {
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
}

impl Service {
    /// Binds `app` to `addr`, served within `limits`.
    pub async fn bind(addr: SocketAddr, app: Router, limits: HttpLimits) -> std::io::Result<Self> {
        Ok(Self {
            listener: TcpListener::bind(addr).await?,
            app,
            limits,
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
        serve(self.listener, self.app, &self.limits, shutdown).await
    }
}

/// Connections refused at the cap (name pinned by the observability contract).
const CONNECTIONS_REFUSED_TOTAL: &str = "http_connections_refused_total";
/// Failed accepts (name pinned by the observability contract).
const ACCEPT_ERRORS_TOTAL: &str = "http_accept_errors_total";
/// TLS connections that ended before a request, by why (name pinned by the observability
/// contract): `plaintext` (a plain HTTP request, answered 400), `handshake` (failed or timed
/// out: an unknown CA, a wrong name, not TLS at all).
const TLS_REFUSED_TOTAL: &str = "http_tls_refused_total";

/// Describes the connection counters and exports every series at zero (an absent series is
/// not a zero); the TLS refusals on a plain port too, so a dashboard reads one set of series
/// everywhere.
fn describe_connection_metrics() {
    metrics::describe_counter!(
        CONNECTIONS_REFUSED_TOTAL,
        "Connections closed at once because HTTP_CONNECTIONS_MAX connections were open."
    );
    metrics::describe_counter!(
        ACCEPT_ERRORS_TOTAL,
        "Failed accepts (e.g. out of file descriptors); each backs off 100 ms."
    );
    metrics::counter!(CONNECTIONS_REFUSED_TOTAL).increment(0);
    metrics::counter!(ACCEPT_ERRORS_TOTAL).increment(0);
    metrics::describe_counter!(
        TLS_REFUSED_TOTAL,
        "TLS connections that ended before a request: a plain HTTP request (answered 400) or a failed handshake."
    );
    for reason in ["plaintext", "handshake"] {
        metrics::counter!(TLS_REFUSED_TOTAL, "reason" => reason).increment(0);
    }
}

/// With `tls`, reads the certificate again on SIGHUP; without, warns that `addr` serves
/// plain HTTP.
fn reload_tls_on_sighup_or_warn(
    tls: Option<&Arc<ServerTls>>,
    addr: SocketAddr,
) -> std::io::Result<()> {
    match tls {
        Some(tls) => {
            let reloaded = tls.clone();
            crate::hangup::on_sighup("TLS_CERT_FILE", move || match reloaded.reload() {
                Ok(()) => tracing::info!(event = "tls_reloaded", "presenting the certificate read now"),
                Err(err) => tracing::error!(event = "tls_reload_failed", error = %err, "kept the certificate in force"),
            })
            .map_err(std::io::Error::other)?;
        }
        None => tracing::warn!(
            event = "plaintext_http",
            addr = %addr,
            "UNSAFE_PLAINTEXT_HTTP: serving plain HTTP; credentials, session ids and proofs cross the network in clear"
        ),
    }
    Ok(())
}

/// Serves `app` on one accepted connection over TLS: the handshake first, within
/// `handshake_timeout`, then HTTP watched by `watcher` for the graceful shutdown.
async fn serve_tls_connection(
    tls: Arc<ServerTls>,
    stream: tokio::net::TcpStream,
    builder: hyper::server::conn::http1::Builder,
    watcher: hyper_util::server::graceful::Watcher,
    app: Router,
    handshake_timeout: Duration,
) {
    // The handshake counts against the header-read timeout: a connection that sends
    // nothing, or half a hello, is closed as one that sends half a head.
    let stream = match tokio::time::timeout(handshake_timeout, handshake(&tls, stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(_)) => return, // counted by `handshake`
        Err(_) => {
            metrics::counter!(TLS_REFUSED_TOTAL, "reason" => "handshake").increment(1);
            return;
        }
    };
    let service = with_verified_client(app, tls_kit::peer_name(&stream));
    let conn = builder.serve_connection(TokioIo::new(JsonParseErrors::new(stream)), service);
    let _ = watcher.watch(conn).await;
}

/// Serves `app` on `listener` within `limits` until `shutdown` completes; then stops
/// accepting, lets in-flight requests finish and closes idle connections.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: &HttpLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let tls = limits
        .server_tls()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?
        .map(Arc::new);
    describe_connection_metrics();
    reload_tls_on_sighup_or_warn(tls.as_ref(), addr)?;
    tracing::info!(
        event = "listening",
        addr = %addr,
        tls = tls.is_some(),
        header_read_timeout_ms = limits.header_read_timeout.as_millis() as u64,
        connections_max = limits.connections_max
    );
    let slots = Arc::new(Semaphore::new(limits.connections_max));
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let refused_warn = Throttle::new(Duration::from_millis(WARN_INTERVAL_MS));
    let accept_warn = Throttle::new(Duration::from_millis(WARN_INTERVAL_MS));
    tokio::pin!(shutdown);
    loop {
        let (stream, _peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(err) => {
                    metrics::counter!(ACCEPT_ERRORS_TOTAL).increment(1);
                    if let Some(suppressed) = accept_warn.allow() {
                        tracing::warn!(event = "accept_failed", error = %err, suppressed, "cannot accept connections (out of file descriptors?)");
                    }
                    tokio::time::sleep(Duration::from_millis(ACCEPT_ERROR_BACKOFF_MS)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            metrics::counter!(CONNECTIONS_REFUSED_TOTAL).increment(1);
            if let Some(suppressed) = refused_warn.allow() {
                tracing::warn!(
                    event = "connection_refused",
                    connections_max = limits.connections_max,
                    suppressed,
                    "connection cap reached; closing new connections"
                );
            }
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let Some(tls) = tls.clone() else {
            let service = with_verified_client(app.clone(), None);
            let conn =
                builder.serve_connection(TokioIo::new(JsonParseErrors::new(stream)), service);
            let conn = graceful.watch(conn);
            tokio::spawn(async move {
                // A client that goes away or times out is not an error of ours.
                let _ = conn.await;
                drop(slot);
            });
            continue;
        };
        let (builder, watcher, app) = (builder.clone(), graceful.watcher(), app.clone());
        let handshake_timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            serve_tls_connection(tls, stream, builder, watcher, app, handshake_timeout).await;
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    tracing::info!(event = "stopped", addr = %addr);
    Ok(())
}

/// `app` as hyper serves it on one connection: every request loses any
/// [`VERIFIED_CLIENT_HEADER`] it came with and, when the handshake verified a client
/// certificate, carries that certificate's name in it.
fn with_verified_client(
    app: Router,
    peer: Option<String>,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<axum::response::Response, std::convert::Infallible>> + Send,
> + Clone
+ Send
+ 'static {
    use hyper::service::Service as _;
    let name = peer.and_then(|p| axum::http::HeaderValue::from_str(&p).ok());
    let service = TowerToHyperService::new(app);
    hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
        let headers = request.headers_mut();
        headers.remove(VERIFIED_CLIENT_HEADER);
        if let Some(name) = &name {
            headers.insert(VERIFIED_CLIENT_HEADER, name.clone());
        }
        service.call(request)
    })
}

/// The TLS handshake of an accepted connection. A plain HTTP request is answered 400 with
/// [`tls_kit::PLAINTEXT_REFUSAL`] and closed; a failed handshake is closed. Both are counted.
async fn handshake(
    tls: &ServerTls,
    mut stream: tokio::net::TcpStream,
) -> std::io::Result<tls_kit::TlsStream<tokio::net::TcpStream>> {
    use tokio::io::AsyncWriteExt;
    if tls_kit::sniff(&stream).await? == tls_kit::Sniffed::PlainHttp {
        metrics::counter!(TLS_REFUSED_TOTAL, "reason" => "plaintext").increment(1);
        let body =
            serde_json::json!({"code": "INVALID_ARGUMENT", "message": tls_kit::PLAINTEXT_REFUSAL})
                .to_string();
        let answer = format!(
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(answer.as_bytes()).await?;
        let _ = stream.shutdown().await;
        return Err(std::io::Error::other("plain HTTP on a TLS port"));
    }
    tls.accept(stream).await.inspect_err(|_| {
        metrics::counter!(TLS_REFUSED_TOTAL, "reason" => "handshake").increment(1);
    })
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
