//! payout-executor: workers that take a lock per payout through `lock-client`, claim with
//! the fencing token, submit through rail-proxy and post the result.
//! Among workspace crates it depends on `lock-api`, `lock-client` and `process-kit` only.
//!
//! Map: [`config`] (flags and env), [`executor`] (the loop), [`guard`] (the held-check before
//! every write, the write's log line and its headroom metric), [`outcome`] (how an attempt ended: the outcome
//! tags), [`quarantine`] (backing off after failures and fenced claims), [`loss`] (the
//! `on_lock_lost` listener), [`services`] (HTTP to payment-resource and rail-proxy),
//! [`telemetry`] (logs, `/metrics`, health).

pub mod config;
pub mod executor;
pub mod guard;
pub mod loss;
pub mod outcome;
pub mod quarantine;
pub mod services;
pub mod telemetry;

pub use config::Config;
pub use executor::Executor;
pub use outcome::Outcome;
