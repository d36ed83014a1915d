//! A job that takes a key set (its payout's key and an account's, ADR 0007), as the SDK's
//! `LockClientSession::acquire_set` registers one: every member granted is handed to the
//! session's core (`SessionCore::granted`) with the attempt that asked, exactly as a single
//! acquire's grant is, so each member is an ordinary grant (its own deadline, renewal and
//! loss); the payout's token fences the writes, and the job releases every member at its end.

use lock_api::{FencingToken, LockKey};
use lock_core::{Attempt, Unhold};

use super::links::Node;
use super::{Pending, Phase, World};
use crate::bank::Write;
use crate::sched::MS;
use crate::service::{LockAnswer, LockCall, Member};

impl World {
    /// Client `c`'s set acquire for job `job` was granted `members` after the replica held it
    /// `waited_ms`: each registered in the core in the set's order (`register_set`). A
    /// member refused as the re-grant of an unanswered release's token is released again,
    /// as are the members registered before it, and the loop goes on as after contention.
    pub(super) fn acquired_set(
        &mut self,
        c: usize,
        job: u64,
        attempt: Attempt,
        members: Vec<Member>,
        waited_ms: u64,
    ) {
        let now_local = self.now_local(c);
        if !self.job_is(c, job) {
            return;
        }
        let asked = self.clients[c].job.as_ref().map(|j| j.keys().to_vec());
        if asked.is_none_or(|keys| !members.iter().map(|m| &m.key).eq(keys.iter())) {
            // The SDK's protocol error: the set answered is not the set asked for.
            self.log(&[Node::Client(c)], || {
                format!("c{c}: a set answered {members:?}, not its own")
            });
            self.clients[c].job = None;
            self.schedule_step(c, MS);
            return;
        }
        let Some(s) = &mut self.clients[c].session else {
            return;
        };
        let mut held: Vec<(LockKey, FencingToken)> = Vec::new();
        for m in &members {
            let registered = s
                .core
                .granted(&m.key, m.token, m.lease_ms, attempt, now_local, waited_ms);
            if registered.is_ok() {
                s.grant_expiry.insert((m.key.clone(), m.token), m.expires);
                held.push((m.key.clone(), m.token));
                continue;
            }
            self.coverage.hit("a stale re-grant refused");
            self.coverage
                .hit("a key set's member refused as a stale re-grant");
            return self.unwind_set(c, job, held, m);
        }
        self.check_grant_deadlines(c);
        let Some(job) = &mut self.clients[c].job else {
            return;
        };
        job.token = held
            .iter()
            .find(|(key, _)| *key == job.key)
            .map(|(_, token)| *token);
        job.held = held;
        job.phase = Phase::Claiming;
        self.write_after_think(c, Write::Claim);
    }

    /// The try that settles an acquire given up unanswered (of one key, or of a set's `keys`)
    /// was answered `answer`: each grant of those keys goes to the core's `settling`, as the
    /// SDK's `settle_set` hands each member (a single key's grant likewise).
    pub(super) fn settle_answered(&mut self, c: usize, keys: &[LockKey], answer: LockAnswer) {
        let grants = match answer {
            LockAnswer::Granted { key, token, .. } => vec![(key, token)],
            LockAnswer::SetGranted { members, .. } => {
                members.into_iter().map(|m| (m.key, m.token)).collect()
            }
            _ => Vec::new(),
        };
        for (key, token) in grants.into_iter().filter(|(key, _)| keys.contains(key)) {
            self.settled(c, key, token);
        }
    }

    /// A set's member `stale` was refused as a stale re-grant after `held` were registered:
    /// the stale one is released again, and once that returns the loop goes on (the SDK
    /// awaits the same release); the members registered are released too.
    fn unwind_set(
        &mut self,
        c: usize,
        job: u64,
        held: Vec<(LockKey, FencingToken)>,
        stale: &Member,
    ) {
        let Some(s) = &mut self.clients[c].session else {
            return;
        };
        let session = s.id;
        let mut releases = Vec::new();
        for (key, token) in held {
            s.grant_expiry.remove(&(key.clone(), token));
            if let Unhold::Last(_) = s.core.unhold(&key, token) {
                releases.push((key, token));
            }
        }
        self.check_grant_deadlines(c);
        let call = LockCall::Release {
            key: stale.key.clone(),
            session,
            token: stale.token,
        };
        let pending = Pending::Release {
            key: stale.key.clone(),
            token: stale.token,
            then_retry: Some(job),
        };
        self.lock_request(c, pending, call);
        for (key, token) in releases {
            let call = LockCall::Release {
                key: key.clone(),
                session,
                token,
            };
            self.lock_request(c, Pending::LooseRelease(key, token), call);
        }
    }
}
