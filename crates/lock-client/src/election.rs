//! Leader election on the lock service (C2 §2.4c). An election is a key: a candidate
//! campaigns by acquiring it exclusively, waiting in the key's FIFO queue, and the grant's
//! fencing token is its **term** (a resource fences the leader's writes with the fence kit as
//! it fences a lock's). The leader announces a value (an address, a document) that anyone may
//! read with [`AdminClient::leader`](crate::admin::AdminClient::leader); it changes it with
//! [`LockClientSession::proclaim`](crate::LockClientSession::proclaim) and keeps its term, and
//! gives the term up with [`LockClientSession::resign`](crate::LockClientSession::resign),
//! which hands the key to the next candidate at once. Leadership is lost exactly as a lock
//! is: the SDK's conservative deadline, the loss listener, the held-check.

use std::time::Duration;

use chrono::{DateTime, Utc};
pub use lock_api::LeaderValue;
use lock_api::{FencingToken, LockError, LockInfo, LockKey, OwnerId, RetryVerdict};

use crate::admin::AdminClient;
use crate::handle::LockHandle;

/// How often an [`Observer`] asks for the leader.
pub const OBSERVE_POLL: Duration = Duration::from_millis(200);

/// A term of leadership this session holds: the election key's grant and what it announces.
/// Check it as a lock's handle before every write
/// ([`LockClientSession::check_still_held`](crate::LockClientSession::check_still_held) on
/// [`handle`](Self::handle)); send [`term`](Self::term) and the handle's proof with each.
#[derive(Debug)]
pub struct Leadership {
    handle: LockHandle,
    value: LeaderValue,
}

impl Leadership {
    pub(crate) fn new(handle: LockHandle, value: LeaderValue) -> Self {
        Self { handle, value }
    }

    /// The election's name (its key).
    pub fn name(&self) -> &LockKey {
        self.handle.lock_key()
    }

    /// The term: the grant's fencing token, above every earlier leader's.
    pub fn term(&self) -> FencingToken {
        self.handle.fencing_token()
    }

    /// What this leader announces now.
    pub fn value(&self) -> &LeaderValue {
        &self.value
    }

    /// The grant behind the term: its deadline, proof and held-checks are a lock's.
    pub fn handle(&self) -> &LockHandle {
        &self.handle
    }

    pub(crate) fn set_value(&mut self, value: LeaderValue) {
        self.value = value;
    }

    /// The grant behind the term, to hold and release as a lock's handle (releasing it
    /// resigns).
    pub fn into_handle(self) -> LockHandle {
        self.handle
    }
}

/// The leader of an election as the lock service answers it: for display and routing,
/// never a safety decision (the term fences writes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The term: the leader's fencing token.
    pub term: FencingToken,
    /// What it announces; `None` before its first announcement lands (a leader of a key
    /// acquired as a plain lock announces nothing).
    pub value: Option<LeaderValue>,
    /// Its session's owner.
    pub owner_id: OwnerId,
    /// When its grant ends unless renewed (display only).
    pub expires_at: DateTime<Utc>,
}

impl Leader {
    pub(crate) fn of(info: LockInfo) -> Option<Self> {
        // A key held by readers or permits has no leader.
        info.holders.is_empty().then_some(Self {
            term: info.fencing_token,
            value: info.value,
            owner_id: info.owner_id,
            expires_at: info.expires_at,
        })
    }
}

impl AdminClient {
    /// The leader of the election `name` (C2 §2.4c): its term, value and owner, or `None`
    /// when no candidate leads (nobody holds the key exclusively). For routing and display,
    /// as inspect is. Tries each endpoint once on `NOT_LEADER` or no answer.
    pub async fn leader(&self, name: &LockKey) -> Result<Option<Leader>, LockError> {
        Ok(self.inspect(name).await?.and_then(Leader::of))
    }

    /// A stream of the election `name`'s leader changes, terms never going backwards.
    pub fn observe(&self, name: &LockKey) -> Observer {
        Observer::new(self.clone(), name.clone())
    }
}

/// A stream of an election's leader changes, by asking every [`OBSERVE_POLL`]: each
/// [`next`](Self::next) answers when the term or its value differs from the last answer.
/// Terms never go backwards: a read naming a term below one already answered (an answer
/// that lagged another) is skipped.
#[derive(Debug)]
pub struct Observer {
    admin: AdminClient,
    name: LockKey,
    last: Option<Option<Leader>>,
    highest: FencingToken,
}

impl Observer {
    pub(crate) fn new(admin: AdminClient, name: LockKey) -> Self {
        Self {
            admin,
            name,
            last: None,
            highest: FencingToken(0),
        }
    }

    /// The next leader change (`None`: no leader now); the first call answers the current
    /// leader. A new term may be answered first without its value and then again with it
    /// (the value lands just after the grant). Unavailability and throttling are waited out;
    /// only a final error (a refused credential, say) ends the stream.
    pub async fn next(&mut self) -> Result<Option<Leader>, LockError> {
        loop {
            match self.admin.leader(&self.name).await {
                Ok(now) if is_change(self.last.as_ref(), self.highest, &now) => {
                    if let Some(leader) = &now {
                        self.highest = leader.term;
                    }
                    self.last = Some(now.clone());
                    return Ok(now);
                }
                Ok(_) => {}
                // Unavailable, or over its rate: asked again after the poll interval.
                Err(err)
                    if matches!(
                        err.retry(),
                        RetryVerdict::NextTick | RetryVerdict::Throttled
                    ) => {}
                Err(err) => return Err(err),
            }
            self.admin.sleep(OBSERVE_POLL).await;
        }
    }
}

/// Whether `now` is a change to answer after `last` (`None`: nothing answered yet), the
/// highest term answered being `highest`: another term or value (a renewal moves only
/// `expires_at`, which is no change), and no term below `highest`.
fn is_change(last: Option<&Option<Leader>>, highest: FencingToken, now: &Option<Leader>) -> bool {
    let who = |leader: &Option<Leader>| leader.as_ref().map(|l| (l.term, l.value.clone()));
    let moved = last.map(who) != Some(who(now));
    let backwards = now.as_ref().is_some_and(|l| l.term < highest);
    moved && !backwards
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(term: u64, value: &str) -> Option<Leader> {
        Some(Leader {
            term: FencingToken(term),
            value: Some(LeaderValue::parse(value).unwrap()),
            owner_id: OwnerId::parse("o").unwrap(),
            expires_at: DateTime::<Utc>::UNIX_EPOCH,
        })
    }

    #[test]
    fn an_observer_answers_changes_and_never_a_lower_term() {
        let t5 = leader(5, "a");
        assert!(is_change(None, FencingToken(0), &None), "the first answer");
        assert!(is_change(None, FencingToken(0), &t5));
        assert!(
            !is_change(Some(&t5), FencingToken(5), &t5),
            "the same leader again"
        );
        let renewed = t5.clone().map(|l| Leader {
            expires_at: l.expires_at + chrono::Duration::seconds(1),
            ..l
        });
        assert!(
            !is_change(Some(&t5), FencingToken(5), &renewed),
            "a renewal is no change"
        );
        assert!(
            is_change(Some(&t5), FencingToken(5), &leader(5, "b")),
            "a new value"
        );
        assert!(is_change(Some(&t5), FencingToken(5), &None), "no leader");
        assert!(
            !is_change(Some(&None), FencingToken(5), &leader(4, "old")),
            "a lagging read"
        );
        assert!(!is_change(Some(&t5), FencingToken(5), &leader(3, "old")));
        assert!(is_change(Some(&None), FencingToken(5), &leader(6, "c")));
    }
}
