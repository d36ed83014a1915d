//! Harness tests: one binary, one module per concern.
#![allow(clippy::unwrap_used)]

mod architecture_map;
mod attack;
mod callers;
mod executor_config;
mod fence_check;
mod lockctl;
mod metrics_hygiene;
mod module_rule;
mod rotation;
mod scenarios;
mod sdk;
mod session_binding;
mod tls;
