//! payout-executor's tests: one binary. Source rules (T-047 criteria 2-4 and the guard rule)
//! and the loss listener on the SDK's real heartbeat path.
#![allow(clippy::unwrap_used)]

mod loss;
mod source_rules;
