//! `LockClient`: endpoints, configuration, the clock, and the one heartbeat thread
//! (`lock-hb-N`) that runs its own current-thread runtime, so a busy application runtime
//! cannot starve heartbeats.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use lock_api::{CreateSessionRequest, LockError, OwnerId, ReleaseRequest, RetryVerdict};
use tokio::sync::mpsc;

use crate::admin::AdminClient;
use crate::background::Background;
use crate::clock::Clock;
use crate::config::{ClientConfig, ConfigError};
use crate::core::acquire::throttled_open_retry;
use crate::core::{SessionCore, TickGrid};
use crate::heartbeat;
use crate::session::{LockClientSession, Shared};
use crate::transport::{Call, Reply, Transport, TransportError};

/// Numbers heartbeat threads: `lock-hb-1`, `lock-hb-2`, ...
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(1);

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// A setting is unusable; the source names its key.
    #[error("the lock client's configuration is unusable")]
    Config(#[from] ConfigError),
    /// The HTTP client or the heartbeat thread could not be created.
    #[error("cannot start the lock client: {what}")]
    Start {
        /// What could not be started.
        what: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

struct Inner {
    config: Arc<ClientConfig>,
    clock: Arc<dyn Clock>,
    app_transport: Arc<dyn Transport>,
    sessions: Mutex<Vec<Weak<Shared>>>,
    frozen: AtomicBool,
    ticks: AtomicU64,
    background: mpsc::UnboundedSender<Background>,
}

impl Inner {
    fn live_sessions(&self) -> Vec<Arc<Shared>> {
        let mut sessions = self
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        sessions.retain(|s| s.upgrade().is_some_and(|s| !s.is_closed()));
        sessions.iter().filter_map(Weak::upgrade).collect()
    }

    fn period(&self) -> Duration {
        let sessions = self.live_sessions();
        let session_ttl = sessions.iter().map(|s| s.ttl_ms).min();
        let shortest_lease = sessions.iter().filter_map(|s| s.shortest_lease_ms()).min();
        let basis = session_ttl.unwrap_or_else(|| {
            u64::try_from(self.config.session_ttl.as_millis()).unwrap_or(u64::MAX)
        });
        self.config.heartbeat_period_for(basis, shortest_lease)
    }
}

/// The SDK entry point: one per process is the intended use. Dropping it (or [`close`]) stops
/// the heartbeat thread and joins it.
///
/// [`close`]: LockClient::close
pub struct LockClient {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
    thread_name: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("endpoints", &self.inner.config.endpoints)
            .finish_non_exhaustive()
    }
}

impl LockClient {
    /// A client from its parts: checked settings, the clock, the transport application calls
    /// use, and the one the heartbeat thread uses.
    pub(crate) fn start(
        config: ClientConfig,
        clock: Arc<dyn Clock>,
        app_transport: Arc<dyn Transport>,
        heartbeat_transport: Arc<dyn Transport>,
    ) -> Result<Self, ClientError> {
        let (background, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            config: Arc::new(config),
            clock,
            app_transport,
            sessions: Mutex::new(Vec::new()),
            frozen: AtomicBool::new(false),
            ticks: AtomicU64::new(0),
            background,
        });
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let name = format!("lock-hb-{}", NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
        let thread_inner = inner.clone();
        // The tick grid starts now, on the caller's thread, so no clock movement between
        // here and the thread's start is missed.
        let grid = TickGrid::new(inner.clock.now_nanos(), inner.period());
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || run_heartbeat(thread_inner, heartbeat_transport, rx, stopped, grid))
            .map_err(|source| ClientError::Start {
                what: "the heartbeat thread",
                source: source.into(),
            })?;
        Ok(Self {
            inner,
            thread: Some(thread),
            thread_name: name,
            stop: Some(stop),
        })
    }

    /// The settings in force.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// One-shot calls over this client's endpoints, credential and TLS.
    pub fn admin(&self) -> AdminClient {
        AdminClient::new(
            self.inner.config.clone(),
            self.inner.clock.clone(),
            self.inner.app_transport.clone(),
        )
    }

    /// The name of this client's heartbeat thread (`lock-hb-N`).
    pub fn heartbeat_thread(&self) -> &str {
        &self.thread_name
    }

    /// The heartbeat period in force now.
    #[cfg(feature = "test-util")]
    pub fn heartbeat_period(&self) -> Duration {
        self.inner.period()
    }

    /// How many heartbeat ticks have completed (all sessions heartbeated, renewed, checked).
    #[cfg(feature = "test-util")]
    pub fn heartbeat_ticks(&self) -> u64 {
        self.inner.ticks.load(Ordering::SeqCst)
    }

    /// Opens a session for `owner_id`, trying each endpoint once on `NOT_LEADER` or
    /// no answer, starting at a random one: sessions of many processes spread over the
    /// replicas instead of all loading the first, and the session stays on the
    /// endpoint that answered until a failure moves it. Its deadline starts from the moment
    /// the request left.
    pub async fn open_session(&self, owner_id: &str) -> Result<LockClientSession, LockError> {
        let owner = OwnerId::parse(owner_id).map_err(|e| LockError::InvalidArgument {
            message: e.to_string(),
        })?;
        let config = &self.inner.config;
        let ttl_ms = u64::try_from(config.session_ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut last = None;
        let count = config.endpoints.len();
        let first = fastrand::usize(..count.max(1));
        let mut throttled = 0;
        let mut step = 0;
        while step < count {
            let index = (first + step) % count;
            let endpoint = &config.endpoints[index];
            let send_nanos = self.inner.clock.now_nanos();
            let call = Call::CreateSession(CreateSessionRequest {
                owner_id: owner.clone(),
                ttl_ms: Some(ttl_ms),
            });
            match self.inner.app_transport.send(endpoint, call).await {
                Ok(Reply::Session(created)) => {
                    let core = SessionCore::new(config.safety_margin, created.ttl_ms, send_nanos);
                    let shared = Arc::new(Shared::new(
                        created.session_id,
                        owner,
                        created.backend,
                        created.ttl_ms,
                        core,
                        index,
                        config.clone(),
                        self.inner.clock.clone(),
                        self.inner.background.clone(),
                    ));
                    self.inner
                        .sessions
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(Arc::downgrade(&shared));
                    let _ = self.inner.background.send(Background::Wake);
                    tracing::info!(event = "session_opened", owner = %shared.owner, session = %shared.id.tag(), backend = shared.backend.as_str(), ttl_ms = created.ttl_ms);
                    // Exported from the first session on, at zero: an absent series is not a zero.
                    crate::metrics::describe(shared.backend.as_str());
                    return Ok(LockClientSession::new(
                        shared,
                        self.inner.app_transport.clone(),
                    ));
                }
                Ok(other) => {
                    return Err(LockError::Protocol {
                        status: 201,
                        message: format!("open session answered {other:?}"),
                    });
                }
                Err(err) => {
                    let err = match err {
                        TransportError::Unreachable(message) => LockError::Unavailable { message },
                        TransportError::Status { status, body } => {
                            LockError::from_wire(status, body, None)
                        }
                    };
                    let verdict = err.retry();
                    let mut rng = fastrand::Rng::new();
                    if let Some(sleep) = throttled_open_retry(verdict, throttled, &mut rng) {
                        // Over its rate or session quota here: the same replica, later.
                        throttled += 1;
                        self.inner.clock.sleep(sleep).await;
                        continue;
                    }
                    if verdict != RetryVerdict::NextTick {
                        return Err(err);
                    }
                    last = Some(err);
                }
            }
            step += 1;
        }
        Err(last.unwrap_or(LockError::Unavailable {
            message: "no endpoint configured".into(),
        }))
    }

    /// Test and fault-injection hook: the heartbeat thread stops doing anything (no heartbeats, no
    /// renewals, no loss delivery), as if its process were frozen. `check_still_held` still applies
    /// the local deadline. There is no way back: use it only to observe expiry.
    #[cfg(feature = "test-util")]
    pub fn freeze_heartbeat(&self) {
        tracing::warn!(
            event = "heartbeat_frozen",
            "heartbeat frozen by a test hook"
        );
        self.inner.frozen.store(true, Ordering::SeqCst);
    }

    /// Stops the heartbeat thread and waits for it. Sessions should be closed first.
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!(
                    event = "heartbeat_thread_panicked",
                    "the heartbeat thread panicked"
                );
            }
        }
    }
}

impl Drop for LockClient {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn run_heartbeat(
    inner: Arc<Inner>,
    transport: Arc<dyn Transport>,
    mut rx: mpsc::UnboundedReceiver<Background>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
    mut grid: TickGrid,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            tracing::error!(event = "heartbeat_failed", error = %err, "cannot build the heartbeat runtime");
            return;
        }
    };
    runtime.block_on(async move {
        let clock = inner.clock.clone();
        loop {
            let wait = grid.wait(clock.now_nanos());
            tokio::select! {
                biased;
                _ = &mut stopped => break,
                message = rx.recv() => match message {
                    None => break,
                    Some(Background::Wake) => grid.tighten(clock.now_nanos(), inner.period()),
                    Some(Background::Release { endpoint, session, key, token }) => {
                        let call = Call::Release(key, ReleaseRequest { session_id: session, fencing_token: token });
                        if let Err(err) = transport.send(&endpoint, call).await {
                            tracing::debug!(event = "release_failed", token = token.0, error = %err);
                        }
                    }
                    Some(Background::DeleteSession { endpoint, session }) => {
                        if let Err(err) = transport.send(&endpoint, Call::DeleteSession(session)).await {
                            tracing::debug!(event = "session_close_failed", session = %session.tag(), error = %err);
                        }
                    }
                },
                _ = clock.sleep(wait) => {
                    let period = inner.period();
                    if !inner.frozen.load(Ordering::SeqCst) {
                        let ticks = async {
                            for session in inner.live_sessions() {
                                heartbeat::tick(&session, transport.as_ref(), period).await;
                            }
                        };
                        // Closing cancels a tick stuck in a slow call: close never waits
                        // for request timeouts.
                        tokio::select! {
                            biased;
                            _ = &mut stopped => break,
                            _ = ticks => {}
                        }
                        inner.ticks.fetch_add(1, Ordering::SeqCst);
                    }
                    grid.advance(clock.now_nanos(), period);
                }
            }
        }
    });
}
