//! Server-side waiting: an acquire with `wait_ms` is held until its key is granted
//! or the wait ends. The FIFO order itself is the store's (a queue per key shared by every
//! replica, `AcquireSpec::queue_ms`); this module only parks requests and wakes them.
//!
//! A parked request holds no store connection. It is woken by the store's wake-ups (on
//! PostgreSQL, `LISTEN lock_free`: the head waiter of a freed key, whichever replica freed
//! it), by a deadline the store told it of (the holder's expiry, the end of a lock-delay),
//! or by its recheck timer, which bounds what a lost wake-up costs. [`Waiters`] is the
//! replica's registry of parked requests, bounded per key and in all.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lock_api::{LockGrant, LockKey, SessionId};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::WaitPolicy;
use crate::metrics as m;
use crate::store::{
    AcquireOutcome, AcquireSpec, LockStore, RequestId, SetOutcome, StoreError, Wake,
};
use uuid::Uuid;

pub use lock_store::wait_plan::{QUEUE_PLACE_SLACK_MS, WAIT_RECHECK_MS, WaitPlan, WaitStep};

/// Why a request could not be parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WaitRefused {
    /// This replica already parks `lock.max.waiters-per-key` requests for the key.
    #[error("this replica already holds {0} waiters for this key (lock.max.waiters-per-key)")]
    PerKey(usize),
    /// This replica already parks `lock.max.waiters` requests.
    #[error("this replica already holds {0} waiters (lock.max.waiters)")]
    PerServer(usize),
}

/// A grant handed over to a parked request, with its place's age ([`Wake::HandedOver`]).
type Handed = Arc<Mutex<Option<(LockGrant, u64)>>>;

/// One parked request's wake-up.
#[derive(Debug)]
struct Slot {
    id: u64,
    notify: Arc<Notify>,
    handed: Handed,
}

#[derive(Debug, Default)]
struct Registry {
    keys: HashMap<LockKey, HashMap<SessionId, Slot>>,
    total: usize,
}

/// The replica's parked acquires, by key and session.
#[derive(Debug)]
pub struct Waiters {
    registry: Mutex<Registry>,
    next_id: AtomicU64,
    policy: WaitPolicy,
}

impl Waiters {
    /// An empty registry bounded by `policy`.
    pub fn new(policy: WaitPolicy) -> Self {
        Self {
            registry: Mutex::new(Registry::default()),
            next_id: AtomicU64::new(1),
            policy,
        }
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        // A panic while holding this lock leaves counts that are still true: recover them.
        self.registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Parks a request of `session` for `key`; the ticket unparks it when dropped. A second
    /// request of the same session for the same key (a retry) takes the wake-ups over.
    pub fn join(
        self: &Arc<Self>,
        key: &LockKey,
        session: SessionId,
    ) -> Result<Ticket, WaitRefused> {
        let mut registry = self.registry();
        let per_key = registry.keys.get(key).map_or(0, HashMap::len);
        if per_key >= self.policy.max_waiters_per_key {
            return Err(WaitRefused::PerKey(per_key));
        }
        if registry.total >= self.policy.max_waiters {
            return Err(WaitRefused::PerServer(registry.total));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        let handed = Handed::default();
        let replaced = registry.keys.entry(key.clone()).or_default().insert(
            session,
            Slot {
                id,
                notify: notify.clone(),
                handed: handed.clone(),
            },
        );
        if let Some(old) = replaced {
            // The older request stays parked until its own timer; it no longer gets wakes.
            old.notify.notify_one();
        } else {
            registry.total += 1;
        }
        metrics::gauge!(m::WAITERS).set(registry.total as f64);
        Ok(Ticket {
            waiters: self.clone(),
            key: key.clone(),
            session,
            id,
            notify,
            handed,
        })
    }

    /// Delivers a store wake-up. A permit is stored when the request is between two store
    /// calls, so a wake-up that races its check is never lost.
    pub fn wake(&self, wake: &Wake) {
        let registry = self.registry();
        match wake {
            Wake::Head { key, session } => {
                if let Some(slot) = registry.keys.get(key).and_then(|k| k.get(session)) {
                    slot.notify.notify_one();
                }
            }
            Wake::HandedOver {
                grant,
                place_age_ms,
            } => {
                let slot = registry
                    .keys
                    .get(&grant.lock_key)
                    .and_then(|k| k.get(&grant.session_id));
                if let Some(slot) = slot {
                    *lock(&slot.handed) = Some((grant.clone(), *place_age_ms));
                    slot.notify.notify_one();
                }
            }
            Wake::Everyone => registry
                .keys
                .values()
                .flat_map(HashMap::values)
                .for_each(|slot| slot.notify.notify_one()),
        }
    }

    /// Requests parked on this replica.
    pub fn len(&self) -> usize {
        self.registry().total
    }

    /// Whether no request is parked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn leave(&self, key: &LockKey, session: SessionId, id: u64) {
        let mut registry = self.registry();
        let Some(sessions) = registry.keys.get_mut(key) else {
            return;
        };
        if sessions.get(&session).is_some_and(|slot| slot.id == id) {
            sessions.remove(&session);
            if sessions.is_empty() {
                registry.keys.remove(key);
            }
            registry.total -= 1;
        }
        metrics::gauge!(m::WAITERS).set(registry.total as f64);
    }
}

/// A parked request's registration; dropping it unparks.
#[derive(Debug)]
pub struct Ticket {
    waiters: Arc<Waiters>,
    key: LockKey,
    session: SessionId,
    id: u64,
    notify: Arc<Notify>,
    handed: Handed,
}

impl Ticket {
    /// Completes at the next wake-up for this request (at once if one came meanwhile).
    pub async fn woken(&self) {
        self.notify.notified().await;
    }

    /// The grant handed over to this request since the last call, with its place's age.
    pub fn take_handed(&self) -> Option<(LockGrant, u64)> {
        lock(&self.handed).take()
    }
}

/// A panic while holding a hand-over slot leaves it whole: recover it.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.waiters.leave(&self.key, self.session, self.id);
    }
}

/// What an acquire request may have left in the store without its client knowing: a grant
/// made by a call whose answer it did not get or has not given yet, or a queue place a
/// hand-over may go to. A request that ends exposed (its client went away and the handler
/// was dropped, a store error, a refusal by the clock guard) abandons them
/// ([`LockStore::abandon`]) from a task of its own, once its store call in flight has ended:
/// the key goes on to the next waiter at once instead of sitting with a grant nobody knows
/// it holds until its lease ends.
#[derive(Debug)]
pub struct Exposure {
    store: Arc<dyn LockStore>,
    /// The key asked for, or a set's keys (sorted): each is abandoned.
    keys: Vec<LockKey>,
    session: SessionId,
    request: RequestId,
    /// The store call under way: it runs to its end even when the request is dropped, so
    /// that the abandon comes after whatever it commits.
    in_flight: Option<JoinHandle<()>>,
    /// A grant for this request may exist that its client has not been told of.
    grant: bool,
    /// The request's place may be in the queue (and so may a grant handed over to it).
    place: bool,
}

impl Exposure {
    /// A request of `session` for `key`, not yet exposed, with a fresh id.
    pub fn new(store: Arc<dyn LockStore>, key: &LockKey, session: SessionId) -> Self {
        Self::of_set(store, vec![key.clone()], session)
    }

    /// A request of `session` for the set `keys` (sorted, each once), not yet exposed.
    pub fn of_set(store: Arc<dyn LockStore>, keys: Vec<LockKey>, session: SessionId) -> Self {
        assert!(!keys.is_empty(), "a request names a key");
        // 63 bits, never 0 (RequestId::NONE): PostgreSQL keeps it as a bigint.
        let request = RequestId((Uuid::new_v4().as_u64_pair().0 >> 1) | 1);
        Self {
            store,
            keys,
            session,
            request,
            in_flight: None,
            grant: false,
            place: false,
        }
    }

    /// Asks the store to grant the key to this request as `spec` says. The request is
    /// exposed from the call on; a refusal exposes no grant (a place asked for stays exposed).
    pub async fn acquire(&mut self, spec: AcquireSpec) -> Result<AcquireOutcome, StoreError> {
        let (store, key, session) = (self.store.clone(), self.key().clone(), self.session);
        let spec = self.exposed_by(spec);
        let answer = self
            .call(async move { store.acquire_with(&key, session, spec).await })
            .await;
        if let Ok(outcome) = &answer {
            self.grant = matches!(outcome, AcquireOutcome::Granted { .. });
        }
        answer
    }

    /// [`Self::acquire`] of the request's set ([`LockStore::acquire_set`]).
    pub async fn acquire_set(&mut self, spec: AcquireSpec) -> Result<SetOutcome, StoreError> {
        let (store, keys, session) = (self.store.clone(), self.keys.clone(), self.session);
        let spec = self.exposed_by(spec);
        let answer = self
            .call(async move { store.acquire_set(&keys, session, spec).await })
            .await;
        if let Ok(outcome) = &answer {
            self.grant = matches!(outcome, SetOutcome::Granted { .. });
        }
        answer
    }

    /// The key asked for (a set's first).
    pub(crate) fn key(&self) -> &LockKey {
        &self.keys[0]
    }

    /// Every key asked for (one, or a set's, sorted).
    pub(crate) fn keys(&self) -> &[LockKey] {
        &self.keys
    }

    /// The session asking.
    pub(crate) fn session(&self) -> SessionId {
        self.session
    }

    /// A store call with `spec` exposes a grant, and a place when it queues.
    fn exposed_by(&mut self, spec: AcquireSpec) -> AcquireSpec {
        self.grant = true;
        self.place |= spec.queue_ms > 0;
        AcquireSpec {
            request: self.request,
            ..spec
        }
    }

    /// Runs a store call in a task of its own, so that it runs to its end even when the
    /// request is dropped (the abandon then comes after whatever it commits).
    async fn call<T: Send + 'static>(
        &mut self,
        call: impl Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (done, answer) = tokio::sync::oneshot::channel();
        self.in_flight = Some(tokio::spawn(async move {
            let _ = done.send(call.await);
        }));
        let answer = answer
            .await
            .unwrap_or_else(|_| Err(StoreError::Internal("an acquire's task ended".into())));
        self.in_flight = None;
        answer
    }

    /// A grant was handed over to the request's place: the place is gone, the grant exposed.
    fn handed_over(&mut self) {
        self.grant = true;
        self.place = false;
    }

    /// The request no longer answers for a queue place: it left the queue, the store removed
    /// it with a grant, or it is kept on purpose for the client's retry on another replica
    /// (draining, a store error) and is not abandoned with the request.
    pub(crate) fn place_not_ours(&mut self) {
        self.place = false;
    }

    /// Leaves the queue of every key asked for.
    pub(crate) async fn leave_queue(&mut self) -> Result<(), StoreError> {
        for key in &self.keys {
            self.store.leave_queue(key, self.session).await?;
        }
        self.place_not_ours();
        Ok(())
    }

    /// The client is being told of the grant: nothing is left to abandon.
    pub fn told(mut self) {
        self.grant = false;
        self.place = false;
    }
}

impl Drop for Exposure {
    fn drop(&mut self) {
        if !(self.grant || self.place) {
            return;
        }
        let (store, keys, session) = (self.store.clone(), self.keys.clone(), self.session);
        let (request, leave, in_flight) = (self.request, self.place, self.in_flight.take());
        let backend = store.backend().as_str();
        metrics::counter!(m::ACQUIRES_ABANDONED_TOTAL, "backend" => backend).increment(1);
        tokio::spawn(async move {
            if let Some(call) = in_flight {
                let _ = call.await;
            }
            for key in keys {
                abandon(&*store, &key, session, request, leave, backend).await;
            }
        });
    }
}

/// Gives back what request `request` of `session` may have left on `key`.
async fn abandon(
    store: &dyn LockStore,
    key: &LockKey,
    session: SessionId,
    request: RequestId,
    leave: bool,
    backend: &'static str,
) {
    match store.abandon(key, session, request, leave).await {
        Ok(released) => {
            if released {
                metrics::counter!(m::ORPHANS_RELEASED_TOTAL, "backend" => backend).increment(1);
            }
            tracing::debug!(event = "acquire_abandoned", key = %key, released);
        }
        Err(err) => {
            tracing::warn!(event = "acquire_abandon_failed", key = %key, error = %err);
        }
    }
}

/// How a waiting acquire ended, short of a store error.
#[derive(Debug)]
pub enum Waited {
    /// Granted by the first try, without parking: no wait.
    AtOnce(AcquireOutcome),
    /// Parked, then the store's last answer (a grant, or the refusal at the deadline) and the
    /// milliseconds between the request's start and the store call that gave it.
    Answer(AcquireOutcome, u64),
    /// Parked, then handed the key by the release (or revoke, or reap) that freed it
    /// ([`Wake::HandedOver`]): the grant and its `waited_ms`.
    HandedOver(LockGrant, u64),
    /// The replica started draining: the client should go to another replica, where its
    /// queue place is still its own.
    Draining,
    /// The request could not be parked.
    Refused(WaitRefused),
}

/// An acquire with a wait for `exposure`'s key and session: asks the store, parks in
/// `waiters` until woken, asks again, until granted or `wait_ms` has passed (then one last
/// try), or until `draining` turns true. `spec.queue_ms` is set here; `exposure` follows what
/// the store may hold for the request.
pub async fn acquire_waiting(
    waiters: &Arc<Waiters>,
    mut draining: tokio::sync::watch::Receiver<bool>,
    exposure: &mut Exposure,
    spec: AcquireSpec,
    wait_ms: u64,
) -> Result<Waited, StoreError> {
    let started = Instant::now();
    let nanos =
        |at: Instant| u64::try_from(at.duration_since(started).as_nanos()).unwrap_or(u64::MAX);
    let plan = WaitPlan::new(0, wait_ms);
    // The uncontended path first: a try, no queue place, nothing parked. A newcomer to a key
    // with waiters is refused here (it has no place) and queues at the back below.
    let tried = exposure.acquire(spec).await?;
    if matches!(tried, AcquireOutcome::Granted { .. }) {
        return Ok(Waited::AtOnce(tried));
    }
    // Parked before the first queued store call, so a wake-up racing it leaves a permit.
    let ticket = match waiters.join(exposure.key(), exposure.session) {
        Ok(ticket) => ticket,
        Err(refused) => return Ok(Waited::Refused(refused)),
    };
    loop {
        // Only a hand-over delivered after this call was sent may answer the request: an
        // older one's grant was seen by this call (answered as a grant) or has ended.
        let _ = ticket.take_handed();
        let called = nanos(Instant::now());
        let queued = AcquireSpec {
            queue_ms: plan.queue_ms(called),
            ..spec
        };
        let outcome = match exposure.acquire(queued).await {
            Ok(outcome) => outcome,
            Err(err) => {
                // The client retries (503) and keeps its place; it lapses otherwise.
                exposure.place_not_ours();
                return Err(err);
            }
        };
        let nap = match plan.after(called, &outcome) {
            WaitStep::Answer {
                waited_ms,
                leave: false,
            } => {
                // A grant: the store removed the place with it.
                exposure.place_not_ours();
                return Ok(Waited::Answer(outcome, waited_ms));
            }
            WaitStep::Answer {
                waited_ms,
                leave: true,
            } => {
                let last = AcquireSpec {
                    queue_ms: 0,
                    ..spec
                };
                return last_try(exposure, &plan, last, outcome, waited_ms, nanos).await;
            }
            WaitStep::Nap(nap) => nap,
        };
        tokio::select! {
            () = ticket.woken() => {}
            () = tokio::time::sleep(nap) => {}
            _ = draining.wait_for(|draining| *draining) => {
                exposure.place_not_ours();
                return Ok(Waited::Draining);
            }
        }
        if let Some((grant, place_age_ms)) = ticket.take_handed() {
            exposure.handed_over();
            let ran_at_most = exposure
                .store
                .admit_hand_over(&grant)?
                .map(|age| u64::try_from(age.as_nanos()).unwrap_or(u64::MAX));
            let now = nanos(Instant::now());
            if let Some(waited_ms) = plan.handed_over(called, place_age_ms, now, ran_at_most) {
                return Ok(Waited::HandedOver(grant, waited_ms));
            }
            // A grant that may predate this request (its notice arrived late): the next
            // store call answers afresh, from a place of its own again.
        }
    }
}

/// At the deadline: the request leaves its place, then tries once more as `last` (a try,
/// without a place). `outcome` is the refusal that ended the wait, answered when the last try
/// is refused too.
async fn last_try(
    exposure: &mut Exposure,
    plan: &WaitPlan,
    last: AcquireSpec,
    outcome: AcquireOutcome,
    waited_ms: u64,
    nanos: impl Fn(Instant) -> u64,
) -> Result<Waited, StoreError> {
    exposure.leave_queue().await?;
    let called = nanos(Instant::now());
    let last = exposure.acquire(last).await?;
    Ok(match last {
        AcquireOutcome::Granted { .. } => Waited::Answer(last, plan.granted_by_call_at(called)),
        AcquireOutcome::Refused(_) => Waited::Answer(outcome, waited_ms),
    })
}
