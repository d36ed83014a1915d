//! The lock-service SDK (tasks T-040 and T-041; not built yet).
//!
//! This crate will hold `LockClient`, `LockClientSession`, the `Clock` seam, the heartbeat
//! thread and the bounded acquire loop described in `docs/contracts/C2-rust-api.md`. Until
//! that issue lands it exports nothing: no caller can mistake it for a working client.
//! It must never depend on `lock-server` (enforced by `deny.toml` and `harness/tests`).
