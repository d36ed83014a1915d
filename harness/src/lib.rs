//! The harness: end-to-end suites, fault experiments, the demo and benchmarks.
//!
//! - [`module_rule`]: the workspace dependency rule, checked on `cargo metadata`.
//! - [`bench`]: load generators (`harness bench locks`, `harness bench pipeline`).
//! - [`demo`]: the whole stack, payouts, a frozen executor and a report (`harness demo`).
//! - [`stack`]: the real services as processes, or (`HARNESS_STACK=compose`) containers.
//! - [`compose`]: the compose project and containers behind compose mode.

pub mod audit;
pub mod bench;
pub mod compose;
pub mod demo;
pub mod metrics;
pub mod module_rule;
pub mod stack;
