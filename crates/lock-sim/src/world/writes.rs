//! A client's fenced writes to the bank: the think time before each (where a pause makes a
//! zombie), the guard the executor runs first, the write with its token and proof, and what
//! its answer does to the job.

use super::links::Node;
use super::{Body, Event, Pending, Phase, World};
use crate::bank::{Answer, Write};
use crate::sched::{MS, Nanos};
use lock_api::{GrantId, LossReason};
use payment_api::PayoutState;
use std::time::Duration;

impl World {
    /// The scheduling point between a guard (or the grant) and the write it allows: the
    /// executor's think time, in which the nemesis may pause the process, up to 3 × TTL.
    pub(super) fn write_after_think(&mut self, c: usize, write: Write) {
        let Some(id) = self.clients[c].job.as_ref().map(|j| j.id) else {
            return;
        };
        let think = self.rng.u64(0..=2 * MS);
        if let Some(len) = self.pause_before(c, think, || format!("{write:?}")) {
            if let Some(job) = &mut self.clients[c].job {
                job.paused_before_write = true;
            }
            self.coverage
                .hit("fault: pause between a guard and its write");
            if len > self.cfg.lease_ms * MS {
                self.coverage
                    .hit("fault: a pause between guard and write outlived the lease");
            }
        }
        self.q.after(think, Event::Write(c, id, write));
    }

    /// At a scheduling point `think` from now, before the action `what` names: during the
    /// faults, with the seed's probability, the nemesis pauses the worker there for up to
    /// 3 × TTL. The pause's length, if it did.
    pub(super) fn pause_before(
        &mut self,
        c: usize,
        think: Nanos,
        what: impl FnOnce() -> String,
    ) -> Option<Nanos> {
        if !(self.in_fault_window() && self.rng.f64() < self.cfg.guard_pause) {
            return None;
        }
        let now = self.q.now();
        let len = self.rng.u64(MS..=3 * self.cfg.ttl_ms * MS);
        self.clients[c].pauses.push((now, now + think + len));
        self.log(&[Node::Client(c)], || {
            format!(
                "nemesis pauses c{c} for {:.3} ms before its {}",
                len as f64 / MS as f64,
                what()
            )
        });
        Some(len)
    }

    /// Sends the job's `write` with its token.
    pub(super) fn send_write(&mut self, c: usize, write: Write) {
        let Some(job) = &self.clients[c].job else {
            return;
        };
        let Some(token) = job.token else { return };
        let Some(session) = &self.clients[c].session else {
            return;
        };
        // The proof the lock-server signed names this grant: its session, key and token.
        let grant = GrantId::derive(session.id, &job.key, token).as_text();
        let Some(payout) = job.payout else { return };
        let paused = job.paused_before_write;
        let token = token.as_i64();
        self.request(
            c,
            Node::Bank,
            Pending::Write(write),
            Body::Write {
                payout,
                write,
                token,
                grant,
                paused,
            },
        );
    }

    /// The executor's guard before a write: the SDK core's `remaining` at the client's now,
    /// for every grant the job holds (a set's members each, as `check_set_held` guards
    /// them): the least left, or `None` on the first loss.
    pub(super) fn guard(&mut self, c: usize) -> Option<Duration> {
        let now_local = self.now_local(c);
        let client = &mut self.clients[c];
        let (Some(session), Some(job)) = (&mut client.session, &client.job) else {
            return None;
        };
        job.token?;
        let mut least: Option<Duration> = None;
        for (key, token) in &job.held {
            match session.core.remaining(key, *token, now_local) {
                Ok(left) => least = Some(least.map_or(left, |l| l.min(left))),
                Err(lost) => {
                    if *key != job.key {
                        self.coverage
                            .hit("a guard stopped a write: its set's other member lost");
                    }
                    self.coverage.hit(match lost.reason {
                        LossReason::DeadlinePassed => "a guard stopped a write: deadline passed",
                        LossReason::RenewRefused => "a guard stopped a write: renew refused",
                        _ => "a guard stopped a write: session lost",
                    });
                    return None;
                }
            }
        }
        least
    }

    pub(super) fn write_reply(&mut self, c: usize, pending: Pending, answer: Answer) {
        let Pending::Write(write) = pending else {
            return;
        };
        if self.clients[c].job.is_none() {
            return;
        }
        match (write, answer) {
            (Write::Claim, Answer::Ok(state)) => {
                let Some(left) = self.guard(c) else {
                    return self.end_job(c);
                };
                if state == PayoutState::Submitted {
                    if self.cfg.bugs.skip_post {
                        return self.end_job(c);
                    }
                    self.set_phase(c, Phase::Posting);
                    return self.write_after_think(c, Write::Post);
                }
                let needed = (self.cfg.hop_ms as f64 * (1.0 + self.cfg.margin())) as u64 * MS;
                if (left.as_nanos() as u64) < needed {
                    self.coverage.hit("a lease-short skip");
                    return self.end_job(c);
                }
                self.set_phase(c, Phase::Submitting);
                self.write_after_think(c, Write::Submit);
            }
            (Write::Submit, Answer::Ok(_) | Answer::AlreadySubmitted) => {
                if self.guard(c).is_none() || self.cfg.bugs.skip_post {
                    return self.end_job(c);
                }
                self.set_phase(c, Phase::Posting);
                self.write_after_think(c, Write::Post);
            }
            (Write::Post, Answer::Ok(_)) => {
                self.coverage.hit("a payout posted");
                self.end_job(c);
            }
            _ => self.end_job(c),
        }
    }
}
