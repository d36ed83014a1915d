//! `LockStore` on etcd, with the `etcd-client` crate. The only place that
//! knows the etcd key layout; ADR 0005 argues the choices.
//!
//! Every key of one deployment lives under one prefix `P`:
//!
//! | key | value | lease | lives until |
//! |---|---|---|---|
//! | `P/s/{session}` | [`SessionValue`] | none | a close, or the reaper after expiry |
//! | `P/sl/{session}` | empty | the session's | the session's lease ends |
//! | `P/sc/{credential}/{session}` | empty | the session's | the session's lease ends, or its close (the credential's session quota counts these) |
//! | `P/g/{lock_key}` | [`GrantValue`] | none | a release or a revoke, or the reaper after expiry |
//! | `P/h/{lock_key}/{token}` | [`GrantValue`] with its scope (a reader's, or a permit's slot and count) | none | a release or a revoke, or the reaper after expiry |
//! | `P/gl/{lease}` | empty | the grant's or share's own (a released one's, reused) | its lease ends, or its release |
//! | `P/f/{lock_key}` | last token issued | none | never (tokens only rise per key) |
//! | `P/v/{lock_key}` | what the key's grant announces (an election's leader), with its token | none | the key's next proclaim replaces it |
//! | `P/r/{lock_key}` | the last revocation (token, who, why) | none | the key's next revoke replaces it |
//! | `P/w/{lock_key}/{session}` | the place's TTL in seconds (a reader's or a permit's: with its claim) | the place's own | granted, left, lapsed, or the reaper once its session ended |
//! | `P/d/{lock_key}` | [`DelayValue`] | none | the key's next grant (unless it names an ended share still there), or the reaper once the delay is over |
//! | `P/dl/{lease}` | empty | the delay's own | the lock-delay ends |
//!
//! A session is live while its `sl` marker exists, expired while its record outlives the
//! marker (so a heartbeat can say `SESSION_EXPIRED` until the reaper runs, as on PostgreSQL). A
//! grant is live while its record, its `gl` marker and its holder's `sl` marker all exist.
//!
//! Readers and permits (ADR 0007): a share of a key is a record `h/{lock_key}/{token}` beside
//! the grant record, live by the same rule as a grant (`shares.rs` argues the layout). A key's
//! live grants are of one kind: a grant of the whole key (a lock, a writer), readers, or
//! permits of one count. Every grant and every share draws its token from the key's one fence
//! `f/{lock_key}` and compares the fence's revision as read, so no grant of either kind is
//! made between a decision's read and its commit: that one compare pins "no share created
//! since", and a share read live or ended keeps that state until its record goes (ended
//! shares never come back: tokens are not reused). A round reads the `h/` prefix in the same
//! read as the grant record (`round.rs`); a lock's round with no shares pays one empty range
//! more and nothing else. Leases
//! are etcd's: the store's clock is the etcd leader's, never a lock-server's. etcd counts
//! lease TTLs in whole seconds, so TTLs are rounded *up* (a holder keeps a lock at least as
//! long as it was told, never less).
//!
//! Waiting: a key's queue is its `w/{lock_key}/` places in the order of their
//! `create_revision` (arrival). A place sits on a lease of its own (the caller's `queue_ms`,
//! rounded up): a refused caller renews it by keeping that lease alive, or, when it asks for
//! another TTL, by putting the place again on a new lease — a put keeps the key's
//! `create_revision`, so a renewed place keeps its turn. A place is live while it exists and
//! its session's `sl` marker does. Lock-delay: a grant that ends involuntarily
//! leaves a `d/{lock_key}` record naming its token and the exempt session, with a `dl` marker
//! on a lease of `lock_delay_ms` (rounded up). etcd does not say when a lease ended, so a
//! delay runs from when the store noticed the end (the revoke, the reaper, or an acquire that
//! found the dead grant), never shorter than asked; the record stays after the marker went
//! so that the same dead grant never starts a second delay.
//!
//! Every change is one transaction whose compares pin what the decision read: the grant
//! record's, the fence's and the delay record's `mod_revision`, the session marker's
//! existence, and the queue (the caller's own place unchanged, or no place created since the
//! read). A lost race is re-read and decided again, never overwritten. Markers of sessions,
//! delays and expired grants never come back once gone (those ids are never reused), so
//! "dead when read" stays true. A released grant's lease is reused by a later grant
//! (`leases.rs`), so its `gl` marker may come back, but only after the transaction that
//! deleted the released record: no record that named it can come back with it. What a
//! replica last wrote to a key is kept as a hint (`hints.rs`): a cycle on a key nobody else
//! touched commits without reading first, pinned by the same compares.

mod acquire;
mod codec;
mod delay;
mod event_ring;
mod events;
mod hinted;
mod hints;
mod holds;
mod keep_alive;
mod keys;
mod leases;
mod members;
mod queue;
mod reap;
mod round;
mod sessions;
mod set;
mod shares;
mod values;
mod wakes;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use lock_api::{
    Backend, Claim, FencingToken, LeaderValue, LockGrant, LockInfo, LockKey, SessionId,
};
use lock_store::{
    AcquireOutcome, AcquireSpec, EventPage, HeadSink, LockStore, ReapReport, RequestId, Revocation,
    RevokeNote, SessionOwner, SessionRecord, SetOutcome, StoreError, WakeSink,
};

use codec::{SessionValue, after_ms, encode, grant_of};
use hints::Hints;
use keep_alive::KeepAlives;
use keys::Keys;
use leases::LeasePool;
use members::Members;
use wakes::WakeHub;

/// The etcd lock store: its parts, each the only code that knows its own state.
#[derive(Clone)]
pub struct EtcdStore {
    /// The members and every call to them.
    members: Arc<Members>,
    /// The key layout.
    keys: Keys,
    /// Every replica (sink) served by this store's one wake-up watch.
    wakes: Arc<WakeHub>,
    /// Released grants' leases, for the next grants.
    leases: Arc<LeasePool>,
    /// What this replica last wrote to each key, to skip the read before a commit.
    hints: Arc<Hints>,
    /// The one lease keep-alive stream of this replica.
    keep_alives: Arc<KeepAlives>,
    /// This replica's window of the watch log (C3 W1).
    events: Arc<event_ring::EventRing>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", &self.keys.all())
            .field("request_timeout", &self.members.request_timeout())
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Connects to `endpoints` (`http://host:port`, any member of one cluster). Keys live
    /// under `prefix`; every call is bounded by `request_timeout`.
    pub async fn connect(
        endpoints: &[String],
        prefix: &str,
        request_timeout: Duration,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            members: Arc::new(Members::connect(endpoints, request_timeout).await?),
            keys: Keys::new(prefix),
            wakes: Arc::default(),
            leases: Arc::default(),
            hints: Arc::default(),
            keep_alives: Arc::default(),
            events: Arc::default(),
        })
    }

    /// Refreshes `lease` to its full TTL; `false` when it has already ended.
    async fn keep_alive(&self, lease: i64) -> Result<bool, StoreError> {
        self.keep_alives.keep_alive(&self.members, lease).await
    }

    /// The lease an acquire's grant goes on (`LeasePool::lease_for`).
    async fn lease_for(&self, lease_ms: u64, spare: &mut Option<i64>) -> Result<i64, StoreError> {
        let (members, keep_alives) = (&self.members, &self.keep_alives);
        self.leases
            .lease_for(members, keep_alives, lease_ms, spare)
            .await
    }

    /// Keeps or revokes the lease of an ended grant (`LeasePool::reuse_lease_later`).
    fn reuse_lease_later(&self, lease_ms: u64, lease: i64) {
        self.leases
            .reuse_lease_later(&self.members, lease_ms, lease);
    }
}

#[async_trait]
impl LockStore for EtcdStore {
    fn backend(&self) -> Backend {
        Backend::Etcd
    }

    async fn open_session(
        &self,
        opener: &SessionOwner,
        ttl_ms: u64,
    ) -> Result<SessionRecord, StoreError> {
        let session_id = SessionId::random();
        let lease = self.members.grant_lease(ttl_ms).await?;
        let value = SessionValue {
            owner: opener.owner.clone(),
            credential: opener.credential.clone(),
            ttl_ms,
            lease,
        };
        self.members
            .txn(
                "create session",
                Txn::new().and_then([
                    TxnOp::put(self.keys.session_key(session_id), encode(&value)?, None),
                    TxnOp::put(
                        self.keys.session_marker(session_id),
                        "",
                        Some(PutOptions::new().with_lease(lease)),
                    ),
                    TxnOp::put(
                        self.keys.credential_session(&opener.credential, session_id),
                        "",
                        Some(PutOptions::new().with_lease(lease)),
                    ),
                ]),
            )
            .await?;
        Ok(SessionRecord {
            session_id,
            ttl_ms,
            expires_at: after_ms(ttl_ms),
        })
    }

    async fn session_owner(&self, session: SessionId) -> Result<Option<SessionOwner>, StoreError> {
        Ok(self
            .session_record(session)
            .await?
            .map(|(_, value)| SessionOwner {
                owner: value.owner,
                credential: value.credential,
            }))
    }

    async fn sessions_of(&self, credential: &str) -> Result<u64, StoreError> {
        self.count_sessions(credential).await
    }

    async fn heartbeat(&self, session: SessionId) -> Result<SessionRecord, StoreError> {
        let read = self
            .members
            .read_keys(&[
                self.keys.session_key(session),
                self.keys.session_marker(session),
            ])
            .await?;
        let value = Self::live_session(session, read[0].as_ref(), read[1].as_ref())?;
        if !self.keep_alive(value.lease).await? {
            return Err(StoreError::SessionExpired(session));
        }
        Ok(SessionRecord {
            session_id: session,
            ttl_ms: value.ttl_ms,
            expires_at: after_ms(value.ttl_ms),
        })
    }

    async fn delete_session(&self, session: SessionId) -> Result<bool, StoreError> {
        let Some((mod_revision, value)) = self.session_record(session).await? else {
            return Ok(false);
        };
        let deleted = self
            .members
            .txn(
                "delete session",
                Txn::new()
                    .when([Compare::mod_revision(
                        self.keys.session_key(session),
                        CompareOp::Equal,
                        mod_revision,
                    )])
                    .and_then([
                        TxnOp::delete(self.keys.session_key(session), None),
                        TxnOp::delete(self.keys.session_marker(session), None),
                        TxnOp::delete(
                            self.keys.credential_session(&value.credential, session),
                            None,
                        ),
                    ]),
            )
            .await?
            .succeeded();
        if deleted {
            // Its grants are dead from this commit on (their holder's marker is gone); the
            // reaper deletes their records without reporting them as expiries.
            self.members.revoke_lease_later(value.lease);
        }
        Ok(deleted)
    }

    async fn acquire_with(
        &self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
    ) -> Result<AcquireOutcome, StoreError> {
        lock_store::claim::check_count(key, spec.claim)?;
        let mut spare_lease = None;
        let outcome = if spec.claim != Claim::Exclusive {
            self.acquire_share_rounds(key, session, spec, &mut spare_lease)
                .await
        } else {
            match self
                .acquire_hinted(key, session, spec, &mut spare_lease)
                .await
            {
                Ok(Some(decided)) => Ok(decided),
                Ok(None) => {
                    self.acquire_rounds(key, session, spec, &mut spare_lease)
                        .await
                }
                Err(err) => Err(err),
            }
        };
        if let Some(lease) = spare_lease {
            if outcome.is_ok() {
                // Every round that used it lost its compare: no record names it. The next
                // grant's.
                self.reuse_lease_later(spec.lease_ms, lease);
            } else {
                // A commit whose answer was lost may have put a grant on it: never share it.
                self.members.revoke_lease_later(lease);
            }
        }
        outcome
    }

    async fn renew(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
    ) -> Result<LockGrant, StoreError> {
        let lost = || StoreError::LockLost {
            lock_key: key.clone(),
            fencing_token: token,
        };
        let read = self
            .members
            .read_keys(&[
                self.keys.session_key(session),
                self.keys.session_marker(session),
                self.keys.grant_key(key),
                self.keys.hold_key(key, token),
            ])
            .await?;
        Self::live_session(session, read[0].as_ref(), read[1].as_ref())?;
        let Some(grant) = Self::record_of(&read[2..], session, token)? else {
            return Err(lost());
        };
        if !self.keep_alive(grant.value.lease).await? {
            return Err(lost());
        }
        // The keep-alive proves the lease was running; this read proves the grant still
        // names it and its session lives, so RENEWED is true at a single instant.
        let record = self.keys.record_key(key, &grant.value);
        let after = self
            .members
            .read_keys(&[record, self.keys.session_marker(session)])
            .await?;
        let unchanged = after[0]
            .as_ref()
            .is_some_and(|kv| kv.mod_revision() == grant.mod_revision);
        if !unchanged {
            return Err(lost());
        }
        if after[1].is_none() {
            return Err(StoreError::SessionExpired(session));
        }
        Ok(grant_of(key, &grant.value, grant.value.lease_ms))
    }

    async fn release(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
    ) -> Result<bool, StoreError> {
        if let Some(released) = self.release_hinted(key, session, token).await? {
            return Ok(released);
        }
        let read = self
            .members
            .read_keys(&[self.keys.grant_key(key), self.keys.hold_key(key, token)])
            .await?;
        let Some(grant) = Self::record_of(&read, session, token)? else {
            return Ok(false);
        };
        self.delete_grant_if_unchanged(
            &self.keys.record_key(key, &grant.value),
            grant.mod_revision,
            grant.value.lease,
            Some(grant.value.lease_ms),
            None,
        )
        .await
    }

    async fn proclaim(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
        value: &LeaderValue,
    ) -> Result<(), StoreError> {
        self.proclaim_value(key, session, token, value).await
    }

    async fn get(&self, key: &LockKey) -> Result<Option<LockInfo>, StoreError> {
        self.inspect(key).await
    }

    async fn events_after(
        &self,
        prefix: &str,
        after: u64,
        limit: usize,
    ) -> Result<EventPage, StoreError> {
        self.events_page(prefix, after, limit).await
    }

    async fn watch_events(&self, sink: HeadSink) -> Result<(), StoreError> {
        self.events.tell(sink);
        Ok(())
    }

    async fn acquire_set(
        &self,
        keys: &[LockKey],
        session: SessionId,
        spec: AcquireSpec,
    ) -> Result<SetOutcome, StoreError> {
        self.acquire_set_rounds(keys, session, spec).await
    }

    async fn leave_queue(&self, key: &LockKey, session: SessionId) -> Result<(), StoreError> {
        self.leave_place(key, session).await
    }

    async fn abandon(
        &self,
        key: &LockKey,
        session: SessionId,
        request: RequestId,
        leave: bool,
    ) -> Result<bool, StoreError> {
        self.abandon_grant(key, session, request, leave).await
    }

    async fn watch_wakes(&self, sink: WakeSink) -> Result<(), StoreError> {
        if !self.wakes.add(sink) {
            return Ok(());
        }
        // Opened here when etcd answers, so that every change after this call is seen; else
        // (etcd down at start: the replica still starts and answers 503) in the background.
        let watch = match self.open_watch().await {
            Ok(watch) => Some(watch),
            Err(err) => {
                tracing::warn!(
                    event = "etcd_wake_watch_deferred",
                    error = %err,
                    "the wake-up watch opens once etcd answers; waiters recheck meanwhile"
                );
                None
            }
        };
        // The task's store must not keep the hub alive: its own, empty one.
        let watcher = Self {
            wakes: Arc::default(),
            ..self.clone()
        };
        tokio::spawn(watcher.run_watch(Arc::downgrade(&self.wakes), watch));
        Ok(())
    }

    async fn revoke(
        &self,
        key: &LockKey,
        note: &RevokeNote,
    ) -> Result<Option<FencingToken>, StoreError> {
        let Some(grant) = self.live_grant(key).await? else {
            return self.revoke_shares(key, note).await;
        };
        let path = self.keys.grant_key(key);
        // The note is written by the transaction that deletes the grant.
        let value = codec::encode_revocation(grant.value.token, note)?;
        let noted = Some(TxnOp::put(self.keys.revocation_key(key), value, None));
        let deleted = if grant.value.lock_delay_ms > 0 {
            // Involuntary: the lock-delay starts. No delay record can be in force while the
            // grant lives (its commit deleted any), so none is compared.
            self.end_grant_with_delay(key, &grant, None, noted).await?
        } else {
            let (revision, lease) = (grant.mod_revision, grant.value.lease);
            self.delete_grant_if_unchanged(&path, revision, lease, None, noted)
                .await?
        };
        Ok(deleted.then_some(grant.value.token))
    }

    async fn revocation(&self, key: &LockKey) -> Result<Option<Revocation>, StoreError> {
        let [kv] = <[_; 1]>::try_from(
            self.members
                .read_keys(&[self.keys.revocation_key(key)])
                .await?,
        )
        .map_err(|_| StoreError::Internal("etcd answered another number of reads".into()))?;
        kv.map(|kv| codec::decode_revocation(kv.value()))
            .transpose()
    }

    async fn reap_expired(&self) -> Result<ReapReport, StoreError> {
        self.reap().await
    }

    async fn ready(&self) -> Result<(), StoreError> {
        // A linearizable read needs a leader and a quorum: exactly "can take writes".
        self.members
            .read(vec![TxnOp::get(
                self.keys.all(),
                Some(GetOptions::new().with_count_only()),
            )])
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::codec::{lease_seconds, map_err};
    use super::*;
    use tonic::Code;

    #[test]
    fn ttls_round_up_to_whole_seconds_never_down() {
        assert_eq!(lease_seconds(1), 1);
        assert_eq!(lease_seconds(1_000), 1);
        assert_eq!(lease_seconds(1_001), 2);
        assert_eq!(lease_seconds(59_999), 60);
    }

    #[test]
    fn etcd_answers_about_itself_map_to_retryable_errors_never_internal() {
        let status = |s: tonic::Status| map_err(etcd_client::Error::GRpcStatus(s));
        assert!(matches!(
            status(tonic::Status::unavailable("etcdserver: no leader")),
            StoreError::NotLeader(_)
        ));
        assert!(matches!(
            status(tonic::Status::unavailable("etcdserver: leader changed")),
            StoreError::NotLeader(_)
        ));
        assert!(matches!(
            status(tonic::Status::unavailable("tcp connect error")),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            status(tonic::Status::deadline_exceeded(
                "etcdserver: request timed out"
            )),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            status(tonic::Status::invalid_argument(
                "etcdserver: key is not provided"
            )),
            StoreError::Internal(_)
        ));
        // A reset connection (the member SIGKILLed under load): tonic wraps the transport
        // error it does not recognise in a status of code `Unknown` with it as the source.
        #[derive(Debug, thiserror::Error)]
        #[error("transport error")]
        struct Reset;
        let reset = tonic::Status::from_error(Box::new(Reset));
        assert_eq!(reset.code(), Code::Unknown);
        assert!(matches!(status(reset), StoreError::Unavailable(_)));
        assert!(matches!(
            status(tonic::Status::unknown("etcdserver: something odd")),
            StoreError::Internal(_)
        ));
    }
}
