//! The fenced resource and the rail, as one node: payouts with their fences (checked by
//! `fence_kit::check_fence`, the **same function** payment-resource runs inside its SQL
//! transaction), one submission per payout, a ledger, and a rail that records every transfer
//! it receives. The model: a submit reserves, calls the rail and records its answer in one
//! step (payment-resource + rail-proxy + rail-stub collapsed; their messages are not what the
//! fence protects). Beside the payouts, the register an election's leaders write (a resource
//! that never ends, fenced with fence-kit's `check_open` by the leader's term).

use fence_kit::{FenceRefusal, FenceRule, GrantFence, check_fence, check_open};
use payment_api::PayoutState;

use crate::config::Bugs;
use crate::sched::Nanos;

/// What the rail does with a payout's one transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RailFault {
    /// Accepts.
    None,
    /// Refuses: the payout ends `REJECTED`.
    Reject,
    /// Never answers: the payout ends `RAIL_AMBIGUOUS`.
    Timeout,
}

/// A write to a payout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Claim: raise the fence to the presented token.
    Claim,
    /// Reserve + rail + record.
    Submit,
    /// Post the recorded outcome.
    Post,
}

/// The resource's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Accepted; the payout's state after it.
    Ok(PayoutState),
    /// `FENCED_OUT`.
    FencedOut,
    /// `ALREADY_TERMINAL`.
    AlreadyTerminal,
    /// `ALREADY_SUBMITTED`.
    AlreadySubmitted,
}

/// How a recorded submission ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Acked,
    Rejected,
    Timeout,
}

/// One payout.
#[derive(Debug, Clone)]
pub struct Payout {
    /// Its fence.
    pub fence: i64,
    /// The grant that set the fence (its proof's grant id).
    pub fence_grant: String,
    /// Its state.
    pub state: PayoutState,
    submission: Option<(i64, Outcome)>,
    rail_fault: RailFault,
}

/// A transfer the rail received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// When.
    pub at: Nanos,
    /// Which payout.
    pub payout: usize,
    /// The token presented.
    pub token: i64,
}

/// The resource, the rail and the ledger.
#[derive(Debug, Clone)]
pub struct Bank {
    /// Payouts by index.
    pub payouts: Vec<Payout>,
    /// Every transfer the rail received, in order.
    pub rail: Vec<Transfer>,
    /// Ledger entries per payout (two per settled payout).
    pub ledger: Vec<u32>,
    /// Every fence each payout had, in order (the witness that fences only rise).
    pub fence_history: Vec<Vec<i64>>,
    /// The election's register: its fence (the last term that wrote) and that grant.
    pub register: (i64, String),
    /// Planted bugs of the resource, the proxy and the rail.
    bugs: Bugs,
}

impl Bank {
    /// `faults.len()` pending payouts.
    pub fn new(faults: &[RailFault], bugs: Bugs) -> Self {
        Self {
            payouts: faults
                .iter()
                .map(|f| Payout {
                    fence: 0,
                    fence_grant: String::new(),
                    state: PayoutState::Pending,
                    submission: None,
                    rail_fault: *f,
                })
                .collect(),
            rail: Vec::new(),
            ledger: vec![0; faults.len()],
            fence_history: vec![Vec::new(); faults.len()],
            register: (0, String::new()),
            bugs,
        }
    }

    /// Payouts a worker may take (not terminal).
    pub fn claimable(&self) -> Vec<usize> {
        (0..self.payouts.len())
            .filter(|i| !self.payouts[*i].state.is_terminal())
            .collect()
    }

    /// Whether every payout is terminal.
    pub fn all_terminal(&self) -> bool {
        self.payouts.iter().all(|p| p.state.is_terminal())
    }

    /// A leader's write to the election's register with its term `token` by `grant`: each
    /// write claims (a term above the fence, or the grant that set it), as a resource that
    /// never ends fences a leader's writes; `true` when it is accepted.
    pub fn leader_write(&mut self, token: i64, grant: &str) -> bool {
        if !self.bugs.ignore_fence {
            let presented = GrantFence { token, grant };
            let (fence, fence_grant) = &self.register;
            let fence = GrantFence {
                token: *fence,
                grant: fence_grant,
            };
            if check_open(FenceRule::Claim, presented, fence).is_err() {
                return false;
            }
        }
        self.register = (token, grant.to_owned());
        true
    }

    fn set_fence(&mut self, payout: usize, token: i64, grant: &str) {
        self.payouts[payout].fence = token;
        self.payouts[payout].fence_grant = grant.to_owned();
        self.fence_history[payout].push(token);
    }

    /// Applies one write at `now`, by the grant `grant` (its id's text) with `token`.
    pub fn write(
        &mut self,
        now: Nanos,
        payout: usize,
        write: Write,
        token: i64,
        grant: &str,
    ) -> Answer {
        let rule = match write {
            Write::Claim => FenceRule::Claim,
            Write::Submit | Write::Post => FenceRule::Holder,
        };
        let current = &self.payouts[payout];
        // Planted: an ambiguous payout taken for one still open.
        let reopened = self.bugs.retry_ambiguous && current.state == PayoutState::RailAmbiguous;
        let state = if reopened {
            PayoutState::Claimed
        } else {
            current.state
        };
        if !self.bugs.ignore_fence {
            let presented = GrantFence { token, grant };
            let fence = GrantFence {
                token: current.fence,
                grant: &current.fence_grant,
            };
            match check_fence(rule, presented, fence, state) {
                Ok(()) => {}
                Err(FenceRefusal::FencedOut { .. }) => return Answer::FencedOut,
                // Posting a terminal payout by the fence holder answers it unchanged.
                Err(FenceRefusal::Terminal(state)) if write == Write::Post => {
                    return Answer::Ok(state);
                }
                Err(FenceRefusal::Terminal(_)) => return Answer::AlreadyTerminal,
            }
        }
        match write {
            Write::Claim => {
                self.set_fence(payout, token, grant);
                let p = &mut self.payouts[payout];
                if reopened {
                    p.state = PayoutState::Claimed;
                    p.submission = None;
                }
                if p.state == PayoutState::Pending {
                    p.state = PayoutState::Claimed;
                }
                Answer::Ok(p.state)
            }
            Write::Submit => {
                if self.payouts[payout].submission.is_some() {
                    return Answer::AlreadySubmitted;
                }
                let calls = if self.bugs.rail_retry { 2 } else { 1 };
                for _ in 0..calls {
                    self.rail.push(Transfer {
                        at: now,
                        payout,
                        token,
                    });
                }
                let p = &mut self.payouts[payout];
                let outcome = match p.rail_fault {
                    RailFault::None => Outcome::Acked,
                    RailFault::Reject => Outcome::Rejected,
                    RailFault::Timeout => Outcome::Timeout,
                };
                p.submission = Some((token, outcome));
                p.state = if outcome == Outcome::Timeout {
                    PayoutState::RailAmbiguous
                } else {
                    PayoutState::Submitted
                };
                Answer::Ok(p.state)
            }
            Write::Post => {
                let p = &mut self.payouts[payout];
                match (p.state, p.submission) {
                    (PayoutState::Submitted, Some((_, Outcome::Acked))) => {
                        p.state = PayoutState::Settled;
                        self.ledger[payout] += 2;
                    }
                    (PayoutState::Submitted, Some((_, Outcome::Rejected))) => {
                        p.state = PayoutState::Rejected;
                        if self.bugs.ledger_on_reject {
                            self.ledger[payout] += 2;
                        }
                    }
                    (PayoutState::Submitted, Some((_, Outcome::Timeout))) => {
                        p.state = PayoutState::RailAmbiguous;
                    }
                    _ => {}
                }
                Answer::Ok(self.payouts[payout].state)
            }
        }
    }
}
