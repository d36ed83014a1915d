//! The reaper: deletes expired grants and sessions on an interval, counts them and logs a
//! `lease_expired` event per grant. Several replicas may reap at once; each row is deleted
//! (and counted) by one of them.

use std::time::Duration;

use tokio::sync::watch;

use crate::metrics as m;
use crate::state::AppState;

/// Runs until `stop` turns true.
pub async fn run(state: AppState, interval: Duration, mut stop: watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => reap_once(&state).await,
            _ = stop.changed() => return,
        }
    }
}

/// One pass. Store errors are logged and retried on the next tick.
pub async fn reap_once(state: &AppState) {
    let backend = state.backend().as_str();
    let started = std::time::Instant::now();
    let reaped = state.store().reap_expired().await;
    match reaped {
        Ok(report) => {
            for lock in &report.locks {
                tracing::info!(
                    event = "lease_expired",
                    owner = %lock.owner_id,
                    session = %lock.session_id.tag(),
                    key = %lock.lock_key,
                    token = lock.fencing_token.0,
                    backend,
                    reason = lock.reason,
                    "grant expired and was reaped"
                );
                metrics::counter!(m::EXPIRED_TOTAL, "backend" => backend, "reason" => lock.reason)
                    .increment(1);
            }
            if report.sessions > 0 {
                metrics::counter!(m::SESSIONS_EXPIRED_TOTAL, "backend" => backend)
                    .increment(report.sessions);
            }
        }
        Err(err) => {
            tracing::warn!(event = "reaper_failed", backend, error = %err, "reaper pass failed")
        }
    }
    metrics::histogram!(m::REAPER_PASS_SECONDS, "backend" => backend)
        .record(started.elapsed().as_secs_f64());
}
