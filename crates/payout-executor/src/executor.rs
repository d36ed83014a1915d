//! The payout loop: list claimable payouts; for each, acquire `payout:{id}` through the SDK,
//! claim (P2) with the handle's token, guard with `check_still_held`, check the remaining
//! lease covers the hop budget, submit through rail-proxy, post (P3), release. The token is
//! threaded unchanged from the handle through every write.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lock_api::{ErrorCode, LockError, LockHandle, LockKey};
use lock_client::{AcquirePolicy, LockClient, LockClientConfig, LockClientSession};

use crate::config::{Config, FaultStep};
use crate::loss::SessionLossHandler;
use crate::services::{CallError, Services};

/// `payout_execute_seconds{outcome}`: one sample per payout attempt.
pub const EXECUTE_SECONDS: &str = "payout_execute_seconds";

/// The acquire policy the executor ships: the SDK's base and cap, but no waiting: a payout
/// another worker holds is being worked on, so this worker moves to the next one.
pub const ACQUIRE_POLICY: AcquirePolicy = AcquirePolicy {
    budget: Duration::ZERO,
    base: Duration::from_millis(25),
    cap: Duration::from_millis(500),
    max_attempts: 1,
};

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
        )?;
        if let Some(id) = config.fault_sigstop_payout {
            tracing::warn!(
                event = "fault_point_armed",
                payout_id = id,
                "TEST-ONLY FAULT POINT ARMED: this process will SIGSTOP itself before submitting payout {id}"
            );
        }
        let sigstop_armed = AtomicBool::new(config.fault_sigstop_payout.is_some());
        Ok(Self {
            client,
            current: tokio::sync::RwLock::new(Current { session, loss }),
            services,
            config,
            lease,
            sigstop_armed,
        })
    }

    /// Scans and executes until `stop` turns true.
    pub async fn run(&self, stop: tokio::sync::watch::Receiver<bool>) {
        while !*stop.borrow() {
            let payouts = match self.services.claimable(self.config.batch).await {
                Ok(payouts) => payouts,
                Err(err) => {
                    tracing::warn!(event = "scan_failed", error = %err);
                    Vec::new()
                }
            };
            let mut worked = false;
            for payout in payouts {
                if *stop.borrow() {
                    break;
                }
                let outcome = self.execute(payout.payout_id).await;
                worked |= !matches!(outcome, Outcome::Contended | Outcome::Error);
            }
            if !worked {
                let mut stop = stop.clone();
                tokio::select! {
                    _ = tokio::time::sleep(self.config.poll_interval) => {}
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
                tracing::warn!(event = "acquire_failed", payout_id, error = %err, "the session is lost for good: opening a new one");
                drop(current);
                self.replace_session().await;
                return Outcome::Error;
            }
            Err(err) => {
                tracing::warn!(event = "acquire_failed", payout_id, error = %err);
                return Outcome::Error;
            }
        };
        let lost = current.loss.watch(&key);
        let outcome = self.under_lock(session, payout_id, &handle, &lost).await;
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
            Err(err) => tracing::warn!(event = "session_reopen_failed", error = %err),
        }
    }

    /// Guard clause before a write: the lock is still ours by the SDK's conservative clock.
    fn still_held(session: &LockClientSession, handle: &LockHandle, lost: &AtomicBool) -> bool {
        session.check_still_held(handle).is_ok() && !lost.load(Ordering::SeqCst)
    }

    async fn under_lock(
        &self,
        session: &LockClientSession,
        payout_id: i64,
        handle: &LockHandle,
        lost: &AtomicBool,
    ) -> Outcome {
        let token = handle.fencing_token();
        let claimed = match self.services.claim(payout_id, token).await {
            Ok(payout) => payout,
            Err(err) => return refusal(payout_id, "claim", &err),
        };
        if claimed.state != "SUBMITTED" {
            let Ok(remaining) = session.remaining(handle) else {
                return Outcome::Lost;
            };
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
                return Outcome::LeaseShort;
            }
            if !Self::still_held(session, handle, lost) {
                return Outcome::Lost;
            }
            self.fault_point(payout_id, FaultStep::Submit);
            match self.services.submit(payout_id, token).await {
                Ok(()) => {}
                // Crash recovery: the submission is on record; post its outcome.
                Err(err) if err.code() == Some(ErrorCode::AlreadySubmitted) => {}
                Err(err) => return refusal(payout_id, "submit", &err),
            }
        }
        self.fault_point(payout_id, FaultStep::Post);
        if !Self::still_held(session, handle, lost) {
            return Outcome::Lost;
        }
        match self.services.post(payout_id, token).await {
            Ok(payout) => match payout.state.as_str() {
                "SETTLED" => Outcome::Acked,
                "REJECTED" => Outcome::Rejected,
                "RAIL_AMBIGUOUS" => Outcome::Ambiguous,
                other => {
                    tracing::warn!(event = "post_unexpected", payout_id, state = other);
                    Outcome::Error
                }
            },
            Err(err) => refusal(payout_id, "post", &err),
        }
    }

    /// The test-only fault point: stop this whole process (every thread, heartbeat included)
    /// at `step` of the armed payout, once.
    fn fault_point(&self, payout_id: i64, step: FaultStep) {
        if self.config.fault_sigstop_payout == Some(payout_id)
            && self.config.fault_sigstop_step == step
            && self.sigstop_armed.swap(false, Ordering::SeqCst)
        {
            tracing::warn!(
                event = "fault_point_sigstop",
                payout_id,
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

/// Refuses a configuration where no submit could ever pass the lease check: the remaining
/// lease right after a heartbeat is at least two periods of the usable TTL (2/3 of it).
fn check_hop_budget(config: &Config, lock: &LockClientConfig) -> anyhow::Result<()> {
    let margin = lock.safety_margin;
    let needed = config.hop_budget.mul_f64(1.0 + margin);
    let worst_remaining = lock
        .session_ttl
        .min(lock.default_ttl)
        .mul_f64((1.0 - margin) * 2.0 / 3.0);
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

fn refusal(payout_id: i64, step: &str, err: &CallError) -> Outcome {
    match err.code() {
        Some(ErrorCode::FencedOut) => {
            tracing::warn!(event = "fenced", payout_id, step, error = %err, "refused by the fence: not re-acquiring in this attempt");
            Outcome::Fenced
        }
        Some(ErrorCode::AlreadyTerminal) => Outcome::AlreadyTerminal,
        _ => {
            tracing::warn!(event = "step_failed", payout_id, step, error = %err);
            Outcome::Error
        }
    }
}
