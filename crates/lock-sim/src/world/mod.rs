//! One seeded run: the clients (each the SDK's real `SessionCore` and `AcquireLoop`, driven
//! through the executor's protocol: `protocol.rs` sends what the core plans and hands back
//! what came of it, and decides nothing the SDK decides; `heartbeat.rs` its heartbeat ticks
//! and renewals), the lock service and the bank
//! (`services.rs`), the network (`network.rs`) and the nemesis (`nemesis.rs`), on one event
//! queue in virtual time, with the checkers (`checkers.rs`) applied after every event. Jobs
//! that take a key set are `set_jobs.rs` at the client and `set_replica.rs` at the replica;
//! jobs that hold a permit or a reader's or writer's share of a key (ADR 0007) are
//! `share_jobs.rs` at the client and `share_replica.rs` at the replica; jobs that campaign in
//! the election and lead are `elect_jobs.rs`, their proclaims and writes at the replica and
//! the bank `elect_service.rs`, the observers polling its leader `observers.rs`, and what the
//! election's checkers witness `elect_witness.rs`; the watchers following the store's events
//! are `watchers.rs`, and what their checkers witness `watch_witness.rs`. This file holds the
//! run's state and its event loop.

mod checkers;
mod elect_jobs;
mod elect_service;
mod elect_witness;
mod heartbeat;
mod kinds;
mod links;
mod nemesis;
mod network;
mod observers;
mod protocol;
mod services;
mod set_jobs;
mod set_replica;
mod share_jobs;
mod share_replica;
mod watch_witness;
mod watchers;
mod witness;
mod writes;

use elect_witness::ElectWitness;
use kinds::Lead;
use kinds::Observer;
use kinds::SharedKey;
use kinds::{WatchStep, Watcher};
use links::Network;
pub use links::Node;
use watch_witness::WatchWitness;
use witness::Witness;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt::Write as _;

use lock_api::{Claim, FencingToken, GrantScope, LockGrant, LockKey, SessionId};
use lock_core::{AcquireLoop, Attempt, Renewal, Sent, SessionCore, TickGrid};

use crate::bank::{Answer, Bank, RailFault, Write};
use crate::check::{Coverage, Violation};
use crate::config::Config;
use crate::sched::{MS, Nanos, Queue};
use crate::service::{LockAnswer, LockCall, LockService};
use lock_store::batch::Gatherer;
use lock_store::wait_plan::WaitPlan;
use lock_store::{AcquireOutcome, RequestId};

/// How many recent events a failure report keeps.
const RECENT_EVENTS: usize = 400;
/// Each replica's sampler reads the store's clock this often, as lock-server's does.
#[allow(clippy::cast_possible_truncation)] // one second fits
const CLOCK_SAMPLE_NANOS: Nanos = lock_store::CLOCK_SAMPLE_INTERVAL.as_nanos() as Nanos;
/// Events of the involved parties a failure report prints.
const REPORT_EVENTS: usize = 25;

#[derive(Debug, Clone)]
enum Body {
    Lock(LockCall),
    LockReply(LockAnswer),
    Write {
        payout: usize,
        write: Write,
        token: i64,
        /// The grant id of the proof the write carries.
        grant: String,
        /// Its job was paused between a guard (or the grant) and a write: fenced, it is a
        /// zombie's (the coverage's mark only; the resource never reads it).
        paused: bool,
    },
    WriteReply(Answer),
    /// A leader's write to the election's register, fenced with its term.
    LeaderWrite {
        token: i64,
        /// The grant id of the proof the write carries.
        grant: String,
        /// A pause landed between its guard and it (the coverage's mark only).
        paused: bool,
    },
    /// The register's answer: accepted, or fenced out.
    LeaderWritten(bool),
    /// The client gave up on its request of this number (its connection closed).
    Cancel(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    ReplicaDown(usize),
    ReplicaUp(usize),
    NotLeaderOn,
    NotLeaderOff,
    Partition(Node, Node),
    Heal(Node, Node),
    /// An operator revokes the payout's lock.
    Revoke(usize),
    /// An operator revokes a shared key: every live grant of it ends.
    RevokeShares(SharedKey),
    /// An operator revokes the election's leader.
    RevokeLeader,
    /// A watcher's connection dies.
    Reconnect(usize),
    /// The store host's wall clock steps by this many nanoseconds.
    StoreClockStep(i64),
}

/// How late a hand-over's notice may reach the replicas, in milliseconds: most of a lease.
const HAND_OVER_LATE_MAX_MS: u64 = 800;

#[derive(Debug)]
enum Event {
    Arrive {
        from: Node,
        to: Node,
        req: u64,
        sent: Nanos,
        body: Body,
    },
    Step(usize),
    /// A heartbeat tick of the client's session generation.
    Tick(usize, u64),
    /// The acquire loop's next attempt for the client's job of this id.
    Retry(usize, u64),
    /// The job of this id sends its next write: the scheduling point between the guard
    /// (or the grant) and the write, where a pause makes a zombie.
    Write(usize, u64, Write),
    /// The share job of this id ends a use of its share (after the scheduling point and
    /// the work), and guards it.
    Use(usize, u64),
    /// Replica r (as of its restart count) makes the store call of a share's acquire that
    /// reached it: alone, never in a batch.
    ShareCall(usize, u64, Node, u64, LockCall),
    /// The election job of this id takes its next step as leader (after the scheduling
    /// point, where a pause deposes it unawares): it proclaims, or writes.
    Lead(usize, u64, Lead),
    /// Replica r (as of its restart count) makes the store call of a proclaim that reached
    /// it: alone, never in a batch.
    ProclaimCall(usize, u64, Node, u64, LockCall),
    /// Observer o reads the election's leader (one poll, on its timer).
    Poll(usize),
    /// Watcher w's next step.
    Watch(usize, WatchStep),
    /// A parked acquire asks the store again (woken, or its nap ended).
    WaitRetry(u64),
    /// A parked acquire that left its queue place at its deadline makes its last try: a
    /// separate store call, after the leave's, with whatever happened between.
    LastTry(u64),
    /// A hand-over's notice reaches a replica late: whatever request of that session parks
    /// for that key then (maybe a later one than the place it was made for) is handed it.
    HandOverArrives(LockGrant, u64, Nanos),
    /// Replica r's batch of this number commits (group commit): its writes are applied
    /// together and each is answered.
    Flush(usize, u64),
    Timeout(usize, u64),
    Nemesis(Fault),
    Reap,
    /// Each replica's sampler reads the store's clock.
    ClockSample,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pending {
    Open {
        send_local: u64,
    },
    Heartbeat(Sent),
    Renew(Renewal),
    /// An attempt of the job of this id, sent to this replica.
    Acquire(u64, Attempt, usize),
    /// The try that settles an acquire (of one key, or of a set's keys) given up on an
    /// unanswered attempt (C2 §2.4): a grant it is answered is released at once.
    Settle(Vec<LockKey>),
    /// A release nothing waits for: a settling try's grant, or a set's member registered
    /// before another member was refused as a stale re-grant.
    LooseRelease(LockKey, FencingToken),
    Release {
        key: LockKey,
        token: FencingToken,
        /// The job whose acquire loop waits for this release (a stale re-grant's), if any.
        then_retry: Option<u64>,
    },
    Write(Write),
    /// A leader's proclaim, for the job of this id.
    Proclaim(u64),
    /// A leader's write to the election's register, for the job of this id.
    LeaderWrite(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Acquiring,
    Claiming,
    Submitting,
    Posting,
}

#[derive(Debug, Clone)]
struct Job {
    id: u64,
    /// The payout it settles (`None`: a share job, which writes nothing).
    payout: Option<usize>,
    /// The payout's key: its token fences the writes.
    key: LockKey,
    /// The payout's key and an account's, sorted, when the job takes them as a set.
    set: Option<Vec<LockKey>>,
    /// What it claims of its key: the key alone (a payout's, a writer's), a reader's share or
    /// a permit.
    claim: Claim,
    /// A share job's uses still to make before it releases.
    uses_left: u32,
    token: Option<FencingToken>,
    /// Every grant the job holds (the payout's, and a set's other member), in key order.
    held: Vec<(LockKey, FencingToken)>,
    phase: Phase,
    /// The SDK's acquire loop for this job's key.
    acquiring: AcquireLoop,
    /// A pause landed between a guard (or the grant) and a write of this job.
    paused_before_write: bool,
}

impl Job {
    /// The keys it acquires: the payout's, or its set's.
    fn keys(&self) -> &[LockKey] {
        self.set
            .as_deref()
            .unwrap_or(std::slice::from_ref(&self.key))
    }
}

#[derive(Debug)]
struct Session {
    id: SessionId,
    core: SessionCore,
    grid: TickGrid,
    ttl_ms: u64,
    /// The store's expiry of the session, as last answered.
    store_expiry: Nanos,
    /// The store's expiry of each grant, as last answered.
    grant_expiry: BTreeMap<(LockKey, FencingToken), Nanos>,
    /// What each grant registered holds of its key, when it is not the whole key (a reader's
    /// share, a permit's slot), as the SDK keeps each handle's scope.
    scopes: BTreeMap<(LockKey, FencingToken), GrantScope>,
}

impl Session {
    /// What grant `token` of `key` holds of its key.
    fn scope_of(&self, key: &LockKey, token: FencingToken) -> GrantScope {
        // A few entries at most: looked through, no key cloned.
        self.scopes
            .iter()
            .find(|((k, t), _)| k == key && *t == token)
            .map(|(_, scope)| *scope)
            .unwrap_or_default()
    }
}

#[derive(Debug)]
struct Client {
    rate: f64,
    offset: u64,
    pauses: Vec<(Nanos, Nanos)>,
    endpoint: usize,
    rotated: bool,
    /// Bumped for each session, so a replaced session's pending ticks are ignored.
    generation: u64,
    session: Option<Session>,
    opening: bool,
    job: Option<Job>,
    /// Numbers jobs, so a replaced job's pending events are ignored.
    jobs: u64,
    pending: BTreeMap<u64, Pending>,
    /// The grants the last job held, still to release one by one (as the SDK's
    /// `release_set` does) before the next payout.
    releases: VecDeque<(LockKey, FencingToken)>,
}

impl Client {
    /// The client's monotonic clock at true time `t` (it drifts at `rate`, from `offset`).
    fn local(&self, t: Nanos) -> u64 {
        self.offset.wrapping_add((t as f64 * self.rate) as u64)
    }

    /// The true time at which the client's clock reads `local`.
    fn true_time(&self, local: u64) -> Nanos {
        (local.wrapping_sub(self.offset) as f64 / self.rate) as Nanos
    }

    fn paused_until(&self, t: Nanos) -> Option<Nanos> {
        self.pauses
            .iter()
            .find(|(start, end)| *start <= t && t < *end)
            .map(|(_, end)| *end)
    }
}

/// An acquire parked on a replica (`waiting::acquire_waiting`'s state).
#[derive(Debug)]
struct Parked {
    replica: usize,
    from: Node,
    req: u64,
    key: LockKey,
    session: SessionId,
    lease_ms: u64,
    plan: WaitPlan,
    /// When its last store call was made.
    last_called: Nanos,
    /// A grant handed over to it, with its place's age and its expiry in true time as the
    /// store judged it then, not yet answered.
    handed: Option<(LockGrant, u64, Nanos)>,
    /// The replica's name for the request (its grants and place record it).
    request: RequestId,
    /// Left its place at the deadline, its last try to come: the refusal that ended the
    /// wait and its `waited_ms`, answered if that try is refused too.
    leaving: Option<(AcquireOutcome, u64)>,
    /// A key set's request: parked on every key of the set; `key` is the one that refused it
    /// last (for the trace).
    set: Option<SetWait>,
    /// What it claims of its key (a set's members: the key alone).
    claim: Claim,
}

impl Parked {
    /// Whether a wake-up reaches it: parked, not leaving, not a set's call in flight.
    fn wakeable(&self) -> bool {
        self.leaving.is_none() && self.set.as_ref().is_none_or(|s| s.tried)
    }

    /// The keys it asks for: its key, or its set's.
    fn keys(&self) -> &[LockKey] {
        self.set
            .as_ref()
            .map_or(std::slice::from_ref(&self.key), |s| &s.keys)
    }
}

/// A key set's request at a replica (lock-server's `set_waiting`).
#[derive(Debug)]
struct SetWait {
    /// The set, sorted.
    keys: Vec<LockKey>,
    /// Whether it may wait (`wait_ms`): a refused try then parks.
    waits: bool,
    /// Its first store call (a try, no places) was made: until then the call is in flight.
    tried: bool,
    /// Its client gave up while that call was in flight: abandoned after it, never answered.
    cancelled: bool,
}

/// The outcome of one run.
#[derive(Debug)]
pub struct RunReport {
    /// The first violation, if any.
    pub violation: Option<Violation>,
    /// What the run reached.
    pub coverage: Coverage,
    /// The event trace (when asked for).
    pub trace: String,
    /// Events processed.
    pub events: u64,
}

/// One run of a seed.
#[derive(Debug)]
pub struct World {
    cfg: Config,
    rng: fastrand::Rng,
    q: Queue<Event>,
    clients: Vec<Client>,
    service: LockService,
    bank: Bank,
    network: Network,
    /// The checkers' own records.
    witness: Witness,
    /// The processes polling the election's leader (none without election jobs).
    observers: Vec<Observer>,
    /// The election checkers' own records.
    elect: ElectWitness,
    /// The processes following the store's events (none in a run without watchers).
    watchers: Vec<Watcher>,
    /// The watch checkers' own records: every event the store logged.
    watch: WatchWitness,
    next_req: u64,
    coverage: Coverage,
    violation: Option<Violation>,
    recent: VecDeque<(Nanos, Vec<Node>, String)>,
    trace: Option<String>,
    /// Acquires parked on a replica, by id.
    parked: BTreeMap<u64, Parked>,
    /// Numbers parked requests.
    parks: u64,
    /// Per replica: its group commit, the writes that arrived while a batch was in flight.
    gathered: Vec<Gatherer<(Node, u64, LockCall), LockCall>>,
    /// Per replica: the batches in flight (by number, their writes), each committed at its
    /// `Flush`.
    flushing: Vec<BTreeMap<u64, Vec<LockCall>>>,
    /// Acquires whose client gave up while their store call was in flight (by client and
    /// request number): abandoned when that call answers, never answered.
    cancelled: BTreeSet<(Node, u64)>,
    /// The request whose store call last touched each queue place (a hand-over to the place
    /// is made for it).
    /// (Looked up only, never iterated: a hash map keeps the run deterministic.)
    place_of: HashMap<(LockKey, SessionId), RequestId>,
    events: u64,
}

fn key_of(payout: usize) -> LockKey {
    LockKey::parse(format!("payout:{payout}")).unwrap_or_else(|e| panic!("{e}"))
}

/// The key of account `account` (a small pool the key sets share).
fn account_key(account: usize) -> LockKey {
    LockKey::parse(format!("account:{account}")).unwrap_or_else(|e| panic!("{e}"))
}

impl World {
    /// Sets up a run from its configuration (everything random comes from `cfg.seed`).
    pub fn new(cfg: Config, trace: bool) -> Self {
        let mut rng = fastrand::Rng::with_seed(cfg.seed);
        let mut coverage = Coverage::default();
        let fault_until = cfg.fault_until_ms * MS;
        let ttl = cfg.ttl_ms * MS;
        let clients = (0..cfg.clients)
            .map(|_| {
                let drift = cfg.drift;
                let rate = 1.0 + drift * (rng.f64() * 2.0 - 1.0);
                let mut pauses = Vec::new();
                for _ in 0..rng.usize(0..=cfg.max_pauses) {
                    let start = rng.u64(0..fault_until);
                    let len = rng.u64(0..=3 * ttl);
                    pauses.push((start, start + len));
                    coverage.hit("fault: client pause");
                    if len > ttl {
                        coverage.hit("fault: pause longer than the TTL");
                    }
                }
                Client {
                    rate,
                    offset: u64::MAX - rng.u64(0..10_000 * MS),
                    pauses,
                    endpoint: rng.usize(0..cfg.replicas),
                    rotated: false,
                    generation: 0,
                    session: None,
                    opening: false,
                    job: None,
                    jobs: 0,
                    pending: BTreeMap::new(),
                    releases: VecDeque::new(),
                }
            })
            .collect();
        if cfg.drift > 0.0 {
            coverage.hit("fault: clock drift");
        }
        let faults: Vec<RailFault> = (0..cfg.payouts)
            .map(|_| match rng.u32(0..10) {
                0 => RailFault::Timeout,
                1 => RailFault::Reject,
                _ => RailFault::None,
            })
            .collect();
        let bank = Bank::new(&faults, cfg.bugs);
        let mut world = Self {
            service: LockService::new(
                cfg.replicas,
                cfg.lease_ms.max(cfg.ttl_ms),
                cfg.lock_delay_ms,
                cfg.events_kept,
                cfg.bugs,
            ),
            bank,
            rng,
            q: Queue::new(),
            clients,
            network: Network::default(),
            witness: Witness::new(cfg.payouts),
            observers: Vec::new(),
            elect: ElectWitness::default(),
            watchers: Vec::new(),
            watch: WatchWitness::default(),
            next_req: 0,
            coverage,
            violation: None,
            recent: VecDeque::new(),
            trace: trace.then(String::new),
            parked: BTreeMap::new(),
            parks: 0,
            gathered: (0..cfg.replicas).map(|_| Gatherer::default()).collect(),
            flushing: vec![BTreeMap::new(); cfg.replicas],
            cancelled: BTreeSet::new(),
            place_of: HashMap::new(),
            events: 0,
            cfg,
        };
        world.schedule_nemesis();
        world.start_observers();
        world.start_watchers();
        for c in 0..world.clients.len() {
            let think = world.rng.u64(0..50 * MS);
            world.q.after(think, Event::Step(c));
        }
        world.q.after(100 * MS, Event::Reap);
        world.q.after(CLOCK_SAMPLE_NANOS, Event::ClockSample);
        world
    }

    fn log(&mut self, parties: &[Node], text: impl FnOnce() -> String) {
        let now = self.q.now();
        let text = text();
        if let Some(trace) = &mut self.trace {
            let _ = writeln!(trace, "{:>12.3} ms  {text}", now as f64 / MS as f64);
        }
        if self.recent.len() == RECENT_EVENTS {
            self.recent.pop_front();
        }
        self.recent.push_back((now, parties.to_vec(), text));
    }

    fn violate(&mut self, invariant: &'static str, parties: &[Node], detail: String) {
        if self.violation.is_some() {
            return;
        }
        let mut recent = String::new();
        let involved: Vec<_> = self
            .recent
            .iter()
            .filter(|(_, p, _)| p.iter().any(|n| parties.contains(n)))
            .collect();
        for (at, _, text) in involved.iter().rev().take(REPORT_EVENTS).rev() {
            let _ = writeln!(recent, "{:>12.3} ms  {text}", *at as f64 / MS as f64);
        }
        self.violation = Some(Violation {
            invariant,
            at: self.q.now(),
            detail,
            recent,
        });
    }

    /// Runs until every payout is terminal after the faults, a violation, or the liveness
    /// bound.
    pub fn run(mut self) -> RunReport {
        let fault_until = self.cfg.fault_until_ms * MS;
        let end = fault_until + self.cfg.liveness_ms * MS;
        while let Some((now, event)) = self.q.pop() {
            if now > end || self.violation.is_some() {
                break;
            }
            self.events += 1;
            self.dispatch(event);
            self.deliver_wakes();
            self.record_log();
            self.check_exclusion();
            self.check_losses_final();
            self.check_orphans();
            if now >= fault_until && self.bank.all_terminal() {
                break;
            }
        }
        if self.violation.is_none() {
            self.check_end();
        }
        self.finish_watch();
        for _ in 0..self.service.withheld {
            self.coverage
                .hit("a grant withheld: the store's clock stepped");
        }
        for _ in 0..self.service.delayed {
            self.coverage
                .hit("an acquire found the key in a lock-delay");
        }
        RunReport {
            violation: self.violation,
            coverage: self.coverage,
            trace: self.trace.unwrap_or_default(),
            events: self.events,
        }
    }

    fn client_of(event: &Event) -> Option<usize> {
        match event {
            Event::Arrive {
                to: Node::Client(c),
                ..
            }
            | Event::Step(c)
            | Event::Tick(c, _)
            | Event::Retry(c, _)
            | Event::Write(c, _, _)
            | Event::Use(c, _)
            | Event::Lead(c, ..)
            | Event::Timeout(c, _) => Some(*c),
            _ => None,
        }
    }

    fn dispatch(&mut self, event: Event) {
        let now = self.q.now();
        if let Some(c) = Self::client_of(&event) {
            if let Some(until) = self.clients[c].paused_until(now) {
                // A paused process runs nothing: its events wait until it is continued.
                self.q.at(until, event);
                return;
            }
        }
        match event {
            Event::Arrive {
                from,
                to,
                req,
                sent,
                body,
            } => {
                if self.network.arrived((from, to), sent) {
                    self.coverage.hit("fault: messages reordered");
                }
                match to {
                    Node::Replica(r) => self.at_replica(r, from, req, body),
                    Node::Bank => self.at_bank(from, req, body),
                    Node::Client(c) => self.at_client(c, from, req, body),
                    Node::Observer(o) => self.at_observer(o, req, body),
                    Node::Watcher(w) => self.at_watcher(w, req, body),
                }
            }
            Event::Step(c) => self.step(c),
            Event::Tick(c, generation) => {
                if self.clients[c].generation == generation {
                    self.tick(c);
                }
            }
            Event::Retry(c, job) => {
                if self.job_is(c, job) {
                    self.send_acquire(c);
                }
            }
            Event::Write(c, job, write) => {
                if self.job_is(c, job) {
                    self.send_write(c, write);
                }
            }
            Event::Use(c, job) => {
                if self.job_is(c, job) {
                    self.use_done(c);
                }
            }
            Event::ShareCall(r, restarts, from, req, call) => {
                self.share_call(r, restarts, from, req, call);
            }
            Event::Lead(c, job, step) => {
                if self.job_is(c, job) {
                    self.lead(c, step);
                }
            }
            Event::ProclaimCall(r, restarts, from, req, call) => {
                self.proclaim_call(r, restarts, from, req, &call);
            }
            Event::Poll(o) => self.poll(o),
            Event::Watch(w, step) => self.watch_step(w, step),
            Event::WaitRetry(id) if self.is_set(id) => self.set_call(id),
            Event::WaitRetry(id) => self.wait_call(id),
            Event::LastTry(id) if self.is_set(id) => self.set_last_try(id),
            Event::LastTry(id) => self.last_try(id),
            Event::HandOverArrives(grant, place_age_ms, expires) => {
                self.hand_over_arrives(grant, place_age_ms, expires);
            }
            Event::Flush(r, batch) => self.flush(r, batch),
            Event::Timeout(c, req) => self.timeout(c, req),
            Event::Nemesis(fault) => self.nemesis(fault),
            Event::Reap => {
                self.service.reap(now);
                self.q.after(100 * MS, Event::Reap);
            }
            Event::ClockSample => {
                if self.service.sample_clocks(now) > 0 {
                    self.coverage
                        .hit("a replica's sampler saw the store's clock step");
                }
                self.q.after(CLOCK_SAMPLE_NANOS, Event::ClockSample);
            }
        }
    }
}
