//! payout-executor's tests: one binary. Source rules (T-047 criteria 2-4 and the guard rule),
//! the loss listener on the SDK's real heartbeat path, and the loop's bounded concurrency
//! (`EXECUTOR_CONCURRENCY`).
#![allow(clippy::unwrap_used)]

mod concurrency;
mod loss;
mod source_rules;
