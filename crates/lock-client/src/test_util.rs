//! Test helpers (feature `test-util`): an in-memory lock service behind the [`Transport`]
//! seam, the clocks, and a rig that runs a real client on a fake clock. Grants, tokens per key, same-session re-grants, renew, compare-and-delete release
//! and sessions behave as the lock-server's do; leases never expire on their own (tests drive loss
//! with faults and a [`FakeClock`]); inspect and revoke answer too (revoke accepts any credential).
//! Faults: fail the next call of a kind, fail every call of a kind, clamp leases, delay replies on
//! a fake clock. [`Rig`] puts a real client on a manual fake clock over it (the SDK's own tests and
//! the executor's).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lock_api::{
    AcquireRequest, AcquireSetRequest, Backend, CreateSessionResponse, ErrorBody, ErrorCode,
    FencingToken, GrantScope, HeartbeatResponse, LeaderValue, LockGrant, LockInfo, LockKey,
    LockOutcome, OwnerId, ProclaimRequest, ReleaseResponse, RenewRequest, SessionId, SetGrant,
};

use std::sync::Arc;

use crate::client::LockClient;
pub use crate::clock::{Clock, Sleep, SystemClock};
pub use crate::fake_clock::FakeClock;
use crate::session::LockClientSession;
pub use crate::transport::{Call, Reply, Transport, TransportError};

/// A clock start close to `u64::MAX`, so every test on a [`Rig`] also crosses the wrap-around.
pub const RIG_START_NANOS: u64 = u64::MAX - 1_500_000_000;
/// How often [`Rig::tick`] looks for the heartbeat thread's tick before it panics.
const RIG_TICK_POLL: Duration = Duration::from_millis(1);
/// Polls of [`Rig::tick`]: about 5 s (no clock read: the SDK's sources read time only
/// through the `Clock` seam).
const RIG_TICK_POLLS: u32 = 5_000;

/// A real [`LockClient`] on a manual [`FakeClock`] over a [`MemoryTransport`], with two
/// endpoints and a fixed heartbeat period.
#[derive(Debug)]
pub struct Rig {
    /// The clock the client reads.
    pub clock: FakeClock,
    /// The in-memory lock service.
    pub service: Arc<MemoryTransport>,
    /// The client.
    pub client: LockClient,
}

impl Rig {
    /// `period` fixes the heartbeat period (an hour keeps the heartbeat out of the way).
    pub fn new(period: Duration) -> Self {
        let clock = FakeClock::new(RIG_START_NANOS);
        let service = Arc::new(MemoryTransport::new());
        let client = LockClient::builder(["http://replica-a", "http://replica-b"])
            .heartbeat_period(period)
            .build_with(Arc::new(clock.clone()), service.clone(), service.clone())
            .unwrap_or_else(|e| panic!("a rig's configuration is valid: {e}"));
        Self {
            clock,
            service,
            client,
        }
    }

    /// Opens a session for `owner`.
    pub async fn session(&self, owner: &str) -> LockClientSession {
        self.client
            .open_session(owner)
            .await
            .unwrap_or_else(|e| panic!("the in-memory service opens sessions: {e}"))
    }

    /// Advances the clock by `by` and waits until the heartbeat thread has completed a tick.
    pub async fn tick(&self, by: Duration) {
        let before = self.client.heartbeat_ticks();
        self.clock.advance(by);
        for _ in 0..RIG_TICK_POLLS {
            if self.client.heartbeat_ticks() > before {
                return;
            }
            tokio::time::sleep(RIG_TICK_POLL).await;
        }
        panic!("no heartbeat tick after {RIG_TICK_POLLS} polls of {RIG_TICK_POLL:?}");
    }

    /// The clock's reading.
    pub fn now(&self) -> u64 {
        self.clock.now_nanos()
    }

    /// Drives `future` to completion, advancing the clock by `step` whenever it waits (an
    /// acquire's backoff sleeps on this clock).
    pub async fn drive<T>(
        &self,
        step: Duration,
        future: impl std::future::Future<Output = T>,
    ) -> T {
        tokio::pin!(future);
        loop {
            tokio::select! {
                biased;
                out = &mut future => return out,
                () = tokio::task::yield_now() => self.clock.advance(step),
            }
        }
    }
}

#[derive(Debug, Default)]
struct State {
    sessions: HashMap<SessionId, (u64, OwnerId)>,
    locks: HashMap<LockKey, (FencingToken, SessionId, u64)>,
    fences: HashMap<LockKey, FencingToken>,
    /// What each key's grant announces, with the announcing token.
    values: HashMap<LockKey, (FencingToken, LeaderValue)>,
    calls: Vec<Call>,
    fail_next: Vec<(&'static str, TransportError)>,
    fail_always: HashMap<&'static str, TransportError>,
    lose_answers: HashMap<&'static str, u32>,
    max_lease_ms: Option<u64>,
    reply_delay: Option<(FakeClock, Duration)>,
}

/// The in-memory lock service.
#[derive(Debug, Default)]
pub struct MemoryTransport {
    state: Mutex<State>,
}

/// The answer to a call naming a session the service does not know.
fn session_unknown() -> TransportError {
    status(ErrorCode::SessionUnknown, "session unknown")
}

/// A server error answer, as a transport error.
pub fn status(code: ErrorCode, message: &str) -> TransportError {
    TransportError::Status {
        status: code.http_status(),
        body: ErrorBody {
            code,
            message: message.to_owned(),
        },
    }
}

impl MemoryTransport {
    /// An empty service.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The next call named `call` (see [`Call::name`]) fails with `err`.
    pub fn fail_next(&self, call: &'static str, err: TransportError) {
        self.state().fail_next.push((call, err));
    }

    /// Every call named `call` fails with `err` until [`MemoryTransport::heal`].
    pub fn fail_always(&self, call: &'static str, err: TransportError) {
        self.state().fail_always.insert(call, err);
    }

    /// The next `times` calls named `call` take effect, and their answers are lost on the
    /// way back (the client sees the replica unreachable).
    pub fn lose_answers(&self, call: &'static str, times: u32) {
        self.state().lose_answers.insert(call, times);
    }

    /// Ends every `fail_always`.
    pub fn heal(&self) {
        self.state().fail_always.clear();
    }

    /// Leases above `max_ms` are granted as `max_ms`, as a server clamps them.
    pub fn clamp_leases_to(&self, max_ms: u64) {
        self.state().max_lease_ms = Some(max_ms);
    }

    /// Before answering, advance `clock` by `delay`: a slow response leg.
    pub fn delay_replies(&self, clock: FakeClock, delay: Duration) {
        self.state().reply_delay = Some((clock, delay));
    }

    /// Every call received so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// How many calls named `call` were received.
    pub fn count(&self, call: &str) -> usize {
        self.state()
            .calls
            .iter()
            .filter(|c| c.name() == call)
            .count()
    }

    /// Deletes `key`'s grant behind its holder's back, as an admin revoke would.
    pub fn revoke(&self, key: &LockKey) {
        self.state().locks.remove(key);
    }

    /// The current holder's token of `key`, if any.
    pub fn holder(&self, key: &LockKey) -> Option<FencingToken> {
        self.state().locks.get(key).map(|(t, _, _)| *t)
    }

    fn answer(state: &mut State, call: Call) -> Result<Reply, TransportError> {
        // Display-only timestamps: a fixed instant, never a wall clock.
        let now = DateTime::<Utc>::UNIX_EPOCH;
        match call {
            Call::CreateSession(req) => {
                let id = SessionId::random();
                let ttl_ms = req.ttl_ms.unwrap_or(10_000);
                state.sessions.insert(id, (ttl_ms, req.owner_id));
                Ok(Reply::Session(CreateSessionResponse {
                    session_id: id,
                    ttl_ms,
                    expires_at: now,
                    backend: Backend::Memory,
                }))
            }
            Call::Heartbeat(id) => match state.sessions.get(&id) {
                Some((ttl_ms, _)) => Ok(Reply::Heartbeat(HeartbeatResponse {
                    ttl_ms: *ttl_ms,
                    expires_at: now,
                })),
                None => Err(session_unknown()),
            },
            Call::DeleteSession(id) => {
                state.sessions.remove(&id);
                state.locks.retain(|_, (_, s, _)| *s != id);
                Ok(Reply::Deleted)
            }
            Call::Acquire(key, req) => Self::acquire(state, key, &req, now),
            Call::AcquireSet(req) => Self::acquire_set(state, &req, now),
            Call::Renew(key, req) => Self::renew(state, key, &req, now),
            Call::Release(key, req) => {
                let released = state.locks.get(&key).is_some_and(|(t, holder, _)| {
                    *t == req.fencing_token && *holder == req.session_id
                });
                if released {
                    state.locks.remove(&key);
                }
                Ok(Reply::Released(ReleaseResponse { released }))
            }
            Call::Proclaim(key, req) => Self::proclaim(state, key, req),
            Call::Inspect(key) => Self::inspect(state, key, now),
            Call::Revoke(key, _admin, _reason) => {
                let revoked = state.locks.remove(&key).map(|(token, _, _)| token);
                Ok(Reply::Revoked(LockOutcome {
                    lock_key: key,
                    revoked: revoked.is_some(),
                    fencing_token: revoked,
                }))
            }
        }
    }

    /// An acquire: a new grant of a free key with the next token, the same grant again to its
    /// holder's session, refused while another session holds it.
    fn acquire(
        state: &mut State,
        key: LockKey,
        req: &AcquireRequest,
        now: DateTime<Utc>,
    ) -> Result<Reply, TransportError> {
        if !state.sessions.contains_key(&req.session_id) {
            return Err(session_unknown());
        }
        if req.mode.is_some() || req.permits.is_some() {
            // Permits and readers are the real stores' (ADR 0007): said, never granted whole.
            let message = "the test lock service grants whole keys only";
            return Err(status(ErrorCode::InvalidArgument, message));
        }
        let asked = req.ttl_ms.unwrap_or(10_000);
        let lease_ms = state.max_lease_ms.map_or(asked, |max| asked.min(max));
        let grant = |token| LockGrant {
            lock_key: key.clone(),
            fencing_token: token,
            lease_ms,
            expires_at: now,
            session_id: req.session_id,
            proof: Some(rig_proof(&key, token)),
            // This double answers at once: it never holds a request (wait_ms).
            waited_ms: 0,
            scope: GrantScope::Exclusive,
        };
        let granted = Self::grant_key(state, &key, req.session_id, lease_ms)?;
        if let Some(value) = &req.value {
            state.values.insert(key.clone(), (granted, value.clone()));
        }
        Ok(Reply::Grant(grant(granted)))
    }

    /// The token of `key`'s grant to `session`: its own again, or a new one of a free key.
    fn grant_key(
        state: &mut State,
        key: &LockKey,
        session: SessionId,
        lease_ms: u64,
    ) -> Result<FencingToken, TransportError> {
        match state.locks.get(key) {
            Some((token, holder, _)) if *holder == session => Ok(*token),
            Some(_) => Err(status(ErrorCode::LockHeld, "held by another session")),
            None => {
                let token = FencingToken(state.fences.get(key).map_or(1, |t| t.0 + 1));
                state.fences.insert(key.clone(), token);
                state.locks.insert(key.clone(), (token, session, lease_ms));
                Ok(token)
            }
        }
    }

    /// A proclaim: the live grant (key, session, token) announces the value.
    fn proclaim(
        state: &mut State,
        key: LockKey,
        req: ProclaimRequest,
    ) -> Result<Reply, TransportError> {
        let held = (state.locks.get(&key))
            .is_some_and(|(t, s, _)| *t == req.fencing_token && *s == req.session_id);
        if !held {
            return Err(status(
                ErrorCode::LockLost,
                "not held by this session with this token",
            ));
        }
        state.values.insert(key, (req.fencing_token, req.value));
        Ok(Reply::Proclaimed)
    }

    /// A set acquire: every key granted as [`Self::acquire`] would, or none while any is
    /// held by another session.
    fn acquire_set(
        state: &mut State,
        req: &AcquireSetRequest,
        now: DateTime<Utc>,
    ) -> Result<Reply, TransportError> {
        let keys = lock_api::key_set(req.lock_keys.clone())
            .map_err(|refused| status(ErrorCode::InvalidArgument, &refused.reason))?;
        let taken = |key: &LockKey| {
            (state.locks.get(key)).is_some_and(|(_, holder, _)| *holder != req.session_id)
        };
        if let Some(held) = keys.iter().find(|key| taken(key)) {
            return Err(status(ErrorCode::LockHeld, &format!("{held} is held")));
        }
        let mut grants = Vec::with_capacity(keys.len());
        for key in keys {
            let single = AcquireRequest {
                session_id: req.session_id,
                ttl_ms: req.ttl_ms,
                wait_ms: None,
                lock_delay_ms: None,
                mode: None,
                permits: None,
                value: None,
            };
            match Self::acquire(state, key, &single, now)? {
                Reply::Grant(grant) => grants.push(grant),
                other => unreachable!("an acquire answers a grant: {other:?}"),
            }
        }
        Ok(Reply::Grants(SetGrant { grants }))
    }

    /// A renew: the same grant again while this session holds the key with this token.
    fn renew(
        state: &State,
        key: LockKey,
        req: &RenewRequest,
        now: DateTime<Utc>,
    ) -> Result<Reply, TransportError> {
        if !state.sessions.contains_key(&req.session_id) {
            return Err(session_unknown());
        }
        match state.locks.get(&key) {
            Some((token, holder, lease_ms))
                if *holder == req.session_id && *token == req.fencing_token =>
            {
                Ok(Reply::Grant(LockGrant {
                    lock_key: key.clone(),
                    fencing_token: *token,
                    lease_ms: *lease_ms,
                    expires_at: now,
                    session_id: *holder,
                    proof: Some(rig_proof(&key, *token)),
                    waited_ms: 0,
                    scope: GrantScope::Exclusive,
                }))
            }
            _ => Err(status(
                ErrorCode::LockLost,
                "not held by this session with this token",
            )),
        }
    }

    /// An inspect: the holder's token and owner, or not held.
    fn inspect(state: &State, key: LockKey, now: DateTime<Utc>) -> Result<Reply, TransportError> {
        match state.locks.get(&key) {
            Some((token, holder, _)) => Ok(Reply::Info(LockInfo {
                lock_key: key.clone(),
                fencing_token: *token,
                owner_id: state
                    .sessions
                    .get(holder)
                    .map(|(_, o)| o.clone())
                    .ok_or_else(|| status(ErrorCode::Internal, "a grant of an unknown session"))?,
                expires_at: now,
                waiters: 0,
                holders: Vec::new(),
                permits: None,
                value: (state.values.get(&key))
                    .filter(|(t, _)| t == token)
                    .map(|(_, v)| v.clone()),
            })),
            None => Err(status(ErrorCode::LockNotHeld, "no live grant")),
        }
    }
}

#[async_trait]
impl Transport for MemoryTransport {
    async fn send(&self, _endpoint: &str, call: Call) -> Result<Reply, TransportError> {
        let mut state = self.state();
        state.calls.push(call.clone());
        let name = call.name();
        if let Some(index) = state.fail_next.iter().position(|(n, _)| *n == name) {
            return Err(state.fail_next.remove(index).1);
        }
        if let Some(err) = state.fail_always.get(name) {
            return Err(err.clone());
        }
        let answer = Self::answer(&mut state, call);
        if let Some((clock, delay)) = &state.reply_delay {
            clock.advance(*delay);
        }
        if let Some(left @ 1..) = state.lose_answers.get_mut(name) {
            *left -= 1;
            return Err(TransportError::Unreachable(format!(
                "the answer to {name} was lost"
            )));
        }
        answer
    }
}

/// The proof the rig's server attaches to a grant (not a signature: the rig checks that the
/// SDK carries the server's proof to the handle unchanged).
pub fn rig_proof(key: &LockKey, token: FencingToken) -> String {
    format!("rig.{key}.{}", token.0)
}
