//! payout-executor's tests: one binary. The loss listener on the SDK's real heartbeat path and
//! the loop's bounded concurrency (`EXECUTOR_CONCURRENCY`); its source rules are among the
//! house rules (`harness/tests/it/house_rules.rs`).
#![allow(clippy::unwrap_used)]

mod concurrency;
mod loss;
