//! A client's session upkeep: the heartbeat ticks the SDK's `TickGrid` schedules, each a
//! heartbeat and the renewals `SessionCore::begin_tick` plans, and what the core makes of
//! their answers. The store's expiries each answer tells are the conservative-expiry
//! checker's witness; an answer that lagged a later one (a delayed reply) never moves the
//! witness back, as the store's own expiry never moves back for it.

use lock_api::{ErrorCode, GrantScope};
use lock_core::{Renewal, Sent, heartbeat_period};

use super::{Event, Pending, World};
use crate::sched::Nanos;
use crate::service::{LockAnswer, LockCall};

impl World {
    pub(super) fn schedule_tick(&mut self, c: usize) {
        let client = &self.clients[c];
        let Some(session) = &client.session else {
            return;
        };
        let local_wait = session.grid.wait(client.local(self.q.now()));
        let true_wait = (local_wait.as_nanos() as f64 / client.rate) as Nanos;
        let generation = client.generation;
        self.q.after(true_wait.max(1), Event::Tick(c, generation));
    }

    pub(super) fn tick(&mut self, c: usize) {
        let now_local = self.now_local(c);
        let Some(session) = &mut self.clients[c].session else {
            return;
        };
        let period = {
            let s = &*session;
            let basis = s
                .core
                .shortest_lease_ms()
                .map_or(s.ttl_ms, |l| l.min(s.ttl_ms));
            heartbeat_period(self.cfg.margin(), basis)
        };
        let plan = session.core.begin_tick(now_local, period);
        session.grid.advance(now_local, period);
        let id = session.id;
        if let Some(sent) = plan.heartbeat {
            self.lock_request(c, Pending::Heartbeat(sent), LockCall::Heartbeat(id));
        }
        for renewal in plan.renew {
            let call = LockCall::Renew {
                key: renewal.key.clone(),
                session: id,
                token: renewal.token,
            };
            self.lock_request(c, Pending::Renew(renewal), call);
        }
        self.settle(c);
        self.schedule_tick(c);
    }

    /// What the session's core makes of a failed heartbeat or renew (`None`: no answer).
    pub(super) fn session_call_failed(
        &mut self,
        c: usize,
        pending: &Pending,
        code: Option<ErrorCode>,
    ) {
        let Some(s) = &mut self.clients[c].session else {
            return;
        };
        let rotate = match pending {
            Pending::Renew(renewal) => s.core.renew_failed(renewal, code, ""),
            _ => s.core.heartbeat_failed(code),
        };
        if rotate {
            self.rotate(c);
        }
    }

    /// Client `c`'s heartbeat sent at `sent` was answered: the TTL the store extended the
    /// session by, and its expiry (true time), handed to the SDK's core and the checkers.
    pub(super) fn heartbeat_answered(&mut self, c: usize, sent: Sent, ttl_ms: u64, expires: Nanos) {
        let Some(s) = &mut self.clients[c].session else {
            return;
        };
        s.core.heartbeat_ok(sent, ttl_ms);
        // An answer that lagged a later heartbeat's leaves the later expiry.
        s.store_expiry = s.store_expiry.max(expires);
        self.check_session_deadline(c);
        self.check_grant_deadlines(c);
    }

    /// Client `c`'s `renewal` was answered `answer` (a grant): handed to the SDK's core.
    pub(super) fn renewed(&mut self, c: usize, renewal: &Renewal, answer: LockAnswer) {
        let LockAnswer::Granted {
            key,
            token,
            lease_ms,
            expires,
            scope,
            ..
        } = answer
        else {
            return;
        };
        let Some(s) = &mut self.clients[c].session else {
            return;
        };
        if renewal.key != key || renewal.token != token {
            // Renew never changes the token: not our grant.
            let _ = s.core.renew_failed(renewal, Some(ErrorCode::LockLost), "");
        } else if s.core.renew_ok(renewal, lease_ms).is_some() {
            // An answer that lagged a later renewal's leaves the later expiry.
            let known = s.grant_expiry.entry((key, token)).or_insert(expires);
            *known = (*known).max(expires);
            if scope != GrantScope::Exclusive {
                self.coverage.hit("a share renewed");
            }
        }
        self.check_grant_deadlines(c);
    }
}
