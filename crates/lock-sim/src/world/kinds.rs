//! The small types the world's parts share, kept apart from the parts that act on them so
//! that the world and its parts import them without importing each other: the keys share
//! jobs hold, a leader's next step, an observer, a watcher and its next step.

use std::collections::BTreeMap;

use lock_api::LockKey;

use crate::observe::{LeaderRead, TermWatch};
use crate::sched::Nanos;
use crate::watch::WatchReader;

/// The keys share jobs hold (ADR 0007): one semaphore key, one read/write key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SharedKey {
    /// A semaphore key: its permit jobs each hold one of its permits.
    Pool,
    /// A read/write key: readers share it, a writer holds it alone.
    Doc,
}

impl SharedKey {
    const POOL: &str = "pool:0";
    const DOC: &str = "doc:0";

    pub(super) fn key(self) -> LockKey {
        let name = match self {
            Self::Pool => Self::POOL,
            Self::Doc => Self::DOC,
        };
        LockKey::parse(name).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Which shared key `key` is, if it is one.
    pub(super) fn of(key: &LockKey) -> Option<Self> {
        match key.as_str() {
            Self::POOL => Some(Self::Pool),
            Self::DOC => Some(Self::Doc),
            _ => None,
        }
    }
}

/// A leader's next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lead {
    /// Announce the turn's value (L9).
    Proclaim,
    /// Write to the election's register with the term.
    Write,
}

/// One observer.
#[derive(Debug)]
pub(super) struct Observer {
    /// The replica its next poll goes to.
    pub(super) endpoint: usize,
    /// The SDK observer's rule and state.
    pub(super) watch: TermWatch,
    /// Its polls not yet answered, by request number: when each was sent.
    pub(super) in_flight: BTreeMap<u64, Nanos>,
    /// What it yielded, in order.
    pub(super) yielded: Vec<Option<LeaderRead>>,
}

/// One watcher: a process following the store's events under a prefix, reading pages
/// through a replica over the network by the lock-server reader's rule.
#[derive(Debug)]
pub(super) struct Watcher {
    /// The replica its connection goes to.
    pub(super) endpoint: usize,
    /// The reader's rule and state (its prefix, its position, what it read and has not sent).
    pub(super) reader: WatchReader,
    /// Its read in flight on the connection, by request number, if any.
    pub(super) in_flight: Option<u64>,
    /// Numbers its scheduled reads: one scheduled before a reconnect is dropped.
    pub(super) scheduled: u64,
    /// It reconnected and has not read a page since.
    pub(super) resuming: bool,
}

/// A watcher's next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WatchStep {
    /// It reads its next page (the read scheduled under this number).
    Read(u64),
    /// Its read of this request number has had no answer in time: the connection is dead.
    Timeout(u64),
}
