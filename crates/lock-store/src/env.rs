//! The memory store's seam to the world: where its clock and its session ids come from. This
//! process's monotonic clock and random ids by default ([`SystemEnv`]); virtual time and
//! counted ids in the simulation (`lock-sim`).

use std::time::Instant;

use chrono::{DateTime, Utc};
use lock_api::SessionId;

/// Where a memory store gets its time and its session ids.
pub trait StoreEnv: Send + Sync + std::fmt::Debug + 'static {
    /// Monotonic nanoseconds (the store's only clock; never wraps within a run).
    fn now_nanos(&self) -> u64;
    /// A new session id.
    fn session_id(&self) -> SessionId;
    /// A store instant as the wire's `expires_at` (display only).
    fn display(&self, nanos: u64) -> DateTime<Utc>;
}

/// The production environment: this process's monotonic clock, random session ids.
#[derive(Debug)]
pub struct SystemEnv {
    origin: Instant,
    origin_wall: DateTime<Utc>,
}

impl Default for SystemEnv {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            origin_wall: Utc::now(),
        }
    }
}

impl StoreEnv for SystemEnv {
    fn now_nanos(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn session_id(&self) -> SessionId {
        SessionId::random()
    }

    fn display(&self, nanos: u64) -> DateTime<Utc> {
        self.origin_wall + chrono::Duration::nanoseconds(i64::try_from(nanos).unwrap_or(i64::MAX))
    }
}
