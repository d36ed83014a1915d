//! The election at the lock service and the bank. At a replica a proclaim (L9) is a store call
//! of its own a store round trip after it arrives (lock-server's `Batched` passes it through;
//! a crash in between loses it), through the replica's `ClockCheckedStore` to lock-store's
//! `MemoryStore`, whose rule it is that only the live grant announces; an observer's read
//! (L7) is answered on arrival. After each proclaim the store accepted, the checker holds it
//! to that rule against the store's live grant before the call ("a stale term never
//! proclaims") and records the value as its term's. At the bank, a leader's write goes to the
//! election's register, fenced with its term by fence-kit's rule; one accepted below a term
//! it accepted before is a superseded leader's (I2, as for a payout).

use super::links::Node;
use super::{Body, Event, World};
use crate::service::{LockAnswer, LockCall};

impl World {
    /// An election's call reaches replica `r`: a proclaim's store call follows a store round
    /// trip later; a read is answered now (`None` from a replica that is down: it vanishes).
    pub(super) fn election_call(&mut self, r: usize, from: Node, req: u64, call: LockCall) {
        if let LockCall::Inspect { key } = &call {
            let answer = self.service.inspect(self.q.now(), r, key);
            if let Some(answer) = answer {
                self.send(Node::Replica(r), from, req, Body::LockReply(answer));
            }
            return;
        }
        if !self.service.up[r] {
            return self.answered(r, from, req, &call, None);
        }
        let restarts = self.service.restarts[r];
        let after = self.store_call_nanos();
        self.q
            .after(after, Event::ProclaimCall(r, restarts, from, req, call));
    }

    /// Replica `r` (that had come back up `restarts` times when the proclaim arrived) makes
    /// its store call: checked against the store's live grant before it, and answered.
    pub(super) fn proclaim_call(
        &mut self,
        r: usize,
        restarts: u64,
        from: Node,
        req: u64,
        call: &LockCall,
    ) {
        let LockCall::Proclaim {
            key,
            session,
            token,
            value,
        } = call
        else {
            return;
        };
        let now = self.q.now();
        let mut answer = None;
        if self.service.restarts[r] == restarts {
            let live = self.service.live_holder(now, r, key);
            answer = self
                .service
                .proclaim(now, r, (key, *session, *token), value);
            if answer == Some(LockAnswer::Proclaimed) {
                self.elect.proclaimed(*token, value);
                if live != Some((*session, *token)) {
                    let detail = format!(
                        "{key}: term {} of {} proclaimed {:?} while the store's live grant was {:?}",
                        token.0,
                        session.tag(),
                        value.as_str(),
                        live.map(|(s, t)| (s.tag(), t.0))
                    );
                    self.violate("a stale term never proclaims", &[from], detail);
                }
            }
        }
        self.answered(r, from, req, call, answer);
    }

    /// A leader's write reaches the bank: the election's register, fenced with its term.
    pub(super) fn register_write(&mut self, from: Node, req: u64, body: Body) {
        let Body::LeaderWrite {
            token,
            grant,
            paused,
        } = body
        else {
            return;
        };
        let accepted = self.bank.leader_write(token, &grant);
        self.log(&[from, Node::Bank], || {
            format!("bank register write term {token} -> accepted {accepted}")
        });
        if accepted {
            self.coverage.hit("a leader's write accepted");
            if let Some(highest) = self.elect.wrote(token) {
                self.violate(
                    "I2 no superseded write accepted",
                    &[from, Node::Bank],
                    format!("the election's register: term {token} accepted after term {highest}"),
                );
            }
        } else {
            self.coverage.hit("a deposed leader's write fenced");
            if paused {
                self.coverage
                    .hit("a deposed leader's write fenced after a pause in its term");
            }
        }
        self.send(Node::Bank, from, req, Body::LeaderWritten(accepted));
    }
}
