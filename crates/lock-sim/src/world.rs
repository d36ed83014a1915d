//! One seeded run: the clients (each the SDK's real `SessionCore` and `AcquireLoop`, driven
//! through the executor's protocol: this file sends what the core plans and hands back what
//! came of it, and decides nothing the SDK decides), the lock service, the bank, the network
//! and the nemesis, on one event queue in virtual time, with the checkers applied after
//! every event.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

use lock_api::{ErrorCode, FencingToken, GrantId, LockKey, LossReason, RetryVerdict, SessionId};
use lock_client::AcquirePolicy;
use lock_client::core::{
    AcquireLoop, Attempt, Next, Renewal, Sent, SessionCore, TickGrid, Unhold, acquire,
    heartbeat_period,
};
use payment_api::PayoutState;

use crate::bank::{Answer, Bank, RailFault, Write};
use crate::check::{Coverage, Violation};
use crate::config::Config;
use crate::sched::{MS, Nanos, Queue};
use crate::service::{LockAnswer, LockCall, LockService};
use lock_store::wait_plan::{WaitPlan, WaitStep};
use lock_store::{AcquireSpec, Wake};

/// How many recent events a failure report keeps.
const RECENT_EVENTS: usize = 400;
/// Each replica's sampler reads the store's clock this often, as lock-server's does.
#[allow(clippy::cast_possible_truncation)] // one second fits
const CLOCK_SAMPLE_NANOS: Nanos = lock_store::CLOCK_SAMPLE_INTERVAL.as_nanos() as Nanos;
/// Events of the involved parties a failure report prints.
const REPORT_EVENTS: usize = 25;

/// A party on the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Node {
    /// A worker.
    Client(usize),
    /// A lock-server replica.
    Replica(usize),
    /// The fenced resource and the rail.
    Bank,
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Client(i) => write!(f, "c{i}"),
            Self::Replica(i) => write!(f, "r{i}"),
            Self::Bank => write!(f, "bank"),
        }
    }
}

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
    },
    WriteReply(Answer),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    ReplicaDown(usize),
    ReplicaUp(usize),
    NotLeaderOn,
    NotLeaderOff,
    Partition(Node, Node),
    Heal(Node, Node),
    /// An operator revokes the payout's lock (L8).
    Revoke(usize),
    /// The store host's wall clock steps by this many nanoseconds.
    StoreClockStep(i64),
}

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
    /// A parked L4 asks the store again (woken, or its nap ended).
    WaitRetry(u64),
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
    /// An attempt of the job of this id.
    Acquire(u64, Attempt),
    Release {
        key: LockKey,
        token: FencingToken,
        /// The job whose acquire loop waits for this release (a stale re-grant's), if any.
        then_retry: Option<u64>,
    },
    Write(Write),
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
    payout: usize,
    key: LockKey,
    token: Option<FencingToken>,
    phase: Phase,
    /// The SDK's acquire loop for this job's key.
    acquiring: AcquireLoop,
    /// A pause landed between a guard (or the grant) and a write of this job.
    paused_before_write: bool,
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

/// An L4 parked on a replica (`waiting::acquire_waiting`'s state).
#[derive(Debug)]
struct Parked {
    replica: usize,
    from: Node,
    req: u64,
    key: LockKey,
    session: SessionId,
    lease_ms: u64,
    plan: WaitPlan,
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
    partitions: Vec<(Node, Node)>,
    next_req: u64,
    coverage: Coverage,
    violation: Option<Violation>,
    recent: VecDeque<(Nanos, Vec<Node>, String)>,
    trace: Option<String>,
    last_sent_on_link: BTreeMap<(Node, Node), Nanos>,
    /// The checker's own record of the highest token the resource accepted per payout.
    accepted_max: Vec<i64>,
    /// Grants an operator revoked: their holders may believe they hold until their next
    /// renewal (revocation ends exclusion of beliefs by design; the fence still protects).
    revoked: BTreeSet<(LockKey, FencingToken)>,
    /// L4 requests parked on a replica, by id.
    parked: BTreeMap<u64, Parked>,
    /// Numbers parked requests.
    parks: u64,
    events: u64,
}

fn key_of(payout: usize) -> LockKey {
    LockKey::parse(format!("payout:{payout}")).unwrap_or_else(|e| panic!("{e}"))
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
        let bank = Bank::new(&faults, cfg.bugs.ignore_fence);
        let mut world = Self {
            service: LockService::new(
                cfg.replicas,
                cfg.lease_ms.max(cfg.ttl_ms),
                cfg.lock_delay_ms,
            ),
            bank,
            rng,
            q: Queue::new(),
            clients,
            partitions: Vec::new(),
            next_req: 0,
            coverage,
            violation: None,
            recent: VecDeque::new(),
            trace: trace.then(String::new),
            last_sent_on_link: BTreeMap::new(),
            accepted_max: vec![0; cfg.payouts],
            revoked: BTreeSet::new(),
            parked: BTreeMap::new(),
            parks: 0,
            events: 0,
            cfg,
        };
        world.schedule_nemesis();
        for c in 0..world.clients.len() {
            let think = world.rng.u64(0..50 * MS);
            world.q.after(think, Event::Step(c));
        }
        world.q.after(100 * MS, Event::Reap);
        world.q.after(CLOCK_SAMPLE_NANOS, Event::ClockSample);
        world
    }

    fn schedule_nemesis(&mut self) {
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

    // ---- network ----------------------------------------------------------------------

    fn in_fault_window(&self) -> bool {
        self.q.now() < self.cfg.fault_until_ms * MS
    }

    fn partitioned(&self, a: Node, b: Node) -> bool {
        self.partitions
            .iter()
            .any(|(x, y)| (*x == a && *y == b) || (*x == b && *y == a))
    }

    fn send(&mut self, from: Node, to: Node, req: u64, body: Body) {
        let faulty = self.in_fault_window();
        if self.partitioned(from, to) {
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

    fn request(&mut self, c: usize, to: Node, pending: Pending, body: Body) {
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

    fn lock_request(&mut self, c: usize, pending: Pending, call: LockCall) {
        let replica = self.clients[c].endpoint % self.cfg.replicas;
        self.request(c, Node::Replica(replica), pending, Body::Lock(call));
    }

    fn rotate(&mut self, c: usize) {
        let client = &mut self.clients[c];
        client.endpoint = (client.endpoint + 1) % self.cfg.replicas;
        client.rotated = true;
    }

    // ---- the run ----------------------------------------------------------------------

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
            self.check_exclusion();
            if now >= fault_until && self.bank.all_terminal() {
                break;
            }
        }
        if self.violation.is_none() {
            self.check_end();
        }
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
                let link = (from, to);
                let last = self.last_sent_on_link.get(&link).copied().unwrap_or(0);
                if sent < last {
                    self.coverage.hit("fault: messages reordered");
                }
                self.last_sent_on_link.insert(link, sent.max(last));
                match to {
                    Node::Replica(r) => self.at_replica(r, from, req, body),
                    Node::Bank => self.at_bank(from, req, body),
                    Node::Client(c) => self.at_client(c, from, req, body),
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
            Event::WaitRetry(id) => self.wait_call(id),
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

    fn nemesis(&mut self, fault: Fault) {
        self.log(&[], || format!("nemesis {fault:?}"));
        match fault {
            Fault::ReplicaDown(r) => {
                self.coverage.hit("fault: replica crash");
                self.service.up[r] = false;
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
                self.partitions.push((a, b));
            }
            Fault::Heal(a, b) => {
                if let Some(i) = self.partitions.iter().position(|p| *p == (a, b)) {
                    self.partitions.remove(i);
                }
            }
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
                    self.revoked.insert((key, token));
                }
            }
        }
    }

    fn at_replica(&mut self, r: usize, from: Node, req: u64, body: Body) {
        let Body::Lock(call) = body else { return };
        let now = self.q.now();
        let Some(answer) = self.service.handle(now, r, &call) else {
            self.log(&[from, Node::Replica(r)], || {
                format!("r{r} is down: #{req} vanishes")
            });
            return;
        };
        if let LockAnswer::Granted {
            key,
            token,
            session,
            ..
        } = &answer
        {
            if matches!(call, LockCall::Acquire { .. }) {
                self.check_grant(key, *token, *session);
            }
        }
        // A refused L4 that may wait is parked on the replica, as `waiting::acquire_waiting`
        // parks it, and driven by the same plan.
        if let (
            LockAnswer::Held,
            LockCall::Acquire {
                key,
                session,
                lease_ms,
                wait_ms: Some(wait_ms),
            },
        ) = (&answer, &call)
        {
            self.parks += 1;
            let id = self.parks;
            self.parked.insert(
                id,
                Parked {
                    replica: r,
                    from,
                    req,
                    key: key.clone(),
                    session: *session,
                    lease_ms: *lease_ms,
                    plan: WaitPlan::new(now, *wait_ms),
                },
            );
            return self.wait_call(id);
        }
        self.send(Node::Replica(r), from, req, Body::LockReply(answer));
    }

    /// A parked L4 asks the store again (its queue place renewed), then answers or naps as
    /// its plan says.
    fn wait_call(&mut self, id: u64) {
        let now = self.q.now();
        let Some(p) = self.parked.get(&id) else {
            return;
        };
        let (r, from, req, key, session) = (p.replica, p.from, p.req, p.key.clone(), p.session);
        let spec = AcquireSpec {
            lease_ms: p.lease_ms,
            queue_ms: p.plan.queue_ms(now),
            // The replica gives every grant its default lock-delay (the SDK names none).
            lock_delay_ms: 0,
        };
        let plan = p.plan;
        let answer = match self.service.acquire_queued(now, r, &key, session, spec) {
            // The replica crashed with the request parked: nothing answers.
            None => {
                self.parked.remove(&id);
                return;
            }
            Some(Err(refusal)) => refusal,
            Some(Ok(outcome)) => match plan.after(now, &outcome) {
                WaitStep::Nap(nap) => {
                    self.q.after(
                        u64::try_from(nap.as_nanos()).unwrap_or(u64::MAX).max(1),
                        Event::WaitRetry(id),
                    );
                    return;
                }
                WaitStep::Answer { waited_ms, leave } => {
                    if leave {
                        self.coverage
                            .hit("a waiting acquire gave up at its deadline");
                        self.service.leave_queue(now, &key, session);
                    } else {
                        self.coverage.hit("a parked acquire granted");
                    }
                    self.service.answer_acquire(now, &key, &outcome, waited_ms)
                }
            },
        };
        self.parked.remove(&id);
        if let LockAnswer::Granted { token, .. } = &answer {
            self.check_grant(&key, *token, session);
        }
        self.log(&[from, Node::Replica(r)], || {
            format!("r{r} answers parked #{req}: {answer:?}")
        });
        self.send(Node::Replica(r), from, req, Body::LockReply(answer));
    }

    /// Delivers the store's wake-ups to the parked requests they name, on every replica; the
    /// nemesis loses some (the recheck timer then bounds the cost) and delays others.
    fn deliver_wakes(&mut self) {
        for wake in self.service.take_wakes() {
            let woken: Vec<u64> = self
                .parked
                .iter()
                .filter(|(_, p)| match &wake {
                    Wake::Head { key, session } => p.key == *key && p.session == *session,
                    Wake::Everyone => true,
                })
                .map(|(id, _)| *id)
                .collect();
            for id in woken {
                if self.in_fault_window() && self.rng.f64() < self.cfg.wake_loss {
                    self.coverage.hit("fault: a wake-up lost");
                    continue;
                }
                let late = if self.in_fault_window() && self.rng.f64() < self.cfg.wake_loss {
                    self.coverage.hit("fault: a wake-up late");
                    self.rng.u64(MS..=200 * MS)
                } else {
                    1
                };
                self.q.after(late, Event::WaitRetry(id));
            }
        }
    }

    fn at_bank(&mut self, from: Node, req: u64, body: Body) {
        let Body::Write {
            payout,
            write,
            token,
            grant,
        } = body
        else {
            return;
        };
        let now = self.q.now();
        let rail_before = self.bank.rail.len();
        let fence_before = self.bank.payouts[payout].fence;
        let state_before = self.bank.payouts[payout].state;
        let answer = self.bank.write(now, payout, write, token, &grant);
        self.log(&[from, Node::Bank], || {
            format!("bank {write:?} payout {payout} token {token} -> {answer:?}")
        });
        if answer == Answer::FencedOut {
            self.coverage.hit("a stale write fenced");
            if let Node::Client(c) = from {
                if self.clients[c]
                    .job
                    .as_ref()
                    .is_some_and(|j| j.payout == payout && j.paused_before_write)
                {
                    self.coverage
                        .hit("a zombie's write fenced after a pause between guard and write");
                }
            }
        }
        if matches!(answer, Answer::Ok(_)) {
            // The checker's own witness, not the model's fence: a write accepted with a token
            // below one the resource already accepted is a superseded holder's, whatever
            // stops it later (one submission per payout is a second line, not the first).
            let highest = self.accepted_max[payout];
            if token < highest {
                self.violate(
                    "I2 no superseded write accepted",
                    &[from, Node::Bank],
                    format!(
                        "payout {payout}: {write:?} with token {token} accepted after token {highest}"
                    ),
                );
            }
            self.accepted_max[payout] = highest.max(token);
        }
        let fence_after = self.bank.payouts[payout].fence;
        if fence_after < fence_before {
            self.violate(
                "I2 fences only rise",
                &[from, Node::Bank],
                format!("payout {payout} fence {fence_before} -> {fence_after} by token {token}"),
            );
        }
        if self.bank.rail.len() > rail_before {
            let seen = self.bank.rail.iter().filter(|t| t.payout == payout).count();
            if seen > 1 {
                self.violate(
                    "I1 at most once at the rail",
                    &[from, Node::Bank],
                    format!("payout {payout} reached the rail {seen} times"),
                );
            }
            if state_before == PayoutState::RailAmbiguous {
                self.violate(
                    "I5 ambiguity is terminal",
                    &[from, Node::Bank],
                    format!("payout {payout} submitted after RAIL_AMBIGUOUS"),
                );
            }
        }
        self.send(Node::Bank, from, req, Body::WriteReply(answer));
    }

    // ---- clients -----------------------------------------------------------------------

    fn now_local(&self, c: usize) -> u64 {
        self.clients[c].local(self.q.now())
    }

    fn step(&mut self, c: usize) {
        let client = &self.clients[c];
        if client.session.is_none() {
            if !client.opening {
                self.clients[c].opening = true;
                let call = LockCall::Open {
                    owner: format!("c{c}"),
                    ttl_ms: self.cfg.ttl_ms,
                };
                let send_local = self.now_local(c);
                self.lock_request(c, Pending::Open { send_local }, call);
            }
            return;
        }
        if client.job.is_some() {
            return;
        }
        let claimable = self.bank.claimable();
        if claimable.is_empty() {
            self.q.after(100 * MS, Event::Step(c));
            return;
        }
        let payout = claimable[self.rng.usize(0..claimable.len())];
        let now_local = self.now_local(c);
        let request_timeout = Duration::from_millis(self.cfg.request_timeout_ms);
        let client = &mut self.clients[c];
        client.jobs += 1;
        client.job = Some(Job {
            id: client.jobs,
            payout,
            key: key_of(payout),
            token: None,
            phase: Phase::Acquiring,
            // The executor's policy, on the SDK's own loop.
            acquiring: AcquireLoop::new(&AcquirePolicy::DEFAULT, request_timeout, now_local),
            paused_before_write: false,
        });
        self.send_acquire(c);
    }

    fn job_is(&self, c: usize, id: u64) -> bool {
        self.clients[c].job.as_ref().is_some_and(|j| j.id == id)
    }

    /// The job's next acquire attempt, as the SDK's loop plans it.
    fn send_acquire(&mut self, c: usize) {
        let now_local = self.now_local(c);
        let lease_ms = self.cfg.lease_ms;
        let client = &mut self.clients[c];
        let (Some(session), Some(job)) = (&client.session, &mut client.job) else {
            return;
        };
        let attempt = job.acquiring.attempt(now_local);
        let call = LockCall::Acquire {
            key: job.key.clone(),
            session: session.id,
            lease_ms,
            wait_ms: attempt.wait_ms(),
        };
        let pending = Pending::Acquire(job.id, attempt);
        self.lock_request(c, pending, call);
    }

    /// An acquire attempt failed with `verdict`: the SDK's loop says what follows.
    fn acquire_failed(&mut self, c: usize, verdict: RetryVerdict) {
        let now_local = self.now_local(c);
        let rate = self.clients[c].rate;
        let Some(job) = &mut self.clients[c].job else {
            return;
        };
        let after = job.acquiring.failed(now_local, verdict, &mut self.rng);
        let id = job.id;
        if after.rotate {
            self.rotate(c);
        }
        match after.next {
            Next::Retry(sleep) => {
                let wait = (sleep.as_nanos() as f64 / rate) as Nanos;
                self.q.after(wait.max(1), Event::Retry(c, id));
            }
            Next::Contended => {
                self.coverage.hit("an acquire gave up contended");
                self.clients[c].job = None;
                let think = self.rng.u64(MS..10 * MS);
                self.schedule_step(c, think);
            }
            Next::Fail => {
                self.clients[c].job = None;
                self.schedule_step(c, 50 * MS);
            }
        }
    }

    fn schedule_step(&mut self, c: usize, after: Nanos) {
        self.q.after(after, Event::Step(c));
    }

    fn schedule_tick(&mut self, c: usize) {
        let client = &self.clients[c];
        let Some(session) = &client.session else {
            return;
        };
        let local_wait = session.grid.wait(client.local(self.q.now()));
        let true_wait = (local_wait.as_nanos() as f64 / client.rate) as Nanos;
        let generation = client.generation;
        self.q.after(true_wait.max(1), Event::Tick(c, generation));
    }

    fn tick(&mut self, c: usize) {
        let now_local = self.now_local(c);
        let Some(session) = &mut self.clients[c].session else {
            return;
        };
        let period = {
            let s = &*session;
            let basis = s
                .core
                .shortest_lease_ms()
                .map_or(s.ttl_ms, |l| l.min(s.ttl_ms));
            heartbeat_period(self.cfg.margin(), basis)
        };
        let plan = session.core.begin_tick(now_local, period);
        session.grid.advance(now_local, period);
        let id = session.id;
        if let Some(sent) = plan.heartbeat {
            self.lock_request(c, Pending::Heartbeat(sent), LockCall::Heartbeat(id));
        }
        for renewal in plan.renew {
            let call = LockCall::Renew {
                key: renewal.key.clone(),
                session: id,
                token: renewal.token,
            };
            self.lock_request(c, Pending::Renew(renewal), call);
        }
        self.settle(c);
        self.schedule_tick(c);
    }

    /// What the session's core makes of a failed L2 or L5 (`None`: no answer).
    fn session_call_failed(&mut self, c: usize, pending: &Pending, code: Option<ErrorCode>) {
        let Some(s) = &mut self.clients[c].session else {
            return;
        };
        let rotate = match pending {
            Pending::Renew(renewal) => s.core.renew_failed(renewal, code),
            _ => s.core.heartbeat_failed(code),
        };
        if rotate {
            self.rotate(c);
        }
    }

    fn timeout(&mut self, c: usize, req: u64) {
        let Some(pending) = self.clients[c].pending.remove(&req) else {
            return;
        };
        self.log(&[Node::Client(c)], || {
            format!("c{c} #{req} timed out ({pending:?})")
        });
        match pending {
            Pending::Open { .. } => {
                self.clients[c].opening = false;
                self.rotate(c);
                self.schedule_step(c, 50 * MS);
            }
            Pending::Heartbeat(_) | Pending::Renew(_) => {
                self.session_call_failed(c, &pending, None);
            }
            Pending::Acquire(job, _) => {
                // An attempt of a job the worker has left (its session was lost) is over.
                if self.job_is(c, job) {
                    self.acquire_failed(c, RetryVerdict::NextTick);
                }
            }
            // The release returned (timed out): the executor moves on, or the acquire loop
            // that sent it goes on.
            Pending::Release { then_retry, .. } => self.after_release(c, then_retry),
            Pending::Write(_) => self.end_job(c),
        }
        self.settle(c);
    }

    fn at_client(&mut self, c: usize, from: Node, req: u64, body: Body) {
        let Some(pending) = self.clients[c].pending.remove(&req) else {
            self.log(&[Node::Client(c), from], || {
                format!("c{c} drops late or duplicate #{req}")
            });
            return;
        };
        self.log(&[Node::Client(c), from], || {
            format!("c{c} <- {from} #{req} {body:?}")
        });
        match body {
            Body::LockReply(answer) => self.lock_reply(c, pending, answer),
            Body::WriteReply(answer) => self.write_reply(c, pending, answer),
            _ => {}
        }
        self.settle(c);
    }

    /// The error code a refusal carries on the wire.
    fn code_of(answer: &LockAnswer) -> Option<ErrorCode> {
        match answer {
            LockAnswer::NotLeader => Some(ErrorCode::NotLeader),
            LockAnswer::SessionUnknown => Some(ErrorCode::SessionUnknown),
            LockAnswer::SessionExpired => Some(ErrorCode::SessionExpired),
            LockAnswer::LockLost => Some(ErrorCode::LockLost),
            LockAnswer::Held => Some(ErrorCode::LockHeld),
            _ => None,
        }
    }

    fn lock_reply(&mut self, c: usize, pending: Pending, answer: LockAnswer) {
        let now_local = self.now_local(c);
        if let Some(code) = Self::code_of(&answer) {
            if code == ErrorCode::NotLeader {
                self.coverage.hit("a NOT_LEADER answer retried");
            }
            match &pending {
                Pending::Open { .. } => {
                    self.clients[c].opening = false;
                    self.rotate(c);
                    self.schedule_step(c, 50 * MS);
                }
                Pending::Heartbeat(_) | Pending::Renew(_) => {
                    self.session_call_failed(c, &pending, Some(code));
                }
                Pending::Acquire(job, _) if !self.job_is(c, *job) => {}
                Pending::Acquire(..) => {
                    if let Some(reason) = acquire::session_loss(code) {
                        // The SDK answers the acquire with the loss; the executor replaces
                        // the session.
                        if let Some(s) = &mut self.clients[c].session {
                            s.core.lose_session(reason);
                        }
                        self.clients[c].job = None;
                    } else {
                        if code == ErrorCode::LockHeld {
                            self.coverage.hit("an acquire found the lock held");
                        }
                        let verdict = if code == ErrorCode::LockHeld {
                            RetryVerdict::Backoff
                        } else {
                            RetryVerdict::NextTick
                        };
                        self.acquire_failed(c, verdict);
                    }
                }
                // The release failed: the lease expires on its own.
                Pending::Release { then_retry, .. } => self.after_release(c, *then_retry),
                Pending::Write(_) => {}
            }
            return;
        }
        if self.clients[c].rotated {
            self.clients[c].rotated = false;
            self.coverage.hit("a failover to the other replica");
        }
        match (answer, pending) {
            (
                LockAnswer::Opened {
                    session,
                    ttl_ms,
                    expires,
                },
                Pending::Open { send_local },
            ) => {
                let margin = self.cfg.margin();
                let core = SessionCore::new(margin, ttl_ms, send_local);
                let period = heartbeat_period(margin, ttl_ms);
                let client = &mut self.clients[c];
                client.opening = false;
                client.generation += 1;
                client.session = Some(Session {
                    id: session,
                    core,
                    grid: TickGrid::new(now_local, period),
                    ttl_ms,
                    store_expiry: expires,
                    grant_expiry: BTreeMap::new(),
                });
                self.check_session_deadline(c);
                self.schedule_tick(c);
                self.schedule_step(c, MS);
            }
            (LockAnswer::Extended { ttl_ms, expires }, Pending::Heartbeat(sent)) => {
                let Some(s) = &mut self.clients[c].session else {
                    return;
                };
                s.core.heartbeat_ok(sent, ttl_ms);
                s.store_expiry = expires;
                self.check_session_deadline(c);
                self.check_grant_deadlines(c);
            }
            (
                LockAnswer::Granted {
                    key,
                    token,
                    lease_ms,
                    expires,
                    ..
                },
                Pending::Renew(renewal),
            ) => {
                let Some(s) = &mut self.clients[c].session else {
                    return;
                };
                if renewal.key != key || renewal.token != token {
                    // Renew never changes the token: not our grant.
                    let _ = s.core.renew_failed(&renewal, Some(ErrorCode::LockLost));
                } else if s.core.renew_ok(&renewal, lease_ms).is_some() {
                    s.grant_expiry.insert((key, token), expires);
                }
                self.check_grant_deadlines(c);
            }
            (
                LockAnswer::Granted {
                    key,
                    token,
                    lease_ms,
                    expires,
                    waited_ms,
                    ..
                },
                Pending::Acquire(job, attempt),
            ) => {
                if !self.job_is(c, job) {
                    return;
                }
                let Some(s) = &mut self.clients[c].session else {
                    return;
                };
                if s.core
                    .granted(&key, token, lease_ms, attempt, now_local, waited_ms)
                    .is_err()
                {
                    // A re-grant of our own unanswered release's token: release it again and,
                    // once that returns, the loop goes on as after contention (the SDK awaits
                    // the release the same way).
                    self.coverage.hit("a stale re-grant refused");
                    let call = LockCall::Release {
                        key: key.clone(),
                        session: s.id,
                        token,
                    };
                    let pending = Pending::Release {
                        key,
                        token,
                        then_retry: Some(job),
                    };
                    self.lock_request(c, pending, call);
                    return;
                }
                s.grant_expiry.insert((key.clone(), token), expires);
                self.check_grant_deadlines(c);
                let Some(job) = &mut self.clients[c].job else {
                    return;
                };
                job.token = Some(token);
                job.phase = Phase::Claiming;
                self.write_after_think(c, Write::Claim);
            }
            (
                LockAnswer::Released,
                Pending::Release {
                    key,
                    token,
                    then_retry,
                },
            ) => {
                if let Some(s) = &mut self.clients[c].session {
                    s.core.release_answered(&key, token);
                }
                self.after_release(c, then_retry);
            }
            (answer, pending) => {
                self.log(&[Node::Client(c)], || {
                    format!("c{c}: unexpected {answer:?} for {pending:?}")
                });
                if matches!(pending, Pending::Acquire(..) | Pending::Release { .. }) {
                    self.clients[c].job = None;
                    self.schedule_step(c, MS);
                }
            }
        }
    }

    /// A release returned (answered or not): the acquire loop that sent it goes on as after
    /// contention, or the executor looks for its next payout.
    fn after_release(&mut self, c: usize, then_retry: Option<u64>) {
        match then_retry {
            Some(job) if self.job_is(c, job) => self.acquire_failed(c, RetryVerdict::Backoff),
            Some(_) => {}
            None => {
                let think = self.rng.u64(MS..10 * MS);
                self.schedule_step(c, think);
            }
        }
    }

    /// The scheduling point between a guard (or the grant) and the write it allows: the
    /// executor's think time, in which the nemesis may pause the process, up to 3 × TTL.
    fn write_after_think(&mut self, c: usize, write: Write) {
        let Some(id) = self.clients[c].job.as_ref().map(|j| j.id) else {
            return;
        };
        let think = self.rng.u64(0..=2 * MS);
        if self.in_fault_window() && self.rng.f64() < self.cfg.guard_pause {
            let now = self.q.now();
            let len = self.rng.u64(MS..=3 * self.cfg.ttl_ms * MS);
            self.clients[c].pauses.push((now, now + think + len));
            if let Some(job) = &mut self.clients[c].job {
                job.paused_before_write = true;
            }
            self.coverage
                .hit("fault: pause between a guard and its write");
            if len > self.cfg.lease_ms * MS {
                self.coverage
                    .hit("fault: a pause between guard and write outlived the lease");
            }
            self.log(&[Node::Client(c)], || {
                format!(
                    "nemesis pauses c{c} for {:.3} ms before its {write:?}",
                    len as f64 / MS as f64
                )
            });
        }
        self.q.after(think, Event::Write(c, id, write));
    }

    /// Sends the job's `write` with its token.
    fn send_write(&mut self, c: usize, write: Write) {
        let Some(job) = &self.clients[c].job else {
            return;
        };
        let Some(token) = job.token else { return };
        let Some(session) = &self.clients[c].session else {
            return;
        };
        // The proof the lock-server signed names this grant: its session, key and token.
        let grant = GrantId::derive(session.id, &job.key, token).as_text();
        let payout = job.payout;
        let token = i64::try_from(token.0).unwrap_or(i64::MAX);
        self.request(
            c,
            Node::Bank,
            Pending::Write(write),
            Body::Write {
                payout,
                write,
                token,
                grant,
            },
        );
    }

    /// The executor's guard before a write: the SDK core's `remaining` at the client's now.
    fn guard(&mut self, c: usize) -> Option<Duration> {
        let now_local = self.now_local(c);
        let client = &mut self.clients[c];
        let (Some(session), Some(job)) = (&mut client.session, &client.job) else {
            return None;
        };
        let token = job.token?;
        match session.core.remaining(&job.key, token, now_local) {
            Ok(left) => Some(left),
            Err(reason) => {
                self.coverage.hit(match reason {
                    LossReason::DeadlinePassed => "a guard stopped a write: deadline passed",
                    LossReason::RenewRefused => "a guard stopped a write: renew refused",
                    _ => "a guard stopped a write: session lost",
                });
                None
            }
        }
    }

    fn write_reply(&mut self, c: usize, pending: Pending, answer: Answer) {
        let Pending::Write(write) = pending else {
            return;
        };
        if self.clients[c].job.is_none() {
            return;
        }
        match (write, answer) {
            (Write::Claim, Answer::Ok(state)) => {
                let Some(left) = self.guard(c) else {
                    return self.end_job(c);
                };
                if state == PayoutState::Submitted {
                    self.set_phase(c, Phase::Posting);
                    return self.write_after_think(c, Write::Post);
                }
                let needed = (self.cfg.hop_ms as f64 * (1.0 + self.cfg.margin())) as u64 * MS;
                if (left.as_nanos() as u64) < needed {
                    self.coverage.hit("a lease-short skip");
                    return self.end_job(c);
                }
                self.set_phase(c, Phase::Submitting);
                self.write_after_think(c, Write::Submit);
            }
            (Write::Submit, Answer::Ok(_) | Answer::AlreadySubmitted) => {
                if self.guard(c).is_none() {
                    return self.end_job(c);
                }
                self.set_phase(c, Phase::Posting);
                self.write_after_think(c, Write::Post);
            }
            (Write::Post, Answer::Ok(_)) => {
                self.coverage.hit("a payout posted");
                self.end_job(c);
            }
            _ => self.end_job(c),
        }
    }

    fn set_phase(&mut self, c: usize, phase: Phase) {
        if let Some(job) = &mut self.clients[c].job {
            job.phase = phase;
        }
    }

    /// Releases the job's grant (L6 on the last hold) and looks for the next payout.
    fn end_job(&mut self, c: usize) {
        let Some(job) = self.clients[c].job.take() else {
            return;
        };
        if let (Some(token), Some(session)) = (job.token, &mut self.clients[c].session) {
            session.grant_expiry.remove(&(job.key.clone(), token));
            if let Unhold::Last(_) = session.core.unhold(&job.key, token) {
                // The executor awaits its release (or its timeout) before the next payout.
                let call = LockCall::Release {
                    key: job.key.clone(),
                    session: session.id,
                    token,
                };
                self.lock_request(
                    c,
                    Pending::Release {
                        key: job.key,
                        token,
                        then_retry: None,
                    },
                    call,
                );
                return;
            }
        }
        let think = self.rng.u64(MS..10 * MS);
        self.schedule_step(c, think);
    }

    /// Applies the deadlines and delivers losses; a lost session is dropped (its job
    /// abandoned with no write) and a new one opened.
    fn settle(&mut self, c: usize) {
        let now_local = self.now_local(c);
        let Some(session) = &mut self.clients[c].session else {
            return;
        };
        session.core.expire(now_local);
        let losses = session.core.take_losses();
        let lost_session = session.core.lost();
        for loss in &losses.grants {
            self.coverage.hit(match loss.lost.reason {
                LossReason::DeadlinePassed => "a loss: deadline passed",
                LossReason::SessionExpired => "a loss: session expired",
                LossReason::SessionUnknown => "a loss: session unknown",
                LossReason::RenewRefused => "a loss: renew refused",
                LossReason::SessionClosed | LossReason::NotHeld => "a loss: other",
            });
        }
        if let Some(reason) = lost_session {
            self.log(&[Node::Client(c)], || {
                format!("c{c} session lost ({reason:?}): abandons its payout")
            });
            self.coverage.hit("a session lost and replaced");
            let client = &mut self.clients[c];
            client.session = None;
            client.job = None;
            self.schedule_step(c, 50 * MS);
        }
    }

    // ---- checkers ----------------------------------------------------------------------

    /// I3 on the grant just made: above the key's previous token, unless it is the same
    /// session's idempotent re-grant; never a token another session had.
    fn check_grant(&mut self, key: &LockKey, token: FencingToken, session: SessionId) {
        let previous = self
            .service
            .grants
            .iter()
            .rev()
            .filter(|(_, k, _, _)| k == key)
            .nth(1)
            .map(|(_, _, t, s)| (*t, *s));
        let Some((last_token, last_session)) = previous else {
            return;
        };
        if last_token == token && last_session != session {
            let detail = format!("{key}: token {} granted to two sessions", token.0);
            self.violate("I3 tokens unique per key", &[], detail);
        } else if last_token != token && token <= last_token {
            let detail = format!("{key}: token {} granted after {}", token.0, last_token.0);
            self.violate("I3 tokens rise per key", &[], detail);
        }
    }

    fn check_session_deadline(&mut self, c: usize) {
        let client = &self.clients[c];
        let Some(s) = &client.session else { return };
        let deadline = client.true_time(s.core.session_deadline_nanos());
        if deadline > s.store_expiry {
            let detail = format!(
                "c{c}'s session deadline {:.3} ms lies after the store's expiry {:.3} ms",
                deadline as f64 / MS as f64,
                s.store_expiry as f64 / MS as f64
            );
            self.violate("I4 conservative expiry", &[Node::Client(c)], detail);
        }
    }

    fn check_grant_deadlines(&mut self, c: usize) {
        let now_local = self.now_local(c);
        let client = &self.clients[c];
        let Some(s) = &client.session else { return };
        let mut bad = None;
        for ((key, token), store_expiry) in &s.grant_expiry {
            if let Some(deadline) = s.core.held_deadline(key, *token, now_local) {
                let deadline = client.true_time(deadline);
                if deadline > *store_expiry {
                    bad = Some(format!(
                        "c{c}'s deadline for {key} token {} is {:.3} ms, after the store's expiry {:.3} ms",
                        token.0,
                        deadline as f64 / MS as f64,
                        *store_expiry as f64 / MS as f64
                    ));
                }
            }
        }
        if let Some(detail) = bad {
            self.violate("I4 conservative expiry", &[Node::Client(c)], detail);
        }
    }

    /// Mutual exclusion in true time: at most one client whose own deadline says it holds a
    /// key.
    fn check_exclusion(&mut self) {
        let now = self.q.now();
        let mut holders: BTreeMap<LockKey, Vec<usize>> = BTreeMap::new();
        for (c, client) in self.clients.iter().enumerate() {
            let (Some(s), Some(job)) = (&client.session, &client.job) else {
                continue;
            };
            let Some(token) = job.token else { continue };
            if self.revoked.contains(&(job.key.clone(), token)) {
                continue;
            }
            if s.core
                .held_deadline(&job.key, token, client.local(now))
                .is_some()
            {
                holders.entry(job.key.clone()).or_default().push(c);
            }
        }
        if let Some((key, cs)) = holders.into_iter().find(|(_, cs)| cs.len() > 1) {
            let parties: Vec<Node> = cs.iter().map(|c| Node::Client(*c)).collect();
            self.violate(
                "mutual exclusion",
                &parties,
                format!("{key} is held at once by clients {cs:?}, each by its own deadline"),
            );
        }
    }

    fn check_end(&mut self) {
        for (payout, p) in self.bank.payouts.iter().enumerate() {
            let entries = self.bank.ledger[payout];
            let expected = if p.state == PayoutState::Settled {
                2
            } else {
                0
            };
            if entries != expected {
                let detail = format!(
                    "payout {payout} is {:?} with {entries} ledger entries",
                    p.state
                );
                self.violation = Some(Violation {
                    invariant: "I6 the ledger balances",
                    at: self.q.now(),
                    detail,
                    recent: String::new(),
                });
                return;
            }
        }
        let open: Vec<(usize, PayoutState)> = self
            .bank
            .payouts
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.state.is_terminal())
            .map(|(i, p)| (i, p.state))
            .collect();
        if !open.is_empty() {
            let parties: Vec<Node> = (0..self.clients.len()).map(Node::Client).collect();
            let detail = format!(
                "{} ms after the faults stopped, payouts are still open: {open:?}",
                self.cfg.liveness_ms
            );
            self.violate(
                "I7 every payout terminal once faults heal",
                &parties,
                detail,
            );
        }
        for state in self.bank.payouts.iter().map(|p| p.state) {
            self.coverage.hit(match state {
                PayoutState::Settled => "a payout settled",
                PayoutState::Rejected => "a payout rejected",
                PayoutState::RailAmbiguous => "a payout ambiguous",
                _ => "a payout open",
            });
        }
    }
}
