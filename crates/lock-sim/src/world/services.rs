//! The lock service's replicas (each over lock-store's `MemoryStore` through its own
//! `ClockCheckedStore`, parking waiting acquires with lock-store's `WaitPlan`) and the bank (the
//! resource and the rail, with fence-kit's `check_fence`) as nodes on the network. Key sets'
//! own store calls are `set_replica.rs`'s, and the first store call of a share's acquire
//! `share_replica.rs`'s.

use lock_api::{Claim, GrantScope, LockGrant, LockKey, SessionId};
use lock_store::wait_plan::{WaitPlan, WaitStep};
use lock_store::{AcquireOutcome, AcquireSpec, RequestId, Wake};
use payment_api::PayoutState;

use super::elect_jobs::is_election;
use super::links::Node;
use super::{Body, Event, HAND_OVER_LATE_MAX_MS, Parked, SharedKey, World};
use crate::bank::Answer;
use crate::sched::{MS, Nanos};
use crate::service::{LockAnswer, LockCall};

/// Share of commits in the fault window that hit a slow disk.
const SLOW_COMMIT_SHARE: f64 = 0.2;
/// The slowest commit, in ms.
const SLOW_COMMIT_MAX_MS: u64 = 200;

impl World {
    /// A lock-surface request reaches replica `r`: an open is answered at once; a write joins
    /// the replica's group commit (as lock-server's `Batched` store gathers it) and is
    /// answered when its batch commits.
    pub(super) fn at_replica(&mut self, r: usize, from: Node, req: u64, body: Body) {
        let call = match body {
            Body::Lock(call) => call,
            Body::Cancel(cancelled) => return self.cancel(r, from, cancelled),
            _ => return,
        };
        if let LockCall::Proclaim { .. } | LockCall::Inspect { .. } = call {
            return self.election_call(r, from, req, call);
        }
        if let LockCall::Events { .. } = call {
            return self.watch_call(r, from, req, &call);
        }
        // The replica names each acquire request (lock-server's `waiting::Exposure`): its
        // grant and its queue place record the name.
        let call = match call {
            LockCall::Acquire {
                key,
                session,
                lease_ms,
                wait_ms,
                claim,
                ..
            } => LockCall::Acquire {
                key,
                session,
                lease_ms,
                wait_ms,
                request: RequestId(req),
                claim,
            },
            set @ LockCall::AcquireSet { .. } => return self.set_arrives(r, from, req, set),
            other => other,
        };
        if let LockCall::Acquire { claim, .. } = &call {
            if *claim != Claim::Exclusive {
                return self.share_arrives(r, from, req, call);
            }
        }
        if let LockCall::Open { .. } = call {
            let answer = self.service.handle(self.q.now(), r, &call);
            return self.answered(r, from, req, &call, answer);
        }
        if !self.service.up[r] {
            return self.answered(r, from, req, &call, None);
        }
        self.gathered[r].push((from, req, call.clone()), call);
        self.start_flush(r);
    }

    /// Sends replica `r`'s next batches while a slot is free: each commits after one flush.
    fn start_flush(&mut self, r: usize) {
        while let Some((id, calls)) = self.gathered[r].take() {
            if calls.len() > 1 {
                self.coverage
                    .hit("a batch of several writes committed together");
                let keys: Vec<&LockKey> = calls.iter().filter_map(LockCall::key).collect();
                if (1..keys.len()).any(|i| keys[..i].contains(&keys[i])) {
                    self.coverage.hit("a batch carried two writes on one key");
                }
            }
            self.flushing[r].insert(id, calls);
            // One WAL flush; in the fault window a slow disk's, long enough for the writes
            // behind it to gather (and for leases to run down while they wait).
            let flush = if self.in_fault_window() && self.rng.f64() < SLOW_COMMIT_SHARE {
                self.coverage.hit("fault: a slow commit");
                self.rng.u64(10 * MS..=SLOW_COMMIT_MAX_MS * MS)
            } else {
                self.rng.u64(MS / 2..=5 * MS)
            };
            self.q.after(flush, Event::Flush(r, id));
        }
    }

    /// Replica `r`'s batch `id` commits: every write is answered from its own result, and
    /// the writes that arrived meanwhile go next.
    pub(super) fn flush(&mut self, r: usize, id: u64) {
        // Gone: the replica crashed with it in flight, and it never committed.
        let Some(calls) = self.flushing[r].remove(&id) else {
            return;
        };
        let Some(answers) = self.service.handle_batch(self.q.now(), r, &calls) else {
            self.gathered[r].clear();
            self.flushing[r].clear();
            return;
        };
        let routed = self.gathered[r]
            .complete(id, answers, LockCall::answered_by)
            .unwrap_or_else(|m| panic!("{}", m.error()));
        for ((from, req, call), answer) in routed {
            self.answered(r, from, req, &call, Some(answer));
        }
        self.start_flush(r);
    }

    /// Replica `r`'s answer to request `req` from `from` (`None`: the replica is down, and the
    /// request vanishes): checked, parked when it may wait, or sent.
    pub(super) fn answered(
        &mut self,
        r: usize,
        from: Node,
        req: u64,
        call: &LockCall,
        answer: Option<LockAnswer>,
    ) {
        let now = self.q.now();
        let Some(answer) = answer else {
            self.log(&[from, Node::Replica(r)], || {
                format!("r{r} is down: #{req} vanishes")
            });
            return;
        };
        self.check_grant_of(&answer, call);
        if let (LockAnswer::Granted { key, token, .. }, LockCall::Acquire { .. }) = (&answer, call)
        {
            self.witness.made(key, *token, RequestId(req));
        }
        if let LockCall::Acquire { key, session, .. } = call {
            if self.cancelled.remove(&(from, req)) {
                // Its client went away while the call was in flight: nothing is answered,
                // and a grant it made is given back (after the call, as `Exposure` waits).
                self.coverage
                    .hit("an acquire cancelled with its store call in flight");
                self.abandon_request(key, *session, RequestId(req), false);
                return;
            }
            if answer == LockAnswer::NotLeader {
                // A store refusal, or a grant the clock guard withheld: what the store made
                // for the request is given back.
                self.abandon_request(key, *session, RequestId(req), false);
            }
        }
        // A refused acquire that may wait is parked on the replica, as `waiting::acquire_waiting`
        // parks it, and driven by the same plan.
        if let (
            LockAnswer::Held,
            LockCall::Acquire {
                key,
                session,
                lease_ms,
                wait_ms: Some(wait_ms),
                request,
                claim,
            },
        ) = (&answer, call)
        {
            self.parks += 1;
            let id = self.parks;
            self.parked.insert(
                id,
                Parked {
                    replica: r,
                    from,
                    req,
                    key: key.clone(),
                    session: *session,
                    lease_ms: *lease_ms,
                    plan: WaitPlan::new(now, *wait_ms),
                    last_called: now,
                    handed: None,
                    request: *request,
                    leaving: None,
                    set: None,
                    claim: *claim,
                },
            );
            return self.wait_call(id);
        }
        self.send(Node::Replica(r), from, req, Body::LockReply(answer));
    }

    /// A parked acquire asks the store again (its queue place renewed), then answers or naps as
    /// its plan says. At its deadline it leaves its place; its last try is a store call of its
    /// own ([`Event::LastTry`]), as in `waiting::acquire_waiting`.
    pub(super) fn wait_call(&mut self, id: u64) {
        if self.answer_hand_over(id) {
            return;
        }
        let now = self.q.now();
        let Some(p) = self.parked.get_mut(&id) else {
            return;
        };
        p.last_called = now;
        let (key, session, request, plan) = (p.key.clone(), p.session, p.request, p.plan);
        let spec = AcquireSpec {
            queue_ms: plan.queue_ms(now),
            request,
            // The replica gives every grant its default lock-delay (the SDK names none).
            ..AcquireSpec::lease(p.lease_ms)
        }
        .claiming(p.claim);
        self.place_of.insert((key.clone(), session), request);
        let answer = match self.parked_call(id, spec) {
            None => return,
            Some(Err(refusal)) => refusal,
            Some(Ok(outcome)) => match plan.after(now, &outcome) {
                WaitStep::Nap(nap) => {
                    let nap = u64::try_from(nap.as_nanos()).unwrap_or(u64::MAX);
                    self.q.after(nap.max(1), Event::WaitRetry(id));
                    return;
                }
                WaitStep::Answer {
                    waited_ms,
                    leave: true,
                } => {
                    self.coverage
                        .hit("a waiting acquire gave up at its deadline");
                    self.service.leave_queue(now, &key, session);
                    if let Some(p) = self.parked.get_mut(&id) {
                        p.leaving = Some((outcome, waited_ms));
                    }
                    let call = self.store_call_nanos();
                    self.q.after(call, Event::LastTry(id));
                    return;
                }
                WaitStep::Answer {
                    waited_ms,
                    leave: false,
                } => {
                    self.coverage.hit("a parked acquire granted");
                    self.service.answer_acquire(now, &key, &outcome, waited_ms)
                }
            },
        };
        self.answer_parked(id, answer);
    }

    /// How long a replica's next store call takes to start: a round trip, or in the fault
    /// window sometimes a slow one, long enough for a release, a hand-over or a cancel to
    /// come between a leave and the last try.
    pub(super) fn store_call_nanos(&mut self) -> Nanos {
        if self.in_fault_window() && self.rng.f64() < SLOW_COMMIT_SHARE {
            self.rng.u64(10 * MS..=SLOW_COMMIT_MAX_MS * MS)
        } else {
            self.rng.u64(MS / 2..=5 * MS)
        }
    }

    /// A parked acquire's last try, after its leave: a grant, or the refusal that ended the
    /// wait.
    pub(super) fn last_try(&mut self, id: u64) {
        let now = self.q.now();
        let Some(p) = self.parked.get(&id) else {
            return;
        };
        let Some((outcome, waited_ms)) = p.leaving.clone() else {
            return;
        };
        let (key, plan) = (p.key.clone(), p.plan);
        let spec = AcquireSpec {
            request: p.request,
            ..AcquireSpec::lease(p.lease_ms)
        }
        .claiming(p.claim);
        self.coverage
            .hit("a waiting acquire's last try after its leave");
        let answer = match self.parked_call(id, spec) {
            None => return,
            Some(Err(refusal)) => refusal,
            Some(Ok(last @ AcquireOutcome::Granted { .. })) => {
                self.coverage
                    .hit("a waiting acquire granted by its last try");
                let waited_ms = plan.granted_by_call_at(now);
                self.service.answer_acquire(now, &key, &last, waited_ms)
            }
            Some(Ok(AcquireOutcome::Refused(_))) => {
                self.service.answer_acquire(now, &key, &outcome, waited_ms)
            }
        };
        self.answer_parked(id, answer);
    }

    /// Parked request `id`'s store call as `spec`: `None` when its replica is down (the
    /// request vanishes); a store refusal or a grant the clock guard withheld ends it exposed,
    /// abandoned (its place kept for the client's retry).
    fn parked_call(
        &mut self,
        id: u64,
        spec: AcquireSpec,
    ) -> Option<Result<AcquireOutcome, LockAnswer>> {
        let now = self.q.now();
        let p = self.parked.get(&id)?;
        let (r, key, session) = (p.replica, p.key.clone(), p.session);
        let Some(result) = self.service.acquire_queued(now, r, &key, session, spec) else {
            self.parked.remove(&id);
            return None;
        };
        self.shared_key_called(r, &key, spec.claim, &result, true);
        if result.is_err() && self.service.reached_store {
            self.withheld_regrant(&key, session, spec.request);
        }
        if result.is_err() {
            self.abandon_request(&key, session, spec.request, false);
        }
        Some(result)
    }

    /// `request`'s acquire of `key` reached the store and its grant was withheld by the clock
    /// guard: a grant of the key its session held, made for another request (a hand-over to
    /// its place, say), was made again by the call, and is no single request's (the store's
    /// re-grant to another request records none), as for a re-grant answered.
    fn withheld_regrant(&mut self, key: &LockKey, session: SessionId, request: RequestId) {
        for (k, s, token) in self.service.live_grants(self.q.now()) {
            if k == *key && s == session && self.witness.made_for(&k, token).is_some() {
                self.witness.made(&k, token, request);
            }
        }
    }

    /// Answers parked request `id` with `answer` (a grant checked first, each of a set's),
    /// and unparks it.
    pub(super) fn answer_parked(&mut self, id: u64, answer: LockAnswer) {
        let Some(p) = self.parked.remove(&id) else {
            return;
        };
        if let LockAnswer::Granted { token, scope, .. } = &answer {
            if is_election(&p.key) {
                self.coverage
                    .hit("a candidate elected after waiting in line");
            }
            self.check_grant(&p.key, *token, p.session, *scope);
            self.witness.made(&p.key, *token, p.request);
        }
        if let LockAnswer::SetGranted { members, .. } = &answer {
            for m in members {
                self.check_grant(&m.key, m.token, p.session, GrantScope::Exclusive);
                self.witness.made(&m.key, m.token, p.request);
            }
        }
        let (r, from, req) = (p.replica, p.from, p.req);
        self.log(&[from, Node::Replica(r)], || {
            format!("r{r} answers parked #{req}: {answer:?}")
        });
        self.send(Node::Replica(r), from, req, Body::LockReply(answer));
    }

    /// A grant handed over since the last call answers without another (as
    /// `waiting::acquire_waiting` answers it, with the plan's credit for the wait); whether
    /// the request was answered. A grant that may predate the request is asked again.
    fn answer_hand_over(&mut self, id: u64) -> bool {
        let now = self.q.now();
        let Some(p) = self.parked.get_mut(&id) else {
            return false;
        };
        let Some((grant, place_age_ms, expires)) = p.handed.take() else {
            return false;
        };
        let (r, from, req, last_called, plan) = (p.replica, p.from, p.req, p.last_called, p.plan);
        let (key, session, request) = (p.key.clone(), p.session, p.request);
        let answer = match self.service.admit_hand_over(now, r, &grant) {
            Ok(ran_at_most) => plan
                .handed_over(last_called, place_age_ms, now, ran_at_most)
                .map(|waited_ms| {
                    self.coverage
                        .hit("a parked acquire answered by a hand-over");
                    self.service.answer_handed(&grant, expires, waited_ms)
                }),
            Err(withheld) => {
                self.coverage.hit("a hand-over withheld by the clock guard");
                self.abandon_request(&key, session, request, false);
                Some(withheld)
            }
        };
        let Some(answer) = answer else {
            // A grant that may predate the request: the next call answers afresh.
            self.coverage
                .hit("a hand-over older than its request asked again");
            return false;
        };
        self.parked.remove(&id);
        self.log(&[from, Node::Replica(r)], || {
            format!("r{r} answers parked #{req} with its hand-over: {answer:?}")
        });
        self.send(Node::Replica(r), from, req, Body::LockReply(answer));
        true
    }

    /// Client `from` gave up on its request `req` to replica `r` (its connection closed): a
    /// parked request ends and is abandoned (a set's on every key); one whose store call is
    /// in flight is abandoned when the call answers; an answered one is gone already.
    fn cancel(&mut self, r: usize, from: Node, req: u64) {
        if !self.service.up[r] {
            return;
        }
        let parked = self
            .parked
            .iter()
            .find(|(_, p)| p.replica == r && p.from == from && p.req == req)
            .map(|(id, _)| *id);
        let Some(id) = parked else {
            self.cancelled.insert((from, req));
            return;
        };
        let in_flight = self.parked.get_mut(&id).and_then(|p| p.set.as_mut());
        if let Some(set) = in_flight.filter(|set| !set.tried) {
            // A set's first store call is in flight: abandoned when it answers.
            set.cancelled = true;
            return;
        }
        let Some(p) = self.parked.remove(&id) else {
            return;
        };
        self.coverage.hit(if p.set.is_some() {
            "a parked key set cancelled by its client"
        } else {
            "a parked acquire cancelled by its client"
        });
        self.log(&[from, Node::Replica(r)], || {
            format!("r{r}: parked #{req} cancelled by its client")
        });
        for key in p.keys() {
            self.abandon_request(key, p.session, p.request, p.leaving.is_none());
        }
    }

    /// `request` ended at a replica without telling its client of a grant: the store gives
    /// back what it made for it (`LockStore::abandon`, as `waiting::Exposure` does), and the
    /// orphan check holds it to that. A store that takes no writes now cannot: the grant is
    /// then the client's to settle, or its lease's.
    pub(super) fn abandon_request(
        &mut self,
        key: &LockKey,
        session: SessionId,
        request: RequestId,
        leave: bool,
    ) {
        if request == RequestId::NONE || self.service.not_leader {
            return;
        }
        let now = self.q.now();
        self.witness.abandon(request, now);
        // A grant no answer carried (the clock guard withheld it) was made for this request.
        for (k, s, token) in self.service.live_grants(now) {
            if k == *key && s == session {
                self.witness.made_unanswered(k, token, request);
            }
        }
        if self.cfg.bugs.keep_abandoned {
            return;
        }
        let released = self.service.abandon(now, key, session, request, leave);
        self.log(&[], || {
            format!(
                "request #{} of {} on {key} abandoned (leave {leave}): grant released {released}",
                request.0,
                session.tag()
            )
        });
        if released {
            self.coverage.hit("an abandoned request's grant given back");
            if SharedKey::of(key).is_some() {
                self.coverage
                    .hit("an abandoned request's pool or doc grant given back");
            }
        }
    }

    /// The grant an acquire was answered, checked (tokens unique and rising per key).
    fn check_grant_of(&mut self, answer: &LockAnswer, call: &LockCall) {
        if let (
            LockAnswer::Granted {
                key,
                token,
                session,
                scope,
                ..
            },
            LockCall::Acquire { .. },
        ) = (answer, call)
        {
            self.check_grant(key, *token, *session, *scope);
        }
    }

    /// Delivers the store's wake-ups to the parked requests they name, on every replica; the
    /// nemesis loses some (the recheck timer then bounds the cost) and delays others.
    pub(super) fn deliver_wakes(&mut self) {
        for wake in self.service.take_wakes() {
            if let Wake::HandedOver { grant, .. } = &wake {
                // Made now, in the store: a grant like any other for the token checks, made
                // for the request that last touched the place.
                self.coverage
                    .hit("a freed key handed over to its head waiter");
                let now = self.q.now();
                let place = (grant.lock_key.clone(), grant.session_id);
                let request = self.place_of.get(&place).copied();
                self.witness.made(
                    &grant.lock_key,
                    grant.fencing_token,
                    request.unwrap_or_default(),
                );
                self.service.grants.push((
                    now,
                    grant.lock_key.clone(),
                    grant.fencing_token,
                    grant.session_id,
                ));
                let (key, token) = (&grant.lock_key, grant.fencing_token);
                self.check_grant(key, token, grant.session_id, grant.scope);
            }
            let woken: Vec<u64> = self
                .parked
                .iter()
                .filter(|(_, p)| p.wakeable())
                .filter(|(_, p)| match &wake {
                    // A set is parked on every key of its set (`set_waiting`).
                    Wake::Head { key, session } => p.keys().contains(key) && p.session == *session,
                    Wake::HandedOver { grant, .. } => {
                        p.key == grant.lock_key && p.session == grant.session_id
                    }
                    Wake::Everyone => true,
                })
                .map(|(id, _)| *id)
                .collect();
            for id in woken {
                if self.in_fault_window() && self.rng.f64() < self.cfg.wake_loss {
                    self.coverage.hit("fault: a wake-up lost");
                    continue;
                }
                if matches!(wake, Wake::Head { .. }) && self.is_set(id) {
                    self.coverage.hit("a parked key set woken by its freed key");
                }
                if matches!(wake, Wake::Head { .. }) && self.is_share(id) {
                    self.coverage.hit("a parked share woken by its key");
                }
                let late = if self.in_fault_window() && self.rng.f64() < self.cfg.wake_loss {
                    self.coverage.hit("fault: a wake-up late");
                    self.rng.u64(MS..=200 * MS)
                } else {
                    1
                };
                if let Wake::HandedOver {
                    grant,
                    place_age_ms,
                } = &wake
                {
                    let expires = self.service.true_expiry(grant);
                    if late > 1 {
                        // The notice itself is late, by up to most of a lease (a listener
                        // connection that stalls): the request may call the store again, end,
                        // or be followed by another of its session before it arrives.
                        self.coverage.hit("fault: a hand-over notice late");
                        let late = self.rng.u64(MS..=HAND_OVER_LATE_MAX_MS * MS);
                        let notice = Event::HandOverArrives(grant.clone(), *place_age_ms, expires);
                        self.q.after(late, notice);
                        continue;
                    }
                    if let Some(p) = self.parked.get_mut(&id) {
                        p.handed = Some((grant.clone(), *place_age_ms, expires));
                    }
                }
                self.q.after(late, Event::WaitRetry(id));
            }
        }
    }

    /// A late hand-over notice reaches the replicas: the request of its session parked for
    /// its key now, if any, is handed it and woken (as `Waiters::wake` finds the slot by key
    /// and session, whichever request holds it).
    pub(super) fn hand_over_arrives(
        &mut self,
        grant: LockGrant,
        place_age_ms: u64,
        expires: Nanos,
    ) {
        let found = self.parked.iter_mut().find(|(_, p)| {
            p.key == grant.lock_key && p.session == grant.session_id && p.wakeable()
        });
        let Some((id, p)) = found else {
            self.coverage
                .hit("a late hand-over notice found its request gone");
            return;
        };
        let id = *id;
        p.handed = Some((grant, place_age_ms, expires));
        self.q.after(1, Event::WaitRetry(id));
    }

    pub(super) fn at_bank(&mut self, from: Node, req: u64, body: Body) {
        let Body::Write {
            payout,
            write,
            token,
            grant,
            paused,
        } = body
        else {
            return self.register_write(from, req, body);
        };
        let now = self.q.now();
        let rail_before = self.bank.rail.len();
        let fence_before = self.bank.payouts[payout].fence;
        // The checker's own witness: ambiguous once, ambiguous for good.
        let was_ambiguous = self.witness.was_ambiguous(payout);
        let answer = self.bank.write(now, payout, write, token, &grant);
        self.log(&[from, Node::Bank], || {
            format!("bank {write:?} payout {payout} token {token} -> {answer:?}")
        });
        if answer == Answer::FencedOut {
            self.coverage.hit("a stale write fenced");
            // Judged by the write, not by the writer's job now (a zombie's session is most
            // often lost, and its job with it, by the time its write arrives).
            if paused {
                self.coverage
                    .hit("a zombie's write fenced after a pause between guard and write");
            }
        }
        if matches!(answer, Answer::Ok(_)) {
            // The checker's own witness, not the model's fence: a write accepted with a token
            // below one the resource already accepted is a superseded holder's, whatever
            // stops it later (one submission per payout is a second line, not the first).
            if let Some(highest) = self.witness.accepted(payout, token) {
                self.violate(
                    "I2 no superseded write accepted",
                    &[from, Node::Bank],
                    format!(
                        "payout {payout}: {write:?} with token {token} accepted after token {highest}"
                    ),
                );
            }
        }
        let ambiguous = self.bank.payouts[payout].state == PayoutState::RailAmbiguous;
        self.witness.ambiguous(payout, ambiguous);
        let fence_after = self.bank.payouts[payout].fence;
        if fence_after < fence_before {
            self.violate(
                "I2 fences only rise",
                &[from, Node::Bank],
                format!("payout {payout} fence {fence_before} -> {fence_after} by token {token}"),
            );
        }
        if self.bank.rail.len() > rail_before {
            // The narrower invariant first: a transfer after RAIL_AMBIGUOUS is also a second.
            if was_ambiguous {
                self.violate(
                    "I5 ambiguity is terminal",
                    &[from, Node::Bank],
                    format!("payout {payout} submitted after RAIL_AMBIGUOUS"),
                );
            }
            let seen = self.bank.rail.iter().filter(|t| t.payout == payout).count();
            if seen > 1 {
                self.violate(
                    "I1 at most once at the rail",
                    &[from, Node::Bank],
                    format!("payout {payout} reached the rail {seen} times"),
                );
            }
        }
        self.send(Node::Bank, from, req, Body::WriteReply(answer));
    }
}
