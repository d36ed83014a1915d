//! The read/write decision, pure: what a shared (reader) or exclusive (writer) acquire of a
//! key gets, given what the store read of it for one caller (ADR 0007).
//!
//! Fairness is FIFO with readers batched: a writer waits for every holder and for everyone
//! queued before it; a reader waits only for a writer that holds the key or is queued before
//! it, so readers that arrive together share the key, and a queued writer is never starved by
//! readers arriving after it. Every grant, shared or exclusive, takes the key's next token, so
//! a writer's token is above every token granted before it: a resource refuses a write below
//! its writer fence, and a read-side action from a reader older than the current writer.
//!
//! A session holds a key in one mode: asking for the other one while holding is refused, not
//! converted (two readers upgrading at once would each wait for the other forever).

use lock_api::{FencingToken, SessionId};

use crate::Refusal;
use crate::decide::queued_or_delayed;

/// How a key is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// With other readers.
    Shared,
    /// Alone.
    Exclusive,
}

/// One live grant of a key, as a decision needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedHolder {
    /// Its session.
    pub session: SessionId,
    /// Its mode.
    pub mode: Mode,
    /// Its token.
    pub token: FencingToken,
    /// Milliseconds until it ends unless renewed (the store's clock).
    pub free_in_ms: u64,
}

/// What the store read of one key for one caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedView<'a> {
    /// The live grants.
    pub holders: &'a [SharedHolder],
    /// Live queue places of other sessions ahead of the caller's, asking for the key
    /// exclusively.
    pub writers_ahead: u64,
    /// Live queue places of other sessions ahead of the caller's, asking to share it.
    pub readers_ahead: u64,
    /// Milliseconds of lock-delay in force for this caller (0: none, or the caller is exempt).
    pub delay_left_ms: u64,
    /// The key's last token (0: never granted).
    pub last_token: u64,
}

/// What the store does with the acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedDecision {
    /// The caller holds the key in this mode already: the same token again.
    Regrant {
        /// The caller's token.
        token: FencingToken,
    },
    /// Grant a new token: the key's last, plus one.
    Grant {
        /// The new token.
        token: FencingToken,
    },
    /// The caller holds the key in the other mode: no grant (release it first).
    ModeConflict {
        /// The mode it holds.
        held: Mode,
    },
    /// No grant: answer this (the store may still keep the caller's queue place).
    Refuse(Refusal),
}

/// The decision for `caller`, asking for `mode`, on a key read as `view`.
pub fn decide_shared(view: &SharedView<'_>, caller: SessionId, mode: Mode) -> SharedDecision {
    assert_consistent(view);
    if let Some(mine) = view.holders.iter().find(|h| h.session == caller) {
        return if mine.mode == mode {
            SharedDecision::Regrant { token: mine.token }
        } else {
            SharedDecision::ModeConflict { held: mine.mode }
        };
    }
    if let Some(blocking) = blocking_holder(view, mode) {
        return SharedDecision::Refuse(Refusal::Held {
            holder_token: blocking.token,
            free_in_ms: blocking.free_in_ms,
        });
    }
    let ahead = match mode {
        Mode::Exclusive => view.writers_ahead + view.readers_ahead,
        Mode::Shared if view.writers_ahead > 0 => view.writers_ahead + view.readers_ahead,
        Mode::Shared => 0,
    };
    if let Some(refusal) = queued_or_delayed(ahead, view.delay_left_ms) {
        return SharedDecision::Refuse(refusal);
    }
    let token = FencingToken(view.last_token + 1);
    assert!(token.0 > view.last_token, "tokens only rise");
    assert!(
        view.holders.iter().all(|h| h.token < token),
        "above every grant before it"
    );
    SharedDecision::Grant { token }
}

/// The grant that keeps `mode` out longest: for a writer, the last holder to end; for a
/// reader, the writer holding the key.
fn blocking_holder<'a>(view: &SharedView<'a>, mode: Mode) -> Option<&'a SharedHolder> {
    match mode {
        Mode::Exclusive => view.holders.iter().max_by_key(|h| h.free_in_ms),
        Mode::Shared => view.holders.iter().find(|h| h.mode == Mode::Exclusive),
    }
}

/// What every store must have kept true of a key: a writer alone, one grant per session,
/// none above the key's last token.
fn assert_consistent(view: &SharedView<'_>) {
    let writers = view
        .holders
        .iter()
        .filter(|h| h.mode == Mode::Exclusive)
        .count();
    assert!(
        writers == 0 || view.holders.len() == 1,
        "a writer holds the key alone"
    );
    for (i, holder) in view.holders.iter().enumerate() {
        assert!(
            holder.token.0 <= view.last_token,
            "no token above the key's last"
        );
        assert!(
            view.holders[i + 1..]
                .iter()
                .all(|o| o.session != holder.session),
            "one grant per session"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(n: u128) -> SessionId {
        SessionId(uuid::Uuid::from_u128(n))
    }

    fn holder(n: u128, mode: Mode, token: u64, free_in_ms: u64) -> SharedHolder {
        SharedHolder {
            session: session(n),
            mode,
            token: FencingToken(token),
            free_in_ms,
        }
    }

    fn view(holders: &[SharedHolder], writers_ahead: u64, readers_ahead: u64) -> SharedView<'_> {
        SharedView {
            holders,
            writers_ahead,
            readers_ahead,
            delay_left_ms: 0,
            last_token: 9,
        }
    }

    const GRANT: SharedDecision = SharedDecision::Grant {
        token: FencingToken(10),
    };

    /// Readers share, a writer is alone, and the queue is FIFO with readers batched.
    #[test]
    fn the_decision_table() {
        use Mode::{Exclusive, Shared};
        let me = session(1);
        let readers = [holder(2, Shared, 6, 300), holder(3, Shared, 8, 900)];
        let writer = [holder(4, Exclusive, 9, 500)];
        let held = |token, free_in_ms| {
            SharedDecision::Refuse(Refusal::Held {
                holder_token: FencingToken(token),
                free_in_ms,
            })
        };
        let queued = |ahead| SharedDecision::Refuse(Refusal::Queued { ahead });
        let table = [
            // (holders, writers ahead, readers ahead, mode, answer)
            (&[][..], 0, 0, Shared, GRANT),
            (&[][..], 0, 0, Exclusive, GRANT),
            (&readers[..], 0, 0, Shared, GRANT),
            (&readers[..], 0, 0, Exclusive, held(8, 900)),
            (&writer[..], 0, 0, Shared, held(9, 500)),
            (&writer[..], 0, 0, Exclusive, held(9, 500)),
            // Readers ahead of a reader hold nobody back; a writer ahead does.
            (&readers[..], 0, 2, Shared, GRANT),
            (&readers[..], 1, 2, Shared, queued(3)),
            (&[][..], 0, 2, Exclusive, queued(2)),
            (&[][..], 1, 0, Exclusive, queued(1)),
        ];
        for (holders, writers_ahead, readers_ahead, mode, answer) in table {
            let seen = decide_shared(&view(holders, writers_ahead, readers_ahead), me, mode);
            assert_eq!(
                seen, answer,
                "{holders:?} w{writers_ahead} r{readers_ahead} {mode:?}"
            );
        }
    }

    #[test]
    fn a_holder_is_answered_its_own_grant_and_never_converted() {
        use Mode::{Exclusive, Shared};
        let me = session(1);
        let reading = [holder(1, Shared, 6, 300), holder(2, Shared, 7, 300)];
        assert_eq!(
            decide_shared(&view(&reading, 3, 0), me, Shared),
            SharedDecision::Regrant {
                token: FencingToken(6)
            }
        );
        assert_eq!(
            decide_shared(&view(&reading, 0, 0), me, Exclusive),
            SharedDecision::ModeConflict { held: Shared }
        );
        let writing = [holder(1, Exclusive, 9, 300)];
        assert_eq!(
            decide_shared(&view(&writing, 0, 0), me, Shared),
            SharedDecision::ModeConflict { held: Exclusive }
        );
    }

    /// A run of arrivals: each grant's token is above every token before it, so a writer's
    /// is above every reader's that it follows, and a writer never shares the key.
    #[test]
    fn a_writers_token_is_above_every_grant_before_it() {
        let modes = [Mode::Shared, Mode::Shared, Mode::Exclusive, Mode::Shared];
        let mut holders: Vec<SharedHolder> = Vec::new();
        let mut last_token = 0;
        for (n, mode) in (1..).zip(modes) {
            if mode == Mode::Exclusive {
                holders.clear(); // the readers release; the writer then comes alone
            }
            let view = SharedView {
                holders: &holders,
                writers_ahead: 0,
                readers_ahead: 0,
                delay_left_ms: 0,
                last_token,
            };
            match decide_shared(&view, session(n), mode) {
                SharedDecision::Grant { token } => {
                    assert!(holders.iter().all(|h| h.token < token));
                    last_token = token.0;
                    holders.push(holder(n, mode, token.0, 1_000));
                }
                SharedDecision::Refuse(Refusal::Held { holder_token, .. }) => {
                    assert_eq!(mode, Mode::Shared, "a reader after the writer waits");
                    assert_eq!(holder_token, FencingToken(3), "for the writer");
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(last_token, 3);
    }

    #[test]
    #[should_panic(expected = "a writer holds the key alone")]
    fn a_store_that_let_a_writer_share_is_caught() {
        let both = [
            holder(2, Mode::Exclusive, 5, 900),
            holder(3, Mode::Shared, 6, 900),
        ];
        decide_shared(&view(&both, 0, 0), session(1), Mode::Shared);
    }
}
