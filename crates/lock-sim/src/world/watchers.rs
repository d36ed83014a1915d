//! The watchers (C3 W1): processes that follow the store's events under a prefix (every key,
//! the payouts', one payout's, the election's, the pool's or the doc's), each reading pages of
//! `events_after` through a replica, over the network, by the lock-server watch reader's rule
//! (`watch::WatchReader`, a copy of its loop): every event it read is sent in order, a
//! position below the page's floor is a gap, an empty page moves it to the page's end and it
//! reads again after [`WAIT`] (lock-server's stream waits for the head to move, or a second).
//! One read at a time, on one connection: a read with no answer in [`READ_TIMEOUT`] kills the
//! connection, and so does the nemesis (0–2 reconnects per watcher, and a stream broken in the
//! middle of a page, its events after the break never sent); the watcher then reconnects to
//! the next replica after [`RECONNECT_AFTER`] (the SDK's pause), forgetting nothing but its
//! connection: it resumes after the last position it was sent. The nemesis also cuts a
//! watcher off from both replicas for a while (0–1 times, 0.5–3 s), which in a run whose store
//! keeps few events puts it behind the floor.
//!
//! What each watcher is sent is checked as it arrives against the checker's copy of the log
//! (`watch_witness.rs`): every event under its prefix, in order, each once, or a gap that
//! skips only what the store forgot. After the run, the watchers alone run on until each has
//! caught up with the log's head, and the log is held to its grants: every grant it began and
//! never ended is live in the store, past every lease; every grant the nemesis revoked ends in
//! it as revoked.

use lock_api::EventKind;

use super::kinds::{WatchStep, Watcher};
use super::links::Node;
use super::watch_witness::{CATCHES_UP, REVOKED_AS_REVOKED};
use super::{Body, Event, Fault, World};
use crate::sched::{MS, Nanos};
use crate::service::{LockAnswer, LockCall};
use crate::watch::{PageStep, WatchReader};

/// The prefixes a watcher may watch ("" is every key; two chances in seven).
const PREFIXES: [&str; 7] = ["", "", "payout:", "payout:1", "elect:", "pool:", "doc:"];
/// A watcher starts within this of the run's start.
const START_WITHIN: Nanos = 2_000 * MS;
/// After an empty page, a watcher reads again this much later.
const WAIT: Nanos = 250 * MS;
/// A read with no answer this long after it was sent: the connection is dead.
const READ_TIMEOUT: Nanos = 2_000 * MS;
/// A watcher reconnects this long after its connection died (the SDK's `RECONNECT_AFTER`).
const RECONNECT_AFTER: Nanos = 250 * MS;
/// Share of pages (of two events or more, in the fault window) whose stream breaks before
/// every event was sent.
const BREAK_SHARE: f64 = 0.05;
/// How long the watchers alone may run after the run to catch up.
const CATCH_UP_WITHIN: Nanos = 10_000 * MS;

impl World {
    /// The run's watchers, each reading from a moment in its first two seconds, after
    /// position 0 (none in a run without watchers, which draws nothing here).
    pub(super) fn start_watchers(&mut self) {
        for w in 0..self.cfg.watchers {
            let prefix = PREFIXES[self.rng.usize(0..PREFIXES.len())];
            let followed = self.watch.follow(prefix, 0);
            debug_assert_eq!(followed, w, "the checker numbers watchers as the run does");
            self.watchers.push(Watcher {
                endpoint: self.rng.usize(0..self.cfg.replicas),
                reader: WatchReader::new(prefix, 0),
                in_flight: None,
                scheduled: 0,
                resuming: false,
            });
            let first = self.rng.u64(0..START_WITHIN);
            self.schedule_read(w, first);
        }
    }

    /// The nemesis's faults for the watchers, drawn last and only in a run with watchers:
    /// reconnects, and a cut from both replicas.
    pub(super) fn schedule_watch_faults(&mut self) {
        let until = self.cfg.fault_until();
        for w in 0..self.cfg.watchers {
            for _ in 0..self.rng.usize(0..=2) {
                let at = self.rng.u64(0..until);
                self.q.at(at, Event::Nemesis(Fault::Reconnect(w)));
            }
            for _ in 0..self.rng.usize(0..=1) {
                let start = self.rng.u64(0..until);
                let len = self.rng.u64(500 * MS..=3_000 * MS);
                for r in 0..self.cfg.replicas {
                    let (a, b) = (Node::Watcher(w), Node::Replica(r));
                    self.q.at(start, Event::Nemesis(Fault::Partition(a, b)));
                    self.q.at(start + len, Event::Nemesis(Fault::Heal(a, b)));
                }
            }
        }
    }

    /// Watcher `w` reads `after` from now (a read scheduled before replaces none: the last
    /// scheduled is the one made).
    fn schedule_read(&mut self, w: usize, after: Nanos) {
        let watcher = &mut self.watchers[w];
        watcher.scheduled += 1;
        let step = WatchStep::Read(watcher.scheduled);
        self.q.after(after, Event::Watch(w, step));
    }

    /// Watcher `w`'s `step`: a scheduled read, or a read's timeout.
    pub(super) fn watch_step(&mut self, w: usize, step: WatchStep) {
        let watcher = &self.watchers[w];
        match step {
            WatchStep::Read(n) if n == watcher.scheduled && watcher.in_flight.is_none() => {
                self.watch_read(w);
            }
            WatchStep::Timeout(req) if watcher.in_flight == Some(req) => {
                self.coverage.hit("a watcher's read timed out");
                self.reconnect_watcher(w);
            }
            WatchStep::Read(_) | WatchStep::Timeout(_) => {}
        }
    }

    /// Watcher `w` reads a page after its position, on its connection to its replica.
    fn watch_read(&mut self, w: usize) {
        self.next_req += 1;
        let req = self.next_req;
        let watcher = &mut self.watchers[w];
        watcher.in_flight = Some(req);
        let call = LockCall::Events {
            prefix: watcher.reader.prefix().to_owned(),
            after: watcher.reader.after(),
        };
        let r = watcher.endpoint;
        self.send(Node::Watcher(w), Node::Replica(r), req, Body::Lock(call));
        self.q
            .after(READ_TIMEOUT, Event::Watch(w, WatchStep::Timeout(req)));
    }

    /// A watcher's read reaches replica `r`: read from the store now and answered (`None` from
    /// a replica that is down: it vanishes).
    pub(super) fn watch_call(&mut self, r: usize, from: Node, req: u64, call: &LockCall) {
        let LockCall::Events { prefix, after } = call else {
            return;
        };
        if let Some(page) = self.service.events_after(self.q.now(), r, prefix, *after) {
            self.send(Node::Replica(r), from, req, Body::LockReply(page));
        }
    }

    /// An answer reaches watcher `w`: a page of its read in flight is taken by the reader's
    /// rule and what it sends is checked; any other (a duplicate, one of a connection it left)
    /// is dropped.
    pub(super) fn at_watcher(&mut self, w: usize, req: u64, body: Body) {
        let watcher = &mut self.watchers[w];
        if watcher.in_flight != Some(req) {
            self.coverage
                .hit("a watcher dropped an answer it no longer waited for");
            return;
        }
        watcher.in_flight = None;
        let Body::LockReply(LockAnswer::Page(page)) = body else {
            return;
        };
        if std::mem::take(&mut watcher.resuming) {
            self.coverage
                .hit("a watcher resumed after its position on a new connection");
        }
        self.coverage.hit("a watcher read a page");
        let before = watcher.reader.after();
        let (count, through, floor) = (page.events.len(), page.through, page.floor);
        let step = watcher.reader.take_page(page);
        self.log(&[Node::Watcher(w)], || {
            format!(
                "w{w} read after {before}: {count} events to {through}, floor {floor}: {step:?}"
            )
        });
        let checked = match step {
            PageStep::Gap(gap) => self.watch.sent_gap(w, gap).map(|skipped| {
                self.coverage.hit("a watcher was told of a gap");
                if skipped > 0 {
                    self.coverage
                        .hit("a gap skipped events under the watcher's prefix");
                }
                self.schedule_read(w, 0);
            }),
            PageStep::Wait => {
                let to = self.watchers[w].reader.after();
                self.watch.moved_to(w, to).map(|()| {
                    self.coverage
                        .hit("a watcher's empty page moved it to its end");
                    self.schedule_read(w, WAIT);
                })
            }
            PageStep::Events => return self.send_events(w),
        };
        if let Err((invariant, detail)) = checked {
            self.violate(invariant, &[Node::Watcher(w)], detail);
        }
    }

    /// Watcher `w`'s reader sends the events it read, each checked; in the fault window its
    /// stream sometimes breaks first, and the watcher reconnects.
    fn send_events(&mut self, w: usize) {
        let unsent = self.watchers[w].reader.unsent();
        let breaks = unsent >= 2 && self.in_fault_window() && self.rng.f64() < BREAK_SHARE;
        let sent = if breaks {
            self.rng.usize(1..unsent)
        } else {
            unsent
        };
        for _ in 0..sent {
            let Some(event) = self.watchers[w].reader.next_event() else {
                break;
            };
            self.coverage.hit("a watcher was sent an event");
            if let Err((invariant, detail)) = self.watch.sent_event(w, &event) {
                return self.violate(invariant, &[Node::Watcher(w)], detail);
            }
        }
        if breaks {
            self.coverage.hit("a watcher's stream broke in a page");
            self.log(&[Node::Watcher(w)], || {
                format!("w{w}'s stream broke after {sent} of {unsent} events")
            });
            return self.reconnect_watcher(w);
        }
        self.schedule_read(w, 0);
    }

    /// Watcher `w`'s connection is gone: its read in flight and what its reader had not sent
    /// go with it; it reconnects to the next replica, after its last position.
    pub(super) fn reconnect_watcher(&mut self, w: usize) {
        let replicas = self.cfg.replicas;
        let watcher = &mut self.watchers[w];
        watcher.in_flight = None;
        watcher.reader.reconnect();
        watcher.endpoint = (watcher.endpoint + 1) % replicas;
        watcher.resuming = true;
        let after = watcher.reader.after();
        self.coverage.hit("a watcher reconnected");
        self.log(&[Node::Watcher(w)], || {
            format!("w{w} reconnects, to resume after {after}")
        });
        self.schedule_read(w, RECONNECT_AFTER);
    }

    /// After a run without a violation: the watchers catch up, then the log is held to the
    /// store's grants.
    pub(super) fn finish_watch(&mut self) {
        if self.violation.is_none() {
            self.catch_up_watchers();
        }
        if self.violation.is_none() {
            self.check_log_end();
        }
    }

    /// After the run: the watchers alone run on (their reads, the replicas' answers, the
    /// faults' ends; nothing writes to the store) until each has caught up with the log's head
    /// or [`CATCH_UP_WITHIN`] passed; one that has not is a violation.
    fn catch_up_watchers(&mut self) {
        let until = self.q.now() + CATCH_UP_WITHIN;
        while !self.watchers_caught_up() && self.violation.is_none() {
            let Some((now, event)) = self.q.pop() else {
                break;
            };
            if now > until {
                break;
            }
            let watching = match &event {
                Event::Watch(..) => true,
                Event::Arrive { from, to, .. } => {
                    matches!(from, Node::Watcher(_)) || matches!(to, Node::Watcher(_))
                }
                Event::Nemesis(fault) => {
                    matches!(
                        fault,
                        Fault::ReplicaUp(_) | Fault::Heal(..) | Fault::NotLeaderOff
                    )
                }
                _ => false,
            };
            if watching {
                self.events += 1;
                self.dispatch(event);
            }
        }
        if self.violation.is_some() {
            return;
        }
        let head = self.watch.head();
        for w in 0..self.watchers.len() {
            let through = self.watch.through(w);
            if through != head {
                let detail = format!(
                    "w{w} is through {through} of the log's {head} events, {} s after the run",
                    CATCH_UP_WITHIN / (1_000 * MS)
                );
                return self.violate(CATCHES_UP, &[Node::Watcher(w)], detail);
            }
            self.coverage
                .hit("a watcher caught up once the faults healed");
        }
    }

    /// Whether every watcher has been sent everything through the log's head.
    fn watchers_caught_up(&self) -> bool {
        let head = self.watch.head();
        (0..self.watchers.len()).all(|w| self.watch.through(w) == head)
    }

    /// The checker copies what the store logged since it last looked (after every event of
    /// the run, so the store's window never moves past an event not copied).
    pub(super) fn record_log(&mut self) {
        let (floor, events) = self.service.logged_after(self.watch.head());
        if events.is_empty() && floor <= self.watch.floor() {
            return;
        }
        if floor > self.watch.floor() {
            self.coverage.hit("the store's log forgot events");
        }
        let missed = self.watch.missed();
        // An operator's revocation (the nemesis's, in the checker's own record) ends its grant
        // as revoked, not released or expired.
        for e in &events {
            if !self.witness.is_revoked(&e.lock_key, e.fencing_token) {
                continue;
            }
            match e.kind {
                EventKind::Revoked => self.coverage.hit("a revoked grant's end logged as revoked"),
                EventKind::Released | EventKind::Expired => {
                    let token = e.fencing_token.0;
                    let detail = format!("{} token {token} was revoked, logged {e:?}", e.lock_key);
                    self.violate(REVOKED_AS_REVOKED, &[], detail);
                }
                EventKind::Granted | EventKind::Proclaimed => {}
            }
        }
        if let Err((invariant, detail)) = self.watch.record(floor, events) {
            self.violate(invariant, &[], detail);
        }
        if self.watch.missed() && !missed {
            self.coverage
                .hit("the checker missed events the store forgot within one step");
        }
    }

    /// At the end of a run: a reap past every lease and session, then every grant the log
    /// began and never ended must be live in the store, and every live grant begun.
    fn check_log_end(&mut self) {
        let late = self.service.reap_past_every_lease(self.q.now());
        self.record_log();
        let live = self.service.live_grants(late);
        if let Err((invariant, detail)) = self.watch.open_are_live(&live) {
            self.violate(invariant, &[], detail);
        }
    }
}
