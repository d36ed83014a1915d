//! The lock-service SDK: sessions, heartbeats, conservative expiry and bounded acquire
//! (contract `docs/contracts/C2-rust-api.md`).
//!
//! A [`LockClient`] owns one heartbeat thread (`lock-hb-N`, its own current-thread runtime).
//! A [`LockClientSession`] acquires locks, tracks each grant's deadline
//! (`send time + lease × (1 − safety margin)` on the [`Clock`], never the server's
//! `expires_at`), renews them, and declares them lost before the server expires them.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use lock_api::LockKey;
//! use lock_client::{AcquirePolicy, LockClient, LockClientConfig, testing::MemoryTransport};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = LockClientConfig::new(["http://127.0.0.1:8081"]);
//! // In production: `LockClient::new(config)?` speaks HTTP to the lock-server.
//! // Here an in-memory lock service stands in behind the transport seam.
//! let client = LockClient::with_transport(config, Arc::new(MemoryTransport::new()))?;
//! let session = client.open_session("executor-1").await?;
//! session.on_lock_lost(|lost| eprintln!("stop: {} is lost ({:?})", lost.lock_key, lost.reason));
//!
//! let key = LockKey::parse("payout:42")?;
//! match session.acquire(&key, Duration::from_secs(10), &AcquirePolicy::default()).await? {
//!     None => println!("someone else is working on it"),
//!     Some(handle) => {
//!         session.check_still_held(&handle)?; // guard clause: Err means stop, write nothing
//!         let token = handle.fencing_token(); // send it with every write it guards
//!         assert_eq!(token.0, 1);
//!         session.release(handle).await?;
//!     }
//! }
//! session.close().await;
//! client.close(); // joins the heartbeat thread: no SDK thread is left
//! # Ok(())
//! # }
//! ```

mod background;
mod client;
mod clock;
mod config;
mod heartbeat;
pub mod metrics;
#[cfg(feature = "service")]
pub mod service;
mod session;
pub mod testing;
mod transport;

pub use client::{ClientError, LockClient};
pub use clock::{Clock, FakeClock, Sleep, SystemClock, deadline_passed, nanos_until};
pub use config::{
    AcquirePolicy, ConfigError, Credential, DEFAULT_SAFETY_MARGIN, HEARTBEAT_DIVISOR,
    LockClientConfig,
};
pub use lock_api::{LockError, LockHandle, LockLost, LossReason};
pub use lock_core as core;
pub use lock_core::backoff::{ceiling as backoff_ceiling, full_jitter};
pub use session::LockClientSession;
pub use tls_kit::ClientTls;
pub use transport::{
    Call, HttpTransport, POOL_IDLE_TIMEOUT_MS, Reply, Transport, TransportError, bearer_headers,
};
