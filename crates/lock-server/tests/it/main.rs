//! lock-server integration tests: one binary, one module per concern.
#![allow(clippy::unwrap_used)]

mod bad_input;
mod clock_step;
mod conformance;
mod elections;
mod etcd_leases;
mod etcd_shares;
mod failover;
mod group_commit;
mod http_api;
mod openapi;
mod orphans;
mod pg_hosts;
mod process;
mod replicas;
mod sets;
mod shares;
mod sql_functions;
mod support;
mod waiting;
