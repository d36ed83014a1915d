//! What the checkers report: the first violated invariant with the facts to debug it, and
//! the "sometimes" coverage counters a run of many seeds must all reach.

use std::collections::BTreeMap;

use crate::sched::{MS, Nanos};

/// Everything a seed run must reach at least once across the CI seed count: each fault kind,
/// each loss reason, a stale write fenced, a lease-short skip, a NOT_LEADER retry, a
/// failover, each way a key set's request goes (granted, refused on either key, parked,
/// woken, granted after parking, given up, cancelled, withheld, settled, a member stale), and
/// what the shares' checkers check (permits granted, beside each other and filling the pool,
/// refused when it is full; readers beside readers; writers after readers, each kind waiting
/// for the other; shares woken, renewed, lost, revoked, abandoned; a kind conflict), and
/// what the election's checkers check (elections won, some after waiting, by another session
/// than the last; leaders proclaiming and writing, deposed ones refused and fenced, resigning;
/// observers yielding leaders, none, a term before its value, a value, a change, and skipping
/// a lagging read, the premise of the rule they run), and what the watch checkers check
/// (watchers reading pages, sent events, moved on by empty pages, reconnecting after a
/// timeout or a stream broken in a page and resuming after their position, told of gaps that
/// skipped events of their prefix, caught up at the end; the store's log forgetting events,
/// and ending revoked grants).
/// A counter missing from a run of many seeds means the fault model or the checkers went
/// blind. (A loss the store reports as `SESSION_EXPIRED` is not here: while the
/// client's deadline never lies after the server's expiry, that deadline always passes first,
/// so it is not owed; nor is `SESSION_UNKNOWN` while the client still believes in its session,
/// which takes a store that forgets a live session, outside this fault model.)
pub const MUST_REACH: &[&str] = &[
    "fault: client pause",
    "fault: pause longer than the TTL",
    "fault: clock drift",
    "fault: message lost",
    "fault: message lost to a partition",
    "fault: message duplicated",
    "fault: message delayed",
    "fault: messages reordered",
    "fault: replica crash",
    "fault: store NOT_LEADER window",
    "fault: partition",
    "fault: a grant revoked",
    "fault: a wake-up lost",
    "fault: a wake-up late",
    "fault: a hand-over notice late",
    "a late hand-over notice found its request gone",
    "a hand-over older than its request asked again",
    "fault: a replica crashed with requests parked",
    "fault: pause between a guard and its write",
    "fault: store clock stepped forward",
    "a grant withheld: the store's clock stepped",
    "an acquire found the key in a lock-delay",
    "fault: a pause between guard and write outlived the lease",
    "a loss: deadline passed",
    "a loss: renew refused",
    "a guard stopped a write: deadline passed",
    "a stale write fenced",
    "a zombie's write fenced after a pause between guard and write",
    "an acquire gave up contended",
    "a parked acquire granted",
    "a freed key handed over to its head waiter",
    "a parked acquire answered by a hand-over",
    "a waiting acquire gave up at its deadline",
    "a waiting acquire's last try after its leave",
    "a parked acquire cancelled by its client",
    "an acquire cancelled with its store call in flight",
    "an abandoned request's grant given back",
    "an acquire given up unanswered sent its settling try",
    "a settling try's grant released",
    "a lease-short skip",
    "a NOT_LEADER answer retried",
    "a failover to the other replica",
    "an acquire found the lock held",
    "a session lost and replaced",
    "a payout settled",
    "a payout rejected",
    "a payout ambiguous",
    "a batch of several writes committed together",
    "a batch carried two writes on one key",
    "a key set granted",
    "a key set refused",
    "a key set refused on its account key",
    "a key set refused on its payout key",
    "a refused key set parked",
    "a parked key set woken by its freed key",
    "a waiting key set granted after parking",
    "a waiting key set gave up at its deadline",
    "a waiting key set's last try after its leave",
    "a waiting key set granted by its last try",
    "a parked key set cancelled by its client",
    "a key set cancelled with its store call in flight",
    "a key set answered NOT_LEADER",
    "a key set granted by the store, withheld by the clock guard",
    "a key set given up unanswered sent its settling try",
    "a key set's member refused as a stale re-grant",
    "a guard stopped a write: its set's other member lost",
    "a permit granted",
    "a permit refused: every permit held",
    "two permits held at once",
    "every permit of the pool held at once",
    "a reader granted",
    "a reader granted beside a reader",
    "a writer granted",
    "a writer granted after readers",
    "a writer waited for readers",
    "a reader waited for a writer",
    "a reader refused: a writer queued first",
    "a parked share woken by its key",
    "a share granted after waiting",
    "a share renewed",
    "a share lost: deadline passed",
    "a guard stopped a share's use: deadline passed",
    "a share job used its share and released it",
    "an abandoned request's pool or doc grant given back",
    "an acquire refused: its session holds the key in the other mode",
    "fault: a shared key's grants revoked",
    "fault: pause between a share's grant or guard and its use",
    "an election won",
    "a candidate elected after waiting in line",
    "a leadership change: another session won",
    "a leader proclaimed its value",
    "a deposed leader's proclaim refused",
    "a leader's write accepted",
    "a deposed leader's write fenced",
    "a leader's guard found its term over",
    "a leader resigned",
    "fault: a leader paused between its guard and its next step",
    "fault: the election's leader revoked",
    "an observer yielded a leader",
    "an observer yielded no leader",
    "an observer yielded a term before its first proclaim",
    "an observer yielded a leader's value",
    "an observer saw the leader change",
    "an observer skipped a term below its highest",
    "a watcher read a page",
    "a watcher was sent an event",
    "a watcher's empty page moved it to its end",
    "a watcher's read timed out",
    "a watcher reconnected",
    "a watcher's stream broke in a page",
    "a watcher resumed after its position on a new connection",
    "the store's log forgot events",
    "a watcher was told of a gap",
    "a gap skipped events under the watcher's prefix",
    "a watcher caught up once the faults healed",
    "a revoked grant's end logged as revoked",
];

/// How often each interesting thing happened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage(pub BTreeMap<&'static str, u64>);

impl Coverage {
    /// Counts one `what`.
    pub fn hit(&mut self, what: &'static str) {
        *self.0.entry(what).or_default() += 1;
    }

    /// Adds another run's counts.
    pub fn add(&mut self, other: &Coverage) {
        for (what, n) in &other.0 {
            *self.0.entry(what).or_default() += n;
        }
    }

    /// The counters of [`MUST_REACH`] never reached.
    pub fn missing(&self) -> Vec<&'static str> {
        MUST_REACH
            .iter()
            .filter(|w| self.0.get(*w).copied().unwrap_or(0) == 0)
            .copied()
            .collect()
    }
}

/// A violated invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which one.
    pub invariant: &'static str,
    /// When, in true time.
    pub at: Nanos,
    /// What was seen.
    pub detail: String,
    /// The last events of the parties involved.
    pub recent: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} violated at {:.3} ms: {}",
            self.invariant,
            self.at as f64 / MS as f64,
            self.detail
        )?;
        if !self.recent.is_empty() {
            writeln!(f, "last events of the parties involved:")?;
            write!(f, "{}", self.recent)?;
        }
        Ok(())
    }
}
