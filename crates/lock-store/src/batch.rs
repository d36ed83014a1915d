//! Group commit, decided without I/O: which writes a replica gathers into one batch, when a
//! batch goes, and which caller each answer of a batch belongs to.
//!
//! A store that takes a batch in one transaction (PostgreSQL: one statement, one WAL flush)
//! answers N writes for the price of one commit. [`Gatherer`] is the policy, adaptive as a
//! write-ahead log's group commit is: a write that finds a free slot (fewer than
//! [`BATCHES_IN_FLIGHT_MAX`] batches in flight) goes at once (no added latency for a lone
//! client); writes that arrive while every slot is busy wait and go together as the next batch.
//! lock-server's `Batched` store drives it with tokio; lock-sim drives it on virtual time, so
//! the simulation sees what the product does.
//!
//! Architecture Invariant: a batch's answers are routed back by position, never by content:
//! the i-th answer belongs to the i-th write taken, and a store answers exactly one result
//! per write, in the order it was given.

use std::collections::VecDeque;

use lock_api::{FencingToken, LockGrant, LockKey, SessionId};

use crate::{AcquireOutcome, AcquireSpec, LockStore, SessionRecord, StoreError};

/// The most writes one batch carries: a bound on the statement a store builds and on the
/// wait of the last write in it (each write in a batch waits for all of them).
pub const BATCH_WRITES_MAX: usize = 256;

/// Batches in flight at once. One would make every write that arrives during a flush wait for
/// it, even a waiter's re-acquire after a hand-off on a hot key (measured: a hot key's
/// hand-offs 27 % slower than a commit per write); two let such a write go at once while a
/// batch is out, and still gather everything that arrives while both are.
pub const BATCHES_IN_FLIGHT_MAX: usize = 2;

/// Whether a write that finds `pending` other writes of its replica unanswered skips the
/// gatherer and goes alone, at once, on its caller's own task: only when there are none. A
/// lone client then pays nothing for group commit (a hop to the gathering task and back cost
/// a seventh of the rate at one client); as soon as writes overlap, they gather.
pub const fn goes_alone(pending: usize) -> bool {
    pending == 0
}

/// A batch's number, given when it is taken.
pub type BatchId = u64;

/// A write a replica may gather with others: the lock surface's heartbeat (L2), acquire
/// (L4), renew (L5) and release (L6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOp {
    /// Extend a session by its TTL.
    Heartbeat {
        /// The session.
        session: SessionId,
    },
    /// Acquire a key.
    Acquire {
        /// The key.
        key: LockKey,
        /// The asking session.
        session: SessionId,
        /// Lease, queue place and lock-delay.
        spec: AcquireSpec,
    },
    /// Renew a grant.
    Renew {
        /// The key.
        key: LockKey,
        /// The holding session.
        session: SessionId,
        /// The grant's token.
        token: FencingToken,
    },
    /// Release a grant.
    Release {
        /// The key.
        key: LockKey,
        /// The holding session.
        session: SessionId,
        /// The grant's token.
        token: FencingToken,
    },
}

/// A store's answer to one [`BatchOp`], of the op's own kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchAnswer {
    /// To a heartbeat.
    Heartbeat(SessionRecord),
    /// To an acquire.
    Acquire(AcquireOutcome),
    /// To a renew.
    Renew(LockGrant),
    /// To a release: whether a grant was deleted.
    Release(bool),
}

/// One write's result in a batch.
pub type BatchResult = Result<BatchAnswer, StoreError>;

impl BatchOp {
    /// Whether `result` can be this write's own: a failure, or an answer of its kind about
    /// its key, session and token. What a store's answers are checked against before each
    /// goes to the caller in its write's position.
    pub fn answered_by(&self, result: &BatchResult) -> bool {
        let Ok(answer) = result else { return true };
        match (self, answer) {
            (Self::Heartbeat { session }, BatchAnswer::Heartbeat(record)) => {
                record.session_id == *session
            }
            (Self::Acquire { key, session, .. }, BatchAnswer::Acquire(outcome)) => match outcome {
                AcquireOutcome::Granted { grant, .. } => {
                    grant.lock_key == *key && grant.session_id == *session
                }
                _ => true,
            },
            (Self::Renew { key, token, .. }, BatchAnswer::Renew(grant)) => {
                grant.lock_key == *key && grant.fencing_token == *token
            }
            (Self::Release { .. }, BatchAnswer::Release(_)) => true,
            _ => false,
        }
    }

    /// Applies this write alone, through the store's single-write call.
    pub async fn apply_alone(&self, store: &(impl LockStore + ?Sized)) -> BatchResult {
        Ok(match self {
            Self::Heartbeat { session } => BatchAnswer::Heartbeat(store.heartbeat(*session).await?),
            Self::Acquire { key, session, spec } => {
                BatchAnswer::Acquire(store.acquire_with(key, *session, *spec).await?)
            }
            Self::Renew {
                key,
                session,
                token,
            } => BatchAnswer::Renew(store.renew(key, *session, *token).await?),
            Self::Release {
                key,
                session,
                token,
            } => BatchAnswer::Release(store.release(key, *session, *token).await?),
        })
    }
}

/// An answer of the wrong kind for its write: a store bug, never the caller's.
pub fn mismatched(answer: &BatchAnswer) -> StoreError {
    StoreError::Internal(format!("the store answered a write with {answer:?}"))
}

/// The gathering policy over callers of type `C` (a reply channel, a simulated request) and
/// writes of type `O` ([`BatchOp`] in lock-server).
#[derive(Debug)]
pub struct Gatherer<C, O = BatchOp> {
    waiting: VecDeque<(C, O)>,
    /// Each batch in flight: its callers with their writes, in the order they were taken.
    in_flight: std::collections::BTreeMap<BatchId, Vec<(C, O)>>,
    next_id: BatchId,
}

impl<C, O> Default for Gatherer<C, O> {
    fn default() -> Self {
        Self {
            waiting: VecDeque::new(),
            in_flight: std::collections::BTreeMap::new(),
            next_id: 0,
        }
    }
}

/// A batch came back with a different number of results than it had writes: none of its
/// callers can be told which result is its own.
#[derive(Debug, PartialEq, Eq)]
pub struct Miscounted<C> {
    /// The batch's callers, each to be failed.
    pub callers: Vec<C>,
    /// How many results came back.
    pub results: usize,
}

impl<C> Miscounted<C> {
    /// The failure each caller is answered with.
    pub fn error(&self) -> StoreError {
        StoreError::Internal(format!(
            "the store answered {} results to a batch of {} writes",
            self.results,
            self.callers.len()
        ))
    }
}

impl<C, O: Clone> Gatherer<C, O> {
    /// A write arrives from `caller`.
    pub fn push(&mut self, caller: C, op: O) {
        self.waiting.push_back((caller, op));
    }

    /// Keeps only the waiting writes whose caller `keep` still wants answered (a gone
    /// caller's write is never sent). Batches in flight are untouched.
    pub fn retain_waiting(&mut self, keep: impl Fn(&C) -> bool) {
        let before = self.waiting.len();
        self.waiting.retain(|(caller, _)| keep(caller));
        debug_assert!(self.waiting.len() <= before);
    }

    /// How many batches are in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The next batch to send, when a slot is free and writes wait: up to
    /// [`BATCH_WRITES_MAX`] of them, oldest first. Taking it puts it in flight.
    pub fn take(&mut self) -> Option<(BatchId, Vec<O>)> {
        if self.in_flight.len() >= BATCHES_IN_FLIGHT_MAX || self.waiting.is_empty() {
            return None;
        }
        let n = self.waiting.len().min(BATCH_WRITES_MAX);
        let writes: Vec<(C, O)> = self.waiting.drain(..n).collect();
        let ops: Vec<O> = writes.iter().map(|(_, op)| op.clone()).collect();
        debug_assert!(!ops.is_empty() && ops.len() <= BATCH_WRITES_MAX);
        self.next_id += 1;
        self.in_flight.insert(self.next_id, writes);
        debug_assert!(self.in_flight.len() <= BATCHES_IN_FLIGHT_MAX);
        Some((self.next_id, ops))
    }

    /// Batch `id` came back: each caller with its own result, the i-th result to the i-th
    /// write taken. `answers(op, result)` says whether a result can be the write's own: each
    /// routed pair is asserted with it (debug builds), where an answer meets its caller.
    ///
    /// # Panics
    /// When batch `id` is not in flight: the shell completed a batch it never took, or twice.
    pub fn complete<R>(
        &mut self,
        id: BatchId,
        results: Vec<R>,
        answers: impl Fn(&O, &R) -> bool,
    ) -> Result<Vec<(C, R)>, Miscounted<C>> {
        let writes = self
            .in_flight
            .remove(&id)
            .expect("a batch completes once, after it was taken");
        assert!(
            self.in_flight.len() < BATCHES_IN_FLIGHT_MAX,
            "a slot is free once a batch completes"
        );
        if results.len() != writes.len() {
            return Err(Miscounted {
                callers: writes.into_iter().map(|(caller, _)| caller).collect(),
                results: results.len(),
            });
        }
        let taken = writes.len();
        let answered: Vec<(C, R)> = writes
            .into_iter()
            .zip(results)
            .map(|((caller, op), result)| {
                debug_assert!(
                    answers(&op, &result),
                    "a batch answer routed to another write"
                );
                (caller, result)
            })
            .collect();
        debug_assert_eq!(answered.len(), taken, "one answer per write taken");
        Ok(answered)
    }

    /// Forgets every write, in flight or waiting (the process that held them is gone).
    pub fn clear(&mut self) {
        self.waiting.clear();
        self.in_flight.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(n: u128) -> BatchOp {
        BatchOp::Heartbeat {
            session: SessionId(uuid::Uuid::from_u128(n)),
        }
    }

    fn answer(n: u128) -> BatchResult {
        Err(StoreError::SessionUnknown(SessionId(
            uuid::Uuid::from_u128(n),
        )))
    }

    /// Whether `result` is about `op`'s own session (every test answer is a refusal naming it).
    #[allow(clippy::trivially_copy_pass_by_ref)]
    fn own(op: &BatchOp, result: &BatchResult) -> bool {
        matches!(
            (op, result),
            (BatchOp::Heartbeat { session }, Err(StoreError::SessionUnknown(s))) if s == session
        )
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a batch answer routed to another write")]
    fn answers_out_of_their_writes_order_stop_at_the_routing() {
        let mut g = Gatherer::default();
        g.push(1, op(1));
        g.push(2, op(2));
        let (id, _) = g.take().unwrap();
        let _ = g.complete(id, vec![answer(2), answer(1)], own);
    }

    #[test]
    fn a_gone_callers_waiting_write_is_never_sent() {
        let mut g = Gatherer::default();
        let mut slots = Vec::new();
        for n in 0..BATCHES_IN_FLIGHT_MAX as u128 {
            g.push(n, op(n));
            slots.push(g.take().expect("a free slot").0);
        }
        for n in 10..14 {
            g.push(n, op(n));
        }
        g.retain_waiting(|caller| caller % 2 == 0);
        let answered = g.complete(slots[0], vec![answer(0)], own).unwrap();
        assert_eq!(answered, vec![(0, answer(0))], "in flight: untouched");
        let (_, ops) = g.take().expect("a slot freed");
        assert_eq!(ops, vec![op(10), op(12)], "only the callers still waiting");
    }

    #[test]
    fn a_write_goes_at_once_while_a_slot_is_free_and_later_ones_gather() {
        let mut g = Gatherer::default();
        let mut slots = Vec::new();
        for n in 0..BATCHES_IN_FLIGHT_MAX as u128 {
            g.push(n, op(n));
            let (id, ops) = g.take().expect("a free slot: the write goes at once");
            assert_eq!(ops, vec![op(n)]);
            slots.push((id, n));
        }
        g.push(10, op(10));
        g.push(11, op(11));
        assert_eq!(g.take(), None, "every slot busy: writes wait");
        let (id, n) = slots.remove(0);
        assert_eq!(
            g.complete(id, vec![answer(n)], own),
            Ok(vec![(n, answer(n))])
        );
        let (next, ops) = g.take().expect("a slot freed");
        assert_eq!(
            ops,
            vec![op(10), op(11)],
            "gathered while the slots were busy"
        );
        assert_eq!(
            g.complete(next, vec![answer(10), answer(11)], own),
            Ok(vec![(10, answer(10)), (11, answer(11))]),
            "each caller gets the answer at its own position"
        );
        assert_eq!(g.take(), None);
    }

    #[test]
    fn a_batch_carries_at_most_the_bound_and_the_rest_goes_next() {
        let mut g = Gatherer::default();
        let total = BATCH_WRITES_MAX + 3;
        for n in 0..total {
            g.push(n, op(n as u128));
        }
        let (id, first) = g.take().unwrap();
        assert_eq!(first.len(), BATCH_WRITES_MAX);
        let results: Vec<BatchResult> = (0..first.len() as u128).map(answer).collect();
        let routed = g.complete(id, results, own).unwrap();
        assert_eq!(routed.first().map(|r| r.0), Some(0));
        assert_eq!(routed.last().map(|r| r.0), Some(BATCH_WRITES_MAX - 1));
        assert_eq!(g.take().map(|(_, b)| b.len()), Some(3));
    }

    #[test]
    fn an_answer_is_checked_against_its_own_write() {
        let session = SessionId::random();
        let renew = |key: &str, token: u64| BatchOp::Renew {
            key: LockKey::parse(key).unwrap(),
            session,
            token: FencingToken(token),
        };
        let renewed = |key: &str, token: u64| -> BatchResult {
            Ok(BatchAnswer::Renew(LockGrant {
                lock_key: LockKey::parse(key).unwrap(),
                fencing_token: FencingToken(token),
                lease_ms: 1_000,
                expires_at: chrono::DateTime::UNIX_EPOCH,
                session_id: session,
                proof: None,
                waited_ms: 0,
                scope: lock_api::GrantScope::Exclusive,
            }))
        };
        let (a, b) = (renew("a", 1), renew("b", 2));
        assert!(a.answered_by(&renewed("a", 1)) && b.answered_by(&renewed("b", 2)));
        // Swapped in the batch: each answer is the other write's.
        assert!(!a.answered_by(&renewed("b", 2)) && !b.answered_by(&renewed("a", 1)));
        assert!(
            !a.answered_by(&Ok(BatchAnswer::Release(true))),
            "another kind"
        );
        assert!(a.answered_by(&Err(StoreError::Unavailable("down".into()))));
    }

    #[test]
    fn a_store_that_miscounts_fails_the_whole_batch_rather_than_guess() {
        let mut g = Gatherer::default();
        g.push("a", op(1));
        g.push("b", op(2));
        let (id, _) = g.take().unwrap();
        let miscounted = g.complete(id, vec![answer(1)], own).unwrap_err();
        assert_eq!(miscounted.callers, vec!["a", "b"]);
        assert!(matches!(miscounted.error(), StoreError::Internal(_)));
        assert_eq!(g.take(), None, "nothing is left in flight or waiting");
    }
}
