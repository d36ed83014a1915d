//! The lock service's replicas (each over lock-store's `MemoryStore` through its own
//! `ClockCheckedStore`, parking waiting acquires with lock-store's `WaitPlan`) and the bank (the
//! resource and the rail, with fence-kit's `check_fence`) as nodes on the network.

use super::*;

/// Share of commits in the fault window that hit a slow disk.
const SLOW_COMMIT_SHARE: f64 = 0.2;
/// The slowest commit, in ms.
const SLOW_COMMIT_MAX_MS: u64 = 200;

impl World {
    /// A lock-surface request reaches replica `r`: an open is answered at once; a write joins
    /// the replica's group commit (as lock-server's `Batched` store gathers it) and is
    /// answered when its batch commits.
    pub(super) fn at_replica(&mut self, r: usize, from: Node, req: u64, body: Body) {
        let Body::Lock(call) = body else { return };
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
            .complete(id, answers)
            .unwrap_or_else(|m| panic!("{}", m.error()));
        for ((from, req, call), answer) in routed {
            self.answered(r, from, req, &call, Some(answer));
        }
        self.start_flush(r);
    }

    /// Replica `r`'s answer to request `req` from `from` (`None`: the replica is down, and the
    /// request vanishes): checked, parked when it may wait, or sent.
    fn answered(
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
        if let LockAnswer::Granted {
            key,
            token,
            session,
            ..
        } = &answer
        {
            if matches!(call, LockCall::Acquire { .. }) {
                self.check_grant(key, *token, *session);
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
                },
            );
            return self.wait_call(id);
        }
        self.send(Node::Replica(r), from, req, Body::LockReply(answer));
    }

    /// A parked acquire asks the store again (its queue place renewed), then answers or naps as
    /// its plan says.
    pub(super) fn wait_call(&mut self, id: u64) {
        let now = self.q.now();
        let Some(p) = self.parked.get_mut(&id) else {
            return;
        };
        // A grant handed over since the last call answers without another (as
        // `waiting::acquire_waiting` answers it, with the plan's credit for the wait).
        if let Some((grant, place_age_ms, expires)) = p.handed.take() {
            let (r, from, req, last_called, plan) =
                (p.replica, p.from, p.req, p.last_called, p.plan);
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
                    Some(withheld)
                }
            };
            if let Some(answer) = answer {
                self.parked.remove(&id);
                self.log(&[from, Node::Replica(r)], || {
                    format!("r{r} answers parked #{req} with its hand-over: {answer:?}")
                });
                self.send(Node::Replica(r), from, req, Body::LockReply(answer));
                return;
            }
            // A grant that may predate the request: the call below answers afresh.
            self.coverage
                .hit("a hand-over older than its request asked again");
        }
        let Some(p) = self.parked.get_mut(&id) else {
            return;
        };
        p.last_called = now;
        let (r, from, req, key, session) = (p.replica, p.from, p.req, p.key.clone(), p.session);
        let spec = AcquireSpec {
            queue_ms: p.plan.queue_ms(now),
            // The replica gives every grant its default lock-delay (the SDK names none).
            ..AcquireSpec::lease(p.lease_ms)
        };
        let plan = p.plan;
        let answer = match self.service.acquire_queued(now, r, &key, session, spec) {
            // The replica crashed with the request parked: nothing answers.
            None => {
                self.parked.remove(&id);
                return;
            }
            Some(Err(refusal)) => refusal,
            Some(Ok(outcome)) => match plan.after(now, &outcome) {
                WaitStep::Nap(nap) => {
                    self.q.after(
                        u64::try_from(nap.as_nanos()).unwrap_or(u64::MAX).max(1),
                        Event::WaitRetry(id),
                    );
                    return;
                }
                WaitStep::Answer { waited_ms, leave } => {
                    if leave {
                        self.coverage
                            .hit("a waiting acquire gave up at its deadline");
                        self.service.leave_queue(now, &key, session);
                        // A hand-over may have raced the leave: one last try, without a place.
                        let try_spec = AcquireSpec {
                            queue_ms: 0,
                            ..spec
                        };
                        match self.service.acquire_queued(now, r, &key, session, try_spec) {
                            Some(Ok(last @ AcquireOutcome::Granted { .. })) => {
                                self.coverage
                                    .hit("a waiting acquire granted by its last try");
                                let waited_ms = plan.granted_by_call_at(now);
                                self.service.answer_acquire(now, &key, &last, waited_ms)
                            }
                            _ => self.service.answer_acquire(now, &key, &outcome, waited_ms),
                        }
                    } else {
                        self.coverage.hit("a parked acquire granted");
                        self.service.answer_acquire(now, &key, &outcome, waited_ms)
                    }
                }
            },
        };
        self.parked.remove(&id);
        if let LockAnswer::Granted { token, .. } = &answer {
            self.check_grant(&key, *token, session);
        }
        self.log(&[from, Node::Replica(r)], || {
            format!("r{r} answers parked #{req}: {answer:?}")
        });
        self.send(Node::Replica(r), from, req, Body::LockReply(answer));
    }

    /// Delivers the store's wake-ups to the parked requests they name, on every replica; the
    /// nemesis loses some (the recheck timer then bounds the cost) and delays others.
    pub(super) fn deliver_wakes(&mut self) {
        for wake in self.service.take_wakes() {
            if let Wake::HandedOver { grant, .. } = &wake {
                // Made now, in the store: a grant like any other for the token checks.
                self.coverage
                    .hit("a freed key handed over to its head waiter");
                let now = self.q.now();
                self.service.grants.push((
                    now,
                    grant.lock_key.clone(),
                    grant.fencing_token,
                    grant.session_id,
                ));
                self.check_grant(&grant.lock_key, grant.fencing_token, grant.session_id);
            }
            let woken: Vec<u64> = self
                .parked
                .iter()
                .filter(|(_, p)| match &wake {
                    Wake::Head { key, session } => p.key == *key && p.session == *session,
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
        let found = self
            .parked
            .iter_mut()
            .find(|(_, p)| p.key == grant.lock_key && p.session == grant.session_id);
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
        } = body
        else {
            return;
        };
        let now = self.q.now();
        let rail_before = self.bank.rail.len();
        let fence_before = self.bank.payouts[payout].fence;
        // The checker's own witness: ambiguous once, ambiguous for good.
        let was_ambiguous = self.ambiguous[payout];
        let answer = self.bank.write(now, payout, write, token, &grant);
        self.log(&[from, Node::Bank], || {
            format!("bank {write:?} payout {payout} token {token} -> {answer:?}")
        });
        if answer == Answer::FencedOut {
            self.coverage.hit("a stale write fenced");
            if let Node::Client(c) = from {
                if self.clients[c]
                    .job
                    .as_ref()
                    .is_some_and(|j| j.payout == payout && j.paused_before_write)
                {
                    self.coverage
                        .hit("a zombie's write fenced after a pause between guard and write");
                }
            }
        }
        if matches!(answer, Answer::Ok(_)) {
            // The checker's own witness, not the model's fence: a write accepted with a token
            // below one the resource already accepted is a superseded holder's, whatever
            // stops it later (one submission per payout is a second line, not the first).
            let highest = self.accepted_max[payout];
            if token < highest {
                self.violate(
                    "I2 no superseded write accepted",
                    &[from, Node::Bank],
                    format!(
                        "payout {payout}: {write:?} with token {token} accepted after token {highest}"
                    ),
                );
            }
            self.accepted_max[payout] = highest.max(token);
        }
        self.ambiguous[payout] |= self.bank.payouts[payout].state == PayoutState::RailAmbiguous;
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
