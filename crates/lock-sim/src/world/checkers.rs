//! The checkers, after every event and at the end: the invariants of
//! `docs/contracts/C1-domain.md` (at most once at the rail, fences only rise, tokens unique
//! and rising per key, conservative expiry, ambiguity is terminal, the ledger balances,
//! nothing is lost), an accepted superseded write, mutual exclusion of the clients' beliefs
//! in true time, a reported loss that stays final, and no orphan grant. Each holds for a key
//! set's members as for any grant (each is registered in its client's core like a single
//! grant); that a set is never partly held is checked at each set's store call
//! (`service/sets.rs`, reported by `set_replica.rs`).

use lock_api::{FencingToken, LockKey, SessionId};
use payment_api::PayoutState;

use super::World;
use super::links::Node;
use crate::check::Violation;
use crate::sched::{MS, Nanos};

/// How long a grant may outlive the abandon of the request it was made for: the abandon is one
/// store write, so anything past a few milliseconds means it did not happen.
const ORPHAN_BOUND: Nanos = 50 * MS;

impl World {
    /// Tokens unique and rising per key, on the grant just made: above the key's previous token,
    /// unless it is the same session's idempotent re-grant; never a token another session had.
    pub(super) fn check_grant(&mut self, key: &LockKey, token: FencingToken, session: SessionId) {
        let previous = self
            .service
            .grants
            .iter()
            .rev()
            .filter(|(_, k, _, _)| k == key)
            .nth(1)
            .map(|(_, _, t, s)| (*t, *s));
        let Some((last_token, last_session)) = previous else {
            return;
        };
        if last_token == token && last_session != session {
            let detail = format!("{key}: token {} granted to two sessions", token.0);
            self.violate("I3 tokens unique per key", &[], detail);
        } else if last_token != token && token <= last_token {
            let detail = format!("{key}: token {} granted after {}", token.0, last_token.0);
            self.violate("I3 tokens rise per key", &[], detail);
        }
    }

    pub(super) fn check_session_deadline(&mut self, c: usize) {
        let client = &self.clients[c];
        let Some(s) = &client.session else { return };
        let deadline = client.true_time(s.core.session_deadline_nanos());
        if deadline > s.store_expiry {
            let detail = format!(
                "c{c}'s session deadline {:.3} ms lies after the store's expiry {:.3} ms",
                deadline as f64 / MS as f64,
                s.store_expiry as f64 / MS as f64
            );
            self.violate("I4 conservative expiry", &[Node::Client(c)], detail);
        }
    }

    pub(super) fn check_grant_deadlines(&mut self, c: usize) {
        let now_local = self.now_local(c);
        let client = &self.clients[c];
        let Some(s) = &client.session else { return };
        let mut bad = None;
        for ((key, token), store_expiry) in &s.grant_expiry {
            if let Some(deadline) = s.core.held_deadline(key, *token, now_local) {
                let deadline = client.true_time(deadline);
                if deadline > *store_expiry {
                    bad = Some(format!(
                        "c{c}'s deadline for {key} token {} is {:.3} ms, after the store's expiry {:.3} ms",
                        token.0,
                        deadline as f64 / MS as f64,
                        *store_expiry as f64 / MS as f64
                    ));
                }
            }
        }
        if let Some(detail) = bad {
            self.violate("I4 conservative expiry", &[Node::Client(c)], detail);
        }
    }

    /// Mutual exclusion in true time: at most one client whose own deadline says it holds a
    /// key. Every grant a client handed its core is asked about (a job's key, each member of
    /// its key set, a grant of an ended job still to be released), not only the job's.
    pub(super) fn check_exclusion(&mut self) {
        let now = self.q.now();
        let mut held: Vec<(&LockKey, usize)> = Vec::new();
        for (c, client) in self.clients.iter().enumerate() {
            let Some(s) = &client.session else {
                continue;
            };
            for (key, token) in s.grant_expiry.keys() {
                if self.witness.is_revoked(key, *token) {
                    continue;
                }
                if s.core
                    .held_deadline(key, *token, client.local(now))
                    .is_some()
                {
                    held.push((key, c));
                }
            }
        }
        if held.len() < 2 {
            return;
        }
        held.sort_unstable();
        let Some(twice) = held.windows(2).find(|w| w[0].0 == w[1].0).map(|w| w[0].0) else {
            return;
        };
        let cs: Vec<usize> = held
            .iter()
            .filter(|(key, _)| *key == twice)
            .map(|(_, c)| *c)
            .collect();
        let key = twice.clone();
        let parties: Vec<Node> = cs.iter().map(|c| Node::Client(*c)).collect();
        self.violate(
            "mutual exclusion",
            &parties,
            format!("{key} is held at once by clients {cs:?}, each by its own deadline"),
        );
    }

    /// A reported loss is final: a grant the SDK told its listener it lost is never held by
    /// its deadline again, whatever answer arrives later (a renewal sent before the loss, a
    /// hand-over notice), until the client asks for the key anew.
    pub(super) fn check_losses_final(&mut self) {
        let now = self.q.now();
        let revived = self.witness.reported_lost().find(|((c, key), token)| {
            let client = &self.clients[*c];
            client.session.as_ref().is_some_and(|s| {
                s.core
                    .held_deadline(key, **token, client.local(now))
                    .is_some()
            })
        });
        if let Some(((c, key), token)) = revived {
            let detail = format!(
                "c{c} holds {key} token {} again after reporting it lost",
                token.0
            );
            let c = *c;
            self.violate("a reported loss stays final", &[Node::Client(c)], detail);
        }
    }

    /// No orphan grant: a grant the store made for a request before its replica abandoned it
    /// (the request ended without telling its client) is gone within [`ORPHAN_BOUND`] of the
    /// abandon, not left to its lease. (A grant handed over later to the place an abandon
    /// kept for the client's retry is that retry's to take over, or the client's to settle.)
    /// Abandons older than the longest lease are dropped: no grant made before them is live.
    pub(super) fn check_orphans(&mut self) {
        let now = self.q.now();
        let longest = self.cfg.lease_ms.max(self.cfg.ttl_ms) * MS;
        if !self
            .witness
            .keep_abandons_within(now, longest + ORPHAN_BOUND)
        {
            return;
        }
        let orphan = self
            .service
            .live_grants(now)
            .into_iter()
            .find_map(|(key, session, token)| {
                let request = self.witness.made_for(&key, token)?;
                let abandoned = self.witness.abandoned_at(request)?;
                // A grant never answered (withheld) has no record: made at the abandon.
                let granted = self
                    .service
                    .grants
                    .iter()
                    .rev()
                    .find(|(_, k, t, _)| *k == key && *t == token)
                    .map_or(0, |(at, ..)| *at);
                (granted <= abandoned && now.saturating_sub(abandoned) > ORPHAN_BOUND)
                    .then_some((key, session, token, request, abandoned))
            });
        if let Some((key, session, token, request, abandoned)) = orphan {
            let detail = format!(
                "{key} token {} of session {} is still held {:.3} ms after request #{} that it \
                 was made for was abandoned",
                token.0,
                session.tag(),
                now.saturating_sub(abandoned) as f64 / MS as f64,
                request.0
            );
            self.violate("no orphan grant", &[], detail);
        }
    }

    pub(super) fn check_end(&mut self) {
        for (payout, p) in self.bank.payouts.iter().enumerate() {
            let entries = self.bank.ledger[payout];
            let expected = if p.state == PayoutState::Settled {
                2
            } else {
                0
            };
            if entries != expected {
                let detail = format!(
                    "payout {payout} is {:?} with {entries} ledger entries",
                    p.state
                );
                self.violation = Some(Violation {
                    invariant: "I6 the ledger balances",
                    at: self.q.now(),
                    detail,
                    recent: String::new(),
                });
                return;
            }
        }
        let open: Vec<(usize, PayoutState)> = self
            .bank
            .payouts
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.state.is_terminal())
            .map(|(i, p)| (i, p.state))
            .collect();
        if !open.is_empty() {
            let parties: Vec<Node> = (0..self.clients.len()).map(Node::Client).collect();
            let detail = format!(
                "{} ms after the faults stopped, payouts are still open: {open:?}",
                self.cfg.liveness_ms
            );
            self.violate(
                "I7 every payout terminal once faults heal",
                &parties,
                detail,
            );
        }
        for state in self.bank.payouts.iter().map(|p| p.state) {
            self.coverage.hit(match state {
                PayoutState::Settled => "a payout settled",
                PayoutState::Rejected => "a payout rejected",
                PayoutState::RailAmbiguous => "a payout ambiguous",
                _ => "a payout open",
            });
        }
    }
}
