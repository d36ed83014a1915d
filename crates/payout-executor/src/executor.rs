//! The payout loop: list claimable payouts and visit them in this process's own shuffled
//! order, up to `EXECUTOR_CONCURRENCY` at once (a [`JoinSet`] of attempts in the process's
//! one session); for each, acquire `payout:{id}` through the SDK, claim with the
//! handle's token, guard, check the remaining lease covers the hop budget, submit through
//! rail-proxy, guard, post, release. The token is threaded unchanged from the handle
//! through every write. The guard ([`guard`]) is a clause that stops the payout with the
//! typed loss reason, never a boolean.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_api::{LockError, LockKey, LockLost, SessionId, Throttle};
use lock_client::{
    AcquirePolicy, ClientBuilder, ClientConfig, LockClient, LockClientSession, LockHandle,
};
use tokio::task::{JoinError, JoinSet};

use crate::config::{CONCURRENCY_MAX, Config, FaultStep};
use crate::guard::{guard, logged};
use crate::loss::{SessionLossHandler, Watch};
use crate::outcome::Outcome;
use crate::quarantine::{QUARANTINED, Quarantine, error_backoff};
use crate::services::{CallError, Fence, Refusal, Services};

/// `payout_execute_seconds{outcome}`: one sample per payout attempt.
pub const EXECUTE_SECONDS: &str = "payout_execute_seconds";

/// The acquire policy the executor ships: the SDK's defaults (budget 2 s, base 25 ms,
/// cap 500 ms, 32 attempts). Workers do not trail each other because each visits a scan's
/// payouts in its own shuffled order, so two rarely want the same payout at once.
pub const ACQUIRE_POLICY: AcquirePolicy = AcquirePolicy::DEFAULT;

/// Offers a scan takes per free attempt slot: one to start now and one to start when an
/// attempt ends, without waiting for the next scan's round trip.
pub const OFFERS_PER_SLOT: usize = 2;
/// Most payout ids a scan asks payment-resource to skip (its bound); past it, the rest are
/// offered and dropped here, as before.
const OFFER_SKIP_MAX: usize = 1_000;
/// An offer lasts this fraction of a lease (see `Executor::offer`), within payment-resource's
/// bounds.
const OFFER_LEASE_DIVISOR: u32 = 4;
/// payment-resource's bounds on an offer (`OFFER_MS_MIN`, `OFFER_MS_MAX`).
const OFFER_MIN: Duration = Duration::from_millis(100);
const OFFER_MAX: Duration = Duration::from_secs(60);

/// At most one line per this interval for each repeated warning (scan, acquire, step,
/// session failures); the count of suppressed ones rides on the next line.
pub const WARN_INTERVAL_MS: u64 = 5_000;

/// The payouts this process has an attempt on. At most one attempt per payout at a time in a
/// process: a second `acquire` of a key the session holds would return the same grant (the
/// SDK's reentrancy), and the loss listener watches one attempt per key.
#[derive(Debug, Default)]
struct InFlightSet(Arc<Mutex<Attempts>>);

/// What [`InFlightSet`] keeps.
#[derive(Debug, Default)]
struct Attempts {
    /// Payouts with an attempt in flight.
    active: HashSet<i64>,
    /// Payouts whose attempt ended since the scan in progress was sent: that page may still
    /// list them as they were before the attempt (a stale row, not work).
    ended: HashSet<i64>,
}

impl InFlightSet {
    fn lock(&self) -> std::sync::MutexGuard<'_, Attempts> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The payout's slot, or `None` while another attempt of this process is on it.
    fn enter(&self, payout_id: i64) -> Option<InFlight> {
        self.lock().active.insert(payout_id).then(|| InFlight {
            attempts: self.0.clone(),
            payout_id,
        })
    }

    /// Called before a scan is sent: attempts ending from now on are remembered for it.
    fn scan_sent(&self) {
        self.lock().ended.clear();
    }

    /// Whether the scan's row of `payout_id` is this process's own work: in flight, or ended
    /// after the scan was sent.
    fn is_own(&self, payout_id: i64) -> bool {
        let attempts = self.lock();
        attempts.active.contains(&payout_id) || attempts.ended.contains(&payout_id)
    }

    /// The payouts with an attempt in flight.
    fn active(&self) -> Vec<i64> {
        self.lock().active.iter().copied().collect()
    }
}

/// One attempt's claim on its payout; dropped (also on a panic) when the attempt ends.
#[derive(Debug)]
struct InFlight {
    attempts: Arc<Mutex<Attempts>>,
    payout_id: i64,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut attempts = self
            .attempts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        attempts.active.remove(&self.payout_id);
        attempts.ended.insert(self.payout_id);
    }
}

/// The process's session and its loss listener.
#[derive(Debug)]
struct Current {
    session: LockClientSession,
    loss: SessionLossHandler,
}

/// One worker process: exactly one `LockClient` and one long-lived session (replaced by a
/// new one only after the old one is lost for good: expired or unknown at the server), with
/// up to `EXECUTOR_CONCURRENCY` payout attempts in it at once, each under its own lock.
#[derive(Debug)]
pub struct Executor {
    client: LockClient,
    current: tokio::sync::RwLock<Current>,
    services: Services,
    config: Config,
    lease: Duration,
    /// How long an offer is this worker's alone: a quarter of a lease. A live worker starts
    /// its offers within milliseconds; a payout whose worker froze goes to another while the
    /// frozen worker's lock still holds, so the other queues for the lock and takes the payout
    /// over the moment the lock lapses, as it would without offers.
    offer: Duration,
    sigstop_armed: AtomicBool,
    /// This process's scan order: seeded from the OS, so no two processes share it.
    scan_rng: Mutex<fastrand::Rng>,
    /// Payouts skipped for a while.
    quarantine: Quarantine,
    /// Payouts with an attempt in flight.
    in_flight: InFlightSet,
    /// Throttles of repeated warnings.
    warn_scan: Throttle,
    warn_acquire: Throttle,
    warn_step: Throttle,
    warn_session: Throttle,
}

impl Executor {
    /// Opens the process's one lock client and session.
    pub async fn start(config: Config, lock_config: ClientBuilder) -> anyhow::Result<Self> {
        check_urls(&config, &lock_config.config()?)?;
        Self::with_client(config, lock_config.build()?).await
    }

    /// Opens the process's one session on `client` (tests pass one over an in-memory lock
    /// service; [`start`](Self::start) one over HTTP).
    pub async fn with_client(config: Config, client: LockClient) -> anyhow::Result<Self> {
        check_urls(&config, client.config())?;
        check_hop_budget(&config, client.config())?;
        let lease = client.config().default_ttl();
        let session = client.open_session(&config.executor_id).await?;
        let loss = SessionLossHandler::register(&session, config.executor_id.clone());
        let services = Services::new(
            &config.payment_url,
            &config.rail_proxy_url,
            config.request_timeout,
            config.hop_budget,
            config.executor_token.as_deref(),
            client.config().tls(),
        )?;
        if config.fault_sigstop_rate > 0.0 {
            tracing::warn!(
                event = "fault_point_armed",
                rate = config.fault_sigstop_rate,
                "TEST-ONLY FAULT POINTS ARMED: this process will SIGSTOP itself at random steps"
            );
        }
        if let Some(id) = config.fault_sigstop_payout {
            tracing::warn!(
                event = "fault_point_armed",
                payout_id = id,
                "TEST-ONLY FAULT POINT ARMED: this process will SIGSTOP itself before submitting payout {id}"
            );
        }
        let sigstop_armed = AtomicBool::new(config.fault_sigstop_payout.is_some());
        metrics::describe_histogram!(
            EXECUTE_SECONDS,
            metrics::Unit::Seconds,
            "Payout attempts, from before the acquire to after the release, by outcome."
        );
        metrics::describe_gauge!(
            QUARANTINED,
            "Payouts this worker skips for now because an attempt on them was fenced."
        );
        for outcome in Outcome::ALL {
            // Registered without a sample: every outcome's series exists from start.
            let _ = metrics::histogram!(EXECUTE_SECONDS, "outcome" => outcome.as_str());
        }
        metrics::gauge!(QUARANTINED).set(0.0);
        crate::guard::describe();
        Ok(Self {
            client,
            current: tokio::sync::RwLock::new(Current { session, loss }),
            services,
            config,
            lease,
            offer: (lease / OFFER_LEASE_DIVISOR).clamp(OFFER_MIN, OFFER_MAX),
            sigstop_armed,
            scan_rng: Mutex::new(fastrand::Rng::new()),
            quarantine: Quarantine::default(),
            in_flight: InFlightSet::default(),
            warn_scan: Throttle::new(Duration::from_millis(WARN_INTERVAL_MS)),
            warn_acquire: Throttle::new(Duration::from_millis(WARN_INTERVAL_MS)),
            warn_step: Throttle::new(Duration::from_millis(WARN_INTERVAL_MS)),
            warn_session: Throttle::new(Duration::from_millis(WARN_INTERVAL_MS)),
        })
    }

    /// Scans and executes until `stop` turns true, then waits for the attempts in flight.
    /// A scan takes offers: payouts payment-resource hands to this worker alone for a while
    /// (so workers side by side take disjoint payouts instead of meeting on the same locks),
    /// as many as it can start soon ([`OFFERS_PER_SLOT`] per free slot, at most
    /// `EXECUTOR_BATCH`). It skips quarantined ones and its own (in flight, or ended since the
    /// scan was sent), and starts an attempt on each as soon as fewer than
    /// `EXECUTOR_CONCURRENCY` are in flight. It sleeps the poll interval (or until an attempt
    /// finishes) when a scan changed no payout, and backs off exponentially (up to
    /// [`ERROR_BACKOFF_MAX_MS`](crate::quarantine::ERROR_BACKOFF_MAX_MS)) while a service
    /// fails: a failed attempt stops the scan, and the attempts already in flight finish on
    /// their own. An offer this worker does not get to lapses after a quarter of a lease and goes to
    /// whoever asks next, as the payout of a worker that froze does.
    pub async fn run(self: &Arc<Self>, stop: tokio::sync::watch::Receiver<bool>) {
        let limit = usize::try_from(self.config.concurrency.clamp(1, CONCURRENCY_MAX)).unwrap_or(1);
        let mut attempts: JoinSet<(i64, Outcome)> = JoinSet::new();
        let mut pass_worked = false;
        let mut failures = 0_u32;
        while !*stop.borrow() {
            self.in_flight.scan_sent();
            let free_slots = limit.saturating_sub(attempts.len()).max(1);
            let wanted = u32::try_from(free_slots * OFFERS_PER_SLOT)
                .unwrap_or(u32::MAX)
                .min(self.config.batch);
            // Payouts this worker would not start now stay free for the others.
            let mut skip = self.in_flight.active();
            skip.extend(self.quarantine.skipped(Instant::now()));
            skip.truncate(OFFER_SKIP_MAX);
            let offered = self
                .services
                .offers(&self.config.executor_id, wanted, self.offer, &skip)
                .await;
            let page = match offered {
                Ok(page) => Some(page),
                Err(err) => {
                    if let Some(suppressed) = self.warn_scan.allow() {
                        tracing::warn!(event = "scan_failed", error = %err, suppressed);
                    }
                    None
                }
            };
            let mut failed = page.is_none();
            let mut payouts = page.unwrap_or_default();
            // Book the attempts that ended before now (a fenced one is quarantined before its
            // row is filtered); the ones ending from now on are in `ended` for this scan.
            while let Some(done) = attempts.try_join_next() {
                failed |= self.settle(done, &mut pass_worked);
            }
            let now = Instant::now();
            payouts.retain(|p| {
                !self.quarantine.is_skipped(p.payout_id, now) && !self.in_flight.is_own(p.payout_id)
            });
            self.scan_rng
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .shuffle(&mut payouts);
            for payout in payouts {
                // Finished attempts first: a failing service stops the page at once.
                while let Some(done) = attempts.try_join_next() {
                    failed |= self.settle(done, &mut pass_worked);
                }
                while attempts.len() >= limit {
                    if let Some(done) = attempts.join_next().await {
                        failed |= self.settle(done, &mut pass_worked);
                    }
                }
                if failed || *stop.borrow() {
                    // A failing service: stop hammering it with the rest of the page.
                    break;
                }
                let Some(slot) = self.in_flight.enter(payout.payout_id) else {
                    continue;
                };
                let executor = Arc::clone(self);
                attempts.spawn(async move {
                    let payout_id = slot.payout_id;
                    (payout_id, executor.execute_in(slot).await)
                });
            }
            let pause = if failed {
                failures = failures.saturating_add(1);
                Some(error_backoff(self.config.poll_interval, failures))
            } else {
                failures = 0;
                // Only a scan that changed no payout sleeps.
                let idle = !std::mem::take(&mut pass_worked);
                idle.then_some(self.config.poll_interval)
            };
            if let Some(pause) = pause {
                let mut stop = stop.clone();
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = stop.changed() => {}
                    // An idle pass may only have waited on attempts still in flight: the first
                    // of them to finish ends the pause (a failing service's backoff runs out).
                    Some(done) = attempts.join_next(), if !failed && !attempts.is_empty() => {
                        let _ = self.settle(done, &mut pass_worked);
                    }
                }
            }
        }
        // Shutdown: every attempt in flight finishes (and releases) before the session closes.
        while let Some(done) = attempts.join_next().await {
            let _ = self.settle(done, &mut pass_worked);
        }
    }

    /// Books a finished attempt: quarantine for a fenced payout, progress for the pass.
    /// Returns whether it failed (a service was unreachable or answered unexpectedly).
    fn settle(&self, done: Result<(i64, Outcome), JoinError>, pass_worked: &mut bool) -> bool {
        match done {
            Ok((payout_id, outcome)) => {
                *pass_worked |= outcome.is_progress();
                match outcome {
                    Outcome::Fenced => self.quarantine.add(payout_id, Instant::now()),
                    Outcome::Error => return true,
                    _ => self.quarantine.clear(payout_id),
                }
                false
            }
            Err(err) => {
                // A panicked attempt: its handle's drop released the lock in the background.
                tracing::error!(event = "attempt_failed", error = %err, "a payout attempt panicked");
                true
            }
        }
    }

    /// One attempt at one payout, timed and tagged; `contended`, with nothing sent, while
    /// another attempt of this process is on the same payout.
    pub async fn execute(&self, payout_id: i64) -> Outcome {
        match self.in_flight.enter(payout_id) {
            Some(slot) => self.execute_in(slot).await,
            None => Outcome::Contended,
        }
    }

    /// The attempt of `slot`'s payout, timed and tagged.
    async fn execute_in(&self, slot: InFlight) -> Outcome {
        let payout_id = slot.payout_id;
        let started = Instant::now();
        let outcome = self.attempt(payout_id).await;
        metrics::histogram!(EXECUTE_SECONDS, "outcome" => outcome.as_str())
            .record(started.elapsed().as_secs_f64());
        tracing::info!(
            event = "payout_attempted",
            payout_id,
            outcome = outcome.as_str()
        );
        drop(slot);
        outcome
    }

    async fn attempt(&self, payout_id: i64) -> Outcome {
        let Ok(key) = LockKey::parse(format!("payout:{payout_id}")) else {
            return Outcome::Error;
        };
        let current = self.current.read().await;
        let session = &current.session;
        let handle = match session.acquire(&key, self.lease, &ACQUIRE_POLICY).await {
            Ok(Some(handle)) => handle,
            Ok(None) => return Outcome::Contended,
            Err(err @ (LockError::SessionExpired { .. } | LockError::SessionUnknown { .. })) => {
                if let Some(suppressed) = self.warn_acquire.allow() {
                    tracing::warn!(event = "acquire_failed", payout_id, error = %err, suppressed, "the session is lost for good: opening a new one");
                }
                let lost = session.id();
                drop(current);
                self.replace_session(lost).await;
                return Outcome::Error;
            }
            Err(err) => {
                if let Some(suppressed) = self.warn_acquire.allow() {
                    tracing::warn!(event = "acquire_failed", payout_id, error = %err, suppressed);
                }
                return Outcome::Error;
            }
        };
        let watch = current.loss.watch(payout_id, &handle);
        let outcome = match self.under_lock(session, payout_id, &handle, &watch).await {
            Ok(outcome) => outcome,
            Err(lost) => {
                tracing::warn!(
                    event = "payout_lost",
                    payout_id,
                    key = %lost.lock_key,
                    token = lost.fencing_token.0,
                    reason = lost.reason.as_str(),
                    "the lock is lost: no further write for this payout by this worker"
                );
                Outcome::Lost
            }
        };
        current.loss.unwatch(&key);
        if let Err(lost) = session.release(handle).await {
            tracing::debug!(
                event = "release_after_loss",
                payout_id,
                reason = lost.reason.as_str()
            );
        }
        outcome
    }

    /// Opens a new session in place of the lost one `lost` (still one session at a time),
    /// then closes the old one best effort. The write lock waits for the attempts in flight on
    /// the old session; the attempts that found it lost too find it replaced already and
    /// leave the new one alone. On failure the old one stays and the next attempt retries.
    async fn replace_session(&self, lost: SessionId) {
        let mut current = self.current.write().await;
        if current.session.id() != lost {
            return;
        }
        match self.client.open_session(&self.config.executor_id).await {
            Ok(session) => {
                let loss = SessionLossHandler::register(&session, self.config.executor_id.clone());
                let old = std::mem::replace(&mut *current, Current { session, loss });
                tracing::info!(event = "session_replaced", old = %old.session.id().tag(), new = %current.session.id().tag());
                old.session.close().await;
            }
            Err(err) => {
                if let Some(suppressed) = self.warn_session.allow() {
                    tracing::warn!(event = "session_reopen_failed", error = %err, suppressed);
                }
            }
        }
    }

    /// The payout's steps under its lock. `Err(LockLost)` from a guard stops them: no write
    /// follows a loss.
    async fn under_lock(
        &self,
        session: &LockClientSession,
        payout_id: i64,
        handle: &LockHandle,
        watch: &Watch,
    ) -> Result<Outcome, LockLost> {
        let token = handle.fencing_token();
        let belief = guard(session, handle, watch)?;
        self.fault_point(payout_id, FaultStep::Claim);
        let claimed = match logged(
            payout_id,
            "claim",
            token,
            belief,
            self.services.claim(payout_id, Fence::of(session, handle)),
        )
        .await
        {
            Ok(payout) => payout,
            Err(err) => return Ok(self.refusal(payout_id, "claim", &err)),
        };
        if claimed.state != "SUBMITTED" {
            let belief = guard(session, handle, watch)?;
            let remaining = belief.remaining;
            let needed = self
                .config
                .hop_budget
                .mul_f64(1.0 + self.client.config().safety_margin());
            if remaining < needed {
                tracing::info!(
                    event = "lease_short",
                    payout_id,
                    remaining_ms = remaining.as_millis() as u64,
                    needed_ms = needed.as_millis() as u64
                );
                return Ok(Outcome::LeaseShort);
            }
            self.fault_point(payout_id, FaultStep::Submit);
            match logged(
                payout_id,
                "submit",
                token,
                belief,
                self.services.submit(payout_id, Fence::of(session, handle)),
            )
            .await
            {
                Ok(()) => {}
                // Crash recovery: the submission is on record; post its outcome.
                Err(err) if err.code() == Some(&Refusal::AlreadySubmitted) => {}
                Err(err) => return Ok(self.refusal(payout_id, "submit", &err)),
            }
        }
        self.fault_point(payout_id, FaultStep::Post);
        let belief = guard(session, handle, watch)?;
        self.fault_point(payout_id, FaultStep::PostSend);
        Ok(
            match logged(
                payout_id,
                "post",
                token,
                belief,
                self.services.post(payout_id, Fence::of(session, handle)),
            )
            .await
            {
                Ok(payout) => match payout.state.as_str() {
                    "SETTLED" => Outcome::Acked,
                    "REJECTED" => Outcome::Rejected,
                    "RAIL_AMBIGUOUS" => Outcome::Ambiguous,
                    other => {
                        tracing::warn!(event = "post_unexpected", payout_id, state = other);
                        Outcome::Error
                    }
                },
                Err(err) => self.refusal(payout_id, "post", &err),
            },
        )
    }

    /// The outcome of a refused or failed write; a failure's warning is throttled.
    fn refusal(&self, payout_id: i64, step: &str, err: &CallError) -> Outcome {
        match err.code() {
            Some(Refusal::FencedOut) => {
                // Not throttled: one line per fenced payout attempt is the evidence of a
                // stopped zombie, and the quarantine keeps repeats rare.
                tracing::warn!(event = "fenced", payout_id, step, error = %err, "refused by the fence: not re-acquiring in this attempt");
                Outcome::Fenced
            }
            Some(Refusal::AlreadyTerminal) => Outcome::AlreadyTerminal,
            _ => {
                if let Some(suppressed) = self.warn_step.allow() {
                    tracing::warn!(event = "step_failed", payout_id, step, error = %err, suppressed);
                }
                Outcome::Error
            }
        }
    }

    /// The test-only fault point: stop this whole process (every thread, heartbeat included)
    /// at `step` of the armed payout, once.
    fn fault_point(&self, payout_id: i64, step: FaultStep) {
        let armed = self.config.fault_sigstop_payout == Some(payout_id)
            && self.config.fault_sigstop_step == step
            && self.sigstop_armed.swap(false, Ordering::SeqCst);
        let drawn = self.config.fault_sigstop_rate > 0.0
            && step != FaultStep::Post
            && self
                .scan_rng
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .f64()
                < self.config.fault_sigstop_rate;
        if armed || drawn {
            tracing::warn!(
                event = "fault_point_sigstop",
                payout_id,
                step = ?step,
                "TEST-ONLY: stopping this process with SIGSTOP now"
            );
            if let Err(err) = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP) {
                tracing::error!(event = "fault_point_failed", error = %err);
            }
        }
    }

    /// Closes the session and the client (joins the heartbeat thread), once
    /// [`run`](Self::run) has returned: its attempts, which share the executor, have ended.
    pub async fn shutdown(self: Arc<Self>) {
        match Arc::try_unwrap(self) {
            Ok(executor) => {
                executor.current.into_inner().session.close().await;
                executor.client.close();
            }
            Err(_) => tracing::warn!(
                event = "shutdown_early",
                "the executor is still shared: its session ends with its TTL"
            ),
        }
    }

    /// The lock client's heartbeat thread name (one per process).
    pub fn heartbeat_thread(&self) -> &str {
        self.client.heartbeat_thread()
    }
}

/// Every URL the executor sends its credentials to: `https://`, or plain `http://` only with
/// `UNSAFE_PLAINTEXT_HTTP` (the lock client's [`lock_client::ClientTls`]); checked before any
/// call.
fn check_urls(config: &Config, lock: &ClientConfig) -> anyhow::Result<()> {
    lock.tls().check_url("PAYMENT_URL", &config.payment_url)?;
    lock.tls()
        .check_url("RAIL_PROXY_URL", &config.rail_proxy_url)?;
    Ok(())
}

/// Refuses a configuration where no submit could ever pass the lease check: the SDK
/// guarantees only `remaining_after_tick` of the shorter TTL right after a heartbeat.
fn check_hop_budget(config: &Config, lock: &ClientConfig) -> anyhow::Result<()> {
    let margin = lock.safety_margin();
    let needed = config.hop_budget.mul_f64(1.0 + margin);
    // The SDK's own guarantee: what a live grant has left right after a heartbeat tick.
    let worst_remaining = lock.remaining_after_tick(lock.session_ttl().min(lock.default_ttl()));
    if needed > worst_remaining {
        anyhow::bail!(
            "rail.hop-budget (RAIL_HOP_BUDGET) {:?} needs {:?} of lease, but LOCK_SESSION_TTL/LOCK_DEFAULT_TTL leave as little as {:?} between heartbeats: lower the budget or raise the TTLs",
            config.hop_budget,
            needed,
            worst_remaining
        );
    }
    Ok(())
}
