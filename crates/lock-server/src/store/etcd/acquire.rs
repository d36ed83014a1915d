//! Acquire: read the key's grant, fence, delay and queue, decide ([`decide`]), and commit the
//! decision in one transaction whose compares pin what was read; a lost race is read and
//! decided again.

use super::queue::Pin;
use super::*;
use crate::store::Refusal;
use crate::store::decide::{Decision, HolderView, KeyView, decide};

impl EtcdStore {
    /// Whether `grant` is live: its own marker and its holder's session marker exist.
    pub(super) async fn liveness(&self, grant: &GrantValue) -> Result<Liveness, StoreError> {
        let markers = self
            .read_keys(&[
                self.grant_marker(grant.lease),
                self.session_marker(grant.session),
            ])
            .await?;
        Ok(match (&markers[0], &markers[1]) {
            (None, _) => Liveness::LeaseEnded,
            (Some(_), None) => Liveness::SessionEnded,
            (Some(_), Some(_)) => Liveness::Live,
        })
    }

    /// The live grant of `key` with its record's revision, if any.
    pub(super) async fn live_grant(&self, key: &LockKey) -> Result<Option<ReadGrant>, StoreError> {
        let record = self.read_keys(&[self.grant_key(key)]).await?.remove(0);
        let Some(grant) = record.map(|kv| read_grant(&kv)).transpose()? else {
            return Ok(None);
        };
        Ok((self.liveness(&grant.value).await? == Liveness::Live).then_some(grant))
    }

    /// The session's record, or the error that heartbeat, acquire and renew answer for a
    /// session that is not live.
    pub(super) fn live_session(
        session: SessionId,
        record: Option<&KeyValue>,
        marker: Option<&KeyValue>,
    ) -> Result<SessionValue, StoreError> {
        let Some(record) = record else {
            return Err(StoreError::SessionUnknown(session));
        };
        if marker.is_none() {
            return Err(StoreError::SessionExpired(session));
        }
        decode(record.value(), "session record")
    }

    /// Same session again: the same token; the lease only grows (so the client's deadline
    /// never lies after the server's expiry). Re-granted to another request than the one it
    /// records, the grant records none (either may have told its client: neither abandons
    /// it). The session's queue place, if it has one, goes.
    pub(super) async fn regrant(
        &self,
        key: &LockKey,
        current: ReadGrant,
        spec: AcquireSpec,
        place: Option<&Place>,
    ) -> Result<Option<LockGrant>, StoreError> {
        let old = current.value;
        let grows = spec.lease_ms > old.lease_ms;
        let request = if old.request == spec.request.0 {
            old.request
        } else {
            RequestId::NONE.0
        };
        if !grows {
            if !self.keep_alive(old.lease).await? {
                return Ok(None);
            }
            if old.request == request {
                if place.is_some() {
                    self.leave_place(key, old.session).await?;
                }
                return Ok(Some(grant_of(key, &old, old.lease_ms)));
            }
        }
        // A longer lease than the grant has moves the grant onto a new, longer lease; another
        // request's re-grant rewrites the record without a request.
        let lease = if grows {
            self.grant_lease(spec.lease_ms).await?
        } else {
            old.lease
        };
        let grown = GrantValue {
            lease,
            lease_ms: spec.lease_ms.max(old.lease_ms),
            request,
            ..old.clone()
        };
        let committed = self
            .txn(
                "regrant",
                Txn::new()
                    .when([
                        Compare::mod_revision(
                            self.grant_key(key),
                            CompareOp::Equal,
                            current.mod_revision,
                        ),
                        Compare::version(self.grant_marker(old.lease), CompareOp::Greater, 0),
                        Compare::version(self.session_marker(old.session), CompareOp::Greater, 0),
                    ])
                    .and_then(
                        [
                            TxnOp::put(self.grant_key(key), encode(&grown)?, None),
                            // Absent when the session has no place: a no-op.
                            TxnOp::delete(self.place_key(key, old.session), None),
                        ]
                        .into_iter()
                        .chain(
                            grows
                                .then(|| self.move_marker_ops(old.lease, lease))
                                .into_iter()
                                .flatten(),
                        )
                        .collect::<Vec<_>>(),
                    ),
            )
            .await?
            .succeeded();
        match (committed, grows) {
            (true, grown_lease) => {
                // Its fence's revision was not read here: no hint for the next cycle.
                self.hints.forget(key);
                if grown_lease {
                    self.revoke_lease_later(old.lease);
                }
                Ok(Some(grant_of(key, &grown, grown.lease_ms)))
            }
            (false, true) => {
                self.revoke_lease_later(lease);
                Ok(None)
            }
            (false, false) => Ok(None),
        }
    }

    /// A grant's marker moved from lease `from` to lease `to`.
    fn move_marker_ops(&self, from: i64, to: i64) -> [TxnOp; 2] {
        [
            TxnOp::put(
                self.grant_marker(to),
                "",
                Some(PutOptions::new().with_lease(to)),
            ),
            TxnOp::delete(self.grant_marker(from), None),
        ]
    }

    /// Leaves `session`'s place in `key`'s queue. The place's lease, now without a key, ends
    /// at its TTL on its own.
    pub(super) async fn leave_place(
        &self,
        key: &LockKey,
        session: SessionId,
    ) -> Result<(), StoreError> {
        self.txn(
            "leave queue",
            Txn::new().and_then([TxnOp::delete(self.place_key(key, session), None)]),
        )
        .await
        .map(|_| ())
    }

    /// [`LockStore::abandon`]: a place carries no request here, so `leave` removes the
    /// session's place; the grant goes only while its record names `request`, pinned on the
    /// record's revision (a later request's re-grant rewrites it).
    pub(super) async fn abandon_grant(
        &self,
        key: &LockKey,
        session: SessionId,
        request: RequestId,
        leave: bool,
    ) -> Result<bool, StoreError> {
        if request == RequestId::NONE {
            return Ok(false);
        }
        if leave {
            self.leave_place(key, session).await?;
        }
        let record = self.read_keys(&[self.grant_key(key)]).await?.remove(0);
        let Some(grant) = record.as_ref().map(read_grant).transpose()? else {
            return Ok(false);
        };
        if grant.value.session != session || grant.value.request != request.0 {
            return Ok(false);
        }
        self.delete_grant_if_unchanged(
            &self.grant_key(key),
            grant.mod_revision,
            grant.value.lease,
            Some(grant.value.lease_ms),
            None,
        )
        .await
    }

    /// A grant's writes: its record, the key's fence raised to its token, its lease's marker.
    pub(super) fn grant_ops(
        &self,
        key: &LockKey,
        grant: &GrantValue,
    ) -> Result<Vec<TxnOp>, StoreError> {
        Ok(vec![
            TxnOp::put(self.grant_key(key), encode(grant)?, None),
            TxnOp::put(self.fence_key(key), encode(&grant.token.0)?, None),
            TxnOp::put(
                self.grant_marker(grant.lease),
                "",
                Some(PutOptions::new().with_lease(grant.lease)),
            ),
        ])
    }

    /// Rounds of read, decide, commit until one decides (a lost race is read again).
    pub(super) async fn acquire_rounds(
        &self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
        spare_lease: &mut Option<i64>,
    ) -> Result<AcquireOutcome, StoreError> {
        for _ in 0..ACQUIRE_ROUNDS_MAX {
            if let Some(decided) = self.acquire_round(key, session, spec, spare_lease).await? {
                return Ok(decided);
            }
        }
        Err(StoreError::Unavailable(format!(
            "acquire of {key} lost {ACQUIRE_ROUNDS_MAX} races in a row"
        )))
    }

    /// One round of acquire: read, decide, commit. `None` when a commit lost a race.
    pub(super) async fn acquire_round(
        &self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
        spare_lease: &mut Option<i64>,
    ) -> Result<Option<AcquireOutcome>, StoreError> {
        let lease_ms = spec.lease_ms;
        let (revision, mut read) = self
            .read_at(vec![
                TxnOp::get(self.session_key(session), None),
                TxnOp::get(self.session_marker(session), None),
                TxnOp::get(self.grant_key(key), None),
                TxnOp::get(self.fence_key(key), None),
                TxnOp::get(self.delay_key(key), None),
                TxnOp::get(
                    self.queue_prefix(key),
                    Some(GetOptions::new().with_prefix()),
                ),
            ])
            .await?;
        let places = self.read_places(&read.pop().unwrap_or_default())?;
        let read: Vec<Option<KeyValue>> = read.into_iter().map(|mut kvs| kvs.pop()).collect();
        let me = Self::live_session(session, read[0].as_ref(), read[1].as_ref())?;
        let current = read[2].as_ref().map(read_grant).transpose()?;
        let (fence_revision, last_token) = match &read[3] {
            Some(kv) => (kv.mod_revision(), decode::<u64>(kv.value(), "fence")?),
            None => (0, 0),
        };
        let delay = read[4].as_ref().map(read_delay).transpose()?;
        let mine = places.iter().find(|p| p.session == session).cloned();
        // Other sessions' places before this session's (all of them when it has none).
        let ahead: Vec<SessionId> = places
            .iter()
            .filter(|p| {
                p.session != session
                    && mine
                        .as_ref()
                        .is_none_or(|m| p.create_revision < m.create_revision)
            })
            .map(|p| p.session)
            .collect();

        // One read of what is live: the grant's markers and its holder's record, the delay's
        // marker, and (when few) the sessions of the places ahead.
        let mut checks = Vec::new();
        if let Some(c) = &current {
            checks.extend([
                self.grant_marker(c.value.lease),
                self.session_marker(c.value.session),
                self.session_key(c.value.session),
            ]);
        }
        if let Some(d) = &delay {
            checks.push(self.delay_marker(d.value.lease));
        }
        let fixed = checks.len();
        let inline = ahead.len() <= INLINE_PLACE_CHECKS;
        if inline {
            checks.extend(ahead.iter().map(|s| self.session_marker(*s)));
        }
        let live = self.exist(&checks).await?;

        // What is live: the grant (its lease and its holder's session), the delay, and the
        // places ahead. A grant whose holder's session was not closed ended involuntarily:
        // it starts a lock-delay for everyone but its holder, once.
        let holder_live = current.is_some() && live[0] && live[1];
        let took_over_expired = current.is_some() && !holder_live;
        let ended_involuntarily = current.as_ref().filter(|_| !holder_live && live[2]);
        let delay_in_force = delay
            .as_ref()
            .filter(|d| d.value.exempt != session && live[fixed - 1]);
        let delay_to_start = ended_involuntarily.filter(|dead| {
            delay_in_force.is_none()
                && dead.value.lock_delay_ms > 0
                && dead.value.session != session
                && delay
                    .as_ref()
                    .is_none_or(|d| d.value.token != dead.value.token)
        });
        let delay_left_ms = match (delay_in_force, delay_to_start) {
            (Some(d), _) => self.delay_remaining(&d.value).await,
            (None, Some(dead)) => dead.value.lock_delay_ms,
            (None, None) => 0,
        };
        let ahead_live = if inline {
            live[fixed..].iter().filter(|l| **l).count()
        } else {
            let markers: Vec<String> = ahead.iter().map(|s| self.session_marker(*s)).collect();
            self.exist(&markers).await?.iter().filter(|l| **l).count()
        };
        let view = KeyView {
            holder: current
                .as_ref()
                .filter(|_| holder_live)
                .map(|c| HolderView {
                    session: c.value.session,
                    token: c.value.token,
                    // An upper bound: etcd does not say how much of the lease is left.
                    free_in_ms: c.value.lease_ms,
                }),
            delay_left_ms,
            ahead: ahead_live as u64,
            last_token,
        };

        let token = match decide(&view, session) {
            Decision::Regrant { .. } => {
                let Some(current) = current else {
                    unreachable!("a regrant is decided on a live grant");
                };
                return Ok(self
                    .regrant(key, current, spec, mine.as_ref())
                    .await?
                    .map(|grant| AcquireOutcome::Granted {
                        grant,
                        took_over_expired: false,
                        store_now: None,
                    }));
            }
            Decision::Refuse(refusal) => {
                // The delay runs from when the store first notices the end (etcd does not say
                // when a lease ended), so any acquire that finds it free starts it, queued or not.
                if let (Refusal::Delayed { .. } | Refusal::Queued { .. }, Some(dead)) =
                    (refusal, delay_to_start)
                {
                    if !self.start_delay(key, dead, delay.as_ref()).await? {
                        return Ok(None);
                    }
                }
                // What held the caller back, pinned while a new place is taken: the grant
                // record as read and the places ahead (any of them gone may have made this
                // caller the head before its place existed).
                let pins = match refusal {
                    Refusal::Held { .. } | Refusal::Queued { .. } => {
                        let record = Pin::record(
                            self.grant_key(key),
                            current.as_ref().map_or(0, |c| c.mod_revision),
                        );
                        let ahead = places
                            .iter()
                            .filter(|p| ahead.contains(&p.session))
                            .map(|p| p.create_revision)
                            .collect();
                        vec![record, Pin::places(self.queue_prefix(key), ahead)]
                    }
                    Refusal::Delayed { .. } => Vec::new(),
                };
                if !self
                    .hold_place(key, session, spec.queue_ms, mine.as_ref(), pins)
                    .await?
                {
                    return Ok(None);
                }
                return Ok(Some(refusal.into()));
            }
            Decision::Grant { token } => token,
        };

        let lease = self.lease_for(lease_ms, spare_lease).await?;
        let value = GrantValue {
            token,
            session,
            owner: me.owner,
            lease,
            lease_ms,
            lock_delay_ms: spec.lock_delay_ms,
            request: spec.request.0,
        };
        let mut ops = self.grant_ops(key, &value)?;
        // The old grant's marker goes, unless its lease is this grant's: then the old grant
        // was released (its lease reused), and the compare on its record fails anyway.
        if let Some(old) = current.as_ref().filter(|old| old.value.lease != lease) {
            ops.push(TxnOp::delete(self.grant_marker(old.value.lease), None));
        }
        if let Some(d) = &delay {
            // A grant ends the key's delay (over, or this session's own).
            ops.push(TxnOp::delete(self.delay_key(key), None));
            ops.push(TxnOp::delete(self.delay_marker(d.value.lease), None));
        }
        let queue_unchanged = match &mine {
            // This session's place is still the one read (so nobody can be ahead of it
            // that was not read: later places arrive behind it) ...
            Some(place) => {
                ops.push(TxnOp::delete(self.place_key(key, session), None));
                Compare::create_revision(
                    self.place_key(key, session),
                    CompareOp::Equal,
                    place.create_revision,
                )
            }
            // ... or, without a place, nobody joined the queue since the read.
            None => Compare::create_revision(self.queue_prefix(key), CompareOp::Less, revision + 1)
                .with_prefix(),
        };
        let committed = self
            .txn(
                "acquire",
                Txn::new()
                    .when([
                        // Nobody granted or released the key since the read ...
                        Compare::mod_revision(
                            self.grant_key(key),
                            CompareOp::Equal,
                            current.as_ref().map_or(0, |c| c.mod_revision),
                        ),
                        // ... nor drew a token from its fence ...
                        Compare::mod_revision(
                            self.fence_key(key),
                            CompareOp::Equal,
                            fence_revision,
                        ),
                        // ... nor started a lock-delay ...
                        Compare::mod_revision(
                            self.delay_key(key),
                            CompareOp::Equal,
                            delay.as_ref().map_or(0, |d| d.mod_revision),
                        ),
                        // ... nor queued where it would be ahead of this session ...
                        queue_unchanged,
                        // ... and the acquiring session is still live.
                        Compare::version(self.session_marker(session), CompareOp::Greater, 0),
                    ])
                    .and_then(ops)
                    // On a lost race, the fence as it is now: did another grant commit?
                    .or_else([
                        TxnOp::get(self.fence_key(key), None),
                        TxnOp::get(self.grant_key(key), None),
                    ]),
            )
            .await?;
        if !committed.succeeded() {
            if spec.queue_ms > 0 {
                // A waiter that lost the race decides again: its next read finds the winner
                // and takes a queue place behind it. Refused here, it would park with no
                // place, which no release wakes (it waited for its recheck).
                return Ok(None);
            }
            return Ok(
                Self::granted_meanwhile(&committed, fence_revision, session)?.map(|holder_token| {
                    Refusal::Held {
                        holder_token,
                        free_in_ms: lease_ms,
                    }
                    .into()
                }),
            );
        }
        *spare_lease = None;
        // No other session had a place at the read. With a place of its own the caller's
        // compare did not stop others queueing behind it before the commit, so the queue is
        // known empty as of the read only (the commit deleted this session's place): places
        // created since then fail the next hinted acquire's compare.
        let queue_empty_since = places
            .iter()
            .all(|p| p.session == session)
            .then_some(revision);
        self.hints
            .granted(key, &value, committed.header(), queue_empty_since);
        if let Some(old) = current {
            assert_ne!(old.value.lease, lease, "a grant took over its own lease");
            self.revoke_lease_later(old.value.lease);
        }
        if let Some(d) = delay {
            self.revoke_lease_later(d.value.lease);
        }
        Ok(Some(AcquireOutcome::Granted {
            grant: grant_of(key, &value, lease_ms),
            took_over_expired,
            store_now: None,
        }))
    }
}
