//! `fencedlock._native`: the Python SDK's native module. It drives the Rust SDK
//! (`lock-client`), so a Python client runs the same decisions as a Rust one (`lock-core`:
//! conservative deadlines, heartbeat grid, the bounded acquire loop) and the same heartbeat
//! thread, TLS and credentials. Python sees [`Client`](client::Client),
//! [`Session`](session::Session), [`Lock`](lock::Lock), [`LockSet`](lock_set::LockSet), an
//! election's [`Leadership`](election::Leadership), [`Leader`](election::Leader) and
//! [`Observer`](client::Observer), a prefix's [`Watcher`](watch::Watcher) with its
//! [`LockEvent`](watch::LockEvent)s and [`WatchGap`](watch::WatchGap)s, the resource side's
//! [`TrustedKeys`](fence::TrustedKeys) with its [`ProvenWrite`](fence::ProvenWrite), the
//! PostgreSQL fence's SQL and refusals ([`postgres`]) and the exceptions of [`errors`];
//! the package `fencedlock` (python/) re-exports them with its typing stubs.
//!
//! Every call that waits (open, acquire, release, campaign, proclaim, resign, an observer's
//! next change, a watcher's next event, close) releases the GIL while it waits.

mod client;
mod election;
mod errors;
mod fence;
mod lock;
mod lock_set;
mod postgres;
mod session;
mod slot;
mod watch;

use pyo3::prelude::*;

/// The module `fencedlock._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::Client>()?;
    m.add_class::<session::Session>()?;
    m.add_class::<lock::Lock>()?;
    m.add_class::<lock_set::LockSet>()?;
    m.add_class::<election::Leadership>()?;
    m.add_class::<election::Leader>()?;
    m.add_class::<client::Observer>()?;
    m.add_class::<watch::Watcher>()?;
    m.add_class::<watch::LockEvent>()?;
    m.add_class::<watch::WatchGap>()?;
    m.add_class::<fence::TrustedKeys>()?;
    m.add_class::<fence::ProvenWrite>()?;
    errors::register(m)?;
    postgres::register(m)?;
    Ok(())
}
