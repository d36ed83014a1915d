//! The observers: processes that poll the election's leader (L7) through the replicas, over
//! the network, and yield what the SDK observer's rule (`observe::TermWatch`, a copy of
//! lock-client's `Observer`) lets through. An observer polls on a timer, every 200 ms (the
//! SDK's `OBSERVE_POLL`), each poll to the next replica, and takes each answer when it
//! arrives: its reads overlap, so a delayed answer can reach it after a later one (a read
//! that lagged another, which the rule skips). The SDK's own loop reads one at a time; over
//! one store whose reads are linearizable it would never see a read out of order, so the
//! overlap is what lets the simulation show the rule doing its work. A duplicated answer is
//! dropped (an HTTP answer arrives once), and so is one that comes 2 s after its poll.
//!
//! Each yield is checked: its term is not below one the observer yielded before ("terms
//! never go backwards"), and a value it shows under term T is one the store accepted from
//! T's proclaim ("a term shows only its leader's value"), never a predecessor's.

use std::collections::BTreeMap;

use super::elect_jobs::election_key;
use super::kinds::Observer;
use super::links::Node;
use super::{Body, Event, World};
use crate::observe::{LeaderRead, TermWatch};
use crate::sched::{MS, Nanos};
use crate::service::{LockAnswer, LockCall};

/// How often an observer polls (the SDK's `OBSERVE_POLL`).
const POLL: Nanos = 200 * MS;
/// An answer this long after its poll is dropped (the poll has timed out).
const POLL_TIMEOUT: Nanos = 2_000 * MS;

impl World {
    /// The run's observers, each polling from a moment in its first period (none in a run
    /// without election jobs, which draws nothing here).
    pub(super) fn start_observers(&mut self) {
        if self.cfg.elect_jobs <= 0.0 {
            return;
        }
        for o in 0..self.cfg.observers {
            self.observers.push(Observer {
                endpoint: self.rng.usize(0..self.cfg.replicas),
                watch: TermWatch::new(),
                in_flight: BTreeMap::new(),
                yielded: Vec::new(),
            });
            let first = self.rng.u64(0..POLL);
            self.q.after(first, Event::Poll(o));
        }
    }

    /// Observer `o` polls: a read of the election's key to its next replica.
    pub(super) fn poll(&mut self, o: usize) {
        let now = self.q.now();
        self.next_req += 1;
        let req = self.next_req;
        let replicas = self.cfg.replicas;
        let observer = &mut self.observers[o];
        observer
            .in_flight
            .retain(|_, sent| now.saturating_sub(*sent) < POLL_TIMEOUT);
        observer.in_flight.insert(req, now);
        let r = observer.endpoint;
        observer.endpoint = (r + 1) % replicas;
        let call = LockCall::Inspect {
            key: election_key(),
        };
        self.send(Node::Observer(o), Node::Replica(r), req, Body::Lock(call));
        self.q.after(POLL, Event::Poll(o));
    }

    /// An answer reaches observer `o`: offered to its rule; a read it yields is checked.
    pub(super) fn at_observer(&mut self, o: usize, req: u64, body: Body) {
        let observer = &mut self.observers[o];
        if observer.in_flight.remove(&req).is_none() {
            return;
        }
        let Body::LockReply(LockAnswer::Leader(read)) = body else {
            return;
        };
        let lags = observer.watch.lags(&read);
        if !observer.watch.offer(&read) {
            if lags {
                self.coverage
                    .hit("an observer skipped a term below its highest");
            }
            return;
        }
        observer.yielded.push(read.clone());
        self.log(&[Node::Observer(o)], || format!("o{o} yields {read:?}"));
        self.check_yield(o, read);
    }

    /// Observer `o` yielded `read`: terms never go backwards, and a term shows only its
    /// leader's value.
    fn check_yield(&mut self, o: usize, read: Option<LeaderRead>) {
        let Some(read) = read else {
            self.coverage.hit("an observer yielded no leader");
            return;
        };
        self.coverage.hit("an observer yielded a leader");
        let highest = self.elect.yielded(o, read.term);
        if read.term < highest {
            let yielded = &self.observers[o].yielded;
            let last = &yielded[yielded.len().saturating_sub(6)..];
            let detail = format!(
                "o{o} yielded term {} after term {} (its last yields: {last:?})",
                read.term.0, highest.0
            );
            return self.violate("terms never go backwards", &[Node::Observer(o)], detail);
        }
        if read.term > highest && highest.0 > 0 {
            self.coverage.hit("an observer saw the leader change");
        }
        let Some(value) = &read.value else {
            self.coverage
                .hit("an observer yielded a term before its first proclaim");
            return;
        };
        self.coverage.hit("an observer yielded a leader's value");
        if !self.elect.was_proclaimed(read.term, value) {
            let detail = format!(
                "o{o} yielded {:?} under term {}, which never proclaimed it",
                value.as_str(),
                read.term.0
            );
            // The leaders' proclaims and grants are what explain it.
            let mut parties: Vec<Node> = (0..self.clients.len()).map(Node::Client).collect();
            parties.push(Node::Observer(o));
            self.violate("a term shows only its leader's value", &parties, detail);
        }
    }
}
