//! What every binary shares as a process, and nothing of HTTP: [`parse_or_exit`] (flags and
//! environment; help and version as usual, any other error one line and exit 2),
//! [`logging`] (JSON or text lines filtered by `RUST_LOG`), [`recorder`] (the process-wide
//! Prometheus recorder and its buckets), [`shutdown`] (SIGTERM or SIGINT).
//!
//! Without the default `runtime` feature only [`parse_or_exit`] (and [`ServeTls`]) is left: no
//! async runtime, no TLS stack, no probe.
//!
//! Architecture Invariant: no HTTP server or client here. The HTTP kit (`service-kit`)
//! builds on this crate; payout-executor, which the module rule keeps from the HTTP kit,
//! uses this one.

mod cli;
#[cfg(feature = "runtime")]
pub mod logging;
#[cfg(feature = "runtime")]
pub mod recorder;
#[cfg(feature = "runtime")]
pub mod shutdown;

pub use cli::{ServeTls, parse_or_exit};
#[cfg(feature = "runtime")]
pub use logging::LogFormat;
