//! `AppState`: what every handler shares.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use lock_api::Backend;

use crate::config::TtlPolicy;
use crate::store::LockStore;

/// Shared, cheaply cloned state of one lock-server replica.
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Arc<dyn LockStore>,
    ttl: TtlPolicy,
    admin_token: Option<String>,
    draining: AtomicBool,
}

impl AppState {
    /// State over `store` with the given TTL policy and optional admin bearer token.
    pub fn new(store: Arc<dyn LockStore>, ttl: TtlPolicy, admin_token: Option<String>) -> Self {
        let admin_token = admin_token.filter(|t| !t.is_empty());
        Self {
            inner: Arc::new(Inner {
                store,
                ttl,
                admin_token,
                draining: AtomicBool::new(false),
            }),
        }
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

    /// The configured admin bearer token, if any.
    pub fn admin_token(&self) -> Option<&str> {
        self.inner.admin_token.as_deref()
    }

    /// From now on, mutations are answered `NOT_LEADER` and readiness fails.
    pub fn start_draining(&self) {
        self.inner.draining.store(true, Ordering::SeqCst);
    }

    /// Whether this replica is draining for shutdown.
    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::SeqCst)
    }
}
