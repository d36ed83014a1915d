//! `LockClientSession`: one server session and the bounded acquire loop, a thin driver of
//! the pure [`SessionCore`] (registry, deadlines, loss detection) over a [`Transport`] and a
//! [`Clock`]. This module owns what the core does not: the mutex around it, the deadline
//! cells handles read, the listeners, the logs and metrics of a loss, endpoints and jitter.
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
    Backend, Claim, ErrorCode, FencingToken, GrantScope, LockError, LockGrant, LockKey, LockLost,
    LossReason, OwnerId, ReleaseRequest, SessionId,
};
use tokio::sync::mpsc;

use crate::background::Background;
use crate::clock::Clock;
use crate::config::ClientConfig;
use crate::core::acquire;
use crate::core::{Attempt, Held, Refused, Renewal, Sent, SessionCore, TickPlan, Unhold};
use crate::handle::{HandleOwner, LockHandle};
use crate::metrics as m;
use crate::transport::{Call, Reply, Transport, TransportError};

mod acquiring;
mod elect;
pub(crate) mod set;

/// A loss listener: runs on the heartbeat thread; must not block or do I/O.
pub(crate) type Listener = Arc<dyn Fn(&LockLost) + Send + Sync>;

struct State {
    /// The pure safety state.
    core: SessionCore,
    /// Each held grant's deadline cell, shared with its handles (`client_deadline_nanos`).
    cells: HashMap<LockKey, Arc<AtomicU64>>,
    /// Each held grant's token and newest signed proof, as the server last sent it (the
    /// grant's, then each renewal's: a renewal signed with a rotated key replaces it).
    proofs: HashMap<LockKey, (FencingToken, String)>,
    /// Each held grant's token, the claim it answered and what it holds of its key (a
    /// share's scope: ADR 0007).
    scopes: HashMap<LockKey, (FencingToken, Claim, GrantScope)>,
    listeners: Vec<Listener>,
}

impl State {
    fn core(&mut self) -> &mut SessionCore {
        &mut self.core
    }

    /// The newest proof of `key`'s grant with `token`, if the session holds one.
    fn proof_of(&self, key: &LockKey, token: FencingToken) -> Option<String> {
        self.proofs
            .get(key)
            .filter(|(held, _)| *held == token)
            .map(|(_, proof)| proof.clone())
    }

    /// The claim `key`'s grant with `token` answered and what it holds (the whole key
    /// unless a share's).
    fn scope_of(&self, key: &LockKey, token: FencingToken) -> (Claim, GrantScope) {
        self.scopes
            .get(key)
            .filter(|(held, ..)| *held == token)
            .map_or(
                (Claim::Exclusive, GrantScope::Exclusive),
                |(_, claim, scope)| (*claim, *scope),
            )
    }
}

/// State shared by a session, its handles and the heartbeat thread.
pub(crate) struct Shared {
    pub(crate) id: SessionId,
    pub(crate) owner: OwnerId,
    pub(crate) backend: Backend,
    pub(crate) ttl_ms: u64,
    pub(crate) config: Arc<ClientConfig>,
    pub(crate) clock: Arc<dyn Clock>,
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

impl Shared {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: SessionId,
        owner: OwnerId,
        backend: Backend,
        ttl_ms: u64,
        core: SessionCore,
        endpoint: usize,
        config: Arc<ClientConfig>,
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
            endpoint: AtomicUsize::new(endpoint),
            state: Mutex::new(State {
                core,
                cells: HashMap::new(),
                proofs: HashMap::new(),
                scopes: HashMap::new(),
                listeners: Vec::new(),
            }),
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
        let next = self
            .endpoint
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1);
        let endpoints = &self.config.endpoints;
        tracing::info!(event = "endpoint_rotated", session = %self.id.tag(), to = %endpoints[next % endpoints.len()], "no usable answer: the next call goes to the next endpoint");
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// A successful heartbeat the core planned as `sent`.
    pub(crate) fn heartbeat_ok(&self, sent: Sent, ttl_ms: u64) {
        self.state().core().heartbeat_ok(sent, ttl_ms);
    }

    /// A successful renew of `renewal`: the handles see the new deadline.
    pub(crate) fn renew_ok(&self, renewal: &Renewal, lease_ms: u64, proof: Option<String>) {
        let mut state = self.state();
        if let Some(deadline) = state.core().renew_ok(renewal, lease_ms) {
            if let Some(cell) = state.cells.get(&renewal.key) {
                cell.store(deadline, Ordering::Release);
            }
            if let Some(proof) = proof {
                state
                    .proofs
                    .insert(renewal.key.clone(), (renewal.token, proof));
            }
        }
    }

    /// Marks the whole session lost (terminal): every grant with it.
    pub(crate) fn lose_session(&self, reason: LossReason) {
        self.state().core().lose_session(reason);
    }

    /// Why the session is lost, if it is.
    pub(crate) fn session_loss(&self) -> Option<LossReason> {
        self.state().core().lost()
    }

    /// A failed heartbeat: what the core makes of `code` (a lost session, the next endpoint).
    pub(crate) fn heartbeat_failed(&self, code: Option<ErrorCode>) {
        if self.state().core().heartbeat_failed(code) {
            self.rotate_endpoint();
        }
    }

    /// A failed renew of `renewal`: what the core makes of `code` and the server's `message`
    /// (a lost grant or session, the next endpoint).
    pub(crate) fn renew_failed(&self, renewal: &Renewal, code: Option<ErrorCode>, message: &str) {
        if self.state().core().renew_failed(renewal, code, message) {
            self.rotate_endpoint();
        }
    }

    /// A tick at `now_nanos`: deadlines first, then what to send.
    pub(crate) fn begin_tick(&self, now_nanos: u64, period: Duration) -> TickPlan {
        self.state().core().begin_tick(now_nanos, period)
    }

    /// The shortest lease among live grants, for the heartbeat period.
    pub(crate) fn shortest_lease_ms(&self) -> Option<u64> {
        self.state().core().shortest_lease_ms()
    }

    /// Applies local deadlines: the session's, then each grant's.
    pub(crate) fn expire_local(&self, now_nanos: u64) {
        self.state().core().expire(now_nanos);
    }

    /// Delivers every loss not yet delivered: logs, counts, and calls each listener once per
    /// lost grant in registration order, catching panics. Called on the heartbeat thread.
    pub(crate) fn fire_pending(&self) {
        if self.is_closed() {
            return;
        }
        let (losses, listeners) = {
            let mut state = self.state();
            let losses = state.core().take_losses();
            (losses, state.listeners.clone())
        };
        let backend = self.backend.as_str();
        let now = self.clock.now_nanos();
        // How long ago (negative: how far ahead) a deadline lay when its loss was delivered:
        // the log line's time minus this is the deadline's wall time (for the check that the
        // client's deadline never lies after the server's expiry).
        let offset_ms = |deadline: u64| (now.wrapping_sub(deadline) as i64) / 1_000_000;
        if let Some((reason, deadline)) = losses.session.filter(|_| losses.grants.is_empty()) {
            let deadline_offset_ms = offset_ms(deadline);
            tracing::warn!(event = "session_lost", owner = %self.owner, session = %self.id.tag(), backend, reason = reason.as_str(), deadline_offset_ms, "lock session lost while holding nothing");
            metrics::counter!(m::SESSION_LOST_TOTAL, "backend" => backend).increment(1);
        }
        let event = if losses.session_lost {
            "session_lost"
        } else {
            "lease_expired"
        };
        for loss in &losses.grants {
            let lost = &loss.lost;
            tracing::warn!(
                event,
                owner = %self.owner,
                session = %self.id.tag(),
                key = %lost.lock_key,
                token = lost.fencing_token.0,
                backend,
                reason = lost.reason.as_str(),
                deadline_offset_ms = offset_ms(loss.deadline_nanos),
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

    fn unhold(&self, key: &LockKey, token: FencingToken) -> Unhold {
        let mut state = self.state();
        let outcome = state.core().unhold(key, token);
        if matches!(outcome, Unhold::Last(_)) {
            state.cells.remove(key);
            state.proofs.remove(key);
            state.scopes.remove(key);
        }
        outcome
    }

    pub(crate) fn mark_closed(&self) {
        self.closed.store(true, Ordering::Release);
        self.state().core().close();
    }
}

impl HandleOwner for Shared {
    fn dropped_unreleased(&self, key: &LockKey, token: FencingToken) {
        if let Unhold::Last(_) = self.unhold(key, token) {
            tracing::debug!(event = "handle_dropped", key = %key, token = token.0, "handle dropped without release; releasing in the background");
            let _ = self.background.send(Background::Release {
                endpoint: self.endpoint(),
                session: self.id,
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

    /// The endpoint this session's calls go to now (the one that opened it, until a
    /// `NOT_LEADER` or no answer moves it to the next).
    pub fn endpoint(&self) -> String {
        self.shared.endpoint()
    }

    /// The session id.
    pub fn id(&self) -> SessionId {
        self.shared.id
    }

    /// Which store backs the server (`postgres`, `etcd` or `memory`, from the answer that
    /// opened the session), for metric labels.
    pub fn backend(&self) -> &'static str {
        self.shared.backend.as_str()
    }

    /// The session TTL the server granted.
    pub fn ttl_ms(&self) -> u64 {
        self.shared.ttl_ms
    }

    /// Maps a transport error, losing the session when the core says the code means it.
    fn classify(&self, err: TransportError) -> LockError {
        self.classify_on(err, None)
    }

    /// [`classify`](Self::classify) of a call made under `grant` (its key and token): the
    /// server's `LOCK_LOST` or `LOCK_REVOKED` is that grant's loss.
    fn classify_on(
        &self,
        err: TransportError,
        grant: Option<(&LockKey, FencingToken)>,
    ) -> LockError {
        match err {
            TransportError::Unreachable(message) => LockError::Unavailable { message },
            TransportError::Status { status, body } => {
                if let Some(reason) = acquire::session_loss(body.code) {
                    self.shared.lose_session(reason);
                }
                LockError::from_wire(status, body, grant)
            }
        }
    }

    fn session_error(&self, reason: LossReason) -> LockError {
        let message = format!("session {} is lost ({reason:?})", self.shared.id.tag());
        match reason {
            LossReason::SessionUnknown => LockError::SessionUnknown { message },
            _ => LockError::SessionExpired { message },
        }
    }

    /// Same-session reentrancy, or an error when the session or the key's grant is lost.
    fn reenter(&self, key: &LockKey, claim: Claim) -> Result<Option<LockHandle>, LockError> {
        let now = self.shared.clock.now_nanos();
        let mut state = self.shared.state();
        match state.core().reenter(key, now) {
            Ok(None) => Ok(None),
            Ok(Some(held)) => {
                let (held_claim, scope) = state.scope_of(key, held.token);
                if held_claim != claim {
                    let _ = state.core().unhold(key, held.token);
                    let message = format!(
                        "this session holds {key} as {}; release it before asking for {claim:?}",
                        scope.as_text()
                    );
                    return Err(LockError::InvalidArgument { message });
                }
                let cell = Self::cell(&mut state, key, &held);
                let proof = state.proof_of(key, held.token);
                Ok(Some(self.handle(key, &held, cell, proof, scope)))
            }
            Err(Refused::Session(reason)) => Err(self.session_error(reason)),
            Err(Refused::Grant(lost)) => Err(LockError::Lost(lost)),
        }
    }

    /// The deadline cell of `key`'s grant, shared by all its handles.
    fn cell(state: &mut State, key: &LockKey, held: &Held) -> Arc<AtomicU64> {
        state
            .cells
            .entry(key.clone())
            .or_insert_with(|| Arc::new(AtomicU64::new(held.deadline_nanos)))
            .clone()
    }

    /// Registers a grant: a handle, or `None` when it re-granted the token of an unanswered
    /// release (released again here; the caller acquires anew).
    async fn register(
        &self,
        key: &LockKey,
        claim: Claim,
        grant: &LockGrant,
        attempt: Attempt,
    ) -> Result<Option<LockHandle>, LockError> {
        if grant.lock_key == *key && grant.session_id == self.shared.id {
            if !claim.answered_by(grant.scope) {
                // Granted, but not what was asked: given back, never held unseen.
                self.send_release(key, grant.fencing_token).await;
                let message = format!("asked for {claim:?} of {key}, granted {:?}", grant.scope);
                return Err(LockError::Protocol {
                    status: 200,
                    message,
                });
            }
        } else {
            return Err(LockError::Protocol {
                status: 200,
                message: format!("grant for another key or session: {grant:?}"),
            });
        }
        let received_nanos = self.shared.clock.now_nanos();
        let registered = {
            let mut state = self.shared.state();
            match state.core().granted(
                key,
                grant.fencing_token,
                grant.lease_ms,
                attempt,
                received_nanos,
                grant.waited_ms,
            ) {
                Ok(held) => {
                    let cell = Self::cell(&mut state, key, &held);
                    // A new grant of this key (the last one ended): its own deadline.
                    cell.store(held.deadline_nanos, Ordering::Release);
                    match &grant.proof {
                        Some(proof) => state
                            .proofs
                            .insert(key.clone(), (held.token, proof.clone())),
                        None => state.proofs.remove(key),
                    };
                    let scope = (held.token, claim, grant.scope);
                    state.scopes.insert(key.clone(), scope);
                    Ok((held, cell))
                }
                Err(stale) => Err(stale),
            }
        };
        match registered {
            Ok((held, cell)) => {
                // A shorter lease may shorten the heartbeat period.
                let _ = self.shared.background.send(Background::Wake);
                Ok(Some(self.handle(
                    key,
                    &held,
                    cell,
                    grant.proof.clone(),
                    grant.scope,
                )))
            }
            Err(stale) => {
                // Our own earlier release of this token is unanswered and may still delete
                // this grant: release it again, then acquire anew (a fresh token).
                tracing::info!(event = "stale_regrant", key = %stale.key, token = stale.token.0, "re-granted the token of an unanswered release: releasing again");
                self.send_release(&stale.key, stale.token).await;
                Ok(None)
            }
        }
    }

    /// Sends the release for `key`/`token`; an answer (whatever it found) is recorded in the core.
    async fn send_release(&self, key: &LockKey, token: FencingToken) -> Option<bool> {
        let call = Call::Release(
            key.clone(),
            ReleaseRequest {
                session_id: self.shared.id,
                fencing_token: token,
            },
        );
        match self.transport.send(&self.shared.endpoint(), call).await {
            Ok(Reply::Released(r)) => {
                self.shared.state().core().release_answered(key, token);
                tracing::debug!(event = "released", key = %key, token = token.0, released = r.released);
                Some(r.released)
            }
            Ok(other) => {
                tracing::warn!(event = "release_failed", key = %key, token = token.0, answer = ?other);
                None
            }
            Err(err) => {
                tracing::debug!(event = "release_failed", key = %key, token = token.0, error = %err, "the lease will expire on its own");
                None
            }
        }
    }

    fn handle(
        &self,
        key: &LockKey,
        held: &Held,
        deadline: Arc<AtomicU64>,
        proof: Option<String>,
        scope: GrantScope,
    ) -> LockHandle {
        let owner: Arc<dyn HandleOwner> = self.shared.clone();
        LockHandle::new(
            key.clone(),
            held.token,
            held.lease_ms,
            self.shared.id,
            deadline,
            Some(owner),
        )
        .with_proof(proof)
        .with_scope(scope)
    }

    /// The newest proof of `handle`'s grant: the one its last renewal brought (a lock-server
    /// that signs with a rotated key sends a proof under the new key), else the grant's own.
    /// Send this with every write: once resources retire the old key, only it verifies.
    pub fn fence_proof(&self, handle: &LockHandle) -> Option<String> {
        let newest = (self.shared.state()).proof_of(handle.lock_key(), handle.fencing_token());
        newest.or_else(|| handle.fence_proof().map(str::to_owned))
    }

    /// Returns `Ok(())` while `handle`'s grant is still within its conservative deadline,
    /// and `Err(LockLost)` once it is not: a guard clause, never a verdict to branch on.
    /// `Ok` is not permission for a side effect: the fencing token is the safety mechanism.
    pub fn check_still_held(&self, handle: &LockHandle) -> Result<(), LockLost> {
        self.remaining(handle).map(|_| ())
    }

    /// Time left before `handle`'s conservative deadline, or `Err(LockLost)`. Each `Ok` is
    /// recorded in [`lock_guard_headroom_seconds`](crate::metrics::GUARD_HEADROOM_SECONDS).
    pub fn remaining(&self, handle: &LockHandle) -> Result<Duration, LockLost> {
        let now = self.shared.clock.now_nanos();
        let left =
            self.shared
                .state()
                .core()
                .remaining(handle.lock_key(), handle.fencing_token(), now)?;
        // Only passed checks: a failed one has no headroom, and its loss is counted elsewhere.
        // The low quantiles show how close guarded writes come to the deadline before any is lost.
        metrics::histogram!(m::GUARD_HEADROOM_SECONDS, "backend" => self.shared.backend.as_str())
            .record(left.as_secs_f64());
        Ok(left)
    }

    /// Releases one hold of `handle`. The last hold sends the release (compare-and-delete on key
    /// and token; transport failures are logged, the lease then simply expires). Returns
    /// `Err(LockLost)` when the grant had been lost, locally or as the server's `released: false`
    /// shows: whatever it guarded may have been done by another holder.
    pub async fn release(&self, handle: LockHandle) -> Result<(), LockLost> {
        let (key, token) = handle.disarm();
        let lost = |reason| LockLost::new(key.clone(), token, reason);
        let outcome = self.shared.unhold(&key, token);
        let lost_reason = match outcome {
            Unhold::StillHeld(reason) => return reason.map_or(Ok(()), |r| Err(lost(r))),
            Unhold::Last(reason) => reason,
            Unhold::Unknown => Some(
                self.shared
                    .state()
                    .core()
                    .lost()
                    .unwrap_or(LossReason::SessionClosed),
            ),
        };
        if self.send_release(&key, token).await == Some(false) && lost_reason.is_none() {
            // The server had no live grant with this token: it expired, was revoked or was
            // taken over before we noticed. Report it as the loss it was.
            return Err(lost(LossReason::NotHeld));
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
            state.core().delivered_losses()
        };
        for lost in &already {
            if catch_unwind(AssertUnwindSafe(|| listener(lost))).is_err() {
                tracing::error!(event = "listener_panicked", key = %lost.lock_key, "an on_lock_lost listener panicked");
            }
        }
    }

    /// Lets go of the session in this process without ending it on the server, and returns its id:
    /// no more heartbeats or loss delivery here, and no close on the server, now or on drop. Grants
    /// it holds count as lost here (`SessionClosed`), as after [`close`](Self::close); a handle
    /// still armed is released in the background when dropped. On the server the session lives
    /// until its TTL runs out: nothing heartbeats it any more (the one-shot calls,
    /// [`LockClient::acquire_as`](crate::LockClient::acquire_as) and the others, do not). For tools
    /// that keep a session across processes (`lockctl session open`); the id is the session's
    /// capability, keep it secret.
    pub fn detach(self) -> SessionId {
        self.shared.mark_closed();
        self.shared.id
    }

    /// Ends the session: no more heartbeats for it, the close sent best effort (never fails).
    pub async fn close(self) {
        self.shared.mark_closed();
        let call = Call::DeleteSession(self.shared.id);
        if let Err(err) = self.transport.send(&self.shared.endpoint(), call).await {
            tracing::debug!(event = "session_close_failed", session = %self.shared.id.tag(), error = %err, "the session will expire on its own");
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
