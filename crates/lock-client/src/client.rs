//! `LockClient`: endpoints, configuration, the clock, and the one heartbeat thread
//! (`lock-hb-N`) that runs its own current-thread runtime, so a busy application runtime
//! cannot starve heartbeats.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use lock_api::{
    AcquireRequest, CreateSessionRequest, ErrorCode, FencingToken, LockError, LockGrant, LockInfo,
    LockKey, LockOutcome, OwnerId, ReleaseRequest, RetryVerdict, RevokeReason, SessionId,
};
use tokio::sync::mpsc;

use crate::background::Background;
use crate::clock::{Clock, SystemClock};
use crate::config::{AcquirePolicy, ConfigError, Credential, LockClientConfig};
use crate::core::acquire::throttled_open_retry;
use crate::core::{AcquireLoop, Next, SessionCore, TickGrid};
use crate::heartbeat;
use crate::session::{LockClientSession, Shared};
use crate::transport::{Call, HttpTransport, Reply, Transport, TransportError};

/// Numbers heartbeat threads: `lock-hb-1`, `lock-hb-2`, ...
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(1);

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The HTTP client or the heartbeat thread could not be created.
    #[error("cannot start the lock client: {0}")]
    Start(String),
}

struct Inner {
    config: Arc<LockClientConfig>,
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
    /// A client over HTTP with the system clock.
    pub fn new(config: LockClientConfig) -> Result<Self, ClientError> {
        config.validate()?;
        config.check_endpoints()?;
        let app = HttpTransport::new(
            config.request_timeout,
            config.credential.as_ref(),
            &config.tls,
        )
        .map_err(|e| ClientError::Start(e.to_string()))?;
        let beat = HttpTransport::new(
            config.request_timeout,
            config.credential.as_ref(),
            &config.tls,
        )
        .map_err(|e| ClientError::Start(e.to_string()))?;
        Self::with_parts(
            config,
            Arc::new(SystemClock::new()),
            Arc::new(app),
            Arc::new(beat),
        )
    }

    /// A client over one transport (tests, simulation) with the system clock.
    pub fn with_transport(
        config: LockClientConfig,
        transport: Arc<dyn Transport>,
    ) -> Result<Self, ClientError> {
        Self::with_parts(
            config,
            Arc::new(SystemClock::new()),
            transport.clone(),
            transport,
        )
    }

    /// A client from its parts: the clock, the transport application calls use, and the one
    /// the heartbeat thread uses.
    pub fn with_parts(
        config: LockClientConfig,
        clock: Arc<dyn Clock>,
        app_transport: Arc<dyn Transport>,
        heartbeat_transport: Arc<dyn Transport>,
    ) -> Result<Self, ClientError> {
        config.validate()?;
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
            .map_err(|e| ClientError::Start(format!("spawn the heartbeat thread: {e}")))?;
        Ok(Self {
            inner,
            thread: Some(thread),
            thread_name: name,
            stop: Some(stop),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &LockClientConfig {
        &self.inner.config
    }

    /// The name of this client's heartbeat thread (`lock-hb-N`).
    pub fn heartbeat_thread(&self) -> &str {
        &self.thread_name
    }

    /// How many heartbeat ticks have completed (all sessions heartbeated, renewed, checked).
    pub fn heartbeat_ticks(&self) -> u64 {
        self.inner.ticks.load(Ordering::SeqCst)
    }

    /// The heartbeat period in force now.
    pub fn heartbeat_period(&self) -> Duration {
        self.inner.period()
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

    /// One-shot acquire for a session this process does not track (one opened elsewhere, e.g. by
    /// `lockctl session open` and [`LockClientSession::detach`]): retries `LOCK_HELD` with
    /// full-jitter backoff within `policy` (budget on the SDK's clock, `max_attempts`), moving
    /// to the next endpoint after `NOT_LEADER` or no answer, as
    /// [`LockClientSession::acquire`] does. `Ok(None)`: still held by another session when the
    /// policy ran out.
    ///
    /// Returns the server's grant record, not a handle: nothing in this process heartbeats
    /// the session or renews the lease, so the grant is good for at most
    /// `lease_ms × (1 − safety margin)` from before this call, and the session's own TTL
    /// bounds it too. A session that holds `key` already is answered its own grant again
    /// (same token). Records no metrics (the session's backend is unknown here).
    pub async fn acquire_as(
        &self,
        session: SessionId,
        key: &LockKey,
        ttl: Duration,
        policy: &AcquirePolicy,
    ) -> Result<Option<LockGrant>, LockError> {
        let clock = &self.inner.clock;
        let endpoints = &self.inner.config.endpoints;
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut acquiring =
            AcquireLoop::new(policy, self.inner.config.request_timeout, clock.now_nanos());
        let mut rng = fastrand::Rng::new();
        let mut endpoint = 0usize;
        loop {
            let attempt = acquiring.attempt(clock.now_nanos());
            let call = Call::Acquire(
                key.clone(),
                AcquireRequest {
                    session_id: session,
                    ttl_ms: Some(ttl_ms),
                    wait_ms: attempt.wait_ms(),
                    lock_delay_ms: None,
                },
            );
            let err = match self
                .inner
                .app_transport
                .send(&endpoints[endpoint % endpoints.len()], call)
                .await
            {
                Ok(Reply::Grant(grant))
                    if grant.lock_key == *key && grant.session_id == session =>
                {
                    return Ok(Some(grant));
                }
                Ok(other) => {
                    return Err(LockError::Protocol {
                        status: 200,
                        message: format!("acquire answered {other:?}"),
                    });
                }
                Err(err) => wire_error(err),
            };
            let after = acquiring.failed(clock.now_nanos(), err.retry(), &mut rng);
            if after.rotate {
                endpoint = endpoint.wrapping_add(1);
            }
            match after.next {
                Next::Retry(sleep) => clock.sleep(sleep).await,
                Next::Contended => return Ok(None),
                Next::Fail => return Err(err),
            }
        }
    }

    /// One-shot release for a session this process does not track: compare-and-delete on `key`,
    /// `token` and `session`. `Ok(true)`: the grant was deleted; `Ok(false)`: there was no
    /// live grant of this key with this token and session (already released, expired,
    /// revoked, or never this session's). Tries each endpoint once on `NOT_LEADER` or no
    /// answer.
    pub async fn release_as(
        &self,
        session: SessionId,
        key: &LockKey,
        token: FencingToken,
    ) -> Result<bool, LockError> {
        let call = Call::Release(
            key.clone(),
            ReleaseRequest {
                session_id: session,
                fencing_token: token,
            },
        );
        match self.call_any(call).await? {
            Reply::Released(answer) => Ok(answer.released),
            other => Err(unexpected("release", &other)),
        }
    }

    /// One-shot close: ends `session` on the server with all its grants (idempotent: an unknown
    /// session is not an error). Unlike [`LockClientSession::close`] it reports a failure,
    /// since nothing will retry it. Tries each endpoint once on `NOT_LEADER` or no answer.
    pub async fn close_session(&self, session: SessionId) -> Result<(), LockError> {
        match self.call_any(Call::DeleteSession(session)).await? {
            Reply::Deleted => Ok(()),
            other => Err(unexpected("close session", &other)),
        }
    }

    /// Inspect: the key's live grant — token, owner and display expiry, never a session id — or
    /// `None` when no live grant exists. For operators and tools: no client may decide
    /// whether a write is safe from it (the fencing token does). Tries each endpoint once on
    /// `NOT_LEADER` or no answer.
    pub async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>, LockError> {
        match self.call_any(Call::Inspect(key.clone())).await {
            Ok(Reply::Info(info)) => Ok(Some(info)),
            Ok(other) => Err(unexpected("inspect", &other)),
            Err(NotHeld) => Ok(None),
            Err(Failed(err)) => Err(err),
        }
    }

    /// Revokes the key's live grant, if any, presenting `admin` (the operators'
    /// `LOCK_ADMIN_TOKEN`) instead of the client's credential, with an optional `reason`. The
    /// holder learns it at its next renewal (`LOCK_REVOKED` with who and why: its loss is
    /// `LossReason::Revoked`); the token is never reused. Tries each endpoint once on
    /// `NOT_LEADER` or no answer.
    pub async fn revoke(
        &self,
        key: &LockKey,
        admin: &Credential,
        reason: Option<&RevokeReason>,
    ) -> Result<LockOutcome, LockError> {
        let call = Call::Revoke(key.clone(), admin.clone(), reason.cloned());
        match self.call_any(call).await? {
            Reply::Revoked(outcome) => Ok(outcome),
            other => Err(unexpected("revoke", &other)),
        }
    }

    /// Sends `call` to each endpoint in order until one answers anything but `NOT_LEADER`
    /// or nothing.
    async fn call_any(&self, call: Call) -> Result<Reply, OneShotError> {
        let mut last = None;
        for endpoint in &self.inner.config.endpoints {
            match self.inner.app_transport.send(endpoint, call.clone()).await {
                Ok(reply) => return Ok(reply),
                Err(TransportError::Status { body, .. }) if body.code == ErrorCode::LockNotHeld => {
                    return Err(NotHeld);
                }
                Err(err) => {
                    let err = wire_error(err);
                    if err.retry() != RetryVerdict::NextTick {
                        return Err(Failed(err));
                    }
                    last = Some(err);
                }
            }
        }
        Err(Failed(last.unwrap_or(LockError::Unavailable {
            message: "no endpoint configured".into(),
        })))
    }

    /// Test and fault-injection hook: the heartbeat thread stops doing anything (no heartbeats, no
    /// renewals, no loss delivery), as if its process were frozen. `check_still_held` still applies
    /// the local deadline. There is no way back: use it only to observe expiry.
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

/// Why a one-shot call failed: inspect's "no live grant" is an answer, not an error.
enum OneShotError {
    NotHeld,
    Failed(LockError),
}

use OneShotError::{Failed, NotHeld};

impl From<OneShotError> for LockError {
    fn from(err: OneShotError) -> Self {
        match err {
            NotHeld => LockError::Protocol {
                status: 404,
                message: "LOCK_NOT_HELD".into(),
            },
            Failed(err) => err,
        }
    }
}

/// A transport failure as the caller sees it (no grant context: `LOCK_LOST` is `Protocol`).
fn wire_error(err: TransportError) -> LockError {
    match err {
        TransportError::Unreachable(message) => LockError::Unavailable { message },
        TransportError::Status { status, body } => LockError::from_wire(status, body, None),
    }
}

fn unexpected(what: &str, reply: &Reply) -> LockError {
    LockError::Protocol {
        status: 200,
        message: format!("{what} answered {reply:?}"),
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
