//! The reaper's pass: grants and shares whose lease or holder's session ended, sessions
//! whose marker is gone, lapsed places and ended delays.

use std::collections::{BTreeMap, HashMap, HashSet};

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, Txn, TxnOp};
use lock_api::{FencingToken, LockKey, SessionId};
use lock_store::{ExpiredLock, ReapReport, StoreError};

use super::EtcdStore;
use super::codec::{ReadDelay, ReadGrant, read_delay, read_grant};
use super::delay::shares_delay;
use super::holds::Ending;
use super::members::TXN_OPS_MAX;

/// The tokens of the grant and share records each key still has after the reaper ended
/// what was dead.
type Kept = HashMap<LockKey, Vec<FencingToken>>;

/// One snapshot of everything the reaper judges, read at one revision.
struct Snapshot {
    grants: Vec<KeyValue>,
    holds: Vec<KeyValue>,
    live_grants: HashSet<Vec<u8>>,
    sessions: Vec<KeyValue>,
    session_records: HashSet<Vec<u8>>,
    live_sessions: HashSet<Vec<u8>>,
    delays: HashMap<LockKey, ReadDelay>,
    delays_in_force: HashSet<Vec<u8>>,
    places: Vec<KeyValue>,
}

impl EtcdStore {
    /// Deletes expired grants, sessions, places and delays (`LockStore::reap_expired`).
    pub(super) async fn reap(&self) -> Result<ReapReport, StoreError> {
        let snapshot = self.reap_snapshot().await?;
        let mut report = ReapReport::default();
        // Grants and shares first, while their sessions' records still name the expiry.
        let mut kept = self.reap_grants(&snapshot, &mut report).await?;
        self.reap_holds(&snapshot, &mut report, &mut kept).await?;
        report.sessions = self.reap_sessions(&snapshot).await?;
        self.reap_places(&snapshot).await?;
        self.reap_delays(&snapshot, &kept).await?;
        Ok(report)
    }

    /// Grant records, share records, live grant markers, session records, live sessions, delay records,
    /// delays in force and queue places, in one read.
    async fn reap_snapshot(&self) -> Result<Snapshot, StoreError> {
        let prefix = |sub: &str| {
            let all = GetOptions::new().with_prefix();
            TxnOp::get(self.keys.section(sub), Some(all))
        };
        let keys_only = |sub: &str| {
            let all = GetOptions::new().with_prefix().with_keys_only();
            TxnOp::get(self.keys.section(sub), Some(all))
        };
        let key_set = |kvs: Option<Vec<KeyValue>>| -> HashSet<Vec<u8>> {
            let kvs = kvs.unwrap_or_default();
            kvs.into_iter().map(|kv| kv.key().to_vec()).collect()
        };
        let read = self.members.read(vec![
            prefix("g"),
            prefix("h"),
            keys_only("gl"),
            prefix("s"),
            keys_only("sl"),
            prefix("d"),
            keys_only("dl"),
            keys_only("w"),
        ]);
        let mut read = read.await?.into_iter();
        let grants = read.next().unwrap_or_default();
        let holds = read.next().unwrap_or_default();
        let live_grants = key_set(read.next());
        let sessions = read.next().unwrap_or_default();
        let live_sessions = key_set(read.next());
        let delays = read
            .next()
            .unwrap_or_default()
            .iter()
            .map(|kv| Ok((self.keys.parse_key_path("d", kv.key())?, read_delay(kv)?)))
            .collect::<Result<HashMap<LockKey, ReadDelay>, StoreError>>()?;
        let delays_in_force = key_set(read.next());
        let places = read.next().unwrap_or_default();
        let session_records = sessions.iter().map(|kv| kv.key().to_vec()).collect();
        Ok(Snapshot {
            grants,
            holds,
            live_grants,
            sessions,
            session_records,
            live_sessions,
            delays,
            delays_in_force,
            places,
        })
    }

    /// Ends the dead grants of `snapshot`, reporting each expiry; the grant records still
    /// there after it (live, or changed meanwhile), whose tokens keep their delay records.
    async fn reap_grants(
        &self,
        snapshot: &Snapshot,
        report: &mut ReapReport,
    ) -> Result<Kept, StoreError> {
        let keys = &self.keys;
        let mut kept = Kept::new();
        for kv in &snapshot.grants {
            let grant = read_grant(kv)?;
            let lock_key = keys.parse_key_path("g", kv.key())?;
            let session_marker = keys.session_marker(grant.value.session);
            let session_live = snapshot.live_sessions.contains(session_marker.as_bytes());
            let lease_marker = keys.grant_marker(grant.value.lease);
            let lease_live = snapshot.live_grants.contains(lease_marker.as_bytes());
            if lease_live && session_live {
                kept.entry(lock_key).or_default().push(grant.value.token);
                continue;
            }
            // A close deleted the session: its grants went with it, as on PostgreSQL (no
            // report, no lock-delay).
            let session_record = keys.session_key(grant.value.session);
            let session_closed = !snapshot.session_records.contains(session_record.as_bytes());
            let prior = snapshot.delays.get(&lock_key);
            let delay_started = prior.is_some_and(|d| d.value.token == grant.value.token);
            let deleted = if grant.value.lock_delay_ms > 0 && !session_closed && !delay_started {
                let prior_revision = Some(prior.map_or(0, |d| d.mod_revision));
                self.end_grant_with_delay(&lock_key, &grant, prior_revision, None)
                    .await?
            } else {
                let path = String::from_utf8_lossy(kv.key()).into_owned();
                let (revision, lease) = (grant.mod_revision, grant.value.lease);
                self.delete_grant_if_unchanged(&path, revision, lease, None, None)
                    .await?
            };
            if !deleted {
                kept.entry(lock_key).or_default().push(grant.value.token);
                continue;
            }
            if session_closed {
                continue;
            }
            report.locks.push(ExpiredLock {
                lock_key,
                fencing_token: grant.value.token,
                session_id: grant.value.session,
                owner_id: grant.value.owner,
                reason: if lease_live { "session" } else { "lease" },
            });
        }
        Ok(kept)
    }

    /// Ends the dead shares of `snapshot`, key by key in one transaction each: every one
    /// reported unless its session was closed, and the lock-delay started (exempting nobody,
    /// naming them all) when one whose end no delay record names yet ended involuntarily and
    /// asked one. The shares still there after it are `kept`.
    async fn reap_holds(
        &self,
        snapshot: &Snapshot,
        report: &mut ReapReport,
        kept: &mut Kept,
    ) -> Result<(), StoreError> {
        let keys = &self.keys;
        let mut by_key: BTreeMap<LockKey, Vec<ReadGrant>> = BTreeMap::new();
        for kv in &snapshot.holds {
            let (lock_key, _) = keys.parse_hold_path(kv.key()).ok_or_else(|| {
                let path = String::from_utf8_lossy(kv.key());
                StoreError::Internal(format!("unreadable share record {path}"))
            })?;
            by_key.entry(lock_key).or_default().push(read_grant(kv)?);
        }
        let has = |set: &HashSet<Vec<u8>>, key: String| set.contains(key.as_bytes());
        for (lock_key, holds) in by_key {
            let lease_live =
                |h: &ReadGrant| has(&snapshot.live_grants, keys.grant_marker(h.value.lease));
            let session_live = |h: &ReadGrant| {
                has(
                    &snapshot.live_sessions,
                    keys.session_marker(h.value.session),
                )
            };
            let closed =
                |h: &ReadGrant| !has(&snapshot.session_records, keys.session_key(h.value.session));
            let (live, dead): (Vec<ReadGrant>, Vec<ReadGrant>) = holds
                .into_iter()
                .partition(|h| lease_live(h) && session_live(h));
            let tokens = kept.entry(lock_key.clone()).or_default();
            tokens.extend(live.iter().map(|h| h.value.token));
            if dead.is_empty() {
                continue;
            }
            let prior = snapshot.delays.get(&lock_key);
            let delay_ms = (dead.iter())
                .filter(|h| !closed(h) && prior.is_none_or(|d| !d.value.covers(h.value.token)))
                .map(|h| h.value.lock_delay_ms)
                .max()
                .filter(|ms| *ms > 0);
            let ended_tokens: Vec<FencingToken> = dead.iter().map(|h| h.value.token).collect();
            let delay = delay_ms.map(|ms| {
                let value = shares_delay(ended_tokens.clone(), ms);
                (value, prior.map_or(0, |d| d.mod_revision))
            });
            let ending = Ending {
                fence_revision: None,
                delay,
                also: None,
            };
            if !self.end_shares(&lock_key, &dead, ending).await? {
                tokens.extend(ended_tokens);
                continue;
            }
            for hold in dead.into_iter().filter(|h| !closed(h)) {
                let reason = if lease_live(&hold) {
                    "session"
                } else {
                    "lease"
                };
                report.locks.push(ExpiredLock {
                    lock_key: lock_key.clone(),
                    fencing_token: hold.value.token,
                    session_id: hold.value.session,
                    owner_id: hold.value.owner,
                    reason,
                });
            }
        }
        Ok(())
    }

    /// Deletes the records of sessions whose marker is gone; how many.
    async fn reap_sessions(&self, snapshot: &Snapshot) -> Result<u64, StoreError> {
        let mut reaped = 0;
        for kv in &snapshot.sessions {
            let session_id = String::from_utf8_lossy(kv.key())
                .rsplit('/')
                .next()
                .and_then(|id| SessionId::parse(id).ok())
                .ok_or_else(|| StoreError::Internal("unreadable session key".into()))?;
            let marker = self.keys.session_marker(session_id);
            if snapshot.live_sessions.contains(marker.as_bytes()) {
                continue;
            }
            let unchanged = Compare::mod_revision(kv.key(), CompareOp::Equal, kv.mod_revision());
            let txn = Txn::new()
                .when([unchanged])
                .and_then([TxnOp::delete(kv.key(), None)]);
            if self.members.txn("reap session", txn).await?.succeeded() {
                reaped += 1;
            }
        }
        Ok(reaped)
    }

    /// Deletes the queue places of ended sessions (a lapsed place is gone with its lease
    /// already). Their deletion wakes the next waiter.
    async fn reap_places(&self, snapshot: &Snapshot) -> Result<(), StoreError> {
        let keys = &self.keys;
        let dead_places: Vec<TxnOp> = snapshot
            .places
            .iter()
            .filter(|kv| {
                keys.parse_place_path(kv.key()).is_some_and(|(_, session)| {
                    let marker = keys.session_marker(session);
                    !snapshot.live_sessions.contains(marker.as_bytes())
                })
            })
            .map(|kv| TxnOp::delete(kv.key(), None))
            .collect();
        for chunk in dead_places.chunks(TXN_OPS_MAX) {
            let txn = Txn::new().and_then(chunk.to_vec());
            self.members.txn("reap queue places", txn).await?;
        }
        Ok(())
    }

    /// Deletes delay records whose delay is over, unless the record of a grant or share
    /// whose end started it is still there (`kept`: it would start the delay a second time).
    async fn reap_delays(&self, snapshot: &Snapshot, kept: &Kept) -> Result<(), StoreError> {
        for (lock_key, delay) in &snapshot.delays {
            let marker = self.keys.delay_marker(delay.value.lease);
            let started_by_kept = kept
                .get(lock_key)
                .is_some_and(|tokens| tokens.iter().any(|t| delay.value.covers(*t)));
            if snapshot.delays_in_force.contains(marker.as_bytes()) || started_by_kept {
                continue;
            }
            let path = self.keys.delay_key(lock_key);
            let unchanged =
                Compare::mod_revision(path.as_str(), CompareOp::Equal, delay.mod_revision);
            let txn = Txn::new()
                .when([unchanged])
                .and_then([TxnOp::delete(path, None)]);
            self.members.txn("reap lock-delay", txn).await?;
        }
        Ok(())
    }
}
