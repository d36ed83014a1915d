//! One seeded run: the clients (each the SDK's real `SessionCore` driven through the
//! executor's protocol), the lock service, the bank, the network and the nemesis, on one
//! event queue in virtual time, with the checkers applied after every event.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

use lock_api::{FencingToken, LockKey, LossReason, SessionId};
use lock_client::core::{SessionCore, TickGrid, Unhold, heartbeat_period};
use payment_api::PayoutState;

use crate::bank::{Answer, Bank, RailFault, Write};
use crate::check::{Coverage, Violation};
use crate::config::{Bugs, Config};
use crate::sched::{MS, Nanos, Queue};
use crate::service::{LockAnswer, LockCall, LockService};

/// How many recent events a failure report keeps.
const RECENT_EVENTS: usize = 400;
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
    Timeout(usize, u64),
    Nemesis(Fault),
    Reap,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pending {
    Open {
        send_local: u64,
    },
    Heartbeat {
        send_local: u64,
    },
    Renew {
        key: LockKey,
        token: FencingToken,
        send_local: u64,
    },
    Acquire {
        send_local: u64,
    },
    Release {
        key: LockKey,
        token: FencingToken,
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
    payout: usize,
    key: LockKey,
    token: Option<FencingToken>,
    phase: Phase,
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
    /// Planted bug "renew once per lease": when each grant was last really renewed (local).
    renewed_at: BTreeMap<LockKey, u64>,
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
    bugs: Bugs,
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
            bugs: cfg.bugs,
            service: LockService::new(cfg.replicas),
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
            events: 0,
            cfg,
        };
        world.schedule_nemesis();
        for c in 0..world.clients.len() {
            let think = world.rng.u64(0..50 * MS);
            world.q.after(think, Event::Step(c));
        }
        world.q.after(100 * MS, Event::Reap);
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
            self.check_exclusion();
            if now >= fault_until && self.bank.all_terminal() {
                break;
            }
        }
        if self.violation.is_none() {
            self.check_end();
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
            Event::Timeout(c, req) => self.timeout(c, req),
            Event::Nemesis(fault) => self.nemesis(fault),
            Event::Reap => {
                self.service.reap(now);
                self.q.after(100 * MS, Event::Reap);
            }
        }
    }

    fn nemesis(&mut self, fault: Fault) {
        self.log(&[], || format!("nemesis {fault:?}"));
        match fault {
            Fault::ReplicaDown(r) => {
                self.coverage.hit("fault: replica crash");
                self.service.up[r] = false;
            }
            Fault::ReplicaUp(r) => self.service.up[r] = true,
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
        self.send(Node::Replica(r), from, req, Body::LockReply(answer));
    }

    fn at_bank(&mut self, from: Node, req: u64, body: Body) {
        let Body::Write {
            payout,
            write,
            token,
        } = body
        else {
            return;
        };
        let now = self.q.now();
        let rail_before = self.bank.rail.len();
        let fence_before = self.bank.payouts[payout].fence;
        let state_before = self.bank.payouts[payout].state;
        let answer = self.bank.write(now, payout, write, token);
        self.log(&[from, Node::Bank], || {
            format!("bank {write:?} payout {payout} token {token} -> {answer:?}")
        });
        if answer == Answer::FencedOut {
            self.coverage.hit("a stale write fenced");
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
        let key = key_of(payout);
        let Some(session) = &self.clients[c].session else {
            return;
        };
        let id = session.id;
        self.clients[c].job = Some(Job {
            payout,
            key: key.clone(),
            token: None,
            phase: Phase::Acquiring,
        });
        let send_local = self.now_local(c);
        let call = LockCall::Acquire {
            key,
            session: id,
            lease_ms: self.cfg.lease_ms,
        };
        self.lock_request(c, Pending::Acquire { send_local }, call);
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
        let mut plan = session.core.begin_tick(now_local, period);
        if self.bugs.renew_once_per_lease {
            let lease_local = self.cfg.lease_ms * MS;
            let renewed_at = &session.renewed_at;
            plan.renew.retain(|(key, _)| {
                renewed_at
                    .get(key)
                    .is_none_or(|at| now_local.wrapping_sub(*at) >= lease_local)
            });
        }
        session.grid.advance(now_local, period);
        let id = session.id;
        if plan.heartbeat {
            self.lock_request(
                c,
                Pending::Heartbeat {
                    send_local: now_local,
                },
                LockCall::Heartbeat(id),
            );
        }
        for (key, token) in plan.renew {
            if let Some(s) = &mut self.clients[c].session {
                s.renewed_at.insert(key.clone(), now_local);
            }
            let pending = Pending::Renew {
                key: key.clone(),
                token,
                send_local: now_local,
            };
            self.lock_request(
                c,
                pending,
                LockCall::Renew {
                    key,
                    session: id,
                    token,
                },
            );
        }
        self.settle(c);
        self.schedule_tick(c);
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
            Pending::Heartbeat { .. } | Pending::Renew { .. } => self.rotate(c),
            Pending::Acquire { .. } => {
                self.rotate(c);
                self.clients[c].job = None;
                self.schedule_step(c, 50 * MS);
            }
            // The executor's release returned (timed out): it moves on.
            Pending::Release { .. } => self.schedule_step(c, MS),
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

    fn lock_reply(&mut self, c: usize, pending: Pending, answer: LockAnswer) {
        let now_local = self.now_local(c);
        match (&answer, &pending) {
            (LockAnswer::NotLeader, _) => {
                self.coverage.hit("a NOT_LEADER answer retried");
                self.rotate(c);
                match pending {
                    Pending::Open { .. } => {
                        self.clients[c].opening = false;
                        self.schedule_step(c, 50 * MS);
                    }
                    Pending::Acquire { .. } => {
                        self.clients[c].job = None;
                        self.schedule_step(c, 50 * MS);
                    }
                    // The executor's release failed: the lease expires on its own.
                    Pending::Release { .. } => self.schedule_step(c, MS),
                    _ => {}
                }
                return;
            }
            (LockAnswer::SessionUnknown | LockAnswer::SessionExpired, _) => {
                let reason = if answer == LockAnswer::SessionUnknown {
                    LossReason::SessionUnknown
                } else {
                    LossReason::SessionExpired
                };
                if let Some(s) = &mut self.clients[c].session {
                    s.core.lose_session(reason);
                }
                if matches!(pending, Pending::Acquire { .. }) {
                    self.clients[c].job = None;
                }
                return;
            }
            _ => {}
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
                    renewed_at: BTreeMap::new(),
                });
                self.check_session_deadline(c);
                self.schedule_tick(c);
                self.schedule_step(c, MS);
            }
            (LockAnswer::Extended { ttl_ms, expires }, Pending::Heartbeat { send_local }) => {
                let renew_once = self.bugs.renew_once_per_lease;
                let send_local = self.measured_from(send_local, now_local);
                let Some(s) = &mut self.clients[c].session else {
                    return;
                };
                s.core.heartbeat_ok(send_local, ttl_ms);
                s.store_expiry = expires;
                if renew_once {
                    // Planted bug: the session's heartbeat is taken to extend every grant.
                    let held: Vec<(LockKey, FencingToken)> =
                        s.grant_expiry.keys().cloned().collect();
                    for (key, token) in held {
                        let _ = s.core.renew_ok(&key, token, send_local, self.cfg.lease_ms);
                    }
                }
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
                Pending::Renew { send_local, .. },
            ) => {
                let send_local = self.measured_from(send_local, now_local);
                let Some(s) = &mut self.clients[c].session else {
                    return;
                };
                if s.core.renew_ok(&key, token, send_local, lease_ms).is_some() {
                    s.grant_expiry.insert((key, token), expires);
                }
                self.check_grant_deadlines(c);
            }
            (LockAnswer::LockLost, Pending::Renew { key, token, .. }) => {
                if let Some(s) = &mut self.clients[c].session {
                    s.core.lose_grant(&key, token, LossReason::RenewRefused);
                }
            }
            (
                LockAnswer::Granted {
                    key,
                    token,
                    lease_ms,
                    expires,
                    ..
                },
                Pending::Acquire { send_local },
            ) => {
                let registered_at = self.measured_from(send_local, now_local);
                let Some(s) = &mut self.clients[c].session else {
                    return;
                };
                if s.core
                    .granted(&key, token, lease_ms, registered_at)
                    .is_err()
                {
                    // A re-grant of our own unanswered release's token: release it again and
                    // acquire anew (the SDK does the same).
                    self.coverage.hit("a stale re-grant refused");
                    let session = s.id;
                    self.clients[c].job = None;
                    let call = LockCall::Release {
                        key: key.clone(),
                        session,
                        token,
                    };
                    self.lock_request(c, Pending::Release { key, token }, call);
                    return;
                }
                s.grant_expiry.insert((key.clone(), token), expires);
                s.renewed_at.insert(key.clone(), registered_at);
                self.check_grant_deadlines(c);
                let Some(job) = &mut self.clients[c].job else {
                    return;
                };
                job.token = Some(token);
                job.phase = Phase::Claiming;
                let payout = job.payout;
                self.write(c, payout, Write::Claim, token);
            }
            (LockAnswer::Held, Pending::Acquire { .. }) => {
                self.coverage.hit("an acquire found the lock held");
                self.clients[c].job = None;
                let backoff = self.rng.u64(20 * MS..200 * MS);
                self.schedule_step(c, backoff);
            }
            (LockAnswer::Released, Pending::Release { key, token }) => {
                if let Some(s) = &mut self.clients[c].session {
                    s.core.release_answered(&key, token);
                }
                let think = self.rng.u64(MS..10 * MS);
                self.schedule_step(c, think);
            }
            (answer, pending) => {
                self.log(&[Node::Client(c)], || {
                    format!("c{c}: unexpected {answer:?} for {pending:?}")
                });
                if matches!(pending, Pending::Acquire { .. } | Pending::Release { .. }) {
                    self.clients[c].job = None;
                    self.schedule_step(c, MS);
                }
            }
        }
    }

    /// The instant a deadline is measured from: the send (planted bug: the response).
    fn measured_from(&self, send_local: u64, recv_local: u64) -> u64 {
        if self.bugs.deadline_from_response {
            recv_local
        } else {
            send_local
        }
    }

    fn write(&mut self, c: usize, payout: usize, write: Write, token: FencingToken) {
        let token = i64::try_from(token.0).unwrap_or(i64::MAX);
        self.request(
            c,
            Node::Bank,
            Pending::Write(write),
            Body::Write {
                payout,
                write,
                token,
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
        let Some(job) = self.clients[c].job.clone() else {
            return;
        };
        let Some(token) = job.token else { return };
        match (write, answer) {
            (Write::Claim, Answer::Ok(state)) => {
                let Some(left) = self.guard(c) else {
                    return self.end_job(c);
                };
                if state == PayoutState::Submitted {
                    self.set_phase(c, Phase::Posting);
                    return self.write(c, job.payout, Write::Post, token);
                }
                let needed = (self.cfg.hop_ms as f64 * (1.0 + self.cfg.margin())) as u64 * MS;
                if (left.as_nanos() as u64) < needed {
                    self.coverage.hit("a lease-short skip");
                    return self.end_job(c);
                }
                self.set_phase(c, Phase::Submitting);
                // Think time between the guard and the write: a pause may land here.
                self.write(c, job.payout, Write::Submit, token);
            }
            (Write::Submit, Answer::Ok(_) | Answer::AlreadySubmitted) => {
                if self.guard(c).is_none() {
                    return self.end_job(c);
                }
                self.set_phase(c, Phase::Posting);
                self.write(c, job.payout, Write::Post, token);
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
