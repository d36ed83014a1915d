//! Each caller's share of the lock service: the sessions it holds open (counted in the
//! store, on every replica) and its acquires waiting on this replica at once. One credential
//! that opens sessions in a loop or parks acquires by the thousand is refused (429, with
//! `Retry-After`) before it fills the service for everyone else.
//!
//! Sessions are counted where they live: the store keeps each session's credential, so the
//! quota holds across replicas whichever replica a session is kept alive through. Opens in
//! flight on this replica count too; opens racing on other replicas may each pass, so a
//! caller can overshoot by the opens it sends at the same moment, never more. Waiters are
//! counted here: a parked acquire holds this replica's connection, so that is what it uses.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_api::{CredentialEntry, ErrorCode};
use service_kit::{ApiError, count_limit};

use crate::store::{LockStore, StoreError};

/// Default sessions one caller holds open across the service: ten times a busy executor
/// fleet, far below the 100,000 sessions a replica has been measured to carry.
pub const SESSIONS_PER_CALLER_DEFAULT: u32 = 1_000;
/// Default acquires of one caller waiting on one replica at once: half the default
/// connection cap, so one caller's parked acquires never take every connection (each parked
/// acquire holds one), and far above an executor's few.
pub const WAITERS_PER_CALLER_DEFAULT: u32 = 512;
/// `Retry-After` of `TOO_MANY_SESSIONS`: a session frees when its holder closes it or its TTL
/// runs out (the default session TTL is 10 s).
pub const SESSIONS_RETRY_AFTER: Duration = Duration::from_secs(5);

/// The quotas of every caller.
#[derive(Debug)]
pub struct Quotas {
    sessions_default: u32,
    waiters_default: u32,
    /// Opens of each caller in flight on this replica (not yet in the store's count), by
    /// the order they arrived in.
    opening: Mutex<HashMap<String, BTreeSet<u64>>>,
    next_open: AtomicU64,
    /// Waiting acquires and watch streams of each caller here; shared with their places.
    waiters: Arc<Mutex<HashMap<String, u32>>>,
}

impl Quotas {
    /// Quotas with these defaults for callers whose credential names none.
    pub fn new(sessions_default: u32, waiters_default: u32) -> Self {
        Self {
            sessions_default,
            waiters_default,
            opening: Mutex::default(),
            next_open: AtomicU64::new(0),
            waiters: Arc::default(),
        }
    }

    /// A place for one more session of `caller`, or 429 `TOO_MANY_SESSIONS`: its live
    /// sessions in `store` and its opens in flight here are below its quota. The place is
    /// held until dropped (after the open, whatever its outcome).
    pub async fn open_session<'a>(
        &'a self,
        store: &dyn LockStore,
        caller: &CredentialEntry,
    ) -> Result<SessionPlace<'a>, OpenRefused> {
        let quota = u64::from(caller.limits.sessions.unwrap_or(self.sessions_default));
        let place = SessionPlace::reserve(self, &caller.name);
        let held = store.sessions_of(&caller.name).await? + place.earlier();
        let allowed = held < quota;
        count_limit("sessions", allowed);
        if !allowed {
            return Err(OpenRefused::Quota(
                ApiError::new(
                    ErrorCode::TooManySessions,
                    format!(
                        "credential {} holds {held} sessions, its quota; close one first",
                        caller.name
                    ),
                )
                .retry_after(SESSIONS_RETRY_AFTER),
            ));
        }
        Ok(place)
    }

    /// A place for one more waiting acquire or watch stream of `caller`, held until
    /// dropped, or 429 `TOO_MANY_WAITERS`.
    pub fn wait(&self, caller: &CredentialEntry) -> Result<WaiterPlace, ApiError> {
        let quota = caller.limits.waiters.unwrap_or(self.waiters_default);
        let mut all = self.waiters.lock().unwrap_or_else(PoisonError::into_inner);
        let waiting = all.entry(caller.name.clone()).or_default();
        let allowed = *waiting < quota;
        count_limit("waiters", allowed);
        if !allowed {
            return Err(ApiError::new(
                ErrorCode::TooManyWaiters,
                format!(
                    "credential {} already has {quota} acquires waiting or watches on this replica, its quota",
                    caller.name
                ),
            ));
        }
        *waiting += 1;
        Ok(WaiterPlace {
            waiters: Arc::clone(&self.waiters),
            caller: caller.name.clone(),
        })
    }
}

/// Why a session was not opened: over the quota, or the store could not count.
#[derive(Debug)]
pub enum OpenRefused {
    /// 429 `TOO_MANY_SESSIONS`.
    Quota(ApiError),
    /// The store's count failed.
    Store(StoreError),
}

impl From<StoreError> for OpenRefused {
    fn from(err: StoreError) -> Self {
        Self::Store(err)
    }
}

/// An open in flight of one caller on this replica; given back when dropped.
#[derive(Debug)]
pub struct SessionPlace<'a> {
    quotas: &'a Quotas,
    caller: String,
    ticket: u64,
}

impl<'a> SessionPlace<'a> {
    fn reserve(quotas: &'a Quotas, caller: &str) -> Self {
        let ticket = quotas.next_open.fetch_add(1, Ordering::Relaxed);
        let mut opening = quotas
            .opening
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        opening.entry(caller.to_owned()).or_default().insert(ticket);
        Self {
            quotas,
            caller: caller.to_owned(),
            ticket,
        }
    }

    /// The caller's opens in flight here that arrived before this one: a burst at the edge
    /// of the quota lets the first in, not none.
    fn earlier(&self) -> u64 {
        let opening = self
            .quotas
            .opening
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        opening
            .get(&self.caller)
            .map_or(0, |tickets| tickets.range(..self.ticket).count() as u64)
    }
}

impl Drop for SessionPlace<'_> {
    fn drop(&mut self) {
        let mut opening = self
            .quotas
            .opening
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(tickets) = opening.get_mut(&self.caller) {
            tickets.remove(&self.ticket);
            if tickets.is_empty() {
                opening.remove(&self.caller);
            }
        }
    }
}

/// A waiting acquire's or a watch stream's place; given back when dropped.
#[derive(Debug)]
pub struct WaiterPlace {
    waiters: Arc<Mutex<HashMap<String, u32>>>,
    caller: String,
}

impl Drop for WaiterPlace {
    fn drop(&mut self) {
        edit(&self.waiters, &self.caller, |waiting| {
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

    #[tokio::test]
    async fn sessions_count_in_the_store_until_closed_and_one_caller_never_uses_anothers() {
        use crate::store::{MemoryStore, SessionOwner};
        let store = MemoryStore::new();
        let quotas = Quotas::new(2, 1);
        let a = caller("a");
        let opener = SessionOwner {
            owner: lock_api::OwnerId::parse("o").unwrap(),
            credential: "a".into(),
        };
        let first = store
            .open_session(&opener, 60_000)
            .await
            .unwrap()
            .session_id;
        let in_flight = quotas.open_session(&store, &a).await.unwrap();
        let refused = quotas.open_session(&store, &a).await.unwrap_err();
        let OpenRefused::Quota(refused) = refused else {
            panic!("{refused:?}")
        };
        assert_eq!(refused.code.code, "TOO_MANY_SESSIONS");
        assert_eq!(refused.retry_after_secs, Some(5));
        assert!(
            quotas.open_session(&store, &caller("b")).await.is_ok(),
            "b's quota is its own"
        );
        drop(in_flight); // the open failed: its place comes back
        store.open_session(&opener, 60_000).await.unwrap();
        assert!(
            quotas.open_session(&store, &a).await.is_err(),
            "two live in the store"
        );
        store.delete_session(first).await.unwrap();
        assert!(quotas.open_session(&store, &a).await.is_ok());
    }

    #[tokio::test]
    async fn a_burst_at_the_edge_of_the_quota_lets_the_first_in() {
        let store = crate::store::MemoryStore::new();
        let quotas = Quotas::new(2, 1);
        let a = caller("a");
        // Two opens in flight at once with room for two: neither counts the later one.
        let first = SessionPlace::reserve(&quotas, "a");
        let second = SessionPlace::reserve(&quotas, "a");
        assert_eq!((first.earlier(), second.earlier()), (0, 1));
        assert!(
            quotas.open_session(&store, &a).await.is_err(),
            "a third has no room"
        );
        drop((first, second));
        assert!(quotas.open_session(&store, &a).await.is_ok());
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
