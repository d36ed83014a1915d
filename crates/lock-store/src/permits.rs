//! The permit decision, pure: what an acquire of one of a semaphore key's permits gets, given
//! what the store read of the key for one caller (ADR 0007). A store reads, calls
//! [`decide_permit`], then writes what it says.
//!
//! A semaphore key has `permits` slots, numbered from 0. Each grant is one slot with a token
//! of its own, drawn from the key's one counter, so tokens rise per key across slots and per
//! slot. A resource fences each (key, slot) as it fences a mutex: a permit's write is refused
//! once a later grant of its slot has written. The slot count is the live grants': it changes
//! only while no permit is held, and a caller that asks for another count is told the key's.
//!
//! The order is the lock's (`decide`): the caller's own permit answers first, then the count,
//! then a full key, then the FIFO queue, then a lock-delay, and only then a new token in the
//! lowest free slot.

use lock_api::{FencingToken, SessionId};

use crate::Refusal;
use crate::decide::queued_or_delayed;

/// Most permits one key may have: a key's holders are read whole in every decision.
pub const MAX_PERMITS: u32 = lock_api::PERMITS_MAX;

/// One live permit of a key, as a decision needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermitHolder {
    /// Its session.
    pub session: SessionId,
    /// Its slot, below the key's permit count.
    pub slot: u32,
    /// Its token.
    pub token: FencingToken,
    /// Milliseconds until it ends unless renewed (the store's clock).
    pub free_in_ms: u64,
}

/// What the store read of one semaphore key for one caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermitView<'a> {
    /// The key's permit count, as its live permits were granted (`None`: none is live).
    pub permits: Option<u32>,
    /// The live permits.
    pub holders: &'a [PermitHolder],
    /// Milliseconds of lock-delay in force for this caller (0: none, or the caller is exempt).
    pub delay_left_ms: u64,
    /// Live queue places of other sessions ahead of the caller's.
    pub ahead: u64,
    /// The key's last token (0: never granted).
    pub last_token: u64,
}

/// What the store does with the acquire of a permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermitDecision {
    /// The caller holds a permit of the key already: the same slot and token again.
    Regrant {
        /// The caller's slot.
        slot: u32,
        /// The caller's token.
        token: FencingToken,
    },
    /// Grant a new permit: the lowest free slot, and the key's last token plus one.
    Grant {
        /// The slot.
        slot: u32,
        /// The new token.
        token: FencingToken,
    },
    /// The key's live permits were granted with another count: no grant (a caller's
    /// mistake, answered with the key's count).
    CountMismatch {
        /// The key's count.
        permits: u32,
    },
    /// No grant: answer this (the store may still keep the caller's queue place).
    Refuse(Refusal),
}

/// The decision for `caller`, asking for one of `asked` permits, on a key read as `view`.
pub fn decide_permit(view: &PermitView<'_>, caller: SessionId, asked: u32) -> PermitDecision {
    assert!(
        (1..=MAX_PERMITS).contains(&asked),
        "a count is checked at the edge"
    );
    assert_consistent(view);
    if let Some(mine) = view.holders.iter().find(|h| h.session == caller) {
        return PermitDecision::Regrant {
            slot: mine.slot,
            token: mine.token,
        };
    }
    if let Some(permits) = view.permits.filter(|&p| p != asked) {
        return PermitDecision::CountMismatch { permits };
    }
    if let Some(soonest) = full(view, asked) {
        return PermitDecision::Refuse(Refusal::Held {
            holder_token: soonest.token,
            free_in_ms: soonest.free_in_ms,
        });
    }
    if let Some(refusal) = queued_or_delayed(view.ahead, view.delay_left_ms) {
        return PermitDecision::Refuse(refusal);
    }
    let slot = lowest_free_slot(view.holders, asked);
    let token = FencingToken(view.last_token + 1);
    assert!(token.0 > view.last_token, "tokens only rise");
    assert!(slot < asked && view.holders.iter().all(|h| h.slot != slot));
    PermitDecision::Grant { slot, token }
}

/// The holder that ends soonest, when every one of `asked` slots is taken.
fn full<'a>(view: &PermitView<'a>, asked: u32) -> Option<&'a PermitHolder> {
    let taken = u32::try_from(view.holders.len()).unwrap_or(u32::MAX);
    if taken < asked {
        return None;
    }
    view.holders.iter().min_by_key(|h| h.free_in_ms)
}

fn lowest_free_slot(holders: &[PermitHolder], permits: u32) -> u32 {
    (0..permits)
        .find(|slot| holders.iter().all(|h| h.slot != *slot))
        .unwrap_or(permits)
}

/// What every store must have kept true of a key before it asks: live permits only with a
/// count, each in its own slot below it, one per session, none above the key's last token.
fn assert_consistent(view: &PermitView<'_>) {
    let Some(permits) = view.permits else {
        assert!(view.holders.is_empty(), "live permits carry their count");
        return;
    };
    assert!(
        view.holders.len() <= permits as usize,
        "never more permits than slots"
    );
    for (i, holder) in view.holders.iter().enumerate() {
        assert!(holder.slot < permits, "a slot below the count");
        assert!(
            holder.token.0 <= view.last_token,
            "no token above the key's last"
        );
        for other in &view.holders[i + 1..] {
            assert!(holder.slot != other.slot, "one permit per slot");
            assert!(holder.session != other.session, "one permit per session");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(n: u128) -> SessionId {
        SessionId(uuid::Uuid::from_u128(n))
    }

    fn holder(n: u128, slot: u32, token: u64, free_in_ms: u64) -> PermitHolder {
        PermitHolder {
            session: session(n),
            slot,
            token: FencingToken(token),
            free_in_ms,
        }
    }

    fn view(permits: Option<u32>, holders: &[PermitHolder]) -> PermitView<'_> {
        PermitView {
            permits,
            holders,
            delay_left_ms: 0,
            ahead: 0,
            last_token: 9,
        }
    }

    /// Each rule of the order, with the answer the contract gives it.
    #[test]
    fn the_decision_table() {
        let me = session(1);
        let two = [holder(2, 0, 5, 900), holder(3, 2, 9, 300)];
        let mine = [holder(1, 1, 7, 900)];
        let grant = |slot, token| PermitDecision::Grant {
            slot,
            token: FencingToken(token),
        };
        // A free key: slot 0, the next token.
        assert_eq!(decide_permit(&view(None, &[]), me, 3), grant(0, 10));
        // Two of three taken: the free slot between them.
        assert_eq!(decide_permit(&view(Some(3), &two), me, 3), grant(1, 10));
        // Full: the soonest-ending holder is named.
        let held = PermitDecision::Refuse(Refusal::Held {
            holder_token: FencingToken(9),
            free_in_ms: 300,
        });
        assert_eq!(
            decide_permit(
                &view(Some(3), &[two[0], two[1], holder(4, 1, 8, 500)]),
                me,
                3
            ),
            held
        );
        // The caller's own permit, whatever else is true.
        let regrant = PermitDecision::Regrant {
            slot: 1,
            token: FencingToken(7),
        };
        let busy = PermitView {
            ahead: 4,
            delay_left_ms: 50,
            ..view(Some(2), &mine)
        };
        assert_eq!(decide_permit(&busy, me, 2), regrant);
        // Another count while permits are live: the key's count, nothing granted.
        assert_eq!(
            decide_permit(&view(Some(3), &two), me, 5),
            PermitDecision::CountMismatch { permits: 3 }
        );
        // A free slot, but others queued first; then a lock-delay.
        let queued = PermitView {
            ahead: 2,
            delay_left_ms: 80,
            ..view(Some(3), &two)
        };
        assert_eq!(
            decide_permit(&queued, me, 3),
            PermitDecision::Refuse(Refusal::Queued { ahead: 2 })
        );
        let delayed = PermitView { ahead: 0, ..queued };
        assert_eq!(
            decide_permit(&delayed, me, 3),
            PermitDecision::Refuse(Refusal::Delayed { remaining_ms: 80 })
        );
        // With no permit live, any count may start the key anew.
        assert_eq!(decide_permit(&view(None, &[]), me, 1), grant(0, 10));
    }

    /// Granting into every reachable state of a small key: never more holders than permits,
    /// never two in one slot, every new token above every token before it.
    #[test]
    fn grants_fill_slots_in_order_and_never_overflow() {
        for permits in 1..=4 {
            let mut holders: Vec<PermitHolder> = Vec::new();
            let mut last_token = 0;
            for caller in 1..=(u128::from(permits) + 2) {
                let view = PermitView {
                    permits: (!holders.is_empty()).then_some(permits),
                    holders: &holders,
                    delay_left_ms: 0,
                    ahead: 0,
                    last_token,
                };
                match decide_permit(&view, session(caller), permits) {
                    PermitDecision::Grant { slot, token } => {
                        assert_eq!(slot as usize, holders.len(), "the lowest free slot");
                        assert!(token.0 > last_token);
                        last_token = token.0;
                        holders.push(holder(caller, slot, token.0, 1_000));
                    }
                    PermitDecision::Refuse(Refusal::Held { .. }) => {
                        assert_eq!(holders.len(), permits as usize, "refused only when full");
                    }
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(holders.len(), permits as usize);
        }
    }

    #[test]
    #[should_panic(expected = "one permit per slot")]
    fn a_store_that_doubled_a_slot_is_caught() {
        let doubled = [holder(2, 0, 5, 900), holder(3, 0, 6, 900)];
        decide_permit(&view(Some(2), &doubled), session(1), 2);
    }
}
