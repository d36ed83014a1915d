//! One acquire round: read the key's grant, shares, fence, delay and queue ([`KeyRead`]), see
//! what of it is live, decide ([`decide`]), and commit the decision in one transaction whose
//! compares pin what was read; a lost race is read and decided again. A share's round
//! (`shares.rs`) reads and judges the same way and decides by its own rule.

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp};
use lock_api::{Claim, GrantScope, LockKey, SessionId};
use lock_store::claim::{HeldAs, conflict, conflict_error};
use lock_store::decide::{Decision, HolderView, KeyView, decide};
use lock_store::{AcquireOutcome, AcquireSpec, Refusal, StoreError};

use super::EtcdStore;
use super::codec::{
    GrantValue, Place, ReadDelay, ReadGrant, SessionValue, decode, grant_of, read_delay, read_grant,
};
use super::delay::DelayStart;
use super::queue::Pin;

/// Rounds of read-decide-commit an acquire tries before it answers "unavailable": each lost
/// round means another grantor committed meanwhile, so the next read usually sees a holder.
pub(super) const ACQUIRE_ROUNDS_MAX: u32 = 16;
/// Queue places ahead of an acquirer whose sessions are checked in the same read as the
/// grant's markers; with more, they are checked only when the decision gets that far.
const INLINE_PLACE_CHECKS: usize = 32;

/// What one round read of a key, at one revision, for one acquiring session.
pub(super) struct KeyRead {
    pub(super) revision: i64,
    /// The acquiring session's record (live when read).
    pub(super) me: SessionValue,
    /// The key's grant record, live or not.
    pub(super) current: Option<ReadGrant>,
    /// The fence's `mod_revision` (0: never written) and the last token it issued.
    pub(super) fence_revision: i64,
    pub(super) last_token: u64,
    pub(super) delay: Option<ReadDelay>,
    /// The key's shares' records (readers', permits'), live or not, lowest token first.
    pub(super) holds: Vec<ReadGrant>,
    pub(super) places: Vec<Place>,
    /// The acquiring session's own place.
    pub(super) mine: Option<Place>,
    /// Other sessions' places before the acquirer's (all of them when it has none).
    pub(super) ahead: Vec<Place>,
}

/// What of a [`KeyRead`] is live, as the decision sees it.
pub(super) struct Judged {
    /// The view of the key's grant record: its holder is the live grant of the whole key.
    pub(super) view: KeyView,
    /// The grant record was there but not live: the grant is taken over.
    pub(super) took_over_expired: bool,
    /// A lock-delay to start now: of a grant, or of shares, that ended involuntarily.
    pub(super) delay_to_start: Option<DelayStart>,
    /// The live shares, lowest token first.
    pub(super) shares: Vec<ReadGrant>,
    /// Of the live places ahead (`view.ahead`), those asking for a reader's share.
    pub(super) readers_ahead: u64,
}

impl KeyRead {
    /// The delay record a grant on this read deletes: any, unless it names an ended share
    /// still there (which would otherwise start its delay again; the reaper deletes the
    /// record after the share's).
    pub(super) fn ended_delay(&self) -> Option<&ReadDelay> {
        let names_a_share =
            |d: &&ReadDelay| self.holds.iter().any(|h| d.value.covers(h.value.token));
        self.delay.as_ref().filter(|d| !names_a_share(d))
    }
}

impl Judged {
    /// What an exclusive acquire (a lock, a writer, a set's member) decides on: the live
    /// grant, or else the live reader that ends last, which keeps a writer out as a holder
    /// does (etcd does not say how much of a lease is left: the longest lease). Refused
    /// outright (nothing queued) when the key's live shares are permits, or when the caller
    /// itself reads the key.
    pub(super) fn exclusive_view(
        &self,
        key: &LockKey,
        session: SessionId,
    ) -> Result<KeyView, StoreError> {
        let Some(first) = self.shares.first() else {
            return Ok(self.view);
        };
        let held = first.value.held_as();
        if conflict(Claim::Exclusive, Some(held)) {
            return Err(conflict_error(key, Claim::Exclusive, held));
        }
        if self.shares.iter().any(|s| s.value.session == session) {
            return Err(conflict_error(key, Claim::Exclusive, HeldAs::Shared));
        }
        let last = (self.shares.iter()).max_by_key(|s| (s.value.lease_ms, s.value.token));
        let reader = last.map(|s| HolderView {
            session: s.value.session,
            token: s.value.token,
            free_in_ms: s.value.lease_ms,
        });
        Ok(KeyView {
            holder: self.view.holder.or(reader),
            ..self.view
        })
    }

    /// What the key's live grants are (`None`: none is live).
    pub(super) fn held_as(&self) -> Option<HeldAs> {
        if self.view.holder.is_some() {
            return Some(HeldAs::Exclusive);
        }
        self.shares.first().map(|s| s.value.held_as())
    }
}

impl EtcdStore {
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
    async fn acquire_round(
        &self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
        spare_lease: &mut Option<i64>,
    ) -> Result<Option<AcquireOutcome>, StoreError> {
        let read = self.read_for_acquire(key, session).await?;
        let judged = self.judge(&read, session).await?;
        match decide(&judged.exclusive_view(key, session)?, session) {
            Decision::Regrant { .. } => {
                let Some(current) = read.current else {
                    unreachable!("a regrant is decided on a live grant");
                };
                Ok(self
                    .regrant(key, current, spec, read.mine.as_ref())
                    .await?
                    .map(|grant| AcquireOutcome::Granted {
                        grant,
                        took_over_expired: false,
                        store_now: None,
                    }))
            }
            Decision::Refuse(refusal) => {
                self.refuse(key, session, spec, (&read, &judged), refusal)
                    .await
            }
            Decision::Grant { token } => {
                let grant = Grant {
                    token,
                    took_over_expired: judged.took_over_expired,
                };
                self.commit_grant(key, session, spec, read, grant, spare_lease)
                    .await
            }
        }
    }

    /// One linearizable read of what an acquire decides on.
    pub(super) async fn read_for_acquire(
        &self,
        key: &LockKey,
        session: SessionId,
    ) -> Result<KeyRead, StoreError> {
        let keys = &self.keys;
        let (revision, mut read) = self
            .members
            .read_at(vec![
                TxnOp::get(keys.session_key(session), None),
                TxnOp::get(keys.session_marker(session), None),
                TxnOp::get(keys.grant_key(key), None),
                TxnOp::get(keys.fence_key(key), None),
                TxnOp::get(keys.delay_key(key), None),
                TxnOp::get(keys.hold_prefix(key), Some(GetOptions::new().with_prefix())),
                TxnOp::get(
                    keys.queue_prefix(key),
                    Some(GetOptions::new().with_prefix()),
                ),
            ])
            .await?;
        let places = keys.read_places(&read.pop().unwrap_or_default())?;
        let holds = (read.pop().unwrap_or_default().iter())
            .map(read_grant)
            .collect::<Result<Vec<_>, _>>()?;
        let read: Vec<Option<KeyValue>> = read.into_iter().map(|mut kvs| kvs.pop()).collect();
        let me = Self::live_session(session, read[0].as_ref(), read[1].as_ref())?;
        let (fence_revision, last_token) = match &read[3] {
            Some(kv) => (kv.mod_revision(), decode::<u64>(kv.value(), "fence")?),
            None => (0, 0),
        };
        let mine = places.iter().find(|p| p.session == session).cloned();
        let ahead = places
            .iter()
            .filter(|p| {
                p.session != session
                    && mine
                        .as_ref()
                        .is_none_or(|m| p.create_revision < m.create_revision)
            })
            .cloned()
            .collect();
        Ok(KeyRead {
            revision,
            me,
            current: read[2].as_ref().map(read_grant).transpose()?,
            fence_revision,
            last_token,
            delay: read[4].as_ref().map(read_delay).transpose()?,
            holds,
            places,
            mine,
            ahead,
        })
    }

    /// What of `read` is live: the grant (its lease and its holder's session), the shares
    /// (each the same), the delay, and the places ahead, in one read of markers (the
    /// places' only when few). A grant whose holder's session was not closed ended
    /// involuntarily: it starts a lock-delay for everyone but its holder, once; so do shares
    /// (`judge_shares`).
    pub(super) async fn judge(
        &self,
        read: &KeyRead,
        session: SessionId,
    ) -> Result<Judged, StoreError> {
        let keys = &self.keys;
        let mut checks = Vec::new();
        if let Some(c) = &read.current {
            checks.extend([
                keys.grant_marker(c.value.lease),
                keys.session_marker(c.value.session),
                keys.session_key(c.value.session),
            ]);
        }
        if let Some(d) = &read.delay {
            checks.push(keys.delay_marker(d.value.lease));
        }
        let shares_at = checks.len();
        for hold in &read.holds {
            checks.extend(self.liveness_checks(&hold.value));
        }
        let fixed = checks.len();
        let inline = read.ahead.len() <= INLINE_PLACE_CHECKS;
        let markers: Vec<String> = (read.ahead.iter())
            .map(|p| keys.session_marker(p.session))
            .collect();
        if inline {
            checks.extend(markers.iter().cloned());
        }
        let live = self.members.exist(&checks).await?;
        let current = read.current.as_ref();
        let holder_live = current.is_some() && live[0] && live[1];
        let ended_involuntarily = current.filter(|_| !holder_live && live[2]);
        let delay_in_force = read
            .delay
            .as_ref()
            .filter(|d| d.value.exempt != session && live[shares_at - 1]);
        let (shares, shares_delay) = judge_shares(read, &live[shares_at..fixed], session);
        let delay_to_start = ended_involuntarily
            .filter(|dead| {
                dead.value.lock_delay_ms > 0
                    && dead.value.session != session
                    && read
                        .delay
                        .as_ref()
                        .is_none_or(|d| !d.value.covers(dead.value.token))
            })
            .cloned()
            .map(DelayStart::Grant)
            .or(shares_delay)
            .filter(|_| delay_in_force.is_none());
        let delay_left_ms = match (delay_in_force, &delay_to_start) {
            (Some(d), _) => self.delay_remaining(&d.value).await,
            (None, Some(start)) => start.delay_ms(),
            (None, None) => 0,
        };
        let ahead_live = if inline {
            live[fixed..].to_vec()
        } else {
            self.members.exist(&markers).await?
        };
        let live_ahead = || (read.ahead.iter().zip(&ahead_live)).filter(|(_, live)| **live);
        let readers_ahead = live_ahead().filter(|(p, _)| p.claim == Claim::Shared);
        let holder = current.filter(|_| holder_live).map(|c| HolderView {
            session: c.value.session,
            token: c.value.token,
            // An upper bound: etcd does not say how much of the lease is left.
            free_in_ms: c.value.lease_ms,
        });
        Ok(Judged {
            view: KeyView {
                holder,
                delay_left_ms,
                ahead: live_ahead().count() as u64,
                last_token: read.last_token,
            },
            took_over_expired: current.is_some() && !holder_live,
            delay_to_start,
            shares,
            readers_ahead: readers_ahead.count() as u64,
        })
    }

    /// What says whether `grant` is live, for [`Members::exist`]: its lease's marker, its
    /// holder's session marker (both there: live), and its holder's session record (there
    /// while the other two are not: it ended involuntarily).
    ///
    /// [`Members::exist`]: super::members::Members::exist
    pub(super) fn liveness_checks(&self, grant: &GrantValue) -> [String; 3] {
        [
            self.keys.grant_marker(grant.lease),
            self.keys.session_marker(grant.session),
            self.keys.session_key(grant.session),
        ]
    }

    /// A refusal: starts the lock-delay of a grant or of shares that ended involuntarily
    /// (the delay runs from when the store first notices the end, since etcd does not say
    /// when a lease ended, so any acquire that finds it free starts it, queued or not) and
    /// holds the caller's place, pinned on what held it back. `None` when either lost a race.
    pub(super) async fn refuse(
        &self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
        (read, judged): (&KeyRead, &Judged),
        refusal: Refusal,
    ) -> Result<Option<AcquireOutcome>, StoreError> {
        if let (Refusal::Delayed { .. } | Refusal::Queued { .. }, Some(start)) =
            (refusal, judged.delay_to_start.as_ref())
        {
            if !self.start_delay(key, start, read.delay.as_ref()).await? {
                return Ok(None);
            }
        }
        // What held the caller back, pinned while a new place is taken: the grant record as
        // read, the live shares and the places ahead (any of them gone may have made this
        // caller the head before its place existed).
        let pins = match refusal {
            Refusal::Held { .. } | Refusal::Queued { .. } => {
                let record = Pin::record(
                    self.keys.grant_key(key),
                    read.current.as_ref().map_or(0, |c| c.mod_revision),
                );
                let ahead = (read.ahead.iter()).map(|p| p.create_revision).collect();
                let mut pins = vec![record, Pin::places(self.keys.queue_prefix(key), ahead)];
                if !judged.shares.is_empty() {
                    let shares = (judged.shares.iter()).map(|s| s.create_revision);
                    pins.push(Pin::places(self.keys.hold_prefix(key), shares.collect()));
                }
                pins
            }
            Refusal::Delayed { .. } => Vec::new(),
        };
        let mine = read.mine.as_ref();
        let place = (spec.queue_ms, spec.claim);
        if !self.hold_place(key, session, place, mine, pins).await? {
            return Ok(None);
        }
        Ok(Some(refusal.into()))
    }

    /// Commits a grant of `token` with compares pinning everything `read` saw; `None` when
    /// a waiter lost the race (it reads and decides again).
    async fn commit_grant(
        &self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
        read: KeyRead,
        grant: Grant,
        spare_lease: &mut Option<i64>,
    ) -> Result<Option<AcquireOutcome>, StoreError> {
        let lease_ms = spec.lease_ms;
        let lease = self.lease_for(lease_ms, spare_lease).await?;
        let value = GrantValue {
            token: grant.token,
            session,
            owner: read.me.owner.clone(),
            lease,
            lease_ms,
            lock_delay_ms: spec.lock_delay_ms,
            request: spec.request.0,
            scope: GrantScope::Exclusive,
            permits: None,
        };
        let txn = self.grant_txn(key, session, &read, &value)?;
        let committed = self.members.txn("acquire", txn).await?;
        if !committed.succeeded() {
            if spec.queue_ms > 0 {
                // A waiter that lost the race decides again: its next read finds the winner
                // and takes a queue place behind it. Refused here, it would park with no
                // place, which no release wakes (it waited for its recheck).
                return Ok(None);
            }
            let meanwhile = self.granted_meanwhile(&committed, read.fence_revision, session)?;
            return Ok(meanwhile.map(|holder_token| {
                Refusal::Held {
                    holder_token,
                    free_in_ms: lease_ms,
                }
                .into()
            }));
        }
        *spare_lease = None;
        // No other session had a place at the read. With a place of its own the caller's
        // compare did not stop others queueing behind it before the commit, so the queue is
        // known empty as of the read only (the commit deleted this session's place): places
        // created since then fail the next hinted acquire's compare.
        let queue_empty_since = read
            .places
            .iter()
            .all(|p| p.session == session)
            .then_some(read.revision);
        self.hints
            .granted(key, &value, committed.header(), queue_empty_since);
        if let Some(old) = &read.current {
            assert_ne!(old.value.lease, lease, "a grant took over its own lease");
            self.members.revoke_lease_later(old.value.lease);
        }
        if let Some(d) = read.ended_delay() {
            self.members.revoke_lease_later(d.value.lease);
        }
        Ok(Some(AcquireOutcome::Granted {
            grant: grant_of(key, &value, lease_ms),
            took_over_expired: grant.took_over_expired,
            store_now: None,
        }))
    }

    /// The transaction that writes grant `value`: it commits only while nothing `read` saw
    /// has changed; on a lost race it answers the fence and the grant as they are now.
    fn grant_txn(
        &self,
        key: &LockKey,
        session: SessionId,
        read: &KeyRead,
        value: &GrantValue,
    ) -> Result<Txn, StoreError> {
        let keys = &self.keys;
        let (compares, ops) = self.grant_parts(key, session, read, value)?;
        Ok(Txn::new()
            .when(compares)
            .and_then(ops)
            // On a lost race, the fence as it is now: did another grant commit? And the
            // newest share: was it one (its kind then decides, in another round)?
            .or_else([
                TxnOp::get(keys.fence_key(key), None),
                TxnOp::get(keys.grant_key(key), None),
                TxnOp::get(
                    keys.hold_prefix(key),
                    Some(
                        GetOptions::new()
                            .with_prefix()
                            .with_keys_only()
                            .with_sort(SortTarget::Key, SortOrder::Descend)
                            .with_limit(1),
                    ),
                ),
            ]))
    }

    /// What a transaction that writes grant `value` (of the whole key, or a share) compares
    /// (nothing `read` saw has changed) and does.
    pub(super) fn grant_parts(
        &self,
        key: &LockKey,
        session: SessionId,
        read: &KeyRead,
        value: &GrantValue,
    ) -> Result<(Vec<Compare>, Vec<TxnOp>), StoreError> {
        let keys = &self.keys;
        let mut ops = self.grant_ops(key, value)?;
        // The old grant's marker goes, unless its lease is this grant's: then the old grant
        // was released (its lease reused), and the compare on its record fails anyway.
        let old = read.current.as_ref();
        if let Some(old) = old.filter(|old| old.value.lease != value.lease) {
            ops.push(TxnOp::delete(keys.grant_marker(old.value.lease), None));
        }
        if old.is_some() && !value.scope.is_exclusive() {
            // A share takes an ended grant's record over as a grant does (which overwrites
            // it): its lock-delay is not started again by a later read of it.
            ops.push(TxnOp::delete(keys.grant_key(key), None));
        }
        if let Some(d) = read.ended_delay() {
            // A grant ends the key's delay (over, or this session's own).
            ops.push(TxnOp::delete(keys.delay_key(key), None));
            ops.push(TxnOp::delete(keys.delay_marker(d.value.lease), None));
        }
        let queue_unchanged = match &read.mine {
            // This session's place is still the one read (so nobody can be ahead of it
            // that was not read: later places arrive behind it) ...
            Some(place) => {
                ops.push(TxnOp::delete(keys.place_key(key, session), None));
                let path = keys.place_key(key, session);
                Compare::create_revision(path, CompareOp::Equal, place.create_revision)
            }
            // ... or, without a place, nobody joined the queue since the read.
            None => {
                let after_read = read.revision + 1;
                Compare::create_revision(keys.queue_prefix(key), CompareOp::Less, after_read)
                    .with_prefix()
            }
        };
        let grant_revision = old.map_or(0, |c| c.mod_revision);
        let delay_revision = read.delay.as_ref().map_or(0, |d| d.mod_revision);
        let compares = vec![
            // Nobody granted or released the key since the read ...
            Compare::mod_revision(keys.grant_key(key), CompareOp::Equal, grant_revision),
            // ... nor drew a token from its fence (every grant does, a share's too: so no
            // share was granted either) ...
            Compare::mod_revision(keys.fence_key(key), CompareOp::Equal, read.fence_revision),
            // ... nor started a lock-delay ...
            Compare::mod_revision(keys.delay_key(key), CompareOp::Equal, delay_revision),
            // ... nor queued where it would be ahead of this session ...
            queue_unchanged,
            // ... and the acquiring session is still live.
            Compare::version(keys.session_marker(session), CompareOp::Greater, 0),
        ];
        Ok((compares, ops))
    }
}

/// The grant a round decided: its token, and whether it takes over a dead grant.
#[derive(Clone, Copy)]
struct Grant {
    token: lock_api::FencingToken,
    took_over_expired: bool,
}

/// The live shares of `read` (`live`: its holds' [`EtcdStore::liveness_checks`], in order),
/// and the lock-delay their involuntary ends start: the longest asked among the ended shares
/// of other sessions that no delay record names yet. The delay names every ended share
/// read, so that none starts another while its record is there.
fn judge_shares(
    read: &KeyRead,
    live: &[bool],
    session: SessionId,
) -> (Vec<ReadGrant>, Option<DelayStart>) {
    let mut shares = Vec::new();
    let mut ended = Vec::new();
    let mut delay_ms = 0;
    for (hold, live) in read.holds.iter().zip(live.chunks(3)) {
        if live[0] && live[1] {
            shares.push(hold.clone());
            continue;
        }
        ended.push(hold.value.token);
        let involuntary = live[2] && hold.value.session != session;
        if involuntary
            && read
                .delay
                .as_ref()
                .is_none_or(|d| !d.value.covers(hold.value.token))
        {
            delay_ms = delay_ms.max(hold.value.lock_delay_ms);
        }
    }
    let start = (delay_ms > 0).then_some(DelayStart::Shares {
        tokens: ended,
        delay_ms,
        fence_revision: read.fence_revision,
    });
    (shares, start)
}
