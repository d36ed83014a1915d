//! `AppState`: what every handler shares.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use lock_api::{Backend, FenceSigner};

use crate::config::TtlPolicy;
use crate::store::LockStore;

/// The secrets a replica is configured with.
#[derive(Debug, Default)]
pub struct Credentials {
    /// L8 revoke's bearer token.
    pub admin_token: Option<String>,
    /// L1-L7's bearer token.
    pub client_token: Option<String>,
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
    store: Arc<dyn LockStore>,
    ttl: TtlPolicy,
    admin_token: Option<String>,
    client_token: Option<String>,
    signer: Option<FenceSigner>,
    draining: AtomicBool,
}

impl AppState {
    /// State over `store` with the given TTL policy and credentials.
    pub fn new(store: Arc<dyn LockStore>, ttl: TtlPolicy, credentials: Credentials) -> Self {
        let nonempty = |t: Option<String>| t.filter(|t| !t.is_empty());
        Self {
            inner: Arc::new(Inner {
                store,
                ttl,
                admin_token: nonempty(credentials.admin_token),
                client_token: nonempty(credentials.client_token),
                signer: credentials.signer,
                draining: AtomicBool::new(false),
            }),
        }
    }

    /// The bearer token of L1-L7, if configured.
    pub fn client_token(&self) -> Option<&str> {
        self.inner.client_token.as_deref()
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
