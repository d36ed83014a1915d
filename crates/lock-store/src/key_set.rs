//! The key-set decision, pure: an acquire of several keys at once is all or nothing (ADR
//! 0007). Each key is judged by the lock's own rule ([`decide`]); the set is granted only
//! when every key would be, each with its own token, and otherwise nothing is granted and the
//! first refusal is answered. A waiting set holds no key, so two sets can never each hold what
//! the other waits for.
//!
//! FIFO across keys: a set waits with one ticket (its place's arrival order, shared by all
//! its keys), and a key's `ahead` counts only the places with an earlier ticket. The oldest
//! waiting set is ahead of everyone on each of its keys, so it is granted as soon as they are
//! all free: no set waits forever behind younger ones.

use lock_api::{FencingToken, LockKey, SessionId};

use crate::Refusal;
use crate::decide::{Decision, KeyView, decide};

/// Most keys in one set ([`lock_api::SET_KEYS_MAX`], which clients check too).
pub const MAX_SET_KEYS: usize = lock_api::SET_KEYS_MAX;

/// What the store does with the acquire of a set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetDecision {
    /// Grant every key: its token, in the set's order; `true` where the caller held it
    /// already (the same token again).
    Grant(Vec<(FencingToken, bool)>),
    /// Grant nothing: the first key (in the set's order) that refused, and why.
    Refuse {
        /// Its index in the set.
        member: usize,
        /// Its refusal.
        refusal: Refusal,
    },
}

/// The decision for `caller` on the keys of `set`, each read as its view (`ahead` counting
/// places with an earlier ticket than the caller's). The set is in the store's order
/// (sorted, each key once), the order it locks the keys' rows in.
pub fn decide_set(set: &[(LockKey, KeyView)], caller: SessionId) -> SetDecision {
    assert!(
        (1..=MAX_SET_KEYS).contains(&set.len()),
        "a set's size is checked at the edge"
    );
    assert!(
        set.windows(2).all(|pair| pair[0].0 < pair[1].0),
        "a set is sorted, each key once"
    );
    let mut tokens = Vec::with_capacity(set.len());
    for (member, (_, view)) in set.iter().enumerate() {
        match decide(view, caller) {
            Decision::Grant { token } => tokens.push((token, false)),
            Decision::Regrant { token } => tokens.push((token, true)),
            Decision::Refuse(refusal) => return SetDecision::Refuse { member, refusal },
        }
    }
    assert_eq!(tokens.len(), set.len(), "all or nothing");
    SetDecision::Grant(tokens)
}

/// `keys` in the store's order: sorted, each once; `None` when a key repeats or the count is
/// out of bounds (the caller's mistake; [`lock_api::key_set`] says which).
pub fn canonical(keys: Vec<LockKey>) -> Option<Vec<LockKey>> {
    lock_api::key_set(keys).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::HolderView;

    fn session(n: u128) -> SessionId {
        SessionId(uuid::Uuid::from_u128(n))
    }

    fn key(name: &str) -> LockKey {
        LockKey::parse(name).unwrap()
    }

    fn free(last_token: u64) -> KeyView {
        KeyView {
            holder: None,
            delay_left_ms: 0,
            ahead: 0,
            last_token,
        }
    }

    #[test]
    fn every_key_free_grants_every_key_its_own_next_token() {
        let set = [(key("acct:a"), free(4)), (key("acct:b"), free(0))];
        assert_eq!(
            decide_set(&set, session(1)),
            SetDecision::Grant(vec![(FencingToken(5), false), (FencingToken(1), false)])
        );
    }

    #[test]
    fn one_refusing_key_grants_nothing_and_names_the_first() {
        let held = KeyView {
            holder: Some(HolderView {
                session: session(2),
                token: FencingToken(3),
                free_in_ms: 700,
            }),
            ..free(3)
        };
        let queued = KeyView {
            ahead: 1,
            ..free(9)
        };
        let set = [
            (key("acct:a"), free(4)),
            (key("acct:b"), held),
            (key("acct:c"), queued),
        ];
        assert_eq!(
            decide_set(&set, session(1)),
            SetDecision::Refuse {
                member: 1,
                refusal: Refusal::Held {
                    holder_token: FencingToken(3),
                    free_in_ms: 700
                }
            }
        );
    }

    #[test]
    fn keys_the_caller_holds_already_are_answered_their_own_tokens() {
        let mine = KeyView {
            holder: Some(HolderView {
                session: session(1),
                token: FencingToken(6),
                free_in_ms: 700,
            }),
            ..free(6)
        };
        let set = [(key("acct:a"), mine), (key("acct:b"), free(2))];
        assert_eq!(
            decide_set(&set, session(1)),
            SetDecision::Grant(vec![(FencingToken(6), true), (FencingToken(3), false)])
        );
    }

    #[test]
    fn a_set_is_sorted_and_names_each_key_once() {
        let sorted = canonical(vec![key("b"), key("a"), key("c")]).unwrap();
        assert_eq!(sorted, vec![key("a"), key("b"), key("c")]);
        assert_eq!(canonical(vec![key("a"), key("b"), key("a")]), None);
    }

    #[test]
    #[should_panic(expected = "a set is sorted, each key once")]
    fn an_unsorted_set_is_refused_by_the_decision() {
        decide_set(&[(key("b"), free(0)), (key("a"), free(0))], session(1));
    }
}
