//! The lock-server's watch reader's rule, copied: lock-server's W1 stream (`http/watch.rs`,
//! `Reader::next`) sends the events it read and has not sent yet, one at a time, its position
//! moving to each; with none left it reads a page of the store after its position
//! (`events_after(prefix, after, EVENT_PAGE_MAX)`): a position below the page's floor is
//! answered with a gap (the events up to the floor are gone) and the position moves to the
//! floor; an empty page moves it to the page's `through` and the stream waits for more; a page
//! of events is kept to send. lock-server's reader is async and HTTP-bound (and the
//! simulation runs no lock-server code), so the rule is copied here, sans IO, as the SDK
//! observer's rule is in [`crate::observe`].

use std::collections::VecDeque;

use lock_api::{LockEvent, WatchGap};
use lock_store::EventPage;

/// What the reader does with a page it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageStep {
    /// Its position was below the page's floor: it sends this gap, moves to the floor, and
    /// reads again (the page's events are not sent).
    Gap(WatchGap),
    /// The page was empty: its position moved to the page's `through`; it waits for more.
    Wait,
    /// The page's events are kept to send ([`WatchReader::next_event`]).
    Events,
}

/// One stream's reader: the prefix it watches, the position it sent last (or resumed after),
/// and what it read and has not sent.
#[derive(Debug, Clone)]
pub struct WatchReader {
    prefix: String,
    after: u64,
    pending: VecDeque<LockEvent>,
}

impl WatchReader {
    /// A reader of `prefix` resuming after `after`.
    pub fn new(prefix: impl Into<String>, after: u64) -> Self {
        Self {
            prefix: prefix.into(),
            after,
            pending: VecDeque::new(),
        }
    }

    /// The prefix it watches (a read asks for keys under it).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The position it sent last, or resumed after: its next read starts after it.
    pub fn after(&self) -> u64 {
        self.after
    }

    /// How many events it read and has not sent.
    pub fn unsent(&self) -> usize {
        self.pending.len()
    }

    /// The next event read and not yet sent, its position now the reader's; `None` when it
    /// must read a page.
    pub fn next_event(&mut self) -> Option<LockEvent> {
        let event = self.pending.pop_front()?;
        self.after = event.position;
        Some(event)
    }

    /// What the reader does with `page`, read after [`WatchReader::after`].
    pub fn take_page(&mut self, page: EventPage) -> PageStep {
        if self.after < page.floor {
            let gap = WatchGap {
                after: self.after,
                resume_from: page.floor,
            };
            self.after = page.floor;
            return PageStep::Gap(gap);
        }
        if page.events.is_empty() {
            self.after = page.through;
            return PageStep::Wait;
        }
        self.pending.extend(page.events);
        PageStep::Events
    }

    /// The stream's connection ended: what was read and not sent goes; the position stays
    /// (the next stream resumes after it, as a watcher reconnecting with `after` does).
    pub fn reconnect(&mut self) {
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use lock_api::{EventKind, FencingToken, LockKey};

    use super::*;

    fn page(positions: &[u64], through: u64, floor: u64) -> EventPage {
        let key = LockKey::parse("a").unwrap_or_else(|e| panic!("{e}"));
        let events = positions
            .iter()
            .map(|p| LockEvent {
                position: *p,
                ..LockEvent::new(key.clone(), EventKind::Granted, FencingToken(*p))
            })
            .collect();
        EventPage {
            events,
            through,
            floor,
        }
    }

    #[test]
    fn events_are_sent_in_order_each_moving_the_position() {
        let mut reader = WatchReader::new("", 3);
        assert_eq!(reader.take_page(page(&[4, 6], 6, 0)), PageStep::Events);
        assert_eq!(reader.after(), 3, "nothing sent yet");
        assert_eq!(reader.next_event().map(|e| e.position), Some(4));
        assert_eq!(reader.after(), 4);
        assert_eq!(reader.next_event().map(|e| e.position), Some(6));
        assert_eq!(reader.next_event(), None);
        assert_eq!(reader.after(), 6);
    }

    #[test]
    fn an_empty_page_moves_to_its_through_and_a_floor_above_is_a_gap() {
        let mut reader = WatchReader::new("pool:", 6);
        assert_eq!(reader.take_page(page(&[], 9, 2)), PageStep::Wait);
        assert_eq!(reader.after(), 9);
        let step = reader.take_page(page(&[13], 13, 11));
        let gap = WatchGap {
            after: 9,
            resume_from: 11,
        };
        assert_eq!(step, PageStep::Gap(gap));
        assert_eq!(reader.after(), 11);
        assert_eq!(reader.next_event(), None, "a gap's page is read again");
    }

    #[test]
    fn a_reconnect_drops_what_was_not_sent_and_keeps_the_position() {
        let mut reader = WatchReader::new("", 0);
        reader.take_page(page(&[1, 2, 3], 3, 0));
        assert!(reader.next_event().is_some());
        reader.reconnect();
        assert_eq!(reader.next_event(), None);
        assert_eq!(reader.after(), 1);
    }
}
