//! lock-client tests on the fake clock and the in-memory transport; the real-server
//! criteria (hold for 3× TTL, frozen heartbeat, contention over HTTP) live in the harness,
//! since lock-client may not depend on lock-server.
#![allow(clippy::unwrap_used)]

mod acquire;
mod deadline;
mod elect;
mod endpoints;
mod headroom;
mod loss;
mod one_shot;
mod sets;
mod support;
