//! The payout loop: list claimable payouts and visit them in this process's own shuffled
//! order; for each, acquire `payout:{id}` through the SDK, claim (P2) with the handle's
//! token, guard, check the remaining lease covers the hop budget, submit through rail-proxy,
//! guard, post (P3), release. The token is threaded unchanged from the handle through every
//! write. The guard ([`guard`]) is a clause that stops the payout with the typed loss reason,
//! never a boolean.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lock_api::{LockError, LockHandle, LockKey, LockLost, Throttle};
use lock_client::{AcquirePolicy, LockClient, LockClientConfig, LockClientSession};

use crate::config::{Config, FaultStep};
use crate::loss::{SessionLossHandler, Watch};
use crate::services::{CallError, Fence, Refusal, Services};

/// `payout_execute_seconds{outcome}`: one sample per payout attempt.
pub const EXECUTE_SECONDS: &str = "payout_execute_seconds";

/// The acquire policy the executor ships: the SDK's T-041 defaults (budget 2 s, base 25 ms,
/// cap 500 ms, 32 attempts). Workers do not trail each other because each visits a scan's
/// payouts in its own shuffled order, so two rarely want the same payout at once.
pub const ACQUIRE_POLICY: AcquirePolicy = AcquirePolicy::DEFAULT;

/// Longest pause between scans while a service keeps failing.
pub const ERROR_BACKOFF_MAX_MS: u64 = 5_000;
/// At most one line per this interval for each repeated warning (scan, acquire, step,
/// session failures); the count of suppressed ones rides on the next line.
pub const WARN_INTERVAL_MS: u64 = 5_000;
/// How long a payout whose claim was fenced while this worker held its lock is skipped at
/// first: such a fence was raised by a token the lock service has not issued yet (a forged
/// or foreign one), or by a worker that took over this one's expired lease and is on it.
/// Doubles per repeat, up to [`QUARANTINE_MAX_MS`].
pub const QUARANTINE_FIRST_MS: u64 = 30_000;
/// Longest quarantine.
pub const QUARANTINE_MAX_MS: u64 = 600_000;

/// The pause after `failures` consecutive failed scans: the poll interval doubled per
/// failure, capped at [`ERROR_BACKOFF_MAX_MS`], with up to a quarter of jitter so that
/// workers do not return in step.
pub fn error_backoff(poll_interval: Duration, failures: u32) -> Duration {
    let cap = Duration::from_millis(ERROR_BACKOFF_MAX_MS);
    let doubled = poll_interval.saturating_mul(1_u32 << failures.min(16).saturating_sub(1));
    let base = doubled.min(cap);
    base.mul_f64(0.75 + fastrand::f64() * 0.25)
}

/// Payouts this worker skips for a while: fenced at claim while it held their lock.
#[derive(Debug, Default)]
pub struct Quarantine {
    /// payout id -> (skipped until, times fenced in a row).
    entries: Mutex<std::collections::HashMap<i64, (Instant, u32)>>,
}

impl Quarantine {
    /// Skips `payout_id` for the next period (doubling per repeat).
    pub fn add(&self, payout_id: i64, now: Instant) {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let repeats = entries.get(&payout_id).map_or(0, |(_, n)| *n);
        let period_ms = QUARANTINE_FIRST_MS
            .saturating_mul(1_u64 << repeats.min(16))
            .min(QUARANTINE_MAX_MS);
        entries.insert(
            payout_id,
            (
                now + Duration::from_millis(period_ms),
                repeats.saturating_add(1),
            ),
        );
        metrics::gauge!(QUARANTINED).set(entries.len() as f64);
    }

    /// Forgets `payout_id` (its attempt got somewhere).
    pub fn clear(&self, payout_id: i64) {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.remove(&payout_id).is_some() {
            metrics::gauge!(QUARANTINED).set(entries.len() as f64);
        }
    }

    /// Whether `payout_id` is to be skipped at `now`.
    pub fn is_skipped(&self, payout_id: i64, now: Instant) -> bool {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        entries
            .get(&payout_id)
            .is_some_and(|(until, _)| now < *until)
    }
}

/// `executor_quarantined_payouts`: payouts this worker currently skips.
pub const QUARANTINED: &str = "executor_quarantined_payouts";

/// How one payout attempt ended (the `outcome` tag, pinned in C4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The rail accepted; the payout is `SETTLED`.
    Acked,
    /// The rail refused; the payout is `REJECTED`.
    Rejected,
    /// The rail's answer is unknown; the payout is `RAIL_AMBIGUOUS`.
    Ambiguous,
    /// Another worker holds the lock: no state change, no failure.
    Contended,
    /// The payout was already terminal.
    AlreadyTerminal,
    /// A claim or submit was refused by the fence: never re-acquired in this attempt.
    Fenced,
    /// The remaining lease does not cover a worst-case submit: released for a fresh token.
    LeaseShort,
    /// The lock was lost: abandoned by this worker, no write after the loss.
    Lost,
    /// A service was unreachable or answered unexpectedly; retried on a later scan.
    Error,
}

impl Outcome {
    /// Whether the attempt changed the payout (or must be retried at once, as a short
    /// lease is): a fenced, contended, terminal or failed attempt is no progress, so a
    /// worker facing only such payouts sleeps instead of spinning.
    pub fn is_progress(self) -> bool {
        matches!(
            self,
            Self::Acked | Self::Rejected | Self::Ambiguous | Self::LeaseShort
        )
    }

    /// Every outcome, so each series is exported from start (at zero).
    pub const ALL: [Self; 9] = [
        Self::Acked,
        Self::Rejected,
        Self::Ambiguous,
        Self::Contended,
        Self::AlreadyTerminal,
        Self::Fenced,
        Self::LeaseShort,
        Self::Lost,
        Self::Error,
    ];

    /// The tag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acked => "acked",
            Self::Rejected => "rejected",
            Self::Ambiguous => "ambiguous",
            Self::Contended => "contended",
            Self::AlreadyTerminal => "already_terminal",
            Self::Fenced => "fenced",
            Self::LeaseShort => "lease_short",
            Self::Lost => "lost",
            Self::Error => "error",
        }
    }
}

/// The process's session and its loss listener.
#[derive(Debug)]
struct Current {
    session: LockClientSession,
    loss: SessionLossHandler,
}

/// One worker process: exactly one `LockClient` and one long-lived session (replaced by a
/// new one only after the old one is lost for good: expired or unknown at the server).
#[derive(Debug)]
pub struct Executor {
    client: LockClient,
    current: tokio::sync::RwLock<Current>,
    services: Services,
    config: Config,
    lease: Duration,
    sigstop_armed: AtomicBool,
    /// This process's scan order: seeded from the OS, so no two processes share it.
    scan_rng: Mutex<fastrand::Rng>,
    /// Payouts skipped for a while.
    quarantine: Quarantine,
    /// Throttles of repeated warnings.
    warn_scan: Throttle,
    warn_acquire: Throttle,
    warn_step: Throttle,
    warn_session: Throttle,
}

impl Executor {
    /// Opens the process's one lock client and session.
    pub async fn start(config: Config, lock_config: LockClientConfig) -> anyhow::Result<Self> {
        let lease = lock_config.default_ttl;
        check_hop_budget(&config, &lock_config)?;
        let client = LockClient::new(lock_config)?;
        let session = client.open_session(&config.executor_id).await?;
        let loss = SessionLossHandler::register(&session, config.executor_id.clone());
        let services = Services::new(
            &config.payment_url,
            &config.rail_proxy_url,
            config.request_timeout,
            config.hop_budget,
            config.executor_token.as_deref(),
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
        Ok(Self {
            client,
            current: tokio::sync::RwLock::new(Current { session, loss }),
            services,
            config,
            lease,
            sigstop_armed,
            scan_rng: Mutex::new(fastrand::Rng::new()),
            quarantine: Quarantine::default(),
            warn_scan: Throttle::new(Duration::from_millis(WARN_INTERVAL_MS)),
            warn_acquire: Throttle::new(Duration::from_millis(WARN_INTERVAL_MS)),
            warn_step: Throttle::new(Duration::from_millis(WARN_INTERVAL_MS)),
            warn_session: Throttle::new(Duration::from_millis(WARN_INTERVAL_MS)),
        })
    }

    /// Scans and executes until `stop` turns true. A scan visits one page of claimable
    /// payouts (keyset-paged by id, so payouts this worker cannot finish at the head of the
    /// queue never hide the ones behind them), skipping quarantined ones. It sleeps the poll
    /// interval when a whole pass changed no payout, and backs off exponentially (up to
    /// [`ERROR_BACKOFF_MAX_MS`]) while a service fails.
    pub async fn run(&self, stop: tokio::sync::watch::Receiver<bool>) {
        let mut cursor = 0_i64;
        let mut pass_worked = false;
        let mut failures = 0_u32;
        while !*stop.borrow() {
            let page = match self.services.claimable(cursor, self.config.batch).await {
                Ok(page) => Some(page),
                Err(err) => {
                    if let Some(suppressed) = self.warn_scan.allow() {
                        tracing::warn!(event = "scan_failed", error = %err, suppressed);
                    }
                    None
                }
            };
            let mut failed = page.is_none();
            let full_page = page
                .as_ref()
                .is_some_and(|p| p.len() >= self.config.batch as usize);
            let mut payouts = page.unwrap_or_default();
            cursor = match payouts.last() {
                Some(last) if full_page => last.payout_id,
                _ => 0,
            };
            let now = Instant::now();
            payouts.retain(|p| !self.quarantine.is_skipped(p.payout_id, now));
            self.scan_rng
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .shuffle(&mut payouts);
            for payout in payouts {
                if *stop.borrow() {
                    break;
                }
                let outcome = self.execute(payout.payout_id).await;
                pass_worked |= outcome.is_progress();
                match outcome {
                    Outcome::Fenced => self.quarantine.add(payout.payout_id, Instant::now()),
                    Outcome::Error => {
                        // A failing service: stop hammering it with the rest of the page.
                        failed = true;
                        break;
                    }
                    _ => self.quarantine.clear(payout.payout_id),
                }
            }
            let pause = if failed {
                failures = failures.saturating_add(1);
                Some(error_backoff(self.config.poll_interval, failures))
            } else {
                failures = 0;
                // A pass ends where paging wraps to the start; only an idle pass sleeps.
                let pass_ended = cursor == 0;
                let idle = pass_ended && !std::mem::take(&mut pass_worked);
                idle.then_some(self.config.poll_interval)
            };
            if let Some(pause) = pause {
                let mut stop = stop.clone();
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = stop.changed() => {}
                }
            }
        }
    }

    /// One attempt at one payout, timed and tagged.
    pub async fn execute(&self, payout_id: i64) -> Outcome {
        let started = Instant::now();
        let outcome = self.attempt(payout_id).await;
        metrics::histogram!(EXECUTE_SECONDS, "outcome" => outcome.as_str())
            .record(started.elapsed().as_secs_f64());
        tracing::info!(
            event = "payout_attempted",
            payout_id,
            outcome = outcome.as_str()
        );
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
                drop(current);
                self.replace_session().await;
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

    /// Opens a new session in place of a lost one (still one session at a time), then closes
    /// the old one best effort. On failure the old one stays and the next attempt retries.
    async fn replace_session(&self) {
        let mut current = self.current.write().await;
        match self.client.open_session(&self.config.executor_id).await {
            Ok(session) => {
                let loss = SessionLossHandler::register(&session, self.config.executor_id.clone());
                let old = std::mem::replace(&mut *current, Current { session, loss });
                tracing::info!(event = "session_replaced", old = %old.session.id(), new = %current.session.id());
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
        let fence = Fence::of(handle);
        self.fault_point(payout_id, FaultStep::Claim);
        let claimed = match logged(
            payout_id,
            "claim",
            token,
            self.services.claim(payout_id, fence),
        )
        .await
        {
            Ok(payout) => payout,
            Err(err) => return Ok(self.refusal(payout_id, "claim", &err)),
        };
        if claimed.state != "SUBMITTED" {
            guard(session, handle, watch)?;
            let remaining = session.remaining(handle)?;
            let needed = self
                .config
                .hop_budget
                .mul_f64(1.0 + self.client.config().safety_margin);
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
                self.services.submit(payout_id, fence),
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
        guard(session, handle, watch)?;
        self.fault_point(payout_id, FaultStep::PostSend);
        Ok(
            match logged(
                payout_id,
                "post",
                token,
                self.services.post(payout_id, fence),
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

    /// Closes the session (L3) and the client (joins the heartbeat thread).
    pub async fn shutdown(self) {
        self.current.into_inner().session.close().await;
        self.client.close();
    }

    /// The lock client's heartbeat thread name (one per process).
    pub fn heartbeat_thread(&self) -> &str {
        self.client.heartbeat_thread()
    }
}

/// Refuses a configuration where no submit could ever pass the lease check: the SDK
/// guarantees only `remaining_after_tick` of the shorter TTL right after a heartbeat.
fn check_hop_budget(config: &Config, lock: &LockClientConfig) -> anyhow::Result<()> {
    let margin = lock.safety_margin;
    let needed = config.hop_budget.mul_f64(1.0 + margin);
    // The SDK's own guarantee: what a live grant has left right after a heartbeat tick.
    let worst_remaining = lock.remaining_after_tick(lock.session_ttl.min(lock.default_ttl));
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

/// Runs one write and logs it with its answer (`write`: payout, step, token, result, the
/// wall time it was sent): the fault campaign's history reads these lines.
async fn logged<T>(
    payout_id: i64,
    step: &'static str,
    token: lock_api::FencingToken,
    call: impl std::future::Future<Output = Result<T, CallError>>,
) -> Result<T, CallError> {
    let invoked_at = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    let result = call.await;
    let outcome = match &result {
        Ok(_) => "ok",
        Err(err) => match err.code() {
            Some(Refusal::FencedOut) => "fenced",
            Some(Refusal::AlreadyTerminal) => "terminal",
            Some(Refusal::AlreadySubmitted) => "submitted",
            _ => "error",
        },
    };
    tracing::info!(event = "write", payout_id, step, token = token.0, result = outcome, invoked_at = %invoked_at);
    result
}

/// The guard clause before every write: the listener has not reported the grant lost, and
/// the grant is within the SDK's conservative deadline. `Err` carries the typed reason; the
/// caller stops with `?`. `Ok` is no permission for a side effect: the fence is the safety.
pub fn guard(
    session: &LockClientSession,
    handle: &LockHandle,
    watch: &Watch,
) -> Result<(), LockLost> {
    watch.check()?;
    session.check_still_held(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_changed_payout_is_progress() {
        let progress: Vec<_> = Outcome::ALL
            .into_iter()
            .filter(|o| o.is_progress())
            .collect();
        assert_eq!(
            progress,
            [
                Outcome::Acked,
                Outcome::Rejected,
                Outcome::Ambiguous,
                Outcome::LeaseShort
            ]
        );
    }

    #[test]
    fn a_fenced_payout_is_skipped_for_a_doubling_period() {
        let q = Quarantine::default();
        let t0 = Instant::now();
        assert!(!q.is_skipped(7, t0));
        q.add(7, t0);
        let first = Duration::from_millis(QUARANTINE_FIRST_MS);
        assert!(q.is_skipped(7, t0 + first - Duration::from_millis(1)));
        assert!(!q.is_skipped(7, t0 + first));
        assert!(!q.is_skipped(8, t0), "other payouts are not skipped");
        q.add(7, t0 + first);
        assert!(
            q.is_skipped(7, t0 + first + first + first / 2),
            "the second period doubles"
        );
        q.clear(7);
        assert!(!q.is_skipped(7, t0 + first));
    }

    #[test]
    fn backoff_doubles_from_the_poll_interval_to_its_cap() {
        let poll = Duration::from_millis(100);
        for (failures, base_ms) in [(1, 100), (2, 200), (3, 400), (7, 5_000), (40, 5_000)] {
            let pause = error_backoff(poll, failures);
            let base = Duration::from_millis(base_ms);
            assert!(
                pause <= base && pause >= base.mul_f64(0.75),
                "{failures}: {pause:?}"
            );
        }
    }
}
