//! The lock service: stateless HTTP replicas in front of a [`store::LockStore`].
//!
//! Map: [`config`] (flags and env), [`store`] (the `lock-store` crate's contract, memory store
//! and store-clock guard, plus the PostgreSQL and etcd backends), [`http`] (the lock routes,
//! errors, extractors, layers), [`state`] (what handlers share; every grant passes the
//! replica's `ClockCheckedStore`), [`waiting`] (acquires parked for their key, woken by the
//! store), [`set_waiting`] (the same for a key set), [`reaper`] (expiry), [`metrics`] (Prometheus names), [`server`] (start, run,
//! drain), [`signing`] (key generation; grants are signed in the handlers with
//! `lock_api::FenceSigner`), [`tls_files`] (`--generate-tls`), [`quota`] (each credential's
//! sessions and waiters). Plumbing shared with the other services (errors, layers, logs) is
//! in `service-kit`. `main.rs` only parses flags and calls [`server::Server`].

pub mod config;
pub mod http;
pub mod metrics;
pub mod quota;
pub mod reaper;
pub mod server;
pub mod sessions;
pub mod set_waiting;
pub mod signing;
pub mod state;
pub mod store;
pub mod tls_files;
pub mod waiting;

pub use config::Config;
pub use server::{Server, StartError, shutdown_signal};
pub use signing::generate_signing_key;
pub use tls_files::generate_tls;
