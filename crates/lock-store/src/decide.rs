//! The grant decision, pure: what an acquire gets, given what the store read of the key for
//! one caller. A store reads, calls [`decide`], then writes what it says; the rule lives
//! here once. PostgreSQL's `lock_acquire` (PL/pgSQL) keeps its own copy inside its
//! transaction, held to the same answers by the conformance suite.
//!
//! The order is the contract (ADR 0006): a live grant answers first (the caller's own: the
//! same token again; another's: held), then the FIFO queue (sessions ahead are served first,
//! so only the head of the queue is told of a lock-delay and naps until it ends), then a
//! lock-delay in force, and only then a new token, one above the key's last.
//!
//! [`hand_over`] is the same rule seen from a key just freed: its head waiter is granted in
//! the freeing write when its own acquire would have been (PostgreSQL's copy is the trigger
//! `lock_notify_free`).

use lock_api::{FencingToken, SessionId};

use crate::Refusal;

/// The live grant of a key, as a decision needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HolderView {
    /// Its session.
    pub session: SessionId,
    /// Its token.
    pub token: FencingToken,
    /// Milliseconds until it ends unless renewed (the store's clock).
    pub free_in_ms: u64,
}

/// What the store read of one key for one caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyView {
    /// The live grant, if any.
    pub holder: Option<HolderView>,
    /// Milliseconds of lock-delay in force for this caller (0: none, or the caller is exempt).
    pub delay_left_ms: u64,
    /// Live queue places of other sessions ahead of the caller's (all of them when the
    /// caller has none).
    pub ahead: u64,
    /// The key's last token (0: never granted).
    pub last_token: u64,
}

/// What the store does with the acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The caller holds the key already: the same token again, its lease and expiry only
    /// growing.
    Regrant {
        /// The caller's token.
        token: FencingToken,
    },
    /// Grant a new token: the key's last, plus one.
    Grant {
        /// The new token.
        token: FencingToken,
    },
    /// No grant: answer this (the store may still keep the caller's queue place).
    Refuse(Refusal),
}

/// The decision for `caller` on a key the store read as `view`.
pub fn decide(view: &KeyView, caller: SessionId) -> Decision {
    if let Some(holder) = view.holder {
        return if holder.session == caller {
            Decision::Regrant {
                token: holder.token,
            }
        } else {
            Decision::Refuse(Refusal::Held {
                holder_token: holder.token,
                free_in_ms: holder.free_in_ms,
            })
        };
    }
    if let Some(refusal) = queued_or_delayed(view.ahead, view.delay_left_ms) {
        return Decision::Refuse(refusal);
    }
    let token = FencingToken(view.last_token + 1);
    assert!(token.0 > view.last_token, "tokens only rise");
    Decision::Grant { token }
}

/// What holds back a caller that nothing holding the key keeps out, for every primitive:
/// sessions queued ahead of it first (FIFO), then a lock-delay in force.
pub(crate) fn queued_or_delayed(ahead: u64, delay_left_ms: u64) -> Option<Refusal> {
    if ahead > 0 {
        return Some(Refusal::Queued { ahead });
    }
    (delay_left_ms > 0).then_some(Refusal::Delayed {
        remaining_ms: delay_left_ms,
    })
}

/// A freed key's live head waiter, as a hand-over needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadView {
    /// Its session.
    pub session: SessionId,
    /// The lease its parked acquire asked for; `None` for a place that names none (written
    /// by a replica that does not hand over): it is woken to ask, not granted.
    pub lease_ms: Option<u64>,
    /// Milliseconds of lock-delay in force for it (0: none, or it is exempt).
    pub delay_left_ms: u64,
}

/// What the store read of a key whose grant just ended, or whose head waiter just left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreedView {
    /// A live grant holds the key: nothing was freed.
    pub held: bool,
    /// An ended grant is still there, not yet removed (its lock-delay is the acquire's to
    /// judge).
    pub ended_grant: bool,
    /// The first live place in the key's queue, if any.
    pub head: Option<HeadView>,
    /// The key's last token.
    pub last_token: u64,
}

/// What the store does, in the same write, for a freed key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandOver {
    /// Grant the key to the head waiter now (one flush instead of two: the release's, then
    /// the waiter's own acquire) and tell its parked request the grant.
    Grant {
        /// The head waiter.
        session: SessionId,
        /// The new token: the key's last, plus one.
        token: FencingToken,
        /// Its lease, as its queue place asked.
        lease_ms: u64,
    },
    /// Wake the head waiter to ask again (the acquire decides: a lock-delay, a grant row
    /// still there, a place that names no lease).
    Wake(SessionId),
    /// Nobody waits, or the key is held.
    Nobody,
}

/// The hand-over for a key the store read as `view`, after a release, a revoke, the reaper,
/// a closed session or a head waiter leaving freed it. Only a head waiter nothing holds back
/// is granted: exactly what its own acquire would have been told at this instant.
pub fn hand_over(view: &FreedView) -> HandOver {
    let Some(head) = view.head.filter(|_| !view.held) else {
        return HandOver::Nobody;
    };
    match head.lease_ms {
        Some(lease_ms) if !view.ended_grant && head.delay_left_ms == 0 => {
            let token = FencingToken(view.last_token + 1);
            assert!(token.0 > view.last_token, "tokens only rise");
            HandOver::Grant {
                session: head.session,
                token,
                lease_ms,
            }
        }
        _ => HandOver::Wake(head.session),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(n: u128) -> SessionId {
        SessionId(uuid::Uuid::from_u128(n))
    }

    /// Every combination of holder (none, the caller, another), delay (none, in force) and
    /// queue (empty, someone ahead), with the answer the contract gives it.
    #[test]
    fn the_decision_table() {
        let me = session(1);
        let other = HolderView {
            session: session(2),
            token: FencingToken(7),
            free_in_ms: 900,
        };
        let mine = HolderView {
            session: me,
            ..other
        };
        let held = Decision::Refuse(Refusal::Held {
            holder_token: FencingToken(7),
            free_in_ms: 900,
        });
        let regrant = Decision::Regrant {
            token: FencingToken(7),
        };
        let table: [(Option<HolderView>, u64, u64, Decision); 12] = [
            (
                None,
                0,
                0,
                Decision::Grant {
                    token: FencingToken(8),
                },
            ),
            (None, 0, 2, Decision::Refuse(Refusal::Queued { ahead: 2 })),
            (
                None,
                300,
                0,
                Decision::Refuse(Refusal::Delayed { remaining_ms: 300 }),
            ),
            (None, 300, 2, Decision::Refuse(Refusal::Queued { ahead: 2 })),
            (Some(mine), 0, 0, regrant),
            (Some(mine), 0, 2, regrant),
            (Some(mine), 300, 0, regrant),
            (Some(mine), 300, 2, regrant),
            (Some(other), 0, 0, held),
            (Some(other), 0, 2, held),
            (Some(other), 300, 0, held),
            (Some(other), 300, 2, held),
        ];
        for (holder, delay_left_ms, ahead, expected) in table {
            let view = KeyView {
                holder,
                delay_left_ms,
                ahead,
                last_token: 7,
            };
            assert_eq!(decide(&view, me), expected, "{view:?}");
        }
    }

    #[test]
    fn a_key_never_granted_starts_at_token_one() {
        let view = KeyView {
            holder: None,
            delay_left_ms: 0,
            ahead: 0,
            last_token: 0,
        };
        assert_eq!(
            decide(&view, session(1)),
            Decision::Grant {
                token: FencingToken(1)
            }
        );
    }

    #[test]
    fn a_freed_key_goes_to_its_head_waiter_only_when_nothing_holds_it_back() {
        let head = HeadView {
            session: session(3),
            lease_ms: Some(2_000),
            delay_left_ms: 0,
        };
        let freed = |ended_grant, head| FreedView {
            held: false,
            ended_grant,
            head,
            last_token: 7,
        };
        assert_eq!(
            hand_over(&freed(false, Some(head))),
            HandOver::Grant {
                session: session(3),
                token: FencingToken(8),
                lease_ms: 2_000
            }
        );
        assert_eq!(hand_over(&freed(false, None)), HandOver::Nobody);
        let woken = HandOver::Wake(session(3));
        assert_eq!(
            hand_over(&freed(true, Some(head))),
            woken,
            "an ended grant is still there"
        );
        let held = FreedView {
            held: true,
            ..freed(false, Some(head))
        };
        assert_eq!(hand_over(&held), HandOver::Nobody, "the key is held");
        let delayed = HeadView {
            delay_left_ms: 300,
            ..head
        };
        assert_eq!(
            hand_over(&freed(false, Some(delayed))),
            woken,
            "a lock-delay"
        );
        let no_lease = HeadView {
            lease_ms: None,
            ..head
        };
        assert_eq!(
            hand_over(&freed(false, Some(no_lease))),
            woken,
            "a place without a lease"
        );
    }
}
