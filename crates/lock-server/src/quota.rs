//! Each caller's share of one replica: the sessions it opened here and holds open, and its
//! acquires waiting here at once. One credential that opens sessions in a loop or parks
//! acquires by the thousand is refused (429) before it fills the replica for everyone else.
//!
//! Kept per replica, in memory, like the request rate: a session counts from its open until
//! it is closed here or its TTL runs out without a heartbeat seen here. A session kept alive
//! through another replica drops out of this count early (the quota errs towards letting a
//! caller in), and a session closed through another replica counts here until its TTL ends.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use lock_api::{CredentialEntry, ErrorCode, SessionId};
use service_kit::{ApiError, count_limit};

/// Default sessions one caller holds open through one replica: ten times a busy executor
/// fleet, far below the 100,000 sessions a replica has been measured to carry.
pub const SESSIONS_PER_CALLER_DEFAULT: u32 = 1_000;
/// Default acquires of one caller waiting on one replica at once: half the default
/// connection cap, so one caller's parked acquires never take every connection (each parked
/// acquire holds one), and far above an executor's few.
pub const WAITERS_PER_CALLER_DEFAULT: u32 = 512;

/// The quotas of every caller on this replica.
#[derive(Debug)]
pub struct Quotas {
    sessions_default: u32,
    waiters_default: u32,
    sessions: Mutex<HashMap<String, Sessions>>,
    waiters: Mutex<HashMap<String, u32>>,
}

/// One caller's sessions here: each with when it runs out unless extended, and opens under
/// way.
#[derive(Debug, Default)]
struct Sessions {
    open: HashMap<SessionId, Instant>,
    opening: u32,
}

impl Quotas {
    /// Quotas with these defaults for callers whose credential names none.
    pub fn new(sessions_default: u32, waiters_default: u32) -> Self {
        Self {
            sessions_default,
            waiters_default,
            sessions: Mutex::default(),
            waiters: Mutex::default(),
        }
    }

    /// A place for one more session of `caller`, or 429 `TOO_MANY_SESSIONS`. The place is
    /// given back unless [`SessionPlace::opened`] fills it.
    pub fn open_session<'a>(
        &'a self,
        caller: &CredentialEntry,
    ) -> Result<SessionPlace<'a>, ApiError> {
        let quota = caller.limits.sessions.unwrap_or(self.sessions_default);
        let now = Instant::now();
        let mut all = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = all.entry(caller.name.clone()).or_default();
        mine.open.retain(|_, runs_out| *runs_out > now);
        let held = mine.open.len() + mine.opening as usize;
        let allowed = held < quota as usize;
        count_limit("sessions", allowed);
        if !allowed {
            return Err(ApiError::new(
                ErrorCode::TooManySessions,
                format!(
                    "credential {} holds {held} sessions through this replica, its quota; close one first",
                    caller.name
                ),
            ));
        }
        mine.opening += 1;
        Ok(SessionPlace {
            quotas: self,
            caller: caller.name.clone(),
        })
    }

    /// A heartbeat of `caller`'s session seen here: it counts for `ttl_ms` more.
    pub fn extended(&self, caller: &CredentialEntry, session: SessionId, ttl_ms: u64) {
        edit(&self.sessions, &caller.name, |mine| {
            if let Some(runs_out) = mine.open.get_mut(&session) {
                *runs_out = Instant::now() + Duration::from_millis(ttl_ms);
            }
        });
    }

    /// `caller` closed `session` here.
    pub fn closed(&self, caller: &CredentialEntry, session: SessionId) {
        edit(&self.sessions, &caller.name, |mine| {
            mine.open.remove(&session);
        });
    }

    /// A place for one more waiting acquire of `caller`, held until dropped, or 429
    /// `TOO_MANY_WAITERS`.
    pub fn wait<'a>(&'a self, caller: &CredentialEntry) -> Result<WaiterPlace<'a>, ApiError> {
        let quota = caller.limits.waiters.unwrap_or(self.waiters_default);
        let mut all = self.waiters.lock().unwrap_or_else(PoisonError::into_inner);
        let waiting = all.entry(caller.name.clone()).or_default();
        let allowed = *waiting < quota;
        count_limit("waiters", allowed);
        if !allowed {
            return Err(ApiError::new(
                ErrorCode::TooManyWaiters,
                format!(
                    "credential {} already has {quota} acquires waiting on this replica, its quota",
                    caller.name
                ),
            ));
        }
        *waiting += 1;
        Ok(WaiterPlace {
            quotas: self,
            caller: caller.name.clone(),
        })
    }
}

/// A reserved place for a session being opened.
#[derive(Debug)]
pub struct SessionPlace<'a> {
    quotas: &'a Quotas,
    caller: String,
}

impl SessionPlace<'_> {
    /// The session opened: it holds the place for `ttl_ms` unless extended or closed.
    pub fn opened(self, session: SessionId, ttl_ms: u64) {
        edit(&self.quotas.sessions, &self.caller, |mine| {
            mine.open
                .insert(session, Instant::now() + Duration::from_millis(ttl_ms));
        });
        // Drop gives back the reservation itself.
    }
}

impl Drop for SessionPlace<'_> {
    fn drop(&mut self) {
        edit(&self.quotas.sessions, &self.caller, |mine| {
            mine.opening = mine.opening.saturating_sub(1);
        });
    }
}

/// A waiting acquire's place; given back when dropped.
#[derive(Debug)]
pub struct WaiterPlace<'a> {
    quotas: &'a Quotas,
    caller: String,
}

impl Drop for WaiterPlace<'_> {
    fn drop(&mut self) {
        edit(&self.quotas.waiters, &self.caller, |waiting| {
            *waiting = waiting.saturating_sub(1);
        });
    }
}

/// Applies `change` to `caller`'s entry of `all`, if it has one.
fn edit<T>(all: &Mutex<HashMap<String, T>>, caller: &str, change: impl FnOnce(&mut T)) {
    if let Some(mine) = all
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_mut(caller)
    {
        change(mine);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(name: &str) -> CredentialEntry {
        CredentialEntry::from_secret(name, &["client"], name)
    }

    #[test]
    fn sessions_count_until_closed_or_run_out_and_one_caller_never_uses_anothers() {
        let quotas = Quotas::new(2, 1);
        let a = caller("a");
        let s1 = SessionId::random();
        quotas.open_session(&a).unwrap().opened(s1, 60_000);
        let in_flight = quotas.open_session(&a).unwrap();
        let refused = quotas.open_session(&a).unwrap_err();
        assert_eq!(refused.code.code, "TOO_MANY_SESSIONS");
        assert!(
            quotas.open_session(&caller("b")).is_ok(),
            "b's quota is its own"
        );
        drop(in_flight); // the open failed: its place comes back
        quotas
            .open_session(&a)
            .unwrap()
            .opened(SessionId::random(), 0);
        // The one with no time left no longer counts.
        quotas
            .open_session(&a)
            .unwrap()
            .opened(SessionId::random(), 60_000);
        assert!(quotas.open_session(&a).is_err());
        quotas.closed(&a, s1);
        assert!(quotas.open_session(&a).is_ok());
    }

    #[test]
    fn a_waiting_place_comes_back_when_the_wait_ends() {
        let mut a = caller("a");
        a.limits.waiters = Some(2);
        let quotas = Quotas::new(10, 1);
        let first = quotas.wait(&a).unwrap();
        let _second = quotas.wait(&a).unwrap();
        assert_eq!(quotas.wait(&a).unwrap_err().code.code, "TOO_MANY_WAITERS");
        drop(first);
        assert!(quotas.wait(&a).is_ok());
        let b = caller("b");
        let _b = quotas.wait(&b).unwrap();
        assert!(quotas.wait(&b).is_err(), "the default quota of 1");
    }
}
