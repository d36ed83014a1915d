//! The harness: end-to-end suites, fault experiments, the demo and benchmarks.
//!
//! - [`module_rule`]: the workspace dependency rule, checked on `cargo metadata`.
//! - [`bench`]: load generators (`harness bench locks`, `harness bench pipeline`).
//! - [`demo`]: the whole stack, payouts, a frozen executor and a report (`harness demo`).
//! - [`stack`]: the real service binaries as processes.

pub mod bench;
pub mod demo;
pub mod module_rule;
pub mod stack;
