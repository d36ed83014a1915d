//! What the watch checkers witness, kept beside the model rather than read from it: a copy of
//! every event the store ever logged (read from the store's log after every event of the run,
//! without the network and around `events_after`'s paging), the grants the log began and has
//! not ended, and for each watcher how far what it was sent has been checked. A store whose
//! window is shorter than what one step of the run logs forgets events before the copy is
//! made: no watcher can have read them either (reads are steps of their own), so each is kept
//! as a position forgotten unseen, which a watcher may pass only by a gap; the grants'
//! history is then no longer whole and goes unchecked for the run (the shortest window, 12,
//! is twice the most one step logged in 2,000 seeds, so it does not happen). The checks are
//! here too: each takes what a watcher was sent (an event, a gap, a move to an empty page's
//! end) or what the store logged, and answers the broken invariant, if any, with what was
//! seen. The only code that writes these records.

use std::collections::BTreeSet;

use lock_api::{EventKind, FencingToken, LockEvent, LockKey, SessionId, WatchGap};

/// A watcher is sent every event under its prefix in order, or told of a gap.
pub(super) const WATCHERS_SEE_ALL: &str = "watchers see every event in order or are told of a gap";
/// The log gives positions 1, 2, 3, … each to one event.
pub(super) const EVERY_POSITION: &str = "the log gives every position once";
/// The log begins each grant once and ends it at most once, after it began.
pub(super) const EACH_GRANT_ONCE: &str = "the log begins and ends each grant once";
/// A grant an operator revoked ends in the log as revoked.
pub(super) const REVOKED_AS_REVOKED: &str = "the log ends a revoked grant as revoked";
/// Once the faults stop, every watcher reaches the log's head.
pub(super) const CATCHES_UP: &str = "a watcher catches up once the faults heal";

/// A broken invariant and what was seen.
pub(super) type Broken = (&'static str, String);

/// One watcher as the checker follows it.
#[derive(Debug)]
struct Followed {
    prefix: String,
    /// What it was sent has been checked through this position (its reader's position).
    through: u64,
}

/// What the watch checkers witnessed.
#[derive(Debug, Default)]
pub(super) struct WatchWitness {
    /// Every event the store logged: position p at index p − 1 (`None`: forgotten before the
    /// checker copied it).
    log: Vec<Option<LockEvent>>,
    /// The highest position the store's log forgot, as last read.
    floor: u64,
    /// Grants the log began and has not ended.
    open: BTreeSet<(LockKey, FencingToken)>,
    /// Grants the log ended.
    ended: BTreeSet<(LockKey, FencingToken)>,
    /// Some events were forgotten before the checker copied them: the grants' history is not
    /// whole.
    missed: bool,
    /// The watchers, by number.
    followed: Vec<Followed>,
}

impl WatchWitness {
    /// The highest position logged.
    pub(super) fn head(&self) -> u64 {
        self.log.len() as u64
    }

    /// The highest position the store's log forgot, as last read.
    pub(super) fn floor(&self) -> u64 {
        self.floor
    }

    /// Follows a new watcher of `prefix`, resuming after `after`; its number.
    pub(super) fn follow(&mut self, prefix: &str, after: u64) -> usize {
        self.followed.push(Followed {
            prefix: prefix.to_owned(),
            through: after,
        });
        self.followed.len() - 1
    }

    /// Where watcher `w` has been checked through.
    pub(super) fn through(&self, w: usize) -> u64 {
        self.followed[w].through
    }

    /// Whether some events were forgotten before the checker copied them.
    pub(super) fn missed(&self) -> bool {
        self.missed
    }

    /// The store's log read after [`WatchWitness::head`]: its floor and the events it keeps
    /// after the head, copied; each must take the next position (after the floor, if the
    /// floor passed the head), and begin, end or announce a grant as the grant's history
    /// allows.
    pub(super) fn record(&mut self, floor: u64, events: Vec<LockEvent>) -> Result<(), Broken> {
        self.floor = self.floor.max(floor);
        if let Some(first) = events.first() {
            // Forgotten before the copy (the window moved past them within one step).
            while self.head() < floor.min(first.position.saturating_sub(1)) {
                self.missed = true;
                self.log.push(None);
            }
        }
        for event in events {
            let next = self.head() + 1;
            if event.position != next {
                let detail = format!(
                    "the store's log holds position {} where {next} was next (its floor {floor}): \
                     {event:?}",
                    event.position
                );
                return Err((EVERY_POSITION, detail));
            }
            if !self.missed {
                self.grant_history(&event)?;
            }
            self.log.push(Some(event));
        }
        Ok(())
    }

    /// `event` against the history of its grant: begun once, ended once after, announcing
    /// only while begun and not ended.
    fn grant_history(&mut self, event: &LockEvent) -> Result<(), Broken> {
        let grant = (event.lock_key.clone(), event.fencing_token);
        let fine = match event.kind {
            EventKind::Granted => !self.ended.contains(&grant) && self.open.insert(grant),
            EventKind::Proclaimed => self.open.contains(&grant),
            EventKind::Released | EventKind::Expired | EventKind::Revoked => {
                self.open.remove(&grant) && self.ended.insert(grant)
            }
        };
        if fine {
            return Ok(());
        }
        let detail = format!(
            "{} {:?} token {} at position {}, its grant {} before",
            event.lock_key,
            event.kind,
            event.fencing_token.0,
            event.position,
            if self
                .ended
                .contains(&(event.lock_key.clone(), event.fencing_token))
            {
                "ended"
            } else if self
                .open
                .contains(&(event.lock_key.clone(), event.fencing_token))
            {
                "begun and not ended"
            } else {
                "never begun"
            }
        );
        Err((EACH_GRANT_ONCE, detail))
    }

    /// The grants the log began and has not ended are the store's `live` grants (at an
    /// instant past every lease and session, after a reap: nothing ended is left unremoved).
    pub(super) fn open_are_live(
        &self,
        live: &[(LockKey, SessionId, FencingToken)],
    ) -> Result<(), Broken> {
        if self.missed {
            return Ok(());
        }
        let live: BTreeSet<(LockKey, FencingToken)> =
            live.iter().map(|(k, _, t)| (k.clone(), *t)).collect();
        if live == self.open {
            return Ok(());
        }
        let never_ended: Vec<_> = self.open.difference(&live).take(4).collect();
        let never_begun: Vec<_> = live.difference(&self.open).take(4).collect();
        let detail = format!(
            "after a reap past every lease: grants the log began and never ended {never_ended:?}, \
             live grants it never began {never_begun:?}"
        );
        Err((EACH_GRANT_ONCE, detail))
    }

    /// The first position after `after` (and at or below `until`) that watcher `w` must be
    /// sent or told of a gap over: the next logged event under its prefix, or a position
    /// forgotten unseen (`None` inside).
    fn next_under(&self, w: usize, after: u64, until: u64) -> Option<(u64, Option<&LockEvent>)> {
        let prefix = &self.followed[w].prefix;
        let from = usize::try_from(after).unwrap_or(usize::MAX);
        let to = usize::try_from(until)
            .unwrap_or(usize::MAX)
            .min(self.log.len());
        let found = (self.log.get(from..to)?.iter().enumerate()).find(|(_, e)| {
            e.as_ref()
                .is_none_or(|e| lock_api::watched(prefix, &e.lock_key))
        });
        found.map(|(i, e)| (after + i as u64 + 1, e.as_ref()))
    }

    /// Watcher `w` was sent `event`: it must be the next logged event under its prefix after
    /// what it was sent before, the same in every field.
    pub(super) fn sent_event(&mut self, w: usize, event: &LockEvent) -> Result<(), Broken> {
        let (through, prefix) = (self.followed[w].through, &self.followed[w].prefix);
        let seen = format!(
            "w{w} (prefix {prefix:?}, through {through}) was sent position {} ({} {:?} token {})",
            event.position, event.lock_key, event.kind, event.fencing_token.0
        );
        if event.position <= through {
            let detail = format!("{seen}: at or below a position it was sent (a duplicate)");
            return Err((WATCHERS_SEE_ALL, detail));
        }
        let expected = self.next_under(w, through, u64::MAX);
        let detail = match expected {
            Some((_, Some(next))) if next == event => {
                self.followed[w].through = event.position;
                return Ok(());
            }
            Some((_, Some(next))) if next.position < event.position => format!(
                "{seen}, skipping position {} ({} {:?}) with no gap",
                next.position, next.lock_key, next.kind
            ),
            Some((_, Some(next))) => format!("{seen}, but the log holds {next:?} next"),
            Some((position, None)) => {
                format!("{seen}, passing position {position}, which the store forgot, with no gap")
            }
            None => format!("{seen}, which the log never held under its prefix"),
        };
        Err((WATCHERS_SEE_ALL, detail))
    }

    /// Watcher `w` was told of `gap`: it must start at what it was sent last and end at or
    /// below the store's floor (it skips only events the store forgot). The events under its
    /// prefix it skips: how many.
    pub(super) fn sent_gap(&mut self, w: usize, gap: WatchGap) -> Result<usize, Broken> {
        let through = self.followed[w].through;
        let seen = format!(
            "w{w} (through {through}) was told of a gap after {} to {}",
            gap.after, gap.resume_from
        );
        if gap.after != through || gap.resume_from <= gap.after {
            let detail = format!("{seen}: not after its position, or empty");
            return Err((WATCHERS_SEE_ALL, detail));
        }
        if gap.resume_from > self.floor {
            let detail = format!(
                "{seen}, though the store forgot only through {}",
                self.floor
            );
            return Err((WATCHERS_SEE_ALL, detail));
        }
        let prefix = &self.followed[w].prefix;
        let from = usize::try_from(gap.after).unwrap_or(usize::MAX);
        let to = usize::try_from(gap.resume_from).unwrap_or(usize::MAX);
        let skipped = (self.log.get(from..to).unwrap_or_default().iter())
            .flatten()
            .filter(|e| lock_api::watched(prefix, &e.lock_key))
            .count();
        self.followed[w].through = gap.resume_from;
        Ok(skipped)
    }

    /// Watcher `w` read an empty page and moved to its end, `to`: the log must hold no event
    /// under its prefix between what it was sent last and `to`, nor end before `to`.
    pub(super) fn moved_to(&mut self, w: usize, to: u64) -> Result<(), Broken> {
        let through = self.followed[w].through;
        let seen = format!("w{w} (through {through}) read an empty page through {to}");
        if to < through || to > self.head() {
            let detail = format!("{seen}, the log's head {}", self.head());
            return Err((WATCHERS_SEE_ALL, detail));
        }
        if let Some((position, missed)) = self.next_under(w, through, to) {
            let detail = format!("{seen}, missing position {position} ({missed:?}) with no gap");
            return Err((WATCHERS_SEE_ALL, detail));
        }
        self.followed[w].through = to;
        Ok(())
    }
}
