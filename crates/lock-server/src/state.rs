//! `AppState`: what every handler shares.

use std::sync::Arc;

use lock_api::{Backend, FenceSigner};
use tokio::sync::watch;

use service_kit::Callers;

use crate::config::{TtlPolicy, WaitPolicy};
use crate::quota::Quotas;
use crate::sessions::SessionBinding;
use crate::store::{ClockCheckedStore, LockStore, StoreError};
use crate::waiting::Waiters;

/// Who a replica lets in, how much of it each caller may take, and the key it signs with.
#[derive(Debug)]
pub struct Credentials {
    /// The credentials it accepts, with their request rates.
    pub callers: Arc<Callers>,
    /// Each caller's sessions and waiters here.
    pub quotas: Quotas,
    /// Signs every grant's proof.
    pub signer: Option<FenceSigner>,
}

/// Shared, cheaply cloned state of one lock-server replica.
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// `clock`, as every handler sees it.
    store: Arc<dyn LockStore>,
    clock: Arc<ClockCheckedStore>,
    ttl: TtlPolicy,
    callers: Arc<Callers>,
    quotas: Quotas,
    sessions: SessionBinding,
    signer: Option<FenceSigner>,
    wait: WaitPolicy,
    waiters: Arc<Waiters>,
    draining: watch::Sender<bool>,
    /// The store's head event position as last heard: watch streams wait on it.
    head: watch::Sender<u64>,
}

impl AppState {
    /// State over `store` with the given TTL and waiting policies and credentials. Every
    /// grant passes this replica's store-clock guard, which holds grants for the longest
    /// lease after a step.
    pub fn new(
        store: Arc<dyn LockStore>,
        ttl: TtlPolicy,
        wait: WaitPolicy,
        credentials: Credentials,
    ) -> Self {
        let clock = Arc::new(ClockCheckedStore::new(
            store,
            std::time::Duration::from_millis(ttl.max_ms),
        ));
        Self {
            inner: Arc::new(Inner {
                store: clock.clone(),
                clock,
                ttl,
                callers: credentials.callers,
                quotas: credentials.quotas,
                sessions: SessionBinding::default(),
                signer: credentials.signer,
                wait,
                waiters: Arc::new(Waiters::new(wait)),
                draining: watch::Sender::new(false),
                head: watch::Sender::new(0),
            }),
        }
    }

    /// Connects the store's wake-ups to this replica's waiters (once, before serving).
    pub async fn watch_wakes(&self) -> Result<(), StoreError> {
        let waiters = self.inner.waiters.clone();
        self.inner
            .store
            .watch_wakes(Arc::new(move |wake| waiters.wake(&wake)))
            .await
    }

    /// Connects the store's head position to this replica's watch streams (once, before
    /// serving).
    pub async fn watch_events(&self) -> Result<(), StoreError> {
        let head = self.inner.head.clone();
        let sink = move |at: u64| {
            head.send_if_modified(|seen| {
                let moved = at > *seen;
                *seen = (*seen).max(at);
                moved
            });
        };
        self.inner.store.watch_events(Arc::new(sink)).await
    }

    /// The store's head event position as last heard, as a receiver that sees it move.
    pub fn head(&self) -> watch::Receiver<u64> {
        self.inner.head.subscribe()
    }

    /// The store, shared (for work that outlives a request, such as leaving a queue).
    pub fn store_arc(&self) -> Arc<dyn LockStore> {
        self.inner.store.clone()
    }

    /// The store with this replica's store-clock guard (for its sampler).
    pub fn clock_checked(&self) -> Arc<ClockCheckedStore> {
        self.inner.clock.clone()
    }

    /// Waiting and lock-delay limits.
    pub fn wait(&self) -> &WaitPolicy {
        &self.inner.wait
    }

    /// This replica's waiting acquires.
    pub fn waiters(&self) -> &Arc<Waiters> {
        &self.inner.waiters
    }

    /// Whether draining started, as a receiver that sees it start.
    pub fn draining(&self) -> watch::Receiver<bool> {
        self.inner.draining.subscribe()
    }

    /// The credentials this replica accepts.
    pub fn callers(&self) -> &Callers {
        &self.inner.callers
    }

    /// Which credential opened each session.
    pub fn sessions(&self) -> &SessionBinding {
        &self.inner.sessions
    }

    /// Each caller's sessions and waiters on this replica.
    pub fn quotas(&self) -> &Quotas {
        &self.inner.quotas
    }

    /// The grant signer, if configured.
    pub fn signer(&self) -> Option<&FenceSigner> {
        self.inner.signer.as_ref()
    }

    /// The store.
    pub fn store(&self) -> &dyn LockStore {
        self.inner.store.as_ref()
    }

    /// The backend label for metrics and logs.
    pub fn backend(&self) -> Backend {
        self.inner.store.backend()
    }

    /// TTL defaults and range.
    pub fn ttl(&self) -> &TtlPolicy {
        &self.inner.ttl
    }

    /// From now on, mutations are answered `NOT_LEADER` and readiness fails.
    pub fn start_draining(&self) {
        self.inner.draining.send_replace(true);
    }

    /// Whether this replica is draining for shutdown.
    pub fn is_draining(&self) -> bool {
        *self.inner.draining.borrow()
    }
}
