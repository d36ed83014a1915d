//! Starting, running and draining one replica: store connection, listener, reaper, the
//! store-clock sampler, graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::{BackendChoice, Config, TtlPolicy};
use crate::quota::Quotas;
use crate::state::{AppState, Credentials};
use crate::store::{Batched, EtcdStore, LockStore, MemoryStore, PostgresStore, StoreError};

/// Why a replica could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The store could not be opened.
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    /// The store can lose a committed token and no override is set.
    #[error(
        "refusing to start: {0} (set LOCK_UNSAFE_ALLOW_NON_DURABLE_STORE=true only for a throwaway store)"
    )]
    NotDurable(String),
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A bound, not yet serving replica.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    state: AppState,
    reaper_interval: Duration,
    drain_grace: Duration,
    request_timeout: Duration,
    http_limits: service_kit::HttpLimits,
}

impl Server {
    /// Opens the configured store (running migrations) and binds the listener.
    pub async fn build(config: &Config) -> Result<Self, StartError> {
        // Configuration mistakes first: they are cheaper to fix than a store's settings.
        config.ttl_policy().map_err(StartError::Config)?;
        config.wait_policy().map_err(StartError::Config)?;
        config.signer().map_err(StartError::Config)?;
        let store: Arc<dyn LockStore> = match config.backend {
            BackendChoice::Memory => Arc::new(MemoryStore::new()),
            BackendChoice::Postgres => {
                let url = config.database_url.as_deref().ok_or_else(|| {
                    StartError::Config("DATABASE_URL is required for the postgres backend".into())
                })?;
                let store = Arc::new(
                    PostgresStore::connect_handing_over(
                        url,
                        config.db_max_connections,
                        config.db_hand_over,
                    )
                    .await?,
                );
                if config.db_group_commit {
                    Arc::new(Batched::new(store))
                } else {
                    store
                }
            }
            BackendChoice::Etcd => {
                if config.etcd_endpoints.is_empty() {
                    return Err(StartError::Config(
                        "LOCK_ETCD_ENDPOINTS is required for the etcd backend".into(),
                    ));
                }
                Arc::new(
                    EtcdStore::connect(
                        &config.etcd_endpoints,
                        &config.etcd_prefix,
                        config.etcd_request_timeout,
                    )
                    .await?,
                )
            }
        };
        check_durability(&*store, config.unsafe_allow_non_durable_store).await?;
        Self::with_store(config, store).await
    }

    /// Binds the listener over an already opened store.
    pub async fn with_store(
        config: &Config,
        store: Arc<dyn LockStore>,
    ) -> Result<Self, StartError> {
        let ttl: TtlPolicy = config.ttl_policy().map_err(StartError::Config)?;
        let wait = config.wait_policy().map_err(StartError::Config)?;
        let listener = TcpListener::bind(config.bind)
            .await
            .map_err(|source| StartError::Bind {
                addr: config.bind,
                source,
            })?;
        let signer = config.signer().map_err(StartError::Config)?;
        match &signer {
            Some(signer) => tracing::info!(event = "signing_grants", key_id = signer.key_id()),
            None => tracing::warn!(
                event = "grants_unsigned",
                "LOCK_SIGNING_KEY is unset: grants carry no proof, and resources that verify proofs refuse their tokens"
            ),
        }
        // Before anything registers a series: the callers' counters are exported from start.
        service_kit::install_metrics();
        let callers = callers(config).map_err(StartError::Config)?;
        if !callers.has_role(crate::http::CLIENT_ROLE) {
            tracing::warn!(
                event = "lock_surface_disabled",
                "no client credential (LOCK_CLIENT_TOKEN or a `client` in LOCK_CREDENTIALS_FILE): L1-L7 answer 403 until one is configured"
            );
        }
        let state = AppState::new(
            store,
            ttl,
            wait,
            Credentials {
                callers,
                quotas: Quotas::new(config.sessions_per_caller, config.waiters_per_caller),
                signer,
            },
        );
        state.watch_wakes().await?;
        state.watch_events().await?;
        // The store-clock guard's first reading, before any grant: a step after this start
        // is then measured against this replica's own clock, not only its host's wall clock.
        state.clock_checked().sample().await?;
        crate::metrics::describe(state.backend().as_str());
        Ok(Self {
            listener,
            state,
            reaper_interval: config.reaper_interval,
            drain_grace: config.drain_grace,
            request_timeout: config.request_timeout,
            http_limits: config.http.clone(),
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// The replica's shared state.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` completes, then drains: mutations get `NOT_LEADER` for the
    /// drain grace, the listener closes, in-flight requests finish, the reaper stops.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let Self {
            listener,
            state,
            reaper_interval,
            drain_grace,
            request_timeout,
            http_limits,
        } = self;
        let (stop_reaper, reaper_stop) = watch::channel(false);
        let reaper = tokio::spawn(crate::reaper::run(
            state.clone(),
            reaper_interval,
            reaper_stop,
        ));
        let clock_watch = tokio::spawn(crate::store::watch_clock(
            state.clock_checked(),
            stop_reaper.subscribe(),
        ));
        let drain_state = state.clone();
        let drain = async move {
            shutdown.await;
            tracing::info!(
                event = "draining",
                grace_ms = drain_grace.as_millis() as u64,
                "shutdown requested"
            );
            drain_state.start_draining();
            tokio::time::sleep(drain_grace).await;
        };
        tracing::info!(event = "backend", backend = state.backend().as_str());
        let app = crate::http::router(state, request_timeout);
        let served = service_kit::serve(listener, app, &http_limits, drain).await;
        let _ = stop_reaper.send(true);
        let _ = reaper.await;
        let _ = clock_watch.await;
        tracing::info!(event = "stopped", "lock-server stopped");
        served
    }
}

/// The credentials a replica accepts: `LOCK_CLIENT_TOKEN` (`lock-client`), `LOCK_ADMIN_TOKEN`
/// (`lock-admin`) and the credentials file's. With a file, a task reloads it on SIGHUP, so
/// call from within the runtime.
fn callers(config: &Config) -> Result<Arc<service_kit::Callers>, String> {
    use crate::http::{ADMIN_CREDENTIAL, ADMIN_ROLE, CLIENT_CREDENTIAL, CLIENT_ROLE};
    let env = [
        (&config.client_token, CLIENT_CREDENTIAL, CLIENT_ROLE),
        (&config.admin_token, ADMIN_CREDENTIAL, ADMIN_ROLE),
    ];
    let fixed = env
        .into_iter()
        .filter_map(|(secret, name, role)| {
            let secret = secret.as_deref().filter(|s| !s.trim().is_empty())?;
            Some(lock_api::CredentialEntry::from_secret(
                name,
                &[role],
                secret,
            ))
        })
        .collect();
    service_kit::Callers::load(
        lock_api::LOCK_CREDENTIAL_ROLES,
        fixed,
        config.credentials_file.as_deref(),
        config.rate,
    )
}

/// Refuses a store that can lose a committed token, unless `allow_unsafe` (then says so
/// loudly, once, at startup).
pub async fn check_durability(store: &dyn LockStore, allow_unsafe: bool) -> Result<(), StartError> {
    let risks = store.durability_risks().await?;
    if risks.is_empty() {
        return Ok(());
    }
    let risks = risks.join("; ");
    if allow_unsafe {
        tracing::warn!(
            event = "non_durable_store",
            risks = %risks,
            "LOCK_UNSAFE_ALLOW_NON_DURABLE_STORE is set: starting on a store that can reuse tokens after a crash"
        );
        return Ok(());
    }
    Err(StartError::NotDurable(risks))
}

/// Completes on SIGTERM or SIGINT.
pub use service_kit::shutdown::signal as shutdown_signal;
