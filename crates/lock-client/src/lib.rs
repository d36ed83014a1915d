//! The lock-service SDK: sessions, heartbeats, conservative expiry and bounded acquire
//! (contract `docs/contracts/C2-rust-api.md`).
//!
//! A [`LockClient`], built by a [`ClientBuilder`], owns one heartbeat thread (`lock-hb-N`,
//! its own current-thread runtime). A [`LockClientSession`] acquires locks, tracks each
//! grant's deadline (`send time + lease × (1 − safety margin)` on a monotonic clock, never the
//! server's `expires_at`), renews them, and declares them lost before the server expires them.
//! Each [`LockHandle`] carries the grant's [`FencingToken`] and signed proof: send both with
//! every write the lock guards, so the resource can refuse a holder that lost it.
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_client::{AcquirePolicy, ClientBuilder, LockKey};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // LOCK_ENDPOINTS, LOCK_CLIENT_TOKEN, TLS_CA_FILE, ... as lockctl reads them.
//! let client = ClientBuilder::from_env(|key| std::env::var(key).ok())?.build()?;
//! let session = client.open_session("executor-1").await?;
//! session.on_lock_lost(|lost| eprintln!("stop: {} is lost ({:?})", lost.lock_key, lost.reason));
//!
//! let key = LockKey::parse("payout:42")?;
//! let policy = AcquirePolicy { budget: Duration::from_secs(2), ..AcquirePolicy::DEFAULT };
//! match session.acquire(&key, Duration::from_secs(10), &policy).await? {
//!     None => println!("someone else is working on it"),
//!     Some(handle) => {
//!         session.check_still_held(&handle)?; // guard clause: Err means stop, write nothing
//!         let token = handle.fencing_token(); // send it with every write it guards
//!         let proof = session.fence_proof(&handle); // and the lock-server's proof of it
//!         println!("writing with token {token} ({proof:?})");
//!         session.release(handle).await?;
//!     }
//! }
//! session.close().await;
//! client.close(); // joins the heartbeat thread: no SDK thread is left
//! # Ok(())
//! # }
//! ```
//!
//! One-shot calls (acquire and release for a session held elsewhere, inspect, revoke) are on
//! an [`admin::AdminClient`]. Test helpers (an in-memory lock service, a fake clock) are in
//! [`test_util`], behind the `test-util` feature. The public API is pinned by
//! `public-api.txt` beside this crate's manifest: a change to it is a deliberate diff.

#![deny(missing_docs)]

pub mod admin;
mod background;
mod builder;
mod client;
mod clock;
mod config;
pub mod election;
#[cfg(any(test, feature = "test-util"))]
mod fake_clock;
mod handle;
mod heartbeat;
pub mod metrics;
#[cfg(feature = "service")]
pub mod service;
mod session;
#[cfg(feature = "test-util")]
pub mod test_util;
mod transport;

use lock_core as core;

pub use builder::ClientBuilder;
pub use client::{ClientError, LockClient};
pub use config::{ClientConfig, ConfigError};
pub use handle::LockHandle;
pub use lock_api::{Claim, FencingToken, LockError, LockKey, LockLost, LossReason};
pub use lock_core::AcquirePolicy;
pub use session::LockClientSession;
pub use session::set::LockSet;
pub use tls_kit::ClientTls;
