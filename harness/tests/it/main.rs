//! Harness tests: one binary, one module per concern.
#![allow(clippy::unwrap_used)]

mod attack;
mod callers;
mod executor_config;
mod fence_check;
mod house_rules;
mod lockctl;
mod metrics_hygiene;
mod pg_failover;
mod public_api;
mod rotation;
mod scenarios;
mod scheduler_example;
mod sdk;
mod sdk_election;
mod session_binding;
mod tls;
mod watch;
