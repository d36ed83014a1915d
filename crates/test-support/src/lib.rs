//! Shared test support for every crate of the workspace.
//!
//! - [`pg`]: PostgreSQL for tests: `DATABASE_URL` when set, a container of the locally built
//!   image with `TEST_POSTGRES=container`, otherwise one throwaway cluster per test process
//!   started from the machine's own binaries; a fresh database per test.
//! - [`etcd`]: etcd for tests: one member per test process with a fresh key prefix per test,
//!   and three-member clusters for leader kills and pauses.
//! - [`faketime`]: a wall clock a test steps under a server (libfaketime).
//! - [`poll`]: wait for a condition with a deadline (never a bare sleep).
//! - [`process`]: child processes with per-test logs that never outlive the test.
//! - [`net`]: free loopback ports.
//! - [`binaries`]: workspace binaries built on demand.
//! - [`bad_input`]: table-driven bad-request checks.
//! - [`keys`]: the test signing key and its public entry.
//! - [`openapi`]: the checked-in OpenAPI documents and their agreement with the HTTP contract.

pub mod bad_input;
pub mod binaries;
pub mod etcd;
pub mod faketime;
pub mod keys;
pub mod net;
pub mod openapi;
pub mod pg;
pub mod poll;
pub mod process;

pub use binaries::{cargo_bin, cargo_bins};
pub use keys::{public_keys, signing_key_base64, test_grant, test_proof, test_signer};
pub use net::free_port;
pub use pg::{
    PgContainer, ReplicatedCluster, TEST_SETTINGS, TestDb, ThrowawayCluster, fresh_database,
    fresh_database_on,
};
pub use poll::{poll_until, wait_until_ok, wait_until_ok_with};
pub use process::ServiceProcess;
