//! The reaper's pass: grants whose lease or holder's session ended, sessions whose marker
//! is gone, lapsed places and ended delays.

use super::*;

impl EtcdStore {
    /// Deletes expired grants, sessions, places and delays (`LockStore::reap_expired`).
    pub(super) async fn reap(&self) -> Result<ReapReport, StoreError> {
        let prefix = |sub: &str| {
            TxnOp::get(
                format!("{}{sub}/", self.prefix),
                Some(GetOptions::new().with_prefix()),
            )
        };
        let keys_only = |sub: &str| {
            TxnOp::get(
                format!("{}{sub}/", self.prefix),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )
        };
        let key_set = |kvs: Vec<KeyValue>| -> HashSet<Vec<u8>> {
            kvs.into_iter().map(|kv| kv.key().to_vec()).collect()
        };
        // One snapshot: grant records, live grant markers, session records, live sessions,
        // delay records, delays in force, queue places.
        let mut snapshot = self
            .read(vec![
                prefix("g"),
                keys_only("gl"),
                prefix("s"),
                keys_only("sl"),
                prefix("d"),
                keys_only("dl"),
                keys_only("w"),
            ])
            .await?;
        let places = snapshot.pop().unwrap_or_default();
        let delays_in_force = key_set(snapshot.pop().unwrap_or_default());
        let delays = snapshot
            .pop()
            .unwrap_or_default()
            .iter()
            .map(|kv| Ok((self.parse_key_path("d", kv.key())?, read_delay(kv)?)))
            .collect::<Result<HashMap<LockKey, ReadDelay>, StoreError>>()?;
        let live_sessions = key_set(snapshot.pop().unwrap_or_default());
        let sessions = snapshot.pop().unwrap_or_default();
        let live_grants = key_set(snapshot.pop().unwrap_or_default());
        let grants = snapshot.pop().unwrap_or_default();
        let session_records: HashSet<Vec<u8>> =
            sessions.iter().map(|kv| kv.key().to_vec()).collect();

        let mut report = ReapReport::default();
        // Grant records still there after this pass (live, or changed meanwhile): their
        // tokens keep their delay records.
        let mut kept: HashMap<LockKey, FencingToken> = HashMap::new();
        // Grants first, while their sessions' records still name the expiry.
        for kv in &grants {
            let grant = read_grant(kv)?;
            let lock_key = self.parse_key_path("g", kv.key())?;
            let session_live =
                live_sessions.contains(self.session_marker(grant.value.session).as_bytes());
            let lease_live = live_grants.contains(self.grant_marker(grant.value.lease).as_bytes());
            if lease_live && session_live {
                kept.insert(lock_key, grant.value.token);
                continue;
            }
            // A close deleted the session: its grants went with it, as on PostgreSQL (no report,
            // no lock-delay).
            let session_closed =
                !session_records.contains(self.session_key(grant.value.session).as_bytes());
            let prior = delays.get(&lock_key);
            let delay_started = prior.is_some_and(|d| d.value.token == grant.value.token);
            let deleted = if grant.value.lock_delay_ms > 0 && !session_closed && !delay_started {
                self.end_grant_with_delay(
                    &lock_key,
                    &grant,
                    Some(prior.map_or(0, |d| d.mod_revision)),
                    None,
                )
                .await?
            } else {
                let path = String::from_utf8_lossy(kv.key()).into_owned();
                self.delete_grant_if_unchanged(
                    &path,
                    grant.mod_revision,
                    grant.value.lease,
                    None,
                    None,
                )
                .await?
            };
            if !deleted {
                kept.insert(lock_key, grant.value.token);
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
        for kv in &sessions {
            let session_id = String::from_utf8_lossy(kv.key())
                .rsplit('/')
                .next()
                .and_then(|id| SessionId::parse(id).ok())
                .ok_or_else(|| StoreError::Internal("unreadable session key".into()))?;
            if live_sessions.contains(self.session_marker(session_id).as_bytes()) {
                continue;
            }
            let deleted = self
                .txn(
                    "reap session",
                    Txn::new()
                        .when([Compare::mod_revision(
                            kv.key(),
                            CompareOp::Equal,
                            kv.mod_revision(),
                        )])
                        .and_then([TxnOp::delete(kv.key(), None)]),
                )
                .await?
                .succeeded();
            if deleted {
                report.sessions += 1;
            }
        }
        // Queue places of ended sessions (a lapsed place is gone with its lease already).
        // Their deletion wakes the next waiter.
        let dead_places: Vec<TxnOp> = places
            .iter()
            .filter(|kv| {
                self.parse_place_path(kv.key()).is_some_and(|(_, session)| {
                    !live_sessions.contains(self.session_marker(session).as_bytes())
                })
            })
            .map(|kv| TxnOp::delete(kv.key(), None))
            .collect();
        for chunk in dead_places.chunks(TXN_OPS_MAX) {
            self.txn("reap queue places", Txn::new().and_then(chunk.to_vec()))
                .await?;
        }
        // Delay records whose delay is over, unless their grant's record is still there (it
        // would start the delay a second time).
        for (lock_key, delay) in &delays {
            if delays_in_force.contains(self.delay_marker(delay.value.lease).as_bytes())
                || kept.get(lock_key) == Some(&delay.value.token)
            {
                continue;
            }
            self.txn(
                "reap lock-delay",
                Txn::new()
                    .when([Compare::mod_revision(
                        self.delay_key(lock_key),
                        CompareOp::Equal,
                        delay.mod_revision,
                    )])
                    .and_then([TxnOp::delete(self.delay_key(lock_key), None)]),
            )
            .await?;
        }
        Ok(report)
    }
}
