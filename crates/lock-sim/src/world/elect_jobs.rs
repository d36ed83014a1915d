//! Jobs that campaign in the election (C2 §2.4c) instead of settling a payout. A campaign is
//! the SDK's way to a lock: the acquire loop asks for the election's key exclusively, waiting
//! in its queue, and the core registers the grant; its token is the term. While the core's
//! deadline says it leads (the executor's guard, `SessionCore::remaining`), the leader takes
//! 1–4 turns, each a proclaim (L9, a value naming the client, the job and the turn) and a
//! write to the election's register in the bank fenced with the term; between its guard and
//! each step is a scheduling point where the nemesis may pause it, deposed unawares. Then it
//! resigns (releases the key, which goes to the next candidate in line). A refused proclaim, a
//! fenced write or a lost term ends the job, which releases what it holds.

use lock_api::{Claim, GrantId, LeaderValue, LockKey, LossReason};
use lock_core::acquire;

use super::kinds::Lead;
use super::links::Node;
use super::{Body, Event, Pending, World};
use crate::sched::MS;
use crate::service::{LockAnswer, LockCall};

/// The election's key.
const ELECTION: &str = "elect:0";
/// Turns a leader takes before it resigns, at most.
const TURNS_MAX: u32 = 4;

/// The election's key.
pub(super) fn election_key() -> LockKey {
    LockKey::parse(ELECTION).unwrap_or_else(|e| panic!("{e}"))
}

/// Whether `key` is the election's.
pub(super) fn is_election(key: &LockKey) -> bool {
    key.as_str() == ELECTION
}

impl World {
    /// A client's next job, when it campaigns: the election's key, claimed alone, and the
    /// turns it takes as leader; `None` otherwise (always in a run without election jobs,
    /// which draws nothing here, so that such a run is what it was before them).
    pub(super) fn pick_election_job(&mut self) -> Option<(LockKey, Claim, u32)> {
        if self.cfg.elect_jobs <= 0.0 || self.rng.f64() >= self.cfg.elect_jobs {
            return None;
        }
        let turns = self.rng.u32(1..=TURNS_MAX);
        Some((election_key(), Claim::Exclusive, turns))
    }

    /// Client `c`'s campaign registered its grant: it leads, its token the term.
    pub(super) fn elected(&mut self, c: usize) {
        let client = &self.clients[c];
        let (Some(session), Some(job)) = (&client.session, &client.job) else {
            return;
        };
        let Some(term) = job.token else { return };
        let session = session.id;
        self.coverage.hit("an election won");
        if self.elect.won(session, term) {
            self.coverage
                .hit("a leadership change: another session won");
        }
        self.log(&[Node::Client(c)], || {
            format!("c{c} leads the election, term {}", term.0)
        });
        self.lead_after_think(c, Lead::Proclaim);
    }

    /// The scheduling point between the leader's guard (or its grant) and its next step,
    /// where the nemesis may pause it.
    fn lead_after_think(&mut self, c: usize, step: Lead) {
        let Some(id) = self.clients[c].job.as_ref().map(|j| j.id) else {
            return;
        };
        let think = self.rng.u64(0..=2 * MS);
        if let Some(len) = self.pause_before(c, think, || format!("{step:?} as leader")) {
            if let Some(job) = &mut self.clients[c].job {
                job.paused_before_write = true;
            }
            self.coverage
                .hit("fault: a leader paused between its guard and its next step");
            if len > self.cfg.lease_ms * MS {
                self.coverage
                    .hit("fault: a leader's pause outlived its lease");
            }
        }
        self.q.after(think, Event::Lead(c, id, step));
    }

    /// Client `c`, leading, takes `step`: proclaims its turn's value through its replica, or
    /// writes to the register with its term and its grant's proof.
    pub(super) fn lead(&mut self, c: usize, step: Lead) {
        let client = &self.clients[c];
        let (Some(session), Some(job)) = (&client.session, &client.job) else {
            return;
        };
        let Some(token) = job.token else { return };
        let (session, key, id) = (session.id, job.key.clone(), job.id);
        match step {
            Lead::Proclaim => {
                let text = format!("c{c} job {id} turn {}", job.uses_left);
                let value = LeaderValue::parse(text).unwrap_or_else(|e| panic!("{e}"));
                let call = LockCall::Proclaim {
                    key,
                    session,
                    token,
                    value,
                };
                self.lock_request(c, Pending::Proclaim(id), call);
            }
            Lead::Write => {
                let grant = GrantId::derive(session, &key, token).as_text();
                let body = Body::LeaderWrite {
                    token: token.as_i64(),
                    grant,
                    paused: job.paused_before_write,
                };
                self.request(c, Node::Bank, Pending::LeaderWrite(id), body);
            }
        }
    }

    /// Client `c`'s proclaim for job `job` was answered `answer` (`None`: no answer in time):
    /// proclaimed, the leader guards and writes; refused or unanswered, the job ends.
    pub(super) fn proclaim_answered(&mut self, c: usize, job: u64, answer: Option<LockAnswer>) {
        if !self.job_is(c, job) {
            return;
        }
        match answer {
            Some(LockAnswer::Proclaimed) => {
                self.coverage.hit("a leader proclaimed its value");
                if self.leader_guard(c) {
                    return self.lead_after_think(c, Lead::Write);
                }
            }
            Some(
                refused @ (LockAnswer::LockLost
                | LockAnswer::SessionExpired
                | LockAnswer::SessionUnknown),
            ) => {
                self.coverage.hit("a deposed leader's proclaim refused");
                let code = Self::code_of(&refused);
                // The SDK's `classify`: a session's loss ends the session.
                if let (Some(reason), Some(s)) = (
                    code.and_then(acquire::session_loss),
                    &mut self.clients[c].session,
                ) {
                    s.core.lose_session(reason);
                }
            }
            _ => {}
        }
        self.end_job(c);
    }

    /// Client `c`'s write for job `job` to the register was accepted or fenced out (`None`:
    /// no answer in time): accepted, the leader's next turn, or, none left, it resigns.
    pub(super) fn leader_wrote(&mut self, c: usize, job: u64, accepted: Option<bool>) {
        if !self.job_is(c, job) {
            return;
        }
        if accepted == Some(true) {
            let Some(job) = &mut self.clients[c].job else {
                return;
            };
            job.uses_left = job.uses_left.saturating_sub(1);
            if job.uses_left == 0 {
                self.coverage.hit("a leader resigned");
            } else if self.leader_guard(c) {
                return self.lead_after_think(c, Lead::Proclaim);
            }
        }
        self.end_job(c);
    }

    /// The executor's guard for the leader: the SDK core's `remaining` at the client's now
    /// for its term; whether it still leads.
    fn leader_guard(&mut self, c: usize) -> bool {
        let now_local = self.now_local(c);
        let client = &mut self.clients[c];
        let (Some(session), Some(job)) = (&mut client.session, &client.job) else {
            return false;
        };
        let Some(token) = job.token else { return false };
        match session.core.remaining(&job.key, token, now_local) {
            Ok(_) => true,
            Err(lost) => {
                self.coverage.hit(match lost.reason {
                    LossReason::DeadlinePassed => "a leader's guard found its term over",
                    _ => "a leader's guard found its term lost otherwise",
                });
                false
            }
        }
    }
}
