//! Key sets at the replicas (ADR 0007), served as lock-server's `set_waiting` serves them: a
//! set's request is a store call of its own (never in a batch), a try first; a refused set
//! that may wait keeps places in every key's queue, parks on every key of the set, and asks
//! for the whole set again when any of them wakes it, at the store's hint or the recheck, until its deadline
//! (then it leaves every key's queue and tries once more). A set request that ends without
//! telling its client (cancelled, refused by the store, withheld by the clock guard) is
//! abandoned on every key, as `waiting::Exposure` abandons it. After each store call the
//! service reports a set partly held, which the checker "a set is never partly held" fails.

use lock_api::{Claim, GrantScope, LockKey, SessionId};
use lock_store::wait_plan::{WaitPlan, WaitStep};
use lock_store::{AcquireSpec, RequestId, SetOutcome};

use super::links::Node;
use super::{Event, Parked, SetWait, World};
use crate::service::{LockAnswer, LockCall};

impl World {
    /// Whether parked request `id` is a key set's.
    pub(super) fn is_set(&self, id: u64) -> bool {
        self.parked.get(&id).is_some_and(|p| p.set.is_some())
    }

    /// A set request `req` reaches replica `r`, which names it: its first store call (a try,
    /// no places) is made a store round trip later, a transaction of its own.
    pub(super) fn set_arrives(&mut self, r: usize, from: Node, req: u64, call: LockCall) {
        let LockCall::AcquireSet {
            keys,
            session,
            lease_ms,
            wait_ms,
            ..
        } = call
        else {
            return;
        };
        if !self.service.up[r] {
            self.log(&[from, Node::Replica(r)], || {
                format!("r{r} is down: #{req} vanishes")
            });
            return;
        }
        let now = self.q.now();
        self.parks += 1;
        let id = self.parks;
        self.parked.insert(
            id,
            Parked {
                replica: r,
                from,
                req,
                key: keys[0].clone(),
                session,
                lease_ms,
                plan: WaitPlan::new(now, wait_ms.unwrap_or(0)),
                last_called: now,
                handed: None,
                request: RequestId(req),
                leaving: None,
                set: Some(SetWait {
                    keys,
                    waits: wait_ms.is_some(),
                    tried: false,
                    cancelled: false,
                }),
                claim: Claim::Exclusive,
            },
        );
        let call = self.store_call_nanos();
        self.q.after(call, Event::WaitRetry(id));
    }

    /// Set request `id` asks the store for its whole set: first a try (answered at once
    /// when granted, or when the set may not wait), then, for a waiting set, queued calls
    /// driven by the wait plan as `set_waiting` drives them.
    pub(super) fn set_call(&mut self, id: u64) {
        let now = self.q.now();
        let Some(p) = self.parked.get_mut(&id) else {
            return;
        };
        // A set is never handed a key alone: a hand-over notice that found its place (an
        // earlier request's) is not read, as `set_waiting` reads none; it asks for the set.
        p.handed = None;
        let Some(set) = p.set.as_mut() else {
            return;
        };
        let first = !set.tried;
        set.tried = true;
        let waits = set.waits;
        p.last_called = now;
        let plan = p.plan;
        let spec = AcquireSpec {
            queue_ms: if first { 0 } else { plan.queue_ms(now) },
            request: p.request,
            ..AcquireSpec::lease(p.lease_ms)
        };
        let Some(outcome) = self.set_store_call(id, spec) else {
            return;
        };
        if first {
            if let SetOutcome::Granted { .. } = outcome {
                return self.answer_set(id, &outcome, 0);
            }
            if !waits {
                return self.answer_set(id, &outcome, 0);
            }
            // Refused, and it may wait: the queued calls begin at once.
            self.coverage.hit("a refused key set parked");
            return self.set_call(id);
        }
        match plan.after(now, &outcome.as_acquire()) {
            WaitStep::Nap(nap) => {
                if let (Some(p), SetOutcome::Refused { key, .. }) =
                    (self.parked.get_mut(&id), &outcome)
                {
                    // The key that refused it (the trace's); it is woken by any of its keys.
                    p.key = key.clone();
                }
                let nap = u64::try_from(nap.as_nanos()).unwrap_or(u64::MAX);
                self.q.after(nap.max(1), Event::WaitRetry(id));
            }
            WaitStep::Answer {
                waited_ms,
                leave: true,
            } => {
                self.coverage
                    .hit("a waiting key set gave up at its deadline");
                let keys = self.parked.get(&id).map(|p| p.keys().to_vec());
                let session = self.parked.get(&id).map(|p| p.session);
                if let (Some(keys), Some(session)) = (keys, session) {
                    for key in &keys {
                        self.service.leave_queue(now, key, session);
                    }
                }
                if let Some(p) = self.parked.get_mut(&id) {
                    p.leaving = Some((outcome.as_acquire(), waited_ms));
                }
                let call = self.store_call_nanos();
                self.q.after(call, Event::LastTry(id));
            }
            WaitStep::Answer {
                waited_ms,
                leave: false,
            } => {
                self.coverage.hit("a waiting key set granted after parking");
                self.answer_set(id, &outcome, waited_ms);
            }
        }
    }

    /// A waiting set's last try, after it left every key's queue: the whole set, or the
    /// refusal that ended its wait.
    pub(super) fn set_last_try(&mut self, id: u64) {
        let now = self.q.now();
        let Some(p) = self.parked.get(&id) else {
            return;
        };
        if p.leaving.is_none() {
            return;
        }
        let plan = p.plan;
        let spec = AcquireSpec {
            request: p.request,
            ..AcquireSpec::lease(p.lease_ms)
        };
        self.coverage
            .hit("a waiting key set's last try after its leave");
        let Some(last) = self.set_store_call(id, spec) else {
            return;
        };
        if let SetOutcome::Granted { .. } = last {
            self.coverage
                .hit("a waiting key set granted by its last try");
            return self.answer_set(id, &last, plan.granted_by_call_at(now));
        }
        // Refused again: the refusal that ended the wait is answered.
        self.answer_parked(id, LockAnswer::Held);
    }

    /// Set request `id`'s store call as `spec`, checked all or nothing: the outcome, or `None`
    /// when the request ended (its replica is down; its client cancelled it while the call
    /// was in flight, and it is abandoned now; the store refused or the clock guard withheld
    /// the grant, and it is abandoned and that answered).
    fn set_store_call(&mut self, id: u64, spec: AcquireSpec) -> Option<SetOutcome> {
        let now = self.q.now();
        let p = self.parked.get(&id)?;
        let (r, from, req, session) = (p.replica, p.from, p.req, p.session);
        let keys = p.keys().to_vec();
        let cancelled = p.set.as_ref().is_some_and(|s| s.cancelled);
        if spec.queue_ms > 0 {
            for key in &keys {
                self.place_of.insert((key.clone(), session), spec.request);
            }
        }
        let Some(called) = self.service.acquire_set(now, r, &keys, session, spec) else {
            self.parked.remove(&id);
            return None;
        };
        self.log(&[from, Node::Replica(r)], || {
            let outcome = match &called.outcome {
                Ok(SetOutcome::Granted { .. }) => "granted".to_owned(),
                Ok(SetOutcome::Refused { key, refusal }) => {
                    format!("refused on {key}: {refusal:?}")
                }
                Err(answer) => format!("{answer:?}"),
            };
            format!(
                "r{r} #{req} set call (queue {} ms): {outcome}",
                spec.queue_ms
            )
        });
        if let Some(detail) = called.partly {
            self.violate(
                "a set is never partly held",
                &[from, Node::Replica(r)],
                detail,
            );
        }
        match &called.outcome {
            Ok(SetOutcome::Granted { .. }) => self.coverage.hit("a key set granted"),
            Ok(SetOutcome::Refused { key, .. }) => {
                self.coverage.hit("a key set refused");
                self.coverage.hit(if key.as_str().starts_with("account:") {
                    "a key set refused on its account key"
                } else {
                    "a key set refused on its payout key"
                });
            }
            Err(LockAnswer::NotLeader) => self.coverage.hit("a key set answered NOT_LEADER"),
            Err(_) => {}
        }
        if called.outcome.is_err() && !called.granted.is_empty() {
            self.coverage
                .hit("a key set granted by the store, withheld by the clock guard");
        }
        if cancelled {
            // Its client went away while the call was in flight: nothing is answered, and
            // what it made is given back (after the call, as `Exposure` waits for it).
            self.coverage
                .hit("a key set cancelled with its store call in flight");
            self.parked.remove(&id);
            if let Ok(granted @ SetOutcome::Granted { .. }) = &called.outcome {
                // Made, and checked as made, though never answered.
                if let LockAnswer::SetGranted { members, .. } =
                    self.service.answer_set(now, session, granted, 0)
                {
                    for m in members {
                        self.check_grant(&m.key, m.token, session, GrantScope::Exclusive);
                        self.witness.made(&m.key, m.token, spec.request);
                    }
                }
            }
            self.abandon_set(&keys, session, spec.request, false);
            return None;
        }
        match called.outcome {
            Ok(outcome) => Some(outcome),
            Err(refusal) => {
                // A store refusal, or a grant the clock guard withheld: given back. A grant
                // withheld was made (or made again) for this request, as a grant answered is.
                for (key, token) in &called.granted {
                    self.witness.made(key, *token, spec.request);
                }
                self.abandon_set(&keys, session, spec.request, false);
                self.answer_parked(id, refusal);
                None
            }
        }
    }

    /// Abandons request `request` of `session` on every key of its set.
    fn abandon_set(
        &mut self,
        keys: &[LockKey],
        session: SessionId,
        request: RequestId,
        leave: bool,
    ) {
        for key in keys {
            self.abandon_request(key, session, request, leave);
        }
    }

    /// Answers set request `id` with the store's `outcome` after `waited_ms`.
    fn answer_set(&mut self, id: u64, outcome: &SetOutcome, waited_ms: u64) {
        let now = self.q.now();
        let Some(session) = self.parked.get(&id).map(|p| p.session) else {
            return;
        };
        let answer = self.service.answer_set(now, session, outcome, waited_ms);
        self.answer_parked(id, answer);
    }
}
