//! Starting in-process replicas and talking to them.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use lock_server::store::{EtcdStore, LockStore, PostgresStore};
use lock_server::{Config, Server};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The lock clients' credential every test replica is configured with.
pub const CLIENT_TOKEN: &str = "test-client-token";

/// Test defaults: any port, short minimum TTL, a fast reaper, a short drain, the test
/// client credential and signing key.
pub fn config(extra: &[&str]) -> Config {
    let signing_key = test_support::signing_key_base64();
    let mut args = vec![
        "lock-server",
        "--client-token",
        CLIENT_TOKEN,
        "--signing-key",
        signing_key,
        "--signing-key-id",
        test_support::keys::SIGNING_KEY_ID,
        "--bind",
        "127.0.0.1:0",
        "--lock.ttl.min",
        "50ms",
        "--reaper-interval",
        "100ms",
        "--drain-grace",
        "300ms",
        "--log-format",
        "text",
        "--unsafe-plaintext-http",
    ];
    args.extend_from_slice(extra);
    Config::parse_from(args)
}

/// A PostgreSQL store on a fresh database.
pub async fn pg_store() -> (Arc<PostgresStore>, String) {
    let db = test_support::fresh_database().await;
    let store = PostgresStore::connect(&db.url, 8)
        .await
        .expect("connect the store");
    (Arc::new(store), db.url)
}

/// A PostgreSQL store on a fresh database whose releases wake the head waiter to ask
/// (`LOCK_DB_HAND_OVER=false`).
pub async fn pg_store_waking() -> Arc<PostgresStore> {
    let db = test_support::fresh_database().await;
    let store = PostgresStore::connect_handing_over(&db.url, 8, false)
        .await
        .expect("connect the store");
    Arc::new(store)
}

/// Budget of one etcd call in tests.
const ETCD_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Where one test's store lives: a fresh PostgreSQL database or a fresh etcd key prefix.
/// Replicas in this process open it; lock-server processes are pointed at it.
#[derive(Debug, Clone)]
pub enum StoreAt {
    /// A database URL.
    Postgres(String),
    /// etcd members and this test's prefix.
    Etcd {
        endpoints: Vec<String>,
        prefix: String,
    },
}

impl StoreAt {
    /// A fresh, empty PostgreSQL database.
    pub async fn postgres() -> Self {
        Self::Postgres(test_support::fresh_database().await.url)
    }

    /// A fresh key prefix on the test process's etcd.
    pub fn etcd() -> Self {
        Self::Etcd {
            endpoints: test_support::etcd::endpoints(),
            prefix: test_support::etcd::fresh_prefix(),
        }
    }

    /// A store over it (each call a separate connection, as a separate replica has).
    pub async fn open(&self) -> Arc<dyn LockStore> {
        match self {
            Self::Postgres(url) => Arc::new(
                PostgresStore::connect(url, 8)
                    .await
                    .expect("connect the PostgreSQL store"),
            ),
            Self::Etcd { endpoints, prefix } => Arc::new(
                EtcdStore::connect(endpoints, prefix, ETCD_REQUEST_TIMEOUT)
                    .await
                    .expect("connect the etcd store"),
            ),
        }
    }

    /// Everything the store holds, for "unchanged" checks: PostgreSQL's rows, or etcd's keys
    /// under the prefix with their values and revisions.
    pub async fn contents(&self) -> Vec<String> {
        match self {
            Self::Postgres(url) => {
                let pool = sqlx::PgPool::connect(url).await.expect("connect");
                let rows: Vec<(String,)> = sqlx::query_as(
                    "SELECT format('session %s %s %s', session_id, owner_id, expires_at) FROM lock_sessions
                     UNION ALL SELECT format('lock %s %s %s %s', lock_key, fencing_token, session_id, expires_at) FROM locks
                     UNION ALL SELECT format('fence %s %s', lock_key, last_token) FROM lock_fences
                     ORDER BY 1",
                )
                .fetch_all(&pool)
                .await
                .expect("read the tables");
                rows.into_iter().map(|(row,)| row).collect()
            }
            Self::Etcd { endpoints, prefix } => {
                let mut client = etcd_client::Client::connect(endpoints, None)
                    .await
                    .expect("connect to etcd");
                let got = client
                    .get(
                        prefix.as_str(),
                        Some(etcd_client::GetOptions::new().with_prefix()),
                    )
                    .await
                    .expect("read the prefix");
                got.kvs()
                    .iter()
                    .map(|kv| {
                        format!(
                            "{} {} @{}",
                            String::from_utf8_lossy(kv.key()),
                            String::from_utf8_lossy(kv.value()),
                            kv.mod_revision()
                        )
                    })
                    .collect()
            }
        }
    }

    /// The backend's name on the wire (`backend` of L1).
    pub fn backend(&self) -> &'static str {
        match self {
            Self::Postgres(_) => "postgres",
            Self::Etcd { .. } => "etcd",
        }
    }

    /// The environment that points a lock-server process at it.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Self::Postgres(url) => vec![
                ("LOCK_BACKEND", "postgres".into()),
                ("DATABASE_URL", url.clone()),
            ],
            Self::Etcd { endpoints, prefix } => vec![
                ("LOCK_BACKEND", "etcd".into()),
                ("LOCK_ETCD_ENDPOINTS", endpoints.join(",")),
                ("LOCK_ETCD_PREFIX", prefix.clone()),
            ],
        }
    }
}

/// Instantiates each `async fn case(at: StoreAt)` once per backend, in modules `postgres`
/// and `etcd`.
macro_rules! on_both_backends {
    ($($case:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case($crate::support::StoreAt::postgres().await).await;
                }
            )*
        }
        mod etcd {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case($crate::support::StoreAt::etcd()).await;
                }
            )*
        }
    };
}
pub(crate) use on_both_backends;

/// A replica serving in this process.
#[derive(Debug)]
pub struct TestServer {
    pub api: Api,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl TestServer {
    pub async fn start(store: Arc<dyn LockStore>, extra: &[&str]) -> Self {
        let server = Server::with_store(&config(extra), store)
            .await
            .expect("start the replica");
        let base = format!("http://{}", server.local_addr());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run_until(async move {
            let _ = stopped.await;
        }));
        Self {
            api: Api::new(base),
            stop: Some(stop),
            task,
        }
    }

    /// Starts draining and returns at once.
    pub fn begin_shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Drains and waits for the replica to stop.
    pub async fn shutdown(mut self) {
        self.begin_shutdown();
        tokio::time::timeout(Duration::from_secs(10), &mut self.task)
            .await
            .expect("replica stops within 10 s")
            .expect("replica task joins")
            .expect("replica serves without I/O error");
    }
}

/// A JSON client for one replica.
#[derive(Debug, Clone)]
pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
}

impl Api {
    /// A client presenting the test client credential.
    pub fn new(base: String) -> Self {
        Self::with_credential(base, Some(CLIENT_TOKEN))
    }

    /// A client presenting `credential` (or none).
    pub fn with_credential(base: String, credential: Option<&str>) -> Self {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(credential) = credential {
            headers.insert(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {credential}")
                    .parse()
                    .expect("a header value"),
            );
        }
        Self {
            base,
            http: reqwest::Client::builder()
                .default_headers(headers)
                .build()
                .expect("client"),
        }
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request reaches the replica");
        let status = response.status();
        let text = response.text().await.expect("read body");
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, value)
    }

    /// The value of the series `series` (name and labels, as exported) on the replica's
    /// `/metrics`; an absent series is a failure, never a zero.
    pub async fn metric(&self, series: &str) -> f64 {
        let page = self
            .http
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("a metrics page");
        page.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("{series} is not exported:\n{page}"))
            .trim()
            .parse()
            .expect("a number")
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(body)).await
    }

    /// L1 with `ttl_ms`; returns the session id.
    pub async fn session(&self, owner: &str, ttl_ms: u64) -> String {
        let (status, body) = self
            .post(
                "/v1/sessions",
                serde_json::json!({"owner_id": owner, "ttl_ms": ttl_ms}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["session_id"].as_str().expect("session_id").to_owned()
    }

    /// L4; returns status and body.
    pub async fn acquire(&self, key: &str, session: &str, ttl_ms: u64) -> (StatusCode, Value) {
        self.post(
            &format!("/v1/locks/{key}/acquire"),
            serde_json::json!({"session_id": session, "ttl_ms": ttl_ms}),
        )
        .await
    }

    /// L6 as `session`; returns `released`.
    pub async fn release(&self, key: &str, session: &str, token: u64) -> bool {
        let (status, body) = self
            .post(
                &format!("/v1/locks/{key}/release"),
                serde_json::json!({"session_id": session, "fencing_token": token}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["released"].as_bool().expect("released")
    }
}

/// The token of a successful grant body.
pub fn token(body: &Value) -> u64 {
    body["fencing_token"]
        .as_u64()
        .unwrap_or_else(|| panic!("no fencing_token in {body}"))
}

/// A TCP proxy in front of PostgreSQL that, once armed, cuts the connection that carries the
/// next statement naming `function` right after the server answered it: the statement
/// committed, and its answer never arrives. (The function's name is on the wire when a
/// connection prepares the statement: arm it before the connection's first call.)
pub struct CutAfterCommit {
    pub url: String,
    pub armed: Arc<std::sync::atomic::AtomicBool>,
    pub cuts: Arc<std::sync::atomic::AtomicUsize>,
}

impl CutAfterCommit {
    pub async fn start(db_url: &str, function: &'static str) -> Self {
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        let upstream = db_url
            .split('@')
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .expect("host:port in the database URL")
            .to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = db_url.replace(&upstream, &listener.local_addr().unwrap().to_string());
        let (armed, cuts) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (arm, cut) = (armed.clone(), cuts.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
                tokio::spawn(Self::pipe(
                    client,
                    server,
                    function,
                    arm.clone(),
                    cut.clone(),
                ));
            }
        });
        Self { url, armed, cuts }
    }

    /// Forwards both ways; on the armed connection that sent `function`, holds the server's
    /// result (from its CommandComplete) until its ReadyForQuery, sent after the commit, and
    /// then drops both sides.
    async fn pipe(
        client: tokio::net::TcpStream,
        server: tokio::net::TcpStream,
        function: &'static str,
        armed: Arc<std::sync::atomic::AtomicBool>,
        cuts: Arc<std::sync::atomic::AtomicUsize>,
    ) {
        use std::sync::atomic::Ordering::SeqCst;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client_read, mut client_write) = client.into_split();
        let (mut server_read, mut server_write) = server.into_split();
        let batch_sent = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sent = batch_sent.clone();
        let upward = tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n @ 1..) = client_read.read(&mut buf).await {
                if buf[..n]
                    .windows(function.len())
                    .any(|w| w == function.as_bytes())
                {
                    sent.store(true, SeqCst);
                }
                if server_write.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        });
        let mut buf = vec![0u8; 64 * 1024];
        let mut held = Vec::new();
        while let Ok(n @ 1..) = server_read.read(&mut buf).await {
            let cutting = armed.load(SeqCst) && batch_sent.load(SeqCst);
            if !cutting {
                if client_write.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                continue;
            }
            held.extend_from_slice(&buf[..n]);
            let answered = held.windows(7).any(|w| w == b"SELECT ");
            if !answered {
                // Not the statement's result yet (the prepare's round trip): pass it on.
                if client_write.write_all(&held).await.is_err() {
                    break;
                }
                held.clear();
                continue;
            }
            let ready = held.windows(5).any(|w| w == b"Z\0\0\0\x05");
            if ready {
                armed.store(false, SeqCst);
                cuts.fetch_add(1, SeqCst);
                break; // both halves dropped: the client sees the connection cut
            }
        }
        upward.abort();
    }
}
