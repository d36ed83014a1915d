//! The harness: end-to-end suites, fault experiments, the demo and benchmarks.
//!
//! - [`module_rule`]: the workspace dependency rule, checked on `cargo metadata`.
//! - [`bench`]: load generators (`harness bench locks`).

pub mod bench;
pub mod module_rule;
