//! The lock service: two stateless replicas over one store, the store being lock-store's
//! `MemoryStore` (the implementation that passes the conformance suite PostgreSQL passes) on
//! virtual time, each replica serving through lock-store's `ClockCheckedStore` (the guard
//! lock-server runs against steps of the store's clock) on its own virtual clocks. A replica
//! can be down (requests to it vanish: the client's request times out) and the store can
//! refuse writes for a window (`NOT_LEADER`, as a read-only or leaderless database makes the
//! real replicas answer). Key sets (`sets.rs`) go to the store alone, as lock-server sends them,
//! and so do readers' and permits' acquires (`shares.rs`) and an election's proclaims and
//! reads (`elections.rs`), and a watcher's reads of the store's events (`watch.rs`).

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use chrono::{DateTime, Utc};
use lock_api::{Claim, FencingToken, LockGrant, LockKey, OwnerId, SessionId};
use lock_store::batch::{BatchAnswer, BatchOp, BatchResult};
use lock_store::{
    AcquireOutcome, AcquireSpec, ClockCheckedStore, LockStore, MemoryStore, Refusal, ReplicaClock,
    RequestId, RevokeNote, StoreEnv, StoreError, Wake,
};

use crate::config::Bugs;
use crate::sched::Nanos;

pub mod calls;
pub mod elections;
pub mod sets;
pub mod shares;
pub mod watch;

pub use calls::{LockAnswer, LockCall, Member};

/// The store's environment on virtual time: the store host's wall clock (the true time, plus
/// whatever steps it took), session ids from a counter.
#[derive(Debug, Default)]
pub struct SimEnv {
    now: AtomicU64,
    /// How far the store host's wall clock has been stepped from the true time.
    offset: AtomicI64,
    next_session: AtomicU64,
    /// How often the store read its clock: each of its calls reads it.
    reads: AtomicU64,
}

impl SimEnv {
    /// Sets the true time.
    pub fn set_now(&self, now: Nanos) {
        self.now.store(now, Ordering::SeqCst);
    }

    /// Steps the store host's wall clock by `by_nanos` (NTP, an operator, a VM resumed).
    pub fn step(&self, by_nanos: i64) {
        self.offset.fetch_add(by_nanos, Ordering::SeqCst);
    }

    /// The true time (what a replica's monotonic clock and its host's wall clock read).
    pub fn true_now(&self) -> Nanos {
        self.now.load(Ordering::SeqCst)
    }

    /// The true time of a store clock reading, as the clock stands now.
    pub fn true_time(&self, store_nanos: Nanos) -> Nanos {
        store_nanos.saturating_add_signed(-self.offset.load(Ordering::SeqCst))
    }
}

impl StoreEnv for SimEnv {
    fn now_nanos(&self) -> u64 {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.now
            .load(Ordering::SeqCst)
            .saturating_add_signed(self.offset.load(Ordering::SeqCst))
    }

    fn session_id(&self) -> SessionId {
        let n = self.next_session.fetch_add(1, Ordering::SeqCst) + 1;
        SessionId(uuid::Uuid::from_u128(u128::from(n)))
    }

    fn display(&self, nanos: u64) -> DateTime<Utc> {
        DateTime::<Utc>::UNIX_EPOCH + chrono::Duration::nanoseconds(nanos as i64)
    }
}

/// A replica's clocks: true time (replicas do not drift in this model; clients do).
#[derive(Debug)]
struct ReplicaClocks(Arc<SimEnv>);

impl ReplicaClock for ReplicaClocks {
    fn mono_nanos(&self) -> u64 {
        self.0.true_now()
    }

    fn wall(&self) -> DateTime<Utc> {
        self.0.display(self.0.true_now())
    }
}

/// Reads back a store instant rendered by [`SimEnv::display`].
pub fn store_nanos(at: DateTime<Utc>) -> Nanos {
    (at - DateTime::<Utc>::UNIX_EPOCH)
        .num_nanoseconds()
        .map_or(0, |n| u64::try_from(n).unwrap_or(0))
}

/// A replica's view of the store: through its own store-clock guard.
fn replica_over(
    store: &Arc<MemoryStore>,
    env: &Arc<SimEnv>,
    longest_lease: std::time::Duration,
) -> ClockCheckedStore {
    ClockCheckedStore::with_clock(
        store.clone(),
        longest_lease,
        Arc::new(ReplicaClocks(env.clone())),
    )
}

/// Runs a store call to completion: the memory store never waits, so one poll finishes it.
fn now_or_never<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => unreachable!("the memory store never waits"),
    }
}

/// A store refusal as the lock surface answers it.
fn refusal(err: StoreError) -> LockAnswer {
    match err {
        StoreError::SessionUnknown(_) => LockAnswer::SessionUnknown,
        StoreError::SessionExpired(_) => LockAnswer::SessionExpired,
        StoreError::LockLost { .. } => LockAnswer::LockLost,
        StoreError::NotLeader(_) | StoreError::Unavailable(_) => LockAnswer::NotLeader,
        StoreError::Internal(e) => panic!("memory store failed: {e}"),
        StoreError::KindConflict { .. } => LockAnswer::KindConflict,
    }
}

/// The replicas and the store.
#[derive(Debug)]
pub struct LockService {
    env: Arc<SimEnv>,
    store: Arc<MemoryStore>,
    /// Per replica: the store it is pointed at (the one store, unless split).
    stores: Vec<Arc<MemoryStore>>,
    /// Per replica: the store as it serves from it (with its own store-clock guard).
    replicas: Vec<ClockCheckedStore>,
    /// The longest lease: the guard's hold after a step.
    longest_lease: std::time::Duration,
    /// The replicas' `lock.default.lock-delay`, given to every grant (the SDK names none).
    lock_delay_ms: u64,
    /// The store's wake-ups not yet taken.
    wakes: Arc<Mutex<Vec<Wake>>>,
    /// Per replica: whether it is up.
    pub up: Vec<bool>,
    /// Per replica: how often it came back up (a call it took before is lost with it).
    pub restarts: Vec<u64>,
    /// The store refuses writes.
    pub not_leader: bool,
    /// Every grant the store made: (true time, key, token, session), the witness that tokens
    /// are unique and rise per key.
    pub grants: Vec<(Nanos, LockKey, FencingToken, SessionId)>,
    /// Acquires a replica's store-clock guard refused or withheld (the memory store itself
    /// is never unavailable).
    pub withheld: u64,
    /// Acquires refused because the key was in a lock-delay.
    pub delayed: u64,
    /// Whether the last waiting acquire's call reached the store (its replica's clock guard
    /// did not refuse it first): a grant it was refused may have been made (again) by it.
    pub reached_store: bool,
    /// Planted: replicas tell a grant's holder a longer lease (and a later expiry) than the
    /// store granted.
    tell_longer_lease: bool,
}

impl LockService {
    /// `replicas` replicas up, an empty store (its watch log keeping `events_kept` events, or
    /// the store's default), leases up to `longest_lease_ms`, every grant with a lock-delay of
    /// `lock_delay_ms`; `bugs` may split the store per replica or make replicas tell longer
    /// leases than granted.
    pub fn new(
        replicas: usize,
        longest_lease_ms: u64,
        lock_delay_ms: u64,
        events_kept: Option<usize>,
        bugs: Bugs,
    ) -> Self {
        let env = Arc::new(SimEnv::default());
        let store = MemoryStore::with_env(env.clone());
        let store = Arc::new(match events_kept {
            Some(kept) => store.with_events_kept(kept),
            None => store,
        });
        let longest_lease = std::time::Duration::from_millis(longest_lease_ms);
        let wakes: Arc<Mutex<Vec<Wake>>> = Arc::default();
        let sink = wakes.clone();
        let _ = now_or_never(store.watch_wakes(Arc::new(move |wake| {
            sink.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(wake);
        })));
        // Planted: a replica pointed at a database of its own.
        let stores: Vec<Arc<MemoryStore>> = (0..replicas)
            .map(|r| {
                if bugs.split_store && r > 0 {
                    Arc::new(MemoryStore::with_env(env.clone()))
                } else {
                    store.clone()
                }
            })
            .collect();
        let replica = |own: &Arc<MemoryStore>| {
            let replica = replica_over(own, &env, longest_lease);
            // As lock-server's start: one reading before serving.
            let _ = now_or_never(replica.sample());
            replica
        };
        Self {
            replicas: stores.iter().map(replica).collect(),
            stores,
            longest_lease,
            lock_delay_ms,
            env,
            store,
            wakes,
            up: vec![true; replicas],
            restarts: vec![0; replicas],
            not_leader: false,
            grants: Vec::new(),
            withheld: 0,
            delayed: 0,
            reached_store: false,
            tell_longer_lease: bugs.tell_longer_lease,
        }
    }

    /// Replica `replica` handles `call` at true time `now`; `None` when it is down. A write
    /// other than an open goes as a batch of one.
    pub fn handle(&mut self, now: Nanos, replica: usize, call: &LockCall) -> Option<LockAnswer> {
        let LockCall::Open { owner, ttl_ms } = call else {
            return self
                .handle_batch(now, replica, std::slice::from_ref(call))
                .map(|mut answers| answers.remove(0));
        };
        if !self.up[replica] {
            return None;
        }
        if self.not_leader {
            return Some(LockAnswer::NotLeader);
        }
        self.env.set_now(now);
        let owner = OwnerId::parse(owner.clone()).unwrap_or_else(|e| panic!("{e}"));
        let answer =
            now_or_never(self.replicas[replica].create_session(&owner, *ttl_ms)).map(|r| {
                let (ttl_ms, expires) = self.told_ttl(r.ttl_ms, r.expires_at);
                LockAnswer::Opened {
                    session: r.session_id,
                    ttl_ms,
                    expires,
                }
            });
        Some(answer.unwrap_or_else(refusal))
    }

    /// Replica `replica` commits a batch of writes (heartbeats, acquires, renews, releases)
    /// at `now`, through the store's `apply_batch` as lock-server's group commit does: each
    /// call's answer, in order; `None` when the replica is down.
    ///
    /// # Panics
    /// On an open in `calls` (opens are not batched).
    pub fn handle_batch(
        &mut self,
        now: Nanos,
        replica: usize,
        calls: &[LockCall],
    ) -> Option<Vec<LockAnswer>> {
        if !self.up[replica] {
            return None;
        }
        // Every write is refused.
        if self.not_leader {
            return Some(vec![LockAnswer::NotLeader; calls.len()]);
        }
        self.env.set_now(now);
        let ops: Vec<BatchOp> = calls.iter().map(|c| self.batch_op(c)).collect();
        let results = now_or_never(self.replicas[replica].apply_batch(&ops));
        assert_eq!(results.len(), calls.len(), "one result per write");
        Some(
            calls
                .iter()
                .zip(results)
                .map(|(call, result)| self.answer(now, call, result))
                .collect(),
        )
    }

    /// A write as the replica hands it to the store.
    fn batch_op(&self, call: &LockCall) -> BatchOp {
        match call {
            LockCall::Open { .. } => panic!("an open is not a batched write"),
            LockCall::AcquireSet { .. } => panic!("a key set is not a batched write"),
            LockCall::Proclaim { .. } | LockCall::Inspect { .. } | LockCall::Events { .. } => {
                panic!("a proclaim or a read is not a batched write")
            }
            LockCall::Heartbeat(session) => BatchOp::Heartbeat { session: *session },
            LockCall::Acquire {
                key,
                session,
                lease_ms,
                request,
                claim,
                ..
            } => {
                // As lock-server's `Batched`: a batch decides locks only.
                assert!(
                    *claim == Claim::Exclusive,
                    "a share's acquire is not a batched write"
                );
                BatchOp::Acquire {
                    key: key.clone(),
                    session: *session,
                    spec: AcquireSpec {
                        lock_delay_ms: self.lock_delay_ms,
                        request: *request,
                        ..AcquireSpec::lease(*lease_ms)
                    },
                }
            }
            LockCall::Renew {
                key,
                session,
                token,
            } => BatchOp::Renew {
                key: key.clone(),
                session: *session,
                token: *token,
            },
            LockCall::Release {
                key,
                session,
                token,
            } => BatchOp::Release {
                key: key.clone(),
                session: *session,
                token: *token,
            },
        }
    }

    /// The lock surface's answer to `call` from its store result.
    fn answer(&mut self, now: Nanos, call: &LockCall, result: BatchResult) -> LockAnswer {
        if let Err(StoreError::Unavailable(_)) = &result {
            self.withheld += 1;
        }
        match (call, result) {
            (_, Err(err)) => refusal(err),
            (LockCall::Heartbeat(_), Ok(BatchAnswer::Heartbeat(r))) => {
                let (ttl_ms, expires) = self.told_ttl(r.ttl_ms, r.expires_at);
                LockAnswer::Extended { ttl_ms, expires }
            }
            (LockCall::Acquire { key, .. }, Ok(BatchAnswer::Acquire(outcome))) => {
                self.answer_acquire(now, key, &outcome, 0)
            }
            (LockCall::Renew { .. }, Ok(BatchAnswer::Renew(g))) => {
                let (lease_ms, expires) = self.told(&g);
                LockAnswer::Granted {
                    key: g.lock_key,
                    token: g.fencing_token,
                    lease_ms,
                    expires,
                    session: g.session_id,
                    waited_ms: 0,
                    scope: g.scope,
                }
            }
            (LockCall::Release { .. }, Ok(BatchAnswer::Release(_))) => LockAnswer::Released,
            (call, Ok(answer)) => panic!("the store answered {call:?} with {answer:?}"),
        }
    }

    /// The acquire's answer for a store outcome at `now`, after the request waited `waited_ms`
    /// (a grant is recorded as the witness that tokens are unique and rise per key).
    pub fn answer_acquire(
        &mut self,
        now: Nanos,
        key: &LockKey,
        outcome: &AcquireOutcome,
        waited_ms: u64,
    ) -> LockAnswer {
        if let AcquireOutcome::Refused(Refusal::Delayed { .. }) = outcome {
            self.delayed += 1;
        }
        match outcome {
            AcquireOutcome::Granted { grant, .. } => {
                self.grants
                    .push((now, key.clone(), grant.fencing_token, grant.session_id));
                let (lease_ms, expires) = self.told(grant);
                LockAnswer::Granted {
                    key: grant.lock_key.clone(),
                    token: grant.fencing_token,
                    lease_ms,
                    expires,
                    session: grant.session_id,
                    waited_ms,
                    scope: grant.scope,
                }
            }
            AcquireOutcome::Refused(_) => LockAnswer::Held,
        }
    }

    /// The lease and expiry (true time) a replica tells the holder of `grant`.
    fn told(&self, grant: &LockGrant) -> (u64, Nanos) {
        self.told_ttl(grant.lease_ms, grant.expires_at)
    }

    /// A lease or session TTL and its expiry as a replica tells them: the store's, or,
    /// planted, four times the TTL and an expiry three TTLs later (longer than any lock-delay,
    /// which otherwise keeps the next holder out while the first still believes).
    fn told_ttl(&self, ttl_ms: u64, expires_at: DateTime<Utc>) -> (u64, Nanos) {
        let expires = self.env.true_time(store_nanos(expires_at));
        if self.tell_longer_lease {
            (4 * ttl_ms, expires + 3 * ttl_ms * 1_000_000)
        } else {
            (ttl_ms, expires)
        }
    }

    /// A grant's expiry in true time as the store judges it now (a grant is judged when it is
    /// made: a later step of the store's clock is every outstanding grant's risk alike).
    pub fn true_expiry(&self, grant: &LockGrant) -> Nanos {
        self.env.true_time(store_nanos(grant.expires_at))
    }

    /// A parked acquire's answer from the grant handed over to it, judged to expire at
    /// `expires` when it was made (and recorded then, not here).
    pub fn answer_handed(&self, grant: &LockGrant, expires: Nanos, waited_ms: u64) -> LockAnswer {
        LockAnswer::Granted {
            key: grant.lock_key.clone(),
            token: grant.fencing_token,
            lease_ms: grant.lease_ms,
            expires,
            session: grant.session_id,
            waited_ms,
            scope: grant.scope,
        }
    }

    /// A waiting acquire's store call on replica `replica` at `now` (its queue place kept for
    /// `spec.queue_ms`): the outcome, a refusal, or `None` when the replica is down.
    pub fn acquire_queued(
        &mut self,
        now: Nanos,
        replica: usize,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
    ) -> Option<Result<AcquireOutcome, LockAnswer>> {
        self.reached_store = false;
        if !self.up[replica] {
            return None;
        }
        if self.not_leader {
            return Some(Err(LockAnswer::NotLeader));
        }
        self.env.set_now(now);
        // The replica's `lock.default.lock-delay`: the SDK names none.
        let spec = AcquireSpec {
            lock_delay_ms: self.lock_delay_ms,
            ..spec
        };
        let reads = self.env.reads.load(Ordering::SeqCst);
        let outcome = now_or_never(self.replicas[replica].acquire_with(key, session, spec));
        self.reached_store = self.env.reads.load(Ordering::SeqCst) > reads;
        if let Ok(AcquireOutcome::Refused(Refusal::Delayed { .. })) = &outcome {
            self.delayed += 1;
        }
        if let Err(StoreError::Unavailable(_)) = &outcome {
            self.withheld += 1;
        }
        Some(outcome.map_err(refusal))
    }

    /// Whether replica `replica` may answer `grant`, handed over to a parked request, and how
    /// long it may have run by now at the longest (its clock guard's judgement).
    pub fn admit_hand_over(
        &mut self,
        now: Nanos,
        replica: usize,
        grant: &LockGrant,
    ) -> Result<Option<Nanos>, LockAnswer> {
        self.env.set_now(now);
        self.replicas[replica]
            .admit_hand_over(grant)
            .map(|age| age.map(|age| u64::try_from(age.as_nanos()).unwrap_or(u64::MAX)))
            .map_err(|err| {
                self.withheld += 1;
                refusal(err)
            })
    }

    /// Request `request` of `session` ended without telling its client of a grant: the store
    /// gives back a grant still recorded for it (and, with `leave`, its place).
    pub fn abandon(
        &mut self,
        now: Nanos,
        key: &LockKey,
        session: SessionId,
        request: RequestId,
        leave: bool,
    ) -> bool {
        self.env.set_now(now);
        now_or_never(self.store.abandon(key, session, request, leave))
            .unwrap_or_else(|e| panic!("memory store failed: {e}"))
    }

    /// The store's live grants at `now`: key, session, token, and the request each is for.
    pub fn live_grants(&self, now: Nanos) -> Vec<(LockKey, SessionId, FencingToken)> {
        // A checker's read: the store's clock is left where the last store call set it, so
        // that reading never changes what the next call sees.
        let before = self.env.true_now();
        self.env.set_now(now);
        let grants = self.store.live_grants();
        self.env.set_now(before);
        grants
    }

    /// A waiting acquire gave up: its queue place goes now.
    pub fn leave_queue(&mut self, now: Nanos, key: &LockKey, session: SessionId) {
        self.env.set_now(now);
        let _ = now_or_never(self.store.leave_queue(key, session));
    }

    /// The store's wake-ups since the last call (every replica hears them, as every replica
    /// listens on PostgreSQL).
    pub fn take_wakes(&mut self) -> Vec<Wake> {
        std::mem::take(
            &mut *self
                .wakes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// An operator's revoke at `now`: the key's live grant, if any, ends (its token is never
    /// reused). Returns the revoked token.
    pub fn revoke(&mut self, now: Nanos, key: &LockKey) -> Option<FencingToken> {
        self.env.set_now(now);
        let note = RevokeNote {
            by: "nemesis".into(),
            reason: None,
        };
        now_or_never(self.store.revoke(key, &note)).ok().flatten()
    }

    /// Replica `replica` comes back up: a new process, with a new guard and no reading of
    /// the store's clock yet.
    pub fn restart(&mut self, now: Nanos, replica: usize) {
        self.env.set_now(now);
        self.replicas[replica] = replica_over(&self.stores[replica], &self.env, self.longest_lease);
        // As lock-server's start: one reading before serving.
        let _ = now_or_never(self.replicas[replica].sample());
        self.up[replica] = true;
        self.restarts[replica] += 1;
    }

    /// Each replica's sampler reads the store's clock (lock-server's
    /// `CLOCK_SAMPLE_INTERVAL` tick). Returns how many saw a step.
    pub fn sample_clocks(&mut self, now: Nanos) -> usize {
        self.env.set_now(now);
        let up = self.up.clone();
        self.replicas
            .iter()
            .zip(up)
            .filter(|(_, up)| *up)
            .filter(|(replica, _)| {
                matches!(
                    now_or_never(replica.sample()),
                    Ok(Some(lock_store::Verdict::Stepped { .. }))
                )
            })
            .count()
    }

    /// Steps the store host's wall clock by `by_nanos`.
    pub fn step_store_clock(&self, by_nanos: i64) {
        self.env.step(by_nanos);
    }

    /// The reaper's pass at `now`.
    pub fn reap(&mut self, now: Nanos) {
        self.env.set_now(now);
        let _ = now_or_never(self.store.reap_expired());
    }
}
