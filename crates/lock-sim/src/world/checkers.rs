//! The checkers, after every event and at the end: the invariants of
//! `docs/contracts/C1-domain.md` (at most once at the rail, fences only rise, tokens unique
//! and rising per key, conservative expiry, ambiguity is terminal, the ledger balances,
//! nothing is lost), an accepted superseded write, exclusion of the clients' beliefs in true
//! time (mutual exclusion of locks, named one leader by belief on the election's key; a
//! semaphore's bound; readers beside no writer), a
//! writer's token above every reader's before it, a reported loss that stays final, and no
//! orphan grant. Each holds for a key set's members and for shares as for any grant (each
//! is registered in its client's core like a single grant); that a set is never partly held
//! is checked at each set's store call (`service/sets.rs`, reported by `set_replica.rs`),
//! and the semaphore's bound also in the store after each permit's store call
//! (`share_replica.rs`). The election's own checkers run where what they check happens: at
//! each observer's yield, terms never go backwards and a term shows only its leader's value
//! (`observers.rs`); at each proclaim's store call, a stale term never proclaims
//! (`elect_service.rs`).

use lock_api::{FencingToken, GrantScope, LockKey, SessionId};
use payment_api::PayoutState;

use super::elect_jobs::is_election;
use super::links::Node;
use super::witness::Granted;
use super::{SharedKey, World};
use crate::check::Violation;
use crate::sched::{MS, Nanos};

/// How long a grant may outlive the abandon of the request it was made for: the abandon is one
/// store write, so anything past a few milliseconds means it did not happen.
const ORPHAN_BOUND: Nanos = 50 * MS;

impl World {
    /// Tokens unique and rising per key, on the grant just made (`scope` of its key): a new
    /// token above every token the key was granted before (a reader's, a permit's, a lock's),
    /// unless it is the same session's idempotent re-grant; never a token another session
    /// had. A writer's new token is above every reader's granted before it (checked first:
    /// the narrower rule).
    pub(super) fn check_grant(
        &mut self,
        key: &LockKey,
        token: FencingToken,
        session: SessionId,
        scope: GrantScope,
    ) {
        let (invariant, detail) = match self.witness.granted(key, token, session, scope) {
            Granted::New { after_readers } => {
                if after_readers {
                    self.coverage.hit("a writer granted after readers");
                }
                return;
            }
            Granted::Again => return,
            Granted::Twice(other) => (
                "I3 tokens unique per key",
                format!(
                    "{key}: token {} granted to {} and {}",
                    token.0,
                    other.tag(),
                    session.tag()
                ),
            ),
            Granted::BelowReader(reader) => (
                "a writer's token above every reader's before it",
                format!(
                    "{key}: a writer granted token {} after a reader was granted {}",
                    token.0, reader.0
                ),
            ),
            Granted::Below(highest) => (
                "I3 tokens rise per key",
                format!("{key}: token {} granted after {}", token.0, highest.0),
            ),
        };
        self.violate(invariant, &[], detail);
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

    /// Exclusion in true time, of what the clients' own deadlines say they hold: a key held
    /// alone (a lock, a writer, an election's leader) by at most one client and beside no
    /// reader; a semaphore key
    /// by at most its permits, never two in one slot. Every grant a client handed its core
    /// is asked about (a job's key, each member of its key set, a share, a grant of an ended
    /// job still to be released), not only the job's.
    pub(super) fn check_exclusion(&mut self) {
        let held = self.beliefs(None);
        if held.len() < 2 {
            return;
        }
        let mut from = 0;
        while from < held.len() {
            let key = held[from].0;
            let to = from + held[from..].iter().take_while(|h| h.0 == key).count();
            if to - from > 1 {
                if let Some((invariant, detail)) = self.excluded(key, &held[from..to]) {
                    let parties: Vec<Node> =
                        held[from..to].iter().map(|h| Node::Client(h.1)).collect();
                    let key = key.clone();
                    self.violate(invariant, &parties, format!("{key} {detail}"));
                    return;
                }
            }
            from = to;
        }
    }

    /// What every client believes it holds now, by its own deadline (of `only` that key, if
    /// given), a revoked grant left out: (key, client, scope), sorted by key and client.
    pub(super) fn beliefs(&self, only: Option<&LockKey>) -> Vec<(&LockKey, usize, GrantScope)> {
        let now = self.q.now();
        let mut held = Vec::new();
        for (c, client) in self.clients.iter().enumerate() {
            let Some(s) = &client.session else {
                continue;
            };
            for (key, token) in s.grant_expiry.keys() {
                if only.is_some_and(|only| only != key) || self.witness.is_revoked(key, *token) {
                    continue;
                }
                if s.core
                    .held_deadline(key, *token, client.local(now))
                    .is_some()
                {
                    held.push((key, c, s.scope_of(key, *token)));
                }
            }
        }
        held.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        held
    }

    /// What breaks exclusion among `held`, the beliefs of one key by several clients: the
    /// invariant and what was seen.
    fn excluded(
        &self,
        key: &LockKey,
        held: &[(&LockKey, usize, GrantScope)],
    ) -> Option<(&'static str, String)> {
        let cs: Vec<(usize, GrantScope)> = held.iter().map(|h| (h.1, h.2)).collect();
        let alone = held.iter().any(|h| h.2 == GrantScope::Exclusive);
        let reading = held.iter().any(|h| h.2 == GrantScope::Shared);
        if alone {
            let invariant = if reading {
                "reader/writer exclusion"
            } else if is_election(key) {
                "one leader by belief"
            } else {
                "mutual exclusion"
            };
            let detail = format!("is held at once by clients {cs:?}, each by its own deadline");
            return Some((invariant, detail));
        }
        if SharedKey::of(key) != Some(SharedKey::Pool) {
            return None;
        }
        let permits = self.cfg.permits;
        let mut slots: Vec<u32> = Vec::new();
        let twice = held.iter().any(|h| match h.2 {
            GrantScope::Permit { slot } if !slots.contains(&slot) => {
                slots.push(slot);
                false
            }
            _ => true,
        });
        (twice || held.len() > permits as usize).then(|| {
            let detail = format!(
                "of {permits} permits is held at once by clients {cs:?} (client, scope), each by \
                 its own deadline"
            );
            ("semaphore bound", detail)
        })
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
