//! The clients: each the SDK's `SessionCore` and `AcquireLoop` driven through the executor's
//! protocol (acquire → claim → guard → submit → guard → post → release), with a scheduling
//! point between every guard and its write. It sends what the core plans and hands back what
//! came of it; every decision the SDK makes is the core's. A job that takes a key set
//! registers and releases its members as `set_jobs.rs` says; a job that holds a share of a
//! key (a permit, a reader's or a writer's hold) uses it as `share_jobs.rs` says.

use std::collections::BTreeMap;
use std::time::Duration;

use lock_api::{
    Claim, ErrorBody, ErrorCode, FencingToken, GrantScope, LockError, LockKey, LossReason,
    RetryVerdict, SessionId,
};
use lock_core::{
    AcquireLoop, AcquirePolicy, Attempt, Next, SessionCore, TickGrid, Unhold, acquire,
    heartbeat_period,
};
use lock_store::RequestId;

use super::links::Node;
use super::{Body, Event, Job, Pending, Phase, Session, World, account_key, key_of};
use crate::bank::Write;
use crate::sched::{MS, Nanos};
use crate::service::{LockAnswer, LockCall};

impl World {
    pub(super) fn now_local(&self, c: usize) -> u64 {
        self.clients[c].local(self.q.now())
    }

    pub(super) fn step(&mut self, c: usize) {
        let client = &self.clients[c];
        if client.session.is_none() {
            if !client.opening {
                self.clients[c].opening = true;
                let call = LockCall::Open {
                    owner: format!("c{c}"),
                    ttl_ms: self.cfg.ttl_ms,
                };
                let send_local = self.now_local(c);
                self.lock_request(c, Pending::Open { send_local }, call);
            }
            return;
        }
        if client.job.is_some() {
            return;
        }
        let claimable = self.bank.claimable();
        if claimable.is_empty() {
            self.q.after(100 * MS, Event::Step(c));
            return;
        }
        // Some jobs hold a share of a key instead (ADR 0007).
        let job = self.pick_share_job();
        let (payout, key, set, claim, uses_left) = match job.or_else(|| self.pick_election_job()) {
            Some((key, claim, uses)) => (None, key, None, claim, uses),
            None => {
                let payout = claimable[self.rng.usize(0..claimable.len())];
                // Some jobs take the payout's key together with an account's, as one key set.
                let set =
                    (self.cfg.set_share > 0.0 && self.rng.f64() < self.cfg.set_share).then(|| {
                        let account = account_key(self.rng.usize(0..self.cfg.accounts));
                        lock_api::key_set(vec![key_of(payout), account])
                            .unwrap_or_else(|e| panic!("{e}"))
                    });
                (Some(payout), key_of(payout), set, Claim::Exclusive, 0)
            }
        };
        let now_local = self.now_local(c);
        let request_timeout = Duration::from_millis(self.cfg.request_timeout_ms);
        let client = &mut self.clients[c];
        client.jobs += 1;
        client.job = Some(Job {
            id: client.jobs,
            payout,
            key,
            set,
            claim,
            uses_left,
            token: None,
            held: Vec::new(),
            phase: Phase::Acquiring,
            // The executor's policy, on the SDK's own loop.
            acquiring: AcquireLoop::new(&AcquirePolicy::DEFAULT, request_timeout, now_local),
            paused_before_write: false,
        });
        self.send_acquire(c);
    }

    pub(super) fn job_is(&self, c: usize, id: u64) -> bool {
        self.clients[c].job.as_ref().is_some_and(|j| j.id == id)
    }

    /// The job's next acquire attempt, as the SDK's loop plans it.
    pub(super) fn send_acquire(&mut self, c: usize) {
        let now_local = self.now_local(c);
        let lease_ms = self.cfg.lease_ms;
        let client = &mut self.clients[c];
        let (Some(session), Some(job)) = (&client.session, &mut client.job) else {
            return;
        };
        let attempt = job.acquiring.attempt(now_local);
        let call = match &job.set {
            Some(keys) => LockCall::AcquireSet {
                keys: keys.clone(),
                session: session.id,
                lease_ms,
                wait_ms: attempt.wait_ms(),
                request: RequestId::NONE,
            },
            None => LockCall::Acquire {
                key: job.key.clone(),
                session: session.id,
                lease_ms,
                wait_ms: attempt.wait_ms(),
                request: RequestId::NONE,
                claim: job.claim,
            },
        };
        let replica = client.endpoint % self.cfg.replicas;
        let pending = Pending::Acquire(job.id, attempt, replica);
        // A new acquire may be granted the same token again (the store's same-session
        // re-grant): from here the SDK may rightly hold it anew.
        for key in job.keys() {
            self.witness.asks_again(c, key);
        }
        self.lock_request(c, pending, call);
    }

    /// An acquire attempt failed with `verdict`: the SDK's loop says what follows.
    pub(super) fn acquire_failed(&mut self, c: usize, verdict: RetryVerdict) {
        let now_local = self.now_local(c);
        let rate = self.clients[c].rate;
        let Some(job) = &mut self.clients[c].job else {
            return;
        };
        let after = job.acquiring.failed(now_local, verdict, &mut self.rng);
        let id = job.id;
        let unanswered = job
            .acquiring
            .ended_unanswered()
            .then(|| (job.keys().to_vec(), job.claim));
        if after.rotate {
            self.rotate(c);
        }
        match after.next {
            Next::Retry(sleep) => {
                let wait = (sleep.as_nanos() as f64 / rate) as Nanos;
                self.q.after(wait.max(1), Event::Retry(c, id));
            }
            Next::Contended => {
                self.coverage.hit("an acquire gave up contended");
                self.clients[c].job = None;
                let think = self.rng.u64(MS..10 * MS);
                self.schedule_step(c, think);
            }
            Next::Fail => {
                self.clients[c].job = None;
                self.schedule_step(c, 50 * MS);
                if let Some((keys, claim)) = unanswered {
                    self.send_settle(c, keys, claim);
                }
            }
        }
    }

    /// The acquire gave up on an attempt whose answer never came: one try, as the SDK's
    /// `acquire_claim` (with the same claim, or `acquire_set`, for a set's keys) settles it
    /// (C2 §2.4); a grant it is answered is released.
    fn send_settle(&mut self, c: usize, keys: Vec<LockKey>, claim: Claim) {
        let Some(session) = &self.clients[c].session else {
            return;
        };
        let (session, lease_ms) = (session.id, self.cfg.lease_ms);
        let call = match keys.as_slice() {
            [key] => LockCall::Acquire {
                key: key.clone(),
                session,
                lease_ms,
                wait_ms: None,
                request: RequestId::NONE,
                claim,
            },
            set => {
                self.coverage
                    .hit("a key set given up unanswered sent its settling try");
                LockCall::AcquireSet {
                    keys: set.to_vec(),
                    session,
                    lease_ms,
                    wait_ms: None,
                    request: RequestId::NONE,
                }
            }
        };
        self.coverage
            .hit("an acquire given up unanswered sent its settling try");
        self.lock_request(c, Pending::Settle(keys), call);
    }

    /// The settling try was answered `token`: released at once unless the session holds the
    /// key otherwise (the SDK's core decides).
    pub(super) fn settled(&mut self, c: usize, key: LockKey, token: FencingToken) {
        let Some(s) = &mut self.clients[c].session else {
            return;
        };
        if !s.core.settling(&key, token) {
            return;
        }
        self.coverage.hit("a settling try's grant released");
        let call = LockCall::Release {
            key: key.clone(),
            session: s.id,
            token,
        };
        self.lock_request(c, Pending::LooseRelease(key, token), call);
    }

    pub(super) fn schedule_step(&mut self, c: usize, after: Nanos) {
        self.q.after(after, Event::Step(c));
    }

    pub(super) fn timeout(&mut self, c: usize, req: u64) {
        let Some(pending) = self.clients[c].pending.remove(&req) else {
            return;
        };
        self.log(&[Node::Client(c)], || {
            format!("c{c} #{req} timed out ({pending:?})")
        });
        match pending {
            Pending::Open { .. } => {
                self.clients[c].opening = false;
                self.rotate(c);
                self.schedule_step(c, 50 * MS);
            }
            Pending::Heartbeat(_) | Pending::Renew(_) => {
                self.session_call_failed(c, &pending, None);
            }
            Pending::Acquire(job, _, replica) => {
                // Its connection closes: the replica learns the request is gone.
                self.coverage.hit("an acquire timed out and was cancelled");
                self.send(
                    Node::Client(c),
                    Node::Replica(replica),
                    req,
                    Body::Cancel(req),
                );
                // An attempt of a job the worker has left (its session was lost) is over.
                if self.job_is(c, job) {
                    self.acquire_failed(c, RetryVerdict::NextTick);
                }
            }
            // The release returned (timed out): the executor moves on, or the acquire loop
            // that sent it goes on.
            Pending::Release { then_retry, .. } => self.after_release(c, then_retry),
            Pending::Write(_) => self.end_job(c),
            Pending::Proclaim(job) => self.proclaim_answered(c, job, None),
            Pending::LeaderWrite(job) => self.leader_wrote(c, job, None),
            Pending::Settle(_) | Pending::LooseRelease(..) => {}
        }
        self.settle(c);
    }

    pub(super) fn at_client(&mut self, c: usize, from: Node, req: u64, body: Body) {
        let Some(pending) = self.clients[c].pending.remove(&req) else {
            self.log(&[Node::Client(c), from], || {
                format!("c{c} drops late or duplicate #{req}")
            });
            return;
        };
        self.log(&[Node::Client(c), from], || {
            format!("c{c} <- {from} #{req} {body:?}")
        });
        match body {
            Body::LockReply(answer) => self.lock_reply(c, pending, answer),
            Body::WriteReply(answer) => self.write_reply(c, pending, answer),
            Body::LeaderWritten(accepted) => {
                if let Pending::LeaderWrite(job) = pending {
                    self.leader_wrote(c, job, Some(accepted));
                }
            }
            _ => {}
        }
        self.settle(c);
    }

    /// The error code a refusal carries on the wire.
    pub(super) fn code_of(answer: &LockAnswer) -> Option<ErrorCode> {
        match answer {
            LockAnswer::NotLeader => Some(ErrorCode::NotLeader),
            LockAnswer::SessionUnknown => Some(ErrorCode::SessionUnknown),
            LockAnswer::SessionExpired => Some(ErrorCode::SessionExpired),
            LockAnswer::LockLost => Some(ErrorCode::LockLost),
            LockAnswer::Held => Some(ErrorCode::LockHeld),
            LockAnswer::KindConflict => Some(ErrorCode::LockKindConflict),
            _ => None,
        }
    }

    /// A lock-server's answer to client `c`'s `pending` call, handed to the SDK's core.
    pub(super) fn lock_reply(&mut self, c: usize, pending: Pending, answer: LockAnswer) {
        if let Pending::Proclaim(job) = pending {
            return self.proclaim_answered(c, job, Some(answer));
        }
        if let Some(code) = Self::code_of(&answer) {
            self.lock_refused(c, &pending, code);
            return;
        }
        if self.clients[c].rotated {
            self.clients[c].rotated = false;
            self.coverage.hit("a failover to the other replica");
        }
        match (answer, pending) {
            (
                LockAnswer::Opened {
                    session,
                    ttl_ms,
                    expires,
                },
                Pending::Open { send_local },
            ) => self.opened(c, session, ttl_ms, expires, send_local),
            (LockAnswer::Extended { ttl_ms, expires }, Pending::Heartbeat(sent)) => {
                self.heartbeat_answered(c, sent, ttl_ms, expires);
            }
            (answer @ LockAnswer::Granted { .. }, Pending::Renew(renewal)) => {
                self.renewed(c, &renewal, answer);
            }
            (
                LockAnswer::Granted {
                    key,
                    token,
                    lease_ms,
                    expires,
                    waited_ms,
                    scope,
                    ..
                },
                Pending::Acquire(job, attempt, _),
            ) => {
                let grant = (key, token, lease_ms, expires, waited_ms);
                self.acquired(c, job, attempt, grant, scope);
            }
            (
                LockAnswer::SetGranted {
                    members, waited_ms, ..
                },
                Pending::Acquire(job, attempt, _),
            ) => self.acquired_set(c, job, attempt, members, waited_ms),
            (
                answer @ (LockAnswer::Granted { .. } | LockAnswer::SetGranted { .. }),
                Pending::Settle(keys),
            ) => self.settle_answered(c, &keys, answer),
            (LockAnswer::Released, Pending::LooseRelease(key, token)) => {
                if let Some(s) = &mut self.clients[c].session {
                    s.core.release_answered(&key, token);
                }
            }
            (
                LockAnswer::Released,
                Pending::Release {
                    key,
                    token,
                    then_retry,
                },
            ) => {
                if let Some(s) = &mut self.clients[c].session {
                    s.core.release_answered(&key, token);
                }
                self.after_release(c, then_retry);
            }
            (answer, pending) => {
                self.log(&[Node::Client(c)], || {
                    format!("c{c}: unexpected {answer:?} for {pending:?}")
                });
                if matches!(pending, Pending::Acquire(..) | Pending::Release { .. }) {
                    self.clients[c].job = None;
                    self.schedule_step(c, MS);
                }
            }
        }
    }

    /// An error answer to client `c`'s `pending` call, as the SDK takes it.
    fn lock_refused(&mut self, c: usize, pending: &Pending, code: ErrorCode) {
        if code == ErrorCode::NotLeader {
            self.coverage.hit("a NOT_LEADER answer retried");
        }
        match &pending {
            Pending::Open { .. } => {
                self.clients[c].opening = false;
                self.rotate(c);
                self.schedule_step(c, 50 * MS);
            }
            Pending::Heartbeat(_) | Pending::Renew(_) => {
                self.session_call_failed(c, pending, Some(code));
            }
            Pending::Acquire(job, ..) if !self.job_is(c, *job) => {}
            Pending::Acquire(..) => {
                if let Some(reason) = acquire::session_loss(code) {
                    // The SDK answers the acquire with the loss; the executor replaces
                    // the session.
                    if let Some(s) = &mut self.clients[c].session {
                        s.core.lose_session(reason);
                    }
                    self.clients[c].job = None;
                } else {
                    if code == ErrorCode::LockHeld {
                        self.coverage.hit("an acquire found the lock held");
                    }
                    if code == ErrorCode::LockKindConflict {
                        self.coverage
                            .hit("an acquire refused: its session holds the key in the other mode");
                    }
                    // The SDK's reading of the code (contention backs off, NOT_LEADER moves
                    // on, a kind conflict is the caller's and ends the acquire).
                    let message = String::new();
                    let verdict = LockError::from_wire(409, ErrorBody { code, message }, None);
                    self.acquire_failed(c, verdict.retry());
                }
            }
            // The release failed: the lease expires on its own.
            Pending::Release { then_retry, .. } => self.after_release(c, *then_retry),
            Pending::Write(_) | Pending::Settle(_) | Pending::LooseRelease(..) => {}
            Pending::Proclaim(_) | Pending::LeaderWrite(_) => {}
        }
    }

    /// Client `c`'s session opened: the SDK's core for it, and its heartbeat grid.
    fn opened(
        &mut self,
        c: usize,
        session: SessionId,
        ttl_ms: u64,
        expires: Nanos,
        send_local: u64,
    ) {
        let now_local = self.now_local(c);
        let margin = self.cfg.margin();
        let core = SessionCore::new(margin, ttl_ms, send_local);
        let period = heartbeat_period(margin, ttl_ms);
        let client = &mut self.clients[c];
        client.opening = false;
        client.generation += 1;
        client.session = Some(Session {
            id: session,
            core,
            grid: TickGrid::new(now_local, period),
            ttl_ms,
            store_expiry: expires,
            grant_expiry: BTreeMap::new(),
            scopes: BTreeMap::new(),
        });
        self.check_session_deadline(c);
        self.schedule_tick(c);
        self.schedule_step(c, MS);
    }

    /// Client `c`'s acquire for job `job` was granted `(key, token, lease_ms, expires,
    /// waited_ms)` holding `scope` of its key: refused when it does not answer the job's
    /// claim (the SDK's `register`), else handed to the SDK's core, which takes it or refuses
    /// a stale re-grant.
    fn acquired(
        &mut self,
        c: usize,
        job: u64,
        attempt: Attempt,
        (key, token, lease_ms, expires, waited_ms): (LockKey, FencingToken, u64, Nanos, u64),
        scope: GrantScope,
    ) {
        let now_local = self.now_local(c);
        if !self.job_is(c, job) || !self.grant_answers_claim(c, &key, scope) {
            return;
        }
        let Some(s) = &mut self.clients[c].session else {
            return;
        };
        if s.core
            .granted(&key, token, lease_ms, attempt, now_local, waited_ms)
            .is_err()
        {
            // A re-grant of our own unanswered release's token: release it again and,
            // once that returns, the loop goes on as after contention (the SDK awaits
            // the release the same way).
            self.coverage.hit("a stale re-grant refused");
            let call = LockCall::Release {
                key: key.clone(),
                session: s.id,
                token,
            };
            let pending = Pending::Release {
                key,
                token,
                then_retry: Some(job),
            };
            self.lock_request(c, pending, call);
            return;
        }
        s.grant_expiry.insert((key.clone(), token), expires);
        if scope != GrantScope::Exclusive {
            s.scopes.insert((key.clone(), token), scope);
        }
        self.check_grant_deadlines(c);
        let Some(job) = &mut self.clients[c].job else {
            return;
        };
        job.held = vec![(key.clone(), token)];
        job.token = Some(token);
        job.phase = Phase::Claiming;
        if job.payout.is_none() {
            return self.share_granted(c, &key, scope);
        }
        self.write_after_think(c, Write::Claim);
    }

    /// A release returned (answered or not): the acquire loop that sent it goes on as after
    /// contention, or the executor releases the last job's next grant, or looks for its
    /// next payout.
    pub(super) fn after_release(&mut self, c: usize, then_retry: Option<u64>) {
        match then_retry {
            Some(job) if self.job_is(c, job) => self.acquire_failed(c, RetryVerdict::Backoff),
            Some(_) => {}
            None => self.release_next(c),
        }
    }

    pub(super) fn set_phase(&mut self, c: usize, phase: Phase) {
        if let Some(job) = &mut self.clients[c].job {
            job.phase = phase;
        }
    }

    /// Ends the job: releases its grants, one at a time (the next when the last returns), and
    /// then looks for the next payout.
    pub(super) fn end_job(&mut self, c: usize) {
        let Some(job) = self.clients[c].job.take() else {
            return;
        };
        self.clients[c].releases = job.held.into();
        self.release_next(c);
    }

    /// Releases the last job's next grant (a release sent on the last hold, awaited as the
    /// executor awaits it), or, none left, looks for the next payout.
    pub(super) fn release_next(&mut self, c: usize) {
        while let Some((key, token)) = self.clients[c].releases.pop_front() {
            let Some(session) = &mut self.clients[c].session else {
                break;
            };
            session.grant_expiry.remove(&(key.clone(), token));
            session.scopes.remove(&(key.clone(), token));
            if let Unhold::Last(_) = session.core.unhold(&key, token) {
                let call = LockCall::Release {
                    key: key.clone(),
                    session: session.id,
                    token,
                };
                let pending = Pending::Release {
                    key,
                    token,
                    then_retry: None,
                };
                self.lock_request(c, pending, call);
                return;
            }
        }
        self.clients[c].releases.clear();
        let think = self.rng.u64(MS..10 * MS);
        self.schedule_step(c, think);
    }

    /// Applies the deadlines and delivers losses; a lost session is dropped (its job
    /// abandoned with no write) and a new one opened.
    pub(super) fn settle(&mut self, c: usize) {
        let now_local = self.now_local(c);
        let Some(session) = &mut self.clients[c].session else {
            return;
        };
        session.core.expire(now_local);
        let losses = session.core.take_losses();
        let lost_session = session.core.lost();
        for loss in &losses.grants {
            let lost = &loss.lost;
            self.share_lost(c, lost);
            self.witness
                .lost(c, lost.lock_key.clone(), lost.fencing_token);
            self.coverage.hit(match loss.lost.reason {
                LossReason::DeadlinePassed => "a loss: deadline passed",
                LossReason::SessionExpired => "a loss: session expired",
                LossReason::SessionUnknown => "a loss: session unknown",
                LossReason::RenewRefused => "a loss: renew refused",
                // SessionClosed, NotHeld, Revoked, and any reason added later.
                _ => "a loss: other",
            });
        }
        if let Some(reason) = lost_session {
            self.log(&[Node::Client(c)], || {
                format!("c{c} session lost ({reason:?}): abandons its payout")
            });
            self.coverage.hit("a session lost and replaced");
            let client = &mut self.clients[c];
            client.session = None;
            client.job = None;
            client.releases.clear();
            self.witness.session_lost(c);
            self.schedule_step(c, 50 * MS);
        }
    }
}
