//! `LockClientSession`: one server session, its registry of held grants, loss detection and
//! listeners, and the bounded acquire loop.
//!
//! Every deadline is `send_nanos + lease × (1 − margin)` on the SDK's [`Clock`], where
//! `send_nanos` is read before the request is written; `expires_at` from the server is never
//! used. No mutex is held across an await.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lock_api::{
    AcquireRequest, Backend, ErrorCode, FencingToken, HandleOwner, LockError, LockGrant,
    LockHandle, LockKey, LockLost, LossReason, OwnerId, ReleaseRequest, RetryVerdict, SessionId,
};
use tokio::sync::mpsc;

use crate::backoff;
use crate::client::Background;
use crate::clock::{Clock, deadline_passed, nanos_until};
use crate::config::{AcquirePolicy, LockClientConfig};
use crate::metrics as m;
use crate::transport::{Call, Reply, Transport, TransportError};

/// A loss listener: runs on the heartbeat thread; must not block or do I/O.
pub type Listener = Arc<dyn Fn(&LockLost) + Send + Sync>;

/// One held grant in the registry.
#[derive(Debug)]
struct Entry {
    token: FencingToken,
    lease_ms: u64,
    deadline_nanos: Arc<AtomicU64>,
    holds: u32,
    lost: Option<LossReason>,
    notified: bool,
}

#[derive(Default)]
struct State {
    lost: Option<LossReason>,
    closed: bool,
    loss_reported: bool,
    handles: HashMap<LockKey, Entry>,
    /// Losses of grants released before the heartbeat delivered them: still delivered once.
    /// Each with its conservative deadline in force when it was released.
    undelivered: Vec<(LockLost, u64)>,
    listeners: Vec<Listener>,
}

/// State shared by a session, its handles and the heartbeat thread.
pub(crate) struct Shared {
    pub(crate) id: SessionId,
    pub(crate) owner: OwnerId,
    pub(crate) backend: Backend,
    pub(crate) ttl_ms: u64,
    pub(crate) config: Arc<LockClientConfig>,
    pub(crate) clock: Arc<dyn Clock>,
    session_deadline_nanos: AtomicU64,
    endpoint: AtomicUsize,
    state: Mutex<State>,
    background: mpsc::UnboundedSender<Background>,
    rng: Mutex<fastrand::Rng>,
    closed: AtomicBool,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

/// What the last release of a hold found.
enum Unhold {
    /// Other holds remain.
    StillHeld(Option<LossReason>),
    /// The last hold: send L6.
    Last(Option<LossReason>),
    /// The registry does not know this grant (session closed).
    Unknown,
}

impl Shared {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: SessionId,
        owner: OwnerId,
        backend: Backend,
        ttl_ms: u64,
        deadline_nanos: u64,
        endpoint: usize,
        config: Arc<LockClientConfig>,
        clock: Arc<dyn Clock>,
        background: mpsc::UnboundedSender<Background>,
    ) -> Self {
        Self {
            id,
            owner,
            backend,
            ttl_ms,
            config,
            clock,
            session_deadline_nanos: AtomicU64::new(deadline_nanos),
            endpoint: AtomicUsize::new(endpoint),
            state: Mutex::new(State::default()),
            background,
            rng: Mutex::new(fastrand::Rng::new()),
            closed: AtomicBool::new(false),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panicking listener never runs under this lock, so poisoning means a bug here;
        // the state is still consistent field by field, so keep going.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn endpoint(&self) -> String {
        let endpoints = &self.config.endpoints;
        endpoints[self.endpoint.load(Ordering::Relaxed) % endpoints.len()].clone()
    }

    /// Moves to the next replica after `NOT_LEADER` or no answer.
    pub(crate) fn rotate_endpoint(&self) {
        self.endpoint.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn deadline_after(&self, send_nanos: u64, lease_ms: u64) -> u64 {
        send_nanos.wrapping_add(self.config.usable_nanos(lease_ms))
    }

    /// A successful L2 sent at `send_nanos`: the session lives `ttl × (1 − margin)` past it.
    pub(crate) fn heartbeat_ok(&self, send_nanos: u64, ttl_ms: u64) {
        let state = self.state();
        if state.lost.is_none() {
            self.session_deadline_nanos
                .store(self.deadline_after(send_nanos, ttl_ms), Ordering::Release);
        }
    }

    /// A successful L5 of `key`/`token` sent at `send_nanos`.
    pub(crate) fn renew_ok(
        &self,
        key: &LockKey,
        token: FencingToken,
        send_nanos: u64,
        lease_ms: u64,
    ) {
        let mut state = self.state();
        if state.lost.is_some() {
            return;
        }
        if let Some(entry) = state
            .handles
            .get_mut(key)
            .filter(|e| e.token == token && e.lost.is_none())
        {
            entry.lease_ms = lease_ms;
            entry
                .deadline_nanos
                .store(self.deadline_after(send_nanos, lease_ms), Ordering::Release);
        }
    }

    /// Marks the whole session lost (terminal): every grant with it.
    pub(crate) fn lose_session(&self, reason: LossReason) {
        let mut state = self.state();
        Self::lose_session_locked(&mut state, reason);
    }

    fn lose_session_locked(state: &mut State, reason: LossReason) {
        if state.lost.is_none() {
            state.lost = Some(reason);
        }
        for entry in state.handles.values_mut() {
            entry.lost.get_or_insert(reason);
        }
    }

    /// Marks one grant lost.
    pub(crate) fn lose_handle(&self, key: &LockKey, token: FencingToken, reason: LossReason) {
        let mut state = self.state();
        if let Some(entry) = state.handles.get_mut(key).filter(|e| e.token == token) {
            entry.lost.get_or_insert(reason);
        }
    }

    /// Grants whose remaining time is under `threshold`: the heartbeat renews them.
    pub(crate) fn due_for_renewal(
        &self,
        now_nanos: u64,
        threshold: Duration,
    ) -> Vec<(LockKey, FencingToken)> {
        let threshold_nanos = u64::try_from(threshold.as_nanos()).unwrap_or(u64::MAX);
        let state = self.state();
        if state.lost.is_some() || state.closed {
            return Vec::new();
        }
        state
            .handles
            .iter()
            .filter(|(_, e)| e.lost.is_none())
            .filter(|(_, e)| {
                nanos_until(now_nanos, e.deadline_nanos.load(Ordering::Acquire)) < threshold_nanos
            })
            .map(|(k, e)| (k.clone(), e.token))
            .collect()
    }

    /// The shortest lease among live grants, for the heartbeat period.
    pub(crate) fn shortest_lease_ms(&self) -> Option<u64> {
        self.state()
            .handles
            .values()
            .filter(|e| e.lost.is_none())
            .map(|e| e.lease_ms)
            .min()
    }

    /// Applies local deadlines: the session's, then each grant's.
    pub(crate) fn expire_local(&self, now_nanos: u64) {
        let mut state = self.state();
        if state.closed {
            return;
        }
        if state.lost.is_none()
            && deadline_passed(
                now_nanos,
                self.session_deadline_nanos.load(Ordering::Acquire),
            )
        {
            Self::lose_session_locked(&mut state, LossReason::DeadlinePassed);
        }
        for entry in state.handles.values_mut() {
            if entry.lost.is_none()
                && deadline_passed(now_nanos, entry.deadline_nanos.load(Ordering::Acquire))
            {
                entry.lost = Some(LossReason::DeadlinePassed);
            }
        }
    }

    /// Delivers every loss not yet delivered: logs, counts, and calls each listener once per
    /// lost grant in registration order, catching panics. Called on the heartbeat thread.
    pub(crate) fn fire_pending(&self) {
        let (events, session_event, listeners) = {
            let mut state = self.state();
            if state.closed {
                return;
            }
            // Each loss with the grant's effective conservative deadline (the earlier of its
            // own and the session's).
            let mut events = std::mem::take(&mut state.undelivered);
            for (key, entry) in state.handles.iter_mut() {
                if let (Some(reason), false) = (entry.lost, entry.notified) {
                    entry.notified = true;
                    let deadline = self.effective_deadline(entry);
                    events.push((
                        LockLost {
                            lock_key: key.clone(),
                            fencing_token: entry.token,
                            reason,
                        },
                        deadline,
                    ));
                }
            }
            let session_event = match (state.lost, state.loss_reported) {
                (Some(reason), false) => {
                    state.loss_reported = true;
                    Some(reason)
                }
                _ => None,
            };
            (events, session_event, state.listeners.clone())
        };
        let backend = self.backend.as_str();
        let now = self.clock.now_nanos();
        if let Some(reason) = session_event.filter(|_| events.is_empty()) {
            let session_deadline = self.session_deadline_nanos.load(Ordering::Acquire);
            let deadline_offset_ms = (now.wrapping_sub(session_deadline) as i64) / 1_000_000;
            tracing::warn!(event = "session_lost", owner = %self.owner, session = %self.id, backend, reason = reason.as_str(), deadline_offset_ms, "lock session lost while holding nothing");
            metrics::counter!(m::SESSION_LOST_TOTAL, "backend" => backend).increment(1);
        }
        for (lost, deadline) in &events {
            let event = if session_event.is_some() || self.state().lost.is_some() {
                "session_lost"
            } else {
                "lease_expired"
            };
            // How long ago (negative: how far ahead) the conservative deadline lay when the
            // loss was delivered: the log line's time minus this is the deadline's wall time.
            let deadline_offset_ms = (now.wrapping_sub(*deadline) as i64) / 1_000_000;
            tracing::warn!(
                event,
                owner = %self.owner,
                session = %self.id,
                key = %lost.lock_key,
                token = lost.fencing_token.0,
                backend,
                reason = lost.reason.as_str(),
                deadline_offset_ms,
                "lock lost: stop work guarded by it"
            );
            metrics::counter!(m::SESSION_LOST_TOTAL, "backend" => backend).increment(1);
            for listener in &listeners {
                if catch_unwind(AssertUnwindSafe(|| listener(lost))).is_err() {
                    tracing::error!(event = "listener_panicked", key = %lost.lock_key, "an on_lock_lost listener panicked; the heartbeat goes on");
                }
            }
        }
    }

    /// The grant's conservative deadline in force: the earlier of its own and the session's.
    fn effective_deadline(&self, entry: &Entry) -> u64 {
        let session = self.session_deadline_nanos.load(Ordering::Acquire);
        let grant = entry.deadline_nanos.load(Ordering::Acquire);
        if deadline_passed(grant, session) {
            session
        } else {
            grant
        }
    }

    fn unhold(&self, key: &LockKey, token: FencingToken) -> Unhold {
        let mut state = self.state();
        let Some(entry) = state.handles.get_mut(key).filter(|e| e.token == token) else {
            return Unhold::Unknown;
        };
        entry.holds = entry.holds.saturating_sub(1);
        let lost = entry.lost;
        if entry.holds > 0 {
            return Unhold::StillHeld(lost);
        }
        if let Some(entry) = state.handles.remove(key) {
            if let (Some(reason), false) = (entry.lost, entry.notified) {
                let deadline = self.effective_deadline(&entry);
                state.undelivered.push((
                    LockLost {
                        lock_key: key.clone(),
                        fencing_token: entry.token,
                        reason,
                    },
                    deadline,
                ));
            }
        }
        Unhold::Last(lost)
    }

    pub(crate) fn mark_closed(&self) {
        self.closed.store(true, Ordering::Release);
        let mut state = self.state();
        state.closed = true;
        for entry in state.handles.values_mut() {
            entry.lost.get_or_insert(LossReason::SessionClosed);
            entry.notified = true;
        }
    }
}

impl HandleOwner for Shared {
    fn dropped_unreleased(&self, key: &LockKey, token: FencingToken) {
        if let Unhold::Last(_) = self.unhold(key, token) {
            tracing::debug!(event = "handle_dropped", key = %key, token = token.0, "handle dropped without release; releasing in the background");
            let _ = self.background.send(Background::Release {
                endpoint: self.endpoint(),
                key: key.clone(),
                token,
            });
        }
    }
}

/// One lock-service session. Safe to share between tasks and threads (`Send + Sync`).
#[derive(Debug)]
pub struct LockClientSession {
    shared: Arc<Shared>,
    transport: Arc<dyn Transport>,
}

impl LockClientSession {
    pub(crate) fn new(shared: Arc<Shared>, transport: Arc<dyn Transport>) -> Self {
        Self { shared, transport }
    }

    /// The session id.
    pub fn id(&self) -> SessionId {
        self.shared.id
    }

    /// Which store backs the server (from L1), for metric labels.
    pub fn backend(&self) -> Backend {
        self.shared.backend
    }

    /// The session TTL the server granted.
    pub fn ttl_ms(&self) -> u64 {
        self.shared.ttl_ms
    }

    /// Acquires `key` for a lease of `ttl` (the server may clamp it), retrying contention
    /// with full-jitter backoff within `policy.budget` on the SDK's clock.
    ///
    /// `Ok(None)` is the ordinary contended outcome: the budget ran out while another
    /// session held the key. Acquiring a key this session already holds returns a new handle
    /// on the same grant and token (a hold count); the last release sends L6.
    pub async fn acquire(
        &self,
        key: &LockKey,
        ttl: Duration,
        policy: &AcquirePolicy,
    ) -> Result<Option<LockHandle>, LockError> {
        let shared = &self.shared;
        let started = shared.clock.now_nanos();
        let backend = shared.backend.as_str();
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        if let Some(handle) = self.reenter(key)? {
            metrics::counter!(m::ACQUIRE_TOTAL, "backend" => backend, "outcome" => "reentrant")
                .increment(1);
            return Ok(Some(handle));
        }
        let budget_nanos = u64::try_from(policy.budget.as_nanos()).unwrap_or(u64::MAX);
        let mut last_error: Option<LockError>;
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let send_nanos = shared.clock.now_nanos();
            let call = Call::Acquire(
                key.clone(),
                AcquireRequest {
                    session_id: shared.id,
                    ttl_ms: Some(ttl_ms),
                },
            );
            match self.transport.send(&shared.endpoint(), call).await {
                Ok(Reply::Grant(grant)) => {
                    let handle = self.register(key, &grant, send_nanos)?;
                    self.observe(started, "granted");
                    return Ok(Some(handle));
                }
                Ok(other) => {
                    self.observe(started, "error");
                    return Err(LockError::Protocol {
                        status: 200,
                        message: format!("acquire answered {other:?}"),
                    });
                }
                Err(err) => {
                    let err = self.classify(err);
                    match err.retry() {
                        RetryVerdict::Never => {
                            self.observe(started, "error");
                            return Err(err);
                        }
                        RetryVerdict::NextTick => shared.rotate_endpoint(),
                        RetryVerdict::Backoff => {}
                    }
                    last_error = Some(err);
                }
            }
            let elapsed = shared.clock.now_nanos().wrapping_sub(started);
            let remaining = budget_nanos.saturating_sub(elapsed);
            if attempt >= policy.max_attempts || remaining == 0 {
                break;
            }
            let jitter = {
                let mut rng = shared
                    .rng
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                backoff::full_jitter(policy.base, policy.cap, attempt - 1, &mut rng)
            };
            shared
                .clock
                .sleep(jitter.min(Duration::from_nanos(remaining)))
                .await;
        }
        match last_error {
            None | Some(LockError::Contention { .. }) => {
                self.observe(started, "contended");
                Ok(None)
            }
            Some(err) => {
                self.observe(started, "error");
                Err(err)
            }
        }
    }

    fn observe(&self, started: u64, outcome: &'static str) {
        let backend = self.shared.backend.as_str();
        let waited = Duration::from_nanos(self.shared.clock.now_nanos().wrapping_sub(started));
        metrics::counter!(m::ACQUIRE_TOTAL, "backend" => backend, "outcome" => outcome)
            .increment(1);
        metrics::histogram!(m::ACQUIRE_WAIT_SECONDS, "backend" => backend, "outcome" => outcome)
            .record(waited.as_secs_f64());
    }

    /// Maps a transport error, losing the session on 404/410.
    fn classify(&self, err: TransportError) -> LockError {
        match err {
            TransportError::Unreachable(message) => LockError::Unavailable { message },
            TransportError::Status { status, body } => {
                match body.code {
                    ErrorCode::SessionUnknown => {
                        self.shared.lose_session(LossReason::SessionUnknown)
                    }
                    ErrorCode::SessionExpired => {
                        self.shared.lose_session(LossReason::SessionExpired)
                    }
                    _ => {}
                }
                LockError::from_wire(status, body, None)
            }
        }
    }

    fn session_error(&self, reason: LossReason) -> LockError {
        let message = format!("session {} is lost ({reason:?})", self.shared.id);
        match reason {
            LossReason::SessionUnknown => LockError::SessionUnknown { message },
            _ => LockError::SessionExpired { message },
        }
    }

    /// Same-session reentrancy, or an error when the session or the key's grant is lost.
    fn reenter(&self, key: &LockKey) -> Result<Option<LockHandle>, LockError> {
        let shared = &self.shared;
        let now = shared.clock.now_nanos();
        shared.expire_local(now);
        let mut state = shared.state();
        if state.closed {
            return Err(self.session_error(LossReason::SessionClosed));
        }
        if let Some(reason) = state.lost {
            return Err(self.session_error(reason));
        }
        let Some(entry) = state.handles.get_mut(key) else {
            return Ok(None);
        };
        if let Some(reason) = entry.lost {
            return Err(LockError::Lost(LockLost {
                lock_key: key.clone(),
                fencing_token: entry.token,
                reason,
            }));
        }
        entry.holds += 1;
        Ok(Some(self.handle(
            key,
            entry.token,
            entry.lease_ms,
            entry.deadline_nanos.clone(),
        )))
    }

    fn register(
        &self,
        key: &LockKey,
        grant: &LockGrant,
        send_nanos: u64,
    ) -> Result<LockHandle, LockError> {
        if grant.lock_key != *key || grant.session_id != self.shared.id {
            return Err(LockError::Protocol {
                status: 200,
                message: format!("grant for another key or session: {grant:?}"),
            });
        }
        let deadline = Arc::new(AtomicU64::new(
            self.shared.deadline_after(send_nanos, grant.lease_ms),
        ));
        {
            let mut state = self.shared.state();
            match state.handles.get_mut(key) {
                // An idempotent re-grant raced with another acquire of ours: one more hold.
                Some(entry) if entry.token == grant.fencing_token && entry.lost.is_none() => {
                    entry.holds += 1;
                    return Ok(self.handle(
                        key,
                        entry.token,
                        entry.lease_ms,
                        entry.deadline_nanos.clone(),
                    ));
                }
                _ => {}
            }
            state.handles.insert(
                key.clone(),
                Entry {
                    token: grant.fencing_token,
                    lease_ms: grant.lease_ms,
                    deadline_nanos: deadline.clone(),
                    holds: 1,
                    lost: None,
                    notified: false,
                },
            );
        }
        // A shorter lease may shorten the heartbeat period.
        let _ = self.shared.background.send(Background::Wake);
        Ok(self.handle(key, grant.fencing_token, grant.lease_ms, deadline))
    }

    fn handle(
        &self,
        key: &LockKey,
        token: FencingToken,
        lease_ms: u64,
        deadline: Arc<AtomicU64>,
    ) -> LockHandle {
        let owner: Arc<dyn HandleOwner> = self.shared.clone();
        LockHandle::new(
            key.clone(),
            token,
            lease_ms,
            self.shared.id,
            deadline,
            Some(owner),
        )
    }

    /// Returns `Ok(())` while `handle`'s grant is still within its conservative deadline,
    /// and `Err(LockLost)` once it is not: a guard clause, never a verdict to branch on.
    /// `Ok` is not permission for a side effect: the fencing token is the safety mechanism.
    pub fn check_still_held(&self, handle: &LockHandle) -> Result<(), LockLost> {
        self.remaining(handle).map(|_| ())
    }

    /// Time left before `handle`'s conservative deadline, or `Err(LockLost)`.
    pub fn remaining(&self, handle: &LockHandle) -> Result<Duration, LockLost> {
        let shared = &self.shared;
        let now = shared.clock.now_nanos();
        shared.expire_local(now);
        let state = shared.state();
        let lost = |reason| LockLost {
            lock_key: handle.lock_key().clone(),
            fencing_token: handle.fencing_token(),
            reason,
        };
        let entry = state
            .handles
            .get(handle.lock_key())
            .filter(|e| e.token == handle.fencing_token())
            .ok_or_else(|| lost(state.lost.unwrap_or(LossReason::SessionClosed)))?;
        if let Some(reason) = entry.lost {
            return Err(lost(reason));
        }
        let session_left = nanos_until(now, shared.session_deadline_nanos.load(Ordering::Acquire));
        let grant_left = nanos_until(now, entry.deadline_nanos.load(Ordering::Acquire));
        Ok(Duration::from_nanos(session_left.min(grant_left)))
    }

    /// Releases one hold of `handle`. The last hold sends L6 (compare-and-delete on key and
    /// token; transport failures are logged, the lease then simply expires). Returns
    /// `Err(LockLost)` when the grant had been lost, locally or as the server's
    /// `released: false` shows: whatever it guarded may have been done by another holder.
    pub async fn release(&self, handle: LockHandle) -> Result<(), LockLost> {
        let (key, token) = handle.disarm();
        let lost = |reason| LockLost {
            lock_key: key.clone(),
            fencing_token: token,
            reason,
        };
        let outcome = self.shared.unhold(&key, token);
        let lost_reason = match outcome {
            Unhold::StillHeld(reason) => return reason.map_or(Ok(()), |r| Err(lost(r))),
            Unhold::Last(reason) => reason,
            Unhold::Unknown => Some(
                self.shared
                    .state()
                    .lost
                    .unwrap_or(LossReason::SessionClosed),
            ),
        };
        let call = Call::Release(
            key.clone(),
            ReleaseRequest {
                fencing_token: token,
            },
        );
        match self.transport.send(&self.shared.endpoint(), call).await {
            Ok(Reply::Released(r)) => {
                tracing::debug!(event = "released", key = %key, token = token.0, released = r.released);
                if !r.released && lost_reason.is_none() {
                    // The server had no live grant with this token: it expired, was revoked
                    // or was taken over before we noticed. Report it as the loss it was.
                    return Err(lost(LossReason::NotHeld));
                }
            }
            Ok(other) => {
                tracing::warn!(event = "release_failed", key = %key, token = token.0, answer = ?other)
            }
            Err(err) => {
                tracing::debug!(event = "release_failed", key = %key, token = token.0, error = %err, "the lease will expire on its own")
            }
        }
        lost_reason.map_or(Ok(()), |r| Err(lost(r)))
    }

    /// Registers a listener called once per lost grant, on the heartbeat thread, in
    /// registration order. A listener registered after a loss was delivered is called at
    /// once (on this thread) for it. Listeners must return quickly and do no I/O.
    pub fn on_lock_lost(&self, listener: impl Fn(&LockLost) + Send + Sync + 'static) {
        let listener: Listener = Arc::new(listener);
        let already: Vec<LockLost> = {
            let mut state = self.shared.state();
            state.listeners.push(listener.clone());
            state
                .handles
                .iter()
                .filter_map(|(key, e)| match (e.lost, e.notified) {
                    (Some(reason), true) => Some(LockLost {
                        lock_key: key.clone(),
                        fencing_token: e.token,
                        reason,
                    }),
                    _ => None,
                })
                .collect()
        };
        for lost in &already {
            if catch_unwind(AssertUnwindSafe(|| listener(lost))).is_err() {
                tracing::error!(event = "listener_panicked", key = %lost.lock_key, "an on_lock_lost listener panicked");
            }
        }
    }

    /// Ends the session: no more heartbeats for it, L3 sent best effort (never fails).
    pub async fn close(self) {
        self.shared.mark_closed();
        let call = Call::DeleteSession(self.shared.id);
        if let Err(err) = self.transport.send(&self.shared.endpoint(), call).await {
            tracing::debug!(event = "session_close_failed", session = %self.shared.id, error = %err, "the session will expire on its own");
        }
    }
}

impl Drop for LockClientSession {
    fn drop(&mut self) {
        if !self.shared.is_closed() {
            self.shared.mark_closed();
            let _ = self.shared.background.send(Background::DeleteSession {
                endpoint: self.shared.endpoint(),
                session: self.shared.id,
            });
        }
    }
}
