//! The network between the parties: per-message delay, and during the fault window loss,
//! duplication, delay spikes (which reorder) and partitions; requests with their timeouts.

use super::links::Node;
use super::{Body, Event, Pending, World};
use crate::sched::MS;
use crate::service::LockCall;

impl World {
    pub(super) fn in_fault_window(&self) -> bool {
        self.q.now() < self.cfg.fault_until_ms * MS
    }

    pub(super) fn send(&mut self, from: Node, to: Node, req: u64, body: Body) {
        let faulty = self.in_fault_window();
        if self.network.partitioned(from, to) {
            self.coverage.hit("fault: message lost to a partition");
            return;
        }
        if faulty && self.rng.f64() < self.cfg.loss {
            self.coverage.hit("fault: message lost");
            return;
        }
        let copies = if faulty && self.rng.f64() < self.cfg.duplicate {
            self.coverage.hit("fault: message duplicated");
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut delay = self.rng.u64(MS..20 * MS);
            if faulty && self.rng.f64() < self.cfg.delay_spike {
                delay = self.rng.u64(20 * MS..=self.cfg.max_delay_ms * MS);
                self.coverage.hit("fault: message delayed");
            }
            let sent = self.q.now();
            self.q.after(
                delay,
                Event::Arrive {
                    from,
                    to,
                    req,
                    sent,
                    body: body.clone(),
                },
            );
        }
    }

    pub(super) fn request(&mut self, c: usize, to: Node, pending: Pending, body: Body) {
        self.next_req += 1;
        let req = self.next_req;
        self.clients[c].pending.insert(req, pending);
        self.log(&[Node::Client(c), to], || {
            format!("c{c} -> {to} #{req} {body:?}")
        });
        self.send(Node::Client(c), to, req, body);
        self.q
            .after(self.cfg.request_timeout_ms * MS, Event::Timeout(c, req));
    }

    pub(super) fn lock_request(&mut self, c: usize, pending: Pending, call: LockCall) {
        let replica = self.clients[c].endpoint % self.cfg.replicas;
        self.request(c, Node::Replica(replica), pending, Body::Lock(call));
    }

    pub(super) fn rotate(&mut self, c: usize) {
        let client = &mut self.clients[c];
        client.endpoint = (client.endpoint + 1) % self.cfg.replicas;
        client.rotated = true;
    }
}
