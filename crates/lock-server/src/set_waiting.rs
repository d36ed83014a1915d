//! Server-side waiting for a key set (ADR 0007): an acquire of a set with `wait_ms` is held
//! until the whole set is granted or the wait ends. The set's places in its keys' queues are
//! the store's (taken together, one arrival order, never handed a key alone); this module
//! parks the request on every key of the set before its first queued store call (a wake-up
//! names a key's head waiter, and one that races a call leaves a permit), and asks for the
//! whole set again when any of its keys wakes it, a deadline the store told of passes, or
//! the recheck timer fires.

use std::sync::Arc;

use tokio::time::Instant;

use crate::store::{AcquireSpec, SetOutcome, StoreError};
use crate::waiting::{Exposure, WaitPlan, WaitRefused, WaitStep, Waiters};

/// How a waiting set acquire ended, short of a store error.
#[derive(Debug)]
pub enum SetWaited {
    /// Granted by the first try, without parking: no wait.
    AtOnce(SetOutcome),
    /// The store's last answer (a grant, or the refusal at the deadline) and the milliseconds
    /// between the request's start and the store call that gave it.
    Answer(SetOutcome, u64),
    /// The replica started draining: the client should go to another replica, where its
    /// places are still its own.
    Draining,
    /// The request could not be parked.
    Refused(WaitRefused),
}

/// An acquire of `exposure`'s set with a wait: tries, parks on every key of the set, asks the
/// store with places and again whenever a key wakes it, until granted or `wait_ms` has passed
/// (then the set leaves its places and tries once more), or until `draining` turns true.
pub async fn acquire_set_waiting(
    waiters: &Arc<Waiters>,
    mut draining: tokio::sync::watch::Receiver<bool>,
    exposure: &mut Exposure,
    spec: AcquireSpec,
    wait_ms: u64,
) -> Result<SetWaited, StoreError> {
    let started = Instant::now();
    let nanos =
        |at: Instant| u64::try_from(at.duration_since(started).as_nanos()).unwrap_or(u64::MAX);
    let plan = WaitPlan::new(0, wait_ms);
    // The uncontended path first: a try, no places, nothing parked.
    let tried = exposure.acquire_set(spec).await?;
    if matches!(tried, SetOutcome::Granted { .. }) {
        return Ok(SetWaited::AtOnce(tried));
    }
    // Parked before the first queued store call, on every key: a wake-up for any of them
    // that races a call leaves a permit.
    let mut tickets = Vec::with_capacity(exposure.keys().len());
    for key in exposure.keys() {
        match waiters.join(key, exposure.session()) {
            Ok(ticket) => tickets.push(ticket),
            Err(refused) => return Ok(SetWaited::Refused(refused)),
        }
    }
    loop {
        let called = nanos(Instant::now());
        let queued = AcquireSpec {
            queue_ms: plan.queue_ms(called),
            ..spec
        };
        let outcome = match exposure.acquire_set(queued).await {
            Ok(outcome) => outcome,
            Err(err) => {
                // The client retries (503) and keeps its places; they lapse otherwise.
                exposure.place_not_ours();
                return Err(err);
            }
        };
        let nap = match plan.after(called, &outcome.as_acquire()) {
            WaitStep::Answer { waited_ms, leave } => {
                if !leave {
                    // A grant: the store removed the set's places with it.
                    exposure.place_not_ours();
                    return Ok(SetWaited::Answer(outcome, waited_ms));
                }
                let last = AcquireSpec {
                    queue_ms: 0,
                    ..spec
                };
                return last_try(exposure, &plan, last, outcome, waited_ms, nanos).await;
            }
            WaitStep::Nap(nap) => nap,
        };
        let woken = futures_util::future::select_all(tickets.iter().map(|t| Box::pin(t.woken())));
        tokio::select! {
            _ = woken => {}
            () = tokio::time::sleep(nap) => {}
            _ = draining.wait_for(|draining| *draining) => {
                exposure.place_not_ours();
                return Ok(SetWaited::Draining);
            }
        }
    }
}

/// At the deadline: the set leaves its places, then tries once more without them.
/// `outcome` is the refusal that ended the wait, answered when the last try is refused too.
async fn last_try(
    exposure: &mut Exposure,
    plan: &WaitPlan,
    last: AcquireSpec,
    outcome: SetOutcome,
    waited_ms: u64,
    nanos: impl Fn(Instant) -> u64,
) -> Result<SetWaited, StoreError> {
    exposure.leave_queue().await?;
    let called = nanos(Instant::now());
    let last = exposure.acquire_set(last).await?;
    Ok(match last {
        SetOutcome::Granted { .. } => SetWaited::Answer(last, plan.granted_by_call_at(called)),
        SetOutcome::Refused { .. } => SetWaited::Answer(outcome, waited_ms),
    })
}
