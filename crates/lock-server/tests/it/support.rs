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
