//! [`Batched`]: group commit in front of a store. A replica's heartbeats, acquires, renews
//! and releases queue to one task, which hands them to the store's `apply_batch` as
//! lock-store's [`Gatherer`] decides (a write that finds a free slot at once; writes that
//! arrive while every slot is busy together, as the next batch) and answers each caller from
//! its own result. A write that finds no other pending goes alone on its own task
//! (`goes_alone`): a lone client pays no hop.
//! Everything else passes straight through.
//!
//! This file owns only the I/O: the channel, the task, the metric. Which writes go together
//! and whose answer is whose is the gatherer's; how a batch is committed is the store's.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use lock_api::{
    Backend, Claim, FencingToken, LeaderValue, LockGrant, LockInfo, LockKey, SessionId,
};
use tokio::sync::{mpsc, oneshot};

use lock_store::batch::{BatchAnswer, BatchOp, BatchResult, Gatherer, goes_alone, mismatched};
use lock_store::{
    AcquireOutcome, AcquireSpec, LockStore, ReapReport, RequestId, Revocation, RevokeNote,
    SessionOwner, SessionRecord, SetOutcome, StoreError, WakeSink,
};
use lock_store::{EventPage, HeadSink};

/// Histogram: writes per batch a replica committed.
pub const STORE_BATCH_WRITES: &str = "lock_store_batch_writes";

/// Writes a replica accepts and has not answered yet, alone or gathered: past it a write is
/// answered 503 at once (back-pressure) instead of queueing behind a store that fell behind.
/// Eight times the writes the batches in flight at once can carry (two of 256), far above
/// what a replica meets unless its store stalls.
pub const PENDING_WRITES_MAX: usize = 4_096;

type Reply = oneshot::Sender<BatchResult>;

/// A store whose writes are committed in batches.
#[derive(Debug)]
pub struct Batched {
    inner: Arc<dyn LockStore>,
    writes: mpsc::UnboundedSender<(Reply, BatchOp)>,
    /// The most writes one batch has carried so far.
    largest: Arc<AtomicUsize>,
    /// Writes accepted and not yet answered, alone or gathered.
    pending: AtomicUsize,
    /// The most of them at once ([`PENDING_WRITES_MAX`] unless a test says otherwise).
    pending_max: usize,
}

/// Counts a write as pending while it lives (a cancelled caller's too).
struct Pending<'a>(&'a AtomicUsize);

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Batched {
    /// Starts the batching task over `inner` (on the current tokio runtime). The task ends
    /// when this store is dropped and the writes queued before have been answered.
    pub fn new(inner: Arc<dyn LockStore>) -> Self {
        Self::bounded(inner, PENDING_WRITES_MAX)
    }

    /// [`Batched::new`] with at most `pending_max` writes accepted and not answered.
    pub fn bounded(inner: Arc<dyn LockStore>, pending_max: usize) -> Self {
        // Unbounded in type only: `write` refuses past `pending_max` before sending.
        let (writes, queue) = mpsc::unbounded_channel();
        let largest = Arc::default();
        tokio::spawn(run(inner.clone(), queue, Arc::clone(&largest)));
        Self {
            inner,
            writes,
            largest,
            pending: AtomicUsize::new(0),
            pending_max,
        }
    }

    /// The most writes one batch has carried so far (1 until writes overlapped).
    pub fn largest_batch(&self) -> usize {
        self.largest.load(Ordering::Relaxed)
    }

    async fn write(&self, op: BatchOp) -> BatchResult {
        let before = self.pending.fetch_add(1, Ordering::AcqRel);
        let _pending = Pending(&self.pending);
        if before >= self.pending_max {
            return Err(StoreError::Unavailable(format!(
                "this replica already has {before} writes waiting for the store; ask again"
            )));
        }
        if goes_alone(before) {
            record_batch(self.inner.backend().as_str(), 1, &self.largest);
            let mut results = self.inner.apply_batch(std::slice::from_ref(&op)).await;
            return match (results.pop(), results.is_empty()) {
                (Some(result), true) => result,
                _ => Err(StoreError::Internal(
                    "the store answered a lone write with other than one result".into(),
                )),
            };
        }
        let (reply, answer) = oneshot::channel();
        self.writes
            .send((reply, op))
            .map_err(|_| StoreError::Internal("the batching task has stopped".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Internal("the batching task dropped a write".into()))?
    }
}

/// One batch of `writes` committed (a lone write is a batch of one).
fn record_batch(backend: &'static str, writes: usize, largest: &AtomicUsize) {
    metrics::histogram!(STORE_BATCH_WRITES, "backend" => backend).record(writes as f64);
    largest.fetch_max(writes, Ordering::Relaxed);
}

/// The batching task: gathers writes, sends each batch the gatherer lets go (its slots'
/// commits run side by side in this task), and answers each caller from its own result when
/// its batch comes back.
async fn run(
    store: Arc<dyn LockStore>,
    mut queue: mpsc::UnboundedReceiver<(Reply, BatchOp)>,
    largest: Arc<AtomicUsize>,
) {
    let backend = store.backend().as_str();
    let mut gatherer: Gatherer<Reply> = Gatherer::default();
    let mut flushing = FuturesUnordered::new();
    let mut open = true;
    while open || gatherer.in_flight() > 0 {
        tokio::select! {
            write = queue.recv(), if open => match write {
                Some((reply, op)) => gatherer.push(reply, op),
                // Dropped: answer what is in flight, then stop.
                None => open = false,
            },
            Some((id, results)) = flushing.next(), if !flushing.is_empty() => {
                let answered = gatherer.complete(id, results, BatchOp::answered_by);
                let answered = answered.unwrap_or_else(|miscounted| {
                    let err = miscounted.error();
                    let fail = |reply| (reply, Err(err.clone()));
                    miscounted.callers.into_iter().map(fail).collect()
                });
                for (reply, result) in answered {
                    // A caller that went away (its request was cancelled) is not waited for.
                    let _ = reply.send(result);
                }
            }
        }
        while let Ok((reply, op)) = queue.try_recv() {
            gatherer.push(reply, op);
        }
        // A caller that went away (its request timed out or was cancelled) is not written
        // for: nobody would learn the answer.
        gatherer.retain_waiting(|reply| !reply.is_closed());
        while let Some((id, batch)) = gatherer.take() {
            record_batch(backend, batch.len(), &largest);
            let store = store.clone();
            flushing.push(async move { (id, store.apply_batch(&batch).await) });
        }
    }
}

#[async_trait]
impl LockStore for Batched {
    fn backend(&self) -> Backend {
        self.inner.backend()
    }

    fn hands_over(&self) -> bool {
        self.inner.hands_over()
    }

    fn admit_hand_over(
        &self,
        grant: &lock_api::LockGrant,
    ) -> Result<Option<std::time::Duration>, StoreError> {
        self.inner.admit_hand_over(grant)
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
        match self.write(BatchOp::Heartbeat { session }).await? {
            BatchAnswer::Heartbeat(record) => Ok(record),
            other => Err(mismatched(&other)),
        }
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
        // A reader's or a permit's acquire goes alone: a batch decides locks only.
        if spec.claim != Claim::Exclusive {
            return self.inner.acquire_with(key, session, spec).await;
        }
        let op = BatchOp::Acquire {
            key: key.clone(),
            session,
            spec,
        };
        match self.write(op).await? {
            BatchAnswer::Acquire(outcome) => Ok(outcome),
            other => Err(mismatched(&other)),
        }
    }

    async fn acquire_set(
        &self,
        keys: &[LockKey],
        session: SessionId,
        spec: AcquireSpec,
    ) -> Result<SetOutcome, StoreError> {
        // A set is one transaction of its own: it goes alone, never in a batch.
        self.inner.acquire_set(keys, session, spec).await
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
        let op = BatchOp::Renew {
            key: key.clone(),
            session,
            token,
        };
        match self.write(op).await? {
            BatchAnswer::Renew(grant) => Ok(grant),
            other => Err(mismatched(&other)),
        }
    }

    async fn release(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
    ) -> Result<bool, StoreError> {
        let op = BatchOp::Release {
            key: key.clone(),
            session,
            token,
        };
        match self.write(op).await? {
            BatchAnswer::Release(released) => Ok(released),
            other => Err(mismatched(&other)),
        }
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

    async fn apply_batch(&self, ops: &[BatchOp]) -> Vec<BatchResult> {
        self.inner.apply_batch(ops).await
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
