//! Jobs that hold a share of a key instead of settling a payout (ADR 0007): one of the pool
//! key's permits, or the doc key as a reader or as its writer. Each goes the SDK's way, as a
//! lock does: the acquire loop asks with the job's claim (`acquire_claim`), a grant whose
//! scope does not answer the claim is refused as the SDK's `register` refuses it
//! (`Claim::answered_by`), the core registers the rest (`SessionCore::granted`), renews them
//! on heartbeat ticks, guards them before each use and loses them as it loses a lock; the job
//! releases its grant at its end. A use writes nothing (the bank's payouts stay fenced by
//! their own locks): it is a scheduling point (think time, where the nemesis may pause the
//! worker, as before a write), some work, then the executor's guard.

use lock_api::{Claim, GrantScope, LockKey, LockLost, LossReason};

use super::elect_jobs::is_election;
use super::kinds::SharedKey;
use super::links::Node;
use super::{Event, World};
use crate::sched::MS;

/// Uses a share job makes before it releases, at most.
const USES_MAX: u32 = 4;
/// The longest work of one use, in ms: a share job holds for up to 400 ms, long enough to
/// be renewed.
const USE_WORK_MAX_MS: u64 = 100;

impl World {
    /// A client's next job, when it is a share job: its key, its claim and its uses; `None`
    /// for a payout's job (always in a run without share jobs, which draws nothing here, so
    /// that such a run is what it was before them).
    pub(super) fn pick_share_job(&mut self) -> Option<(LockKey, Claim, u32)> {
        if self.cfg.share_jobs <= 0.0 || self.rng.f64() >= self.cfg.share_jobs {
            return None;
        }
        let (key, claim) = if self.rng.bool() {
            let permits = self.cfg.permits;
            (SharedKey::Pool, Claim::Permit { permits })
        } else if self.rng.u32(0..3) < 2 {
            (SharedKey::Doc, Claim::Shared)
        } else {
            (SharedKey::Doc, Claim::Exclusive)
        };
        Some((key.key(), claim, self.rng.u32(1..=USES_MAX)))
    }

    /// Whether a grant of `key` holding `scope` answers client `c`'s job: its key, and a scope
    /// its claim asked for, as the SDK's `register` checks. One that does not is the SDK's
    /// protocol error: the job ends, and the grant is left to its lease (nobody believes it).
    pub(super) fn grant_answers_claim(
        &mut self,
        c: usize,
        key: &LockKey,
        scope: GrantScope,
    ) -> bool {
        let Some(job) = &self.clients[c].job else {
            return false;
        };
        if job.key == *key && job.claim.answered_by(scope) {
            return true;
        }
        let claim = job.claim;
        self.log(&[Node::Client(c)], || {
            format!("c{c}: a grant of {key} as {scope:?} does not answer {claim:?}")
        });
        self.coverage
            .hit("a grant refused: its scope does not answer the claim");
        self.clients[c].job = None;
        self.schedule_step(c, MS);
        false
    }

    /// Client `c`'s share job registered its grant of `key` holding `scope`: what it holds
    /// beside the other clients' beliefs is counted, and its first use begins. (A campaign's
    /// grant of the election's key is no share: it leads, as `elect_jobs.rs` says.)
    pub(super) fn share_granted(&mut self, c: usize, key: &LockKey, scope: GrantScope) {
        if is_election(key) {
            return self.elected(c);
        }
        let others: Vec<GrantScope> = self
            .beliefs(Some(key))
            .iter()
            .filter(|h| h.1 != c)
            .map(|h| h.2)
            .collect();
        match scope {
            GrantScope::Permit { .. } => {
                self.coverage.hit("a permit granted");
                if !others.is_empty() {
                    self.coverage.hit("two permits held at once");
                }
                if others.len() + 1 == self.cfg.permits as usize {
                    self.coverage.hit("every permit of the pool held at once");
                }
            }
            GrantScope::Shared => {
                self.coverage.hit("a reader granted");
                if others.contains(&GrantScope::Shared) {
                    self.coverage.hit("a reader granted beside a reader");
                }
            }
            GrantScope::Exclusive => self.coverage.hit("a writer granted"),
        }
        self.use_after_think(c);
    }

    /// The scheduling point before a share job's next use (the executor's think time, where
    /// the nemesis may pause the worker, as before a write), then the use's work: its end
    /// is an [`Event::Use`].
    fn use_after_think(&mut self, c: usize) {
        let Some(id) = self.clients[c].job.as_ref().map(|j| j.id) else {
            return;
        };
        let think = self.rng.u64(0..=2 * MS);
        if let Some(len) = self.pause_before(c, think, || "use of its share".to_owned()) {
            self.coverage
                .hit("fault: pause between a share's grant or guard and its use");
            if len > self.cfg.lease_ms * MS {
                self.coverage
                    .hit("fault: a pause before a share's use outlived the lease");
            }
        }
        let work = self.rng.u64(MS..=USE_WORK_MAX_MS * MS);
        self.q.after(think + work, Event::Use(c, id));
    }

    /// Client `c`'s share job ended a use: the executor's guard; a grant lost ends the job,
    /// else the next use follows, or, none left, the job releases.
    pub(super) fn use_done(&mut self, c: usize) {
        if !self.share_guard(c) {
            return self.end_job(c);
        }
        let Some(job) = &mut self.clients[c].job else {
            return;
        };
        job.uses_left = job.uses_left.saturating_sub(1);
        if job.uses_left == 0 {
            self.coverage
                .hit("a share job used its share and released it");
            return self.end_job(c);
        }
        self.use_after_think(c);
    }

    /// The executor's guard after a use: the SDK core's `remaining` at the client's now for
    /// the job's grant; whether it is still held.
    fn share_guard(&mut self, c: usize) -> bool {
        let now_local = self.now_local(c);
        let client = &mut self.clients[c];
        let (Some(session), Some(job)) = (&mut client.session, &client.job) else {
            return false;
        };
        for (key, token) in &job.held {
            if let Err(lost) = session.core.remaining(key, *token, now_local) {
                self.coverage.hit(match lost.reason {
                    LossReason::DeadlinePassed => "a guard stopped a share's use: deadline passed",
                    _ => "a guard stopped a share's use: lost otherwise",
                });
                return false;
            }
        }
        true
    }

    /// Client `c`'s SDK reported `lost`: counted by reason when it held a share.
    pub(super) fn share_lost(&mut self, c: usize, lost: &LockLost) {
        let Some(s) = &self.clients[c].session else {
            return;
        };
        if s.scope_of(&lost.lock_key, lost.fencing_token) == GrantScope::Exclusive {
            return;
        }
        self.coverage.hit(match lost.reason {
            LossReason::DeadlinePassed => "a share lost: deadline passed",
            LossReason::RenewRefused => "a share lost: renew refused",
            _ => "a share lost: otherwise",
        });
    }
}
