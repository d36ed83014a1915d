//! Payout workers (tasks T-027 and T-047 end state; not built yet).
//!
//! Will take a lock per payout through `lock-client`, claim with the fencing token, submit
//! through rail-proxy and post the result. Among workspace crates it may depend on
//! `lock-api` and `lock-client` only (enforced by `deny.toml` and `harness/tests`).
