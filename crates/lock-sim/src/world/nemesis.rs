//! The nemesis: what faults a seed schedules (partitions, pauses, replica crashes,
//! `NOT_LEADER` windows, revocations, steps of the store's clock) and what each one does.
//! A run with election jobs also has the election's leader revoked (0–1 times) and each
//! observer cut from a replica (0–1 times), drawn after the rest; a run with watchers has
//! their faults drawn last (`watchers.rs`): reconnects and cuts from both replicas.

use super::elect_jobs::election_key;
use super::links::Node;
use super::{Event, Fault, SharedKey, World, key_of};
use crate::sched::MS;

impl World {
    pub(super) fn schedule_nemesis(&mut self) {
        let until = self.cfg.fault_until_ms * MS;
        for _ in 0..self.rng.usize(0..=2) {
            let r = self.rng.usize(0..self.cfg.replicas);
            let start = self.rng.u64(0..until);
            let len = self.rng.u64(200 * MS..3_000 * MS);
            self.q.at(start, Event::Nemesis(Fault::ReplicaDown(r)));
            self.q.at(start + len, Event::Nemesis(Fault::ReplicaUp(r)));
        }
        for _ in 0..self.rng.usize(0..=2) {
            let start = self.rng.u64(0..until);
            let len = self.rng.u64(100 * MS..1_500 * MS);
            self.q.at(start, Event::Nemesis(Fault::NotLeaderOn));
            self.q.at(start + len, Event::Nemesis(Fault::NotLeaderOff));
        }
        for _ in 0..self.rng.usize(0..=3) {
            let a = Node::Client(self.rng.usize(0..self.cfg.clients));
            let b = if self.rng.bool() {
                Node::Bank
            } else {
                Node::Replica(self.rng.usize(0..self.cfg.replicas))
            };
            let start = self.rng.u64(0..until);
            let len = self.rng.u64(200 * MS..2_000 * MS);
            self.q.at(start, Event::Nemesis(Fault::Partition(a, b)));
            self.q.at(start + len, Event::Nemesis(Fault::Heal(a, b)));
        }
        for _ in 0..self.rng.usize(0..=2) {
            let payout = self.rng.usize(0..self.cfg.payouts);
            let at = self.rng.u64(0..until);
            self.q.at(at, Event::Nemesis(Fault::Revoke(payout)));
        }
        {
            let ttl = i64::try_from(self.cfg.ttl_ms * MS).unwrap_or(i64::MAX);
            // Two steps forward (the kind that can cost exclusion), the rest either way.
            for n in 0..self.cfg.clock_steps {
                let by = self.rng.i64(ttl / 2..=3 * ttl);
                let by = if n < 2 || self.rng.bool() { by } else { -by };
                let at = self.rng.u64(0..until);
                self.q.at(at, Event::Nemesis(Fault::StoreClockStep(by)));
            }
        }
        // Drawn last, and only in a run with share jobs: a run without is what it was.
        if self.cfg.share_jobs > 0.0 {
            for which in [SharedKey::Pool, SharedKey::Doc] {
                for _ in 0..self.rng.usize(0..=1) {
                    let at = self.rng.u64(0..until);
                    self.q.at(at, Event::Nemesis(Fault::RevokeShares(which)));
                }
            }
        }
        // Drawn after those, and only in a run with election jobs.
        if self.cfg.elect_jobs > 0.0 {
            for _ in 0..self.rng.usize(0..=1) {
                let at = self.rng.u64(0..until);
                self.q.at(at, Event::Nemesis(Fault::RevokeLeader));
            }
            for o in 0..self.cfg.observers {
                for _ in 0..self.rng.usize(0..=1) {
                    let (a, b) = (
                        Node::Observer(o),
                        Node::Replica(self.rng.usize(0..self.cfg.replicas)),
                    );
                    let start = self.rng.u64(0..until);
                    let len = self.rng.u64(200 * MS..2_000 * MS);
                    self.q.at(start, Event::Nemesis(Fault::Partition(a, b)));
                    self.q.at(start + len, Event::Nemesis(Fault::Heal(a, b)));
                }
            }
        }
        self.schedule_watch_faults();
    }

    pub(super) fn nemesis(&mut self, fault: Fault) {
        self.log(&[], || format!("nemesis {fault:?}"));
        match fault {
            Fault::ReplicaDown(r) => {
                self.coverage.hit("fault: replica crash");
                self.service.up[r] = false;
                // Its batch in flight and the writes gathered behind it die with it.
                self.gathered[r].clear();
                self.flushing[r].clear();
                let before = self.parked.len();
                self.parked.retain(|_, p| p.replica != r);
                if self.parked.len() < before {
                    self.coverage
                        .hit("fault: a replica crashed with requests parked");
                }
            }
            Fault::ReplicaUp(r) => self.service.restart(self.q.now(), r),
            Fault::NotLeaderOn => {
                self.coverage.hit("fault: store NOT_LEADER window");
                self.service.not_leader = true;
            }
            Fault::NotLeaderOff => self.service.not_leader = false,
            Fault::Partition(a, b) => {
                self.coverage.hit("fault: partition");
                self.network.cut(a, b);
            }
            Fault::Heal(a, b) => self.network.heal(a, b),
            Fault::Reconnect(w) => self.reconnect_watcher(w),
            Fault::StoreClockStep(by) => {
                self.coverage.hit(if by > 0 {
                    "fault: store clock stepped forward"
                } else {
                    "fault: store clock stepped back"
                });
                self.service.step_store_clock(by);
            }
            Fault::Revoke(payout) => {
                let key = key_of(payout);
                if let Some(token) = self.service.revoke(self.q.now(), &key) {
                    self.coverage.hit("fault: a grant revoked");
                    self.witness.revoke(key, token);
                }
            }
            Fault::RevokeLeader => {
                let key = election_key();
                if let Some(token) = self.service.revoke(self.q.now(), &key) {
                    self.coverage.hit("fault: the election's leader revoked");
                    self.witness.revoke(key, token);
                }
            }
            Fault::RevokeShares(which) => {
                // Every live grant of the key ends (the revoke names only the newest).
                let (now, key) = (self.q.now(), which.key());
                let live: Vec<_> = self.service.live_grants(now);
                if self.service.revoke(now, &key).is_some() {
                    self.coverage.hit("fault: a shared key's grants revoked");
                    for (_, _, token) in live.into_iter().filter(|(k, ..)| *k == key) {
                        self.witness.revoke(key.clone(), token);
                    }
                }
            }
        }
    }
}
