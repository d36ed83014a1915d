//! The harness: end-to-end suites, fault experiments, the demo and benchmarks.
//!
//! - [`module_rule`]: the workspace dependency rule, checked on `cargo metadata`.
//! - [`serve_lock`]: one lock-server on a throwaway database for test suites outside Rust.
//! - [`imports`]: the import graph of a crate's modules and its circles (a house rule).
//! - [`bench`], [`bench_load`], [`bench_sets`], [`bench_shares`], [`bench_scale`], [`bench_python`]: benchmarks
//!   (`harness bench locks`: granted locks through the SDK, raw HTTP, pgbench and etcd's lock
//!   API, and two keys at once as a set or as two ordered acquires; `harness
//!   bench pipeline`; `harness bench scale`: a million held keys; `harness bench python`: the
//!   Python SDK against tooz and python-redis-lock).
//! - [`demo`]: the whole stack, payouts, a frozen executor and a report (`harness demo`).
//! - [`stack`]: the real services as processes, or (`HARNESS_STACK=compose`) containers.
//! - [`compose`]: the compose project and containers behind compose mode.
//! - [`audit`], [`metrics`]: unique rising tokens and conservative expiry, checked from the
//!   services' logs; `/metrics` parsing.
//! - [`chaos`], [`history`], [`timeline`]: the fault campaign, its checked history and its
//!   pictures (`harness chaos`).

pub mod audit;
pub mod bench;
mod bench_cpu;
mod bench_etcd;
pub mod bench_failover;
pub mod bench_load;
pub mod bench_pipeline;
mod bench_plot;
pub mod bench_python;
pub mod bench_scale;
pub mod bench_sets;
pub mod bench_shares;
pub mod bench_stores;
pub mod bench_watch;
pub mod chaos;
pub mod compose;
pub mod demo;
pub mod history;
pub mod imports;
pub mod metrics;
pub mod module_rule;
pub mod serve_lock;
pub mod stack;
pub mod svg;
pub mod timeline;
