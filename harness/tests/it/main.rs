//! Harness tests: one binary, one module per concern.
#![allow(clippy::unwrap_used)]

mod architecture_map;
mod attack;
mod callers;
mod executor_config;
mod fence_check;
mod lockctl;
mod m2;
mod metrics_hygiene;
mod module_rule;
mod rotation;
mod sdk;
mod session_binding;
mod tls;
