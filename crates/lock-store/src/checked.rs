//! `ClockCheckedStore`: the store a replica serves from. It passes every call through to the
//! backend and every grant through this replica's [`ClockGuard`]: a grant whose store clock
//! ran ahead of the replica's monotonic expectation is withheld (503 `STORE_UNAVAILABLE`)
//! and no grant is answered for the longest lease after it. Owning the check here, not in
//! the handlers, means no path to a grant (try, wait, a later hand-over) can skip it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lock_api::{Backend, FencingToken, LeaderValue, LockGrant, LockInfo, LockKey, SessionId};

use crate::clock_guard::{ClockGuard, ClockReading, Verdict};
use crate::events::{EventPage, HeadSink};
use crate::{
    AcquireOutcome, AcquireSpec, LockStore, ReapReport, RequestId, Revocation, RevokeNote,
    SessionOwner, SessionRecord, SetOutcome, StoreError, WakeSink,
};

/// Steps of the store's clock a replica's guard saw (ERROR `store_clock_stepped` each).
pub const STORE_CLOCK_STEPS_TOTAL: &str = "lock_store_clock_steps_total";
/// Grants refused or withheld while a replica's store-clock guard held grants.
pub const GRANTS_WITHHELD_TOTAL: &str = "lock_grants_withheld_total";

/// How often a replica reads the store's clock between grants: keeps the guard's bound
/// tight and sees a step while no grant is asked for.
pub const CLOCK_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// The replica's own clocks as the guard reads them. The simulation gives virtual ones.
pub trait ReplicaClock: Send + Sync + std::fmt::Debug + 'static {
    /// The replica's monotonic clock (never steps).
    fn mono_nanos(&self) -> u64;
    /// The replica host's wall clock.
    fn wall(&self) -> DateTime<Utc>;
}

/// This process's monotonic clock and its host's wall clock.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl Default for SystemClock {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl ReplicaClock for SystemClock {
    fn mono_nanos(&self) -> u64 {
        duration_nanos(self.origin.elapsed())
    }

    fn wall(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A store whose grants pass the replica's store-clock guard.
#[derive(Debug)]
pub struct ClockCheckedStore {
    inner: Arc<dyn LockStore>,
    guard: Mutex<ClockGuard>,
    clock: Arc<dyn ReplicaClock>,
}

impl ClockCheckedStore {
    /// Wraps `inner`; after a step no grant is answered for `hold` (the longest lease).
    pub fn new(inner: Arc<dyn LockStore>, hold: Duration) -> Self {
        Self::with_clock(inner, hold, Arc::new(SystemClock::default()))
    }

    /// [`ClockCheckedStore::new`] on the given replica clocks.
    pub fn with_clock(
        inner: Arc<dyn LockStore>,
        hold: Duration,
        clock: Arc<dyn ReplicaClock>,
    ) -> Self {
        Self {
            inner,
            guard: Mutex::new(ClockGuard::new(duration_nanos(hold))),
            clock,
        }
    }

    fn mono_nanos(&self) -> u64 {
        self.clock.mono_nanos()
    }

    fn guard(&self) -> std::sync::MutexGuard<'_, ClockGuard> {
        self.guard.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the store's clock once (the sampler's tick). `None` for a store without one.
    pub async fn sample(&self) -> Result<Option<Verdict>, StoreError> {
        let sent = self.mono_nanos();
        let Some(store_now) = self.inner.clock_now().await? else {
            return Ok(None);
        };
        Ok(Some(self.observe(store_now, sent, "sample")))
    }

    /// Feeds one reading bracketed by a call sent at `sent_nanos` to the guard.
    fn observe(&self, store_now: DateTime<Utc>, sent_nanos: u64, source: &'static str) -> Verdict {
        let reading = ClockReading {
            store_nanos: epoch_nanos(store_now),
            sent_nanos,
            received_nanos: self.mono_nanos(),
            wall_nanos: epoch_nanos(self.clock.wall()),
        };
        let verdict = self.guard().observe(reading);
        self.report(verdict, store_now, source)
    }

    /// Feeds the guard a store time that no call of this replica's brackets.
    fn judge(&self, store_now: DateTime<Utc>, source: &'static str) -> Verdict {
        let (received, wall) = (self.mono_nanos(), epoch_nanos(self.clock.wall()));
        let verdict = self
            .guard()
            .judge_unbracketed(epoch_nanos(store_now), received, wall);
        self.report(verdict, store_now, source)
    }

    /// A step is logged and counted here, once.
    fn report(&self, verdict: Verdict, store_now: DateTime<Utc>, source: &'static str) -> Verdict {
        if let Verdict::Stepped {
            ahead_nanos,
            at_start,
        } = verdict
        {
            let backend = self.inner.backend().as_str();
            tracing::error!(
                event = "store_clock_stepped",
                backend,
                ahead_ms = ahead_nanos / 1_000_000,
                at_start,
                source,
                store_now = %store_now.to_rfc3339(),
                "the store's clock ran ahead of this replica's: leases granted before it may have ended early by the store's judgement; this replica answers no grant for the longest lease"
            );
            metrics::counter!(STORE_CLOCK_STEPS_TOTAL, "backend" => backend).increment(1);
        }
        if let Verdict::Behind { behind_nanos } = verdict
            && !self.guard().reported_back()
        {
            let backend = self.inner.backend().as_str();
            tracing::error!(
                event = "store_clock_stepped",
                backend,
                behind_ms = behind_nanos / 1_000_000,
                source,
                store_now = %store_now.to_rfc3339(),
                "the store's clock went back: a lease granted now would end early if it returns; this replica answers no grant while it stays back (at most the longest lease)"
            );
            metrics::counter!(STORE_CLOCK_STEPS_TOTAL, "backend" => backend).increment(1);
        }
        verdict
    }

    /// Before a call that may grant: refused while the guard holds grants back, else the
    /// replica's monotonic reading as the call is sent.
    fn before_grant(&self) -> Result<u64, StoreError> {
        match self.held() {
            Some(refusal) => Err(refusal),
            None => Ok(self.mono_nanos()),
        }
    }

    /// A grant decided at the store's `store_now`, for a call sent at `sent`: withheld when
    /// that reading shows the store's clock stepped or behind. Withheld, the session never
    /// learns it holds the key (or the set), so no second belief arises; the request that
    /// asked gives every grant back (`LockStore::abandon`).
    fn admit_grant(&self, store_now: Option<DateTime<Utc>>, sent: u64) -> Result<(), StoreError> {
        let Some(store_now) = store_now else {
            return Ok(());
        };
        match self.observe(store_now, sent, "grant") {
            Verdict::Stepped { .. } | Verdict::Behind { .. } => Err(self.withheld()),
            _ => Ok(()),
        }
    }

    /// The refusal of a grant the reading just taken withheld: the hold's, which that
    /// reading started.
    fn withheld(&self) -> StoreError {
        self.held()
            .unwrap_or_else(|| StoreError::Unavailable("the store's clock stepped".into()))
    }

    /// The refusal while grants are held, if they are.
    fn held(&self) -> Option<StoreError> {
        let left_nanos = self.guard().held_for(self.mono_nanos())?;
        metrics::counter!(GRANTS_WITHHELD_TOTAL, "backend" => self.inner.backend().as_str())
            .increment(1);
        Some(StoreError::Unavailable(format!(
            "the store's clock stepped; this replica answers no grant for {} ms more",
            left_nanos.div_ceil(1_000_000)
        )))
    }
}

/// Reads the store's clock every [`CLOCK_SAMPLE_INTERVAL`] until `stop` turns true.
#[cfg(feature = "sampler")]
pub async fn watch_clock(
    store: Arc<ClockCheckedStore>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(CLOCK_SAMPLE_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => match store.sample().await {
                Ok(Some(_)) => {}
                // A store without a wall clock has nothing to watch.
                Ok(None) => return,
                Err(err) => tracing::debug!(event = "clock_sample_failed", error = %err),
            },
            _ = stop.changed() => return,
        }
    }
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn epoch_nanos(at: DateTime<Utc>) -> i128 {
    i128::from(at.timestamp()) * 1_000_000_000 + i128::from(at.timestamp_subsec_nanos())
}

#[async_trait]
impl LockStore for ClockCheckedStore {
    fn backend(&self) -> Backend {
        self.inner.backend()
    }

    fn hands_over(&self) -> bool {
        self.inner.hands_over()
    }

    fn admit_hand_over(&self, grant: &LockGrant) -> Result<Option<Duration>, StoreError> {
        if let Some(refusal) = self.held() {
            return Err(refusal);
        }
        // The hand-over's start is one more reading of the store's clock, judged like a
        // grant's, but brackets no call of this replica's (see `judge_unbracketed`).
        let lease =
            chrono::Duration::milliseconds(i64::try_from(grant.lease_ms).unwrap_or(i64::MAX));
        let began = grant.expires_at - lease;
        if matches!(self.judge(began, "hand-over"), Verdict::Stepped { .. }) {
            return Err(self.withheld());
        }
        self.inner.admit_hand_over(grant)?;
        Ok(self
            .guard()
            .at_most_ago(epoch_nanos(began), self.mono_nanos())
            .map(Duration::from_nanos))
    }

    async fn open_session(
        &self,
        opener: &SessionOwner,
        ttl_ms: u64,
    ) -> Result<SessionRecord, StoreError> {
        self.inner.open_session(opener, ttl_ms).await
    }

    async fn session_owner(&self, session: SessionId) -> Result<Option<SessionOwner>, StoreError> {
        self.inner.session_owner(session).await
    }

    async fn sessions_of(&self, credential: &str) -> Result<u64, StoreError> {
        self.inner.sessions_of(credential).await
    }

    async fn heartbeat(&self, session: SessionId) -> Result<SessionRecord, StoreError> {
        self.inner.heartbeat(session).await
    }

    async fn delete_session(&self, session: SessionId) -> Result<bool, StoreError> {
        self.inner.delete_session(session).await
    }

    async fn acquire_with(
        &self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
    ) -> Result<AcquireOutcome, StoreError> {
        let sent = self.before_grant()?;
        let outcome = self.inner.acquire_with(key, session, spec).await?;
        if let AcquireOutcome::Granted { store_now, .. } = &outcome {
            self.admit_grant(*store_now, sent)?;
        }
        Ok(outcome)
    }

    async fn acquire_set(
        &self,
        keys: &[LockKey],
        session: SessionId,
        spec: AcquireSpec,
    ) -> Result<SetOutcome, StoreError> {
        let sent = self.before_grant()?;
        let outcome = self.inner.acquire_set(keys, session, spec).await?;
        if let SetOutcome::Granted { store_now, .. } = &outcome {
            self.admit_grant(*store_now, sent)?;
        }
        Ok(outcome)
    }

    async fn leave_queue(&self, key: &LockKey, session: SessionId) -> Result<(), StoreError> {
        self.inner.leave_queue(key, session).await
    }

    async fn abandon(
        &self,
        key: &LockKey,
        session: SessionId,
        request: RequestId,
        leave: bool,
    ) -> Result<bool, StoreError> {
        self.inner.abandon(key, session, request, leave).await
    }

    async fn watch_wakes(&self, sink: WakeSink) -> Result<(), StoreError> {
        self.inner.watch_wakes(sink).await
    }

    async fn renew(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
    ) -> Result<LockGrant, StoreError> {
        self.inner.renew(key, session, token).await
    }

    async fn release(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
    ) -> Result<bool, StoreError> {
        self.inner.release(key, session, token).await
    }

    async fn proclaim(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
        value: &LeaderValue,
    ) -> Result<(), StoreError> {
        self.inner.proclaim(key, session, token, value).await
    }

    async fn get(&self, key: &LockKey) -> Result<Option<LockInfo>, StoreError> {
        self.inner.get(key).await
    }

    async fn events_after(
        &self,
        prefix: &str,
        after: u64,
        limit: usize,
    ) -> Result<EventPage, StoreError> {
        self.inner.events_after(prefix, after, limit).await
    }

    async fn watch_events(&self, sink: HeadSink) -> Result<(), StoreError> {
        self.inner.watch_events(sink).await
    }

    async fn revoke(
        &self,
        key: &LockKey,
        note: &RevokeNote,
    ) -> Result<Option<FencingToken>, StoreError> {
        self.inner.revoke(key, note).await
    }

    async fn revocation(&self, key: &LockKey) -> Result<Option<Revocation>, StoreError> {
        self.inner.revocation(key).await
    }

    async fn reap_expired(&self) -> Result<ReapReport, StoreError> {
        self.inner.reap_expired().await
    }

    async fn clock_now(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        self.inner.clock_now().await
    }

    async fn ready(&self) -> Result<(), StoreError> {
        self.inner.ready().await
    }

    async fn durability_risks(&self) -> Result<Vec<String>, StoreError> {
        self.inner.durability_risks().await
    }
}
