//! `LockStore` on etcd (milestone M3), with the `etcd-client` crate. The only place that
//! knows the etcd key layout; ADR 0005 argues the choices.
//!
//! Every key of one deployment lives under one prefix `P`:
//!
//! | key | value | lease | lives until |
//! |---|---|---|---|
//! | `P/s/{session}` | [`SessionValue`] | none | L3, or the reaper after expiry |
//! | `P/sl/{session}` | empty | the session's | the session's lease ends |
//! | `P/g/{lock_key}` | [`GrantValue`] | none | L6, L8, or the reaper after expiry |
//! | `P/gl/{lease}` | empty | the grant's own | the grant's lease ends |
//! | `P/f/{lock_key}` | last token issued | none | never (invariant I3) |
//!
//! A session is live while its `sl` marker exists, expired while its record outlives the
//! marker (so L2 can say `SESSION_EXPIRED` until the reaper runs, as on PostgreSQL). A grant
//! is live while its record, its `gl` marker and its holder's `sl` marker all exist. Leases
//! are etcd's: the store's clock is the etcd leader's, never a lock-server's. etcd counts
//! lease TTLs in whole seconds, so TTLs are rounded *up* (a holder keeps a lock at least as
//! long as it was told, never less).
//!
//! Every change is one transaction whose compares pin what the decision read: the grant
//! record's and the fence's `mod_revision`, the session marker's existence. A lost race is
//! re-read and decided again, never overwritten. Markers never come back once gone (lease ids
//! and session ids are never reused), so "dead when read" stays true.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, KeyValue, PutOptions, Txn, TxnOp,
    TxnOpResponse,
};
use lock_api::{Backend, FencingToken, LockGrant, LockInfo, LockKey, OwnerId, SessionId};
use serde::{Deserialize, Serialize};
use tonic::Code;

use super::{
    AcquireOutcome, AcquireSpec, ExpiredLock, LockStore, ReapReport, SessionRecord, StoreError,
};

/// etcd counts lease TTLs in whole seconds.
const LEASE_GRANULARITY_MS: u64 = 1_000;
/// Rounds of read-decide-commit an acquire tries before it answers "unavailable": each lost
/// round means another grantor committed meanwhile, so the next read usually sees a holder.
const ACQUIRE_ROUNDS_MAX: u32 = 16;
/// Interval and timeout of HTTP/2 pings on each etcd connection: a member that stops
/// answering (paused, partitioned) is dropped from the balance within about this long.
const ETCD_PING_INTERVAL_MS: u64 = 500;
/// How long a connection attempt to one member may take.
const ETCD_CONNECT_TIMEOUT_MS: u64 = 1_000;

/// The etcd lock store.
#[derive(Clone)]
pub struct EtcdStore {
    members: Arc<Members>,
    prefix: String,
    request_timeout: Duration,
}

/// One client per member and the member calls go to. A call that finds its member
/// unreachable, leaderless or silent moves every later call to the next member (as etcd's
/// own Go client pins one endpoint). Balancing over all members instead sends most calls to
/// a dead member: its refusals are the quickest answers.
struct Members {
    endpoints: Vec<String>,
    clients: Vec<Client>,
    pinned: AtomicUsize,
}

impl Members {
    fn pinned(&self) -> (usize, Client) {
        let index = self.pinned.load(Ordering::Relaxed) % self.clients.len();
        (index, self.clients[index].clone())
    }

    /// Moves calls off member `index`, unless another call already has.
    fn unpin(&self, index: usize, err: &StoreError) {
        let next = (index + 1) % self.clients.len();
        if self
            .pinned
            .compare_exchange(index, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
            && self.clients.len() > 1
        {
            tracing::warn!(
                event = "etcd_member_switched",
                from = %self.endpoints[index],
                to = %self.endpoints[next],
                error = %err,
                "etcd member failed a call; later calls go to the next member"
            );
        }
    }
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", &self.prefix)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

/// `P/s/{session}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SessionValue {
    owner: OwnerId,
    ttl_ms: u64,
    lease: i64,
}

/// `P/g/{lock_key}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct GrantValue {
    token: FencingToken,
    session: SessionId,
    owner: OwnerId,
    lease: i64,
    lease_ms: u64,
}

/// A grant record as read, with the revision a transaction pins.
#[derive(Debug, Clone)]
struct ReadGrant {
    value: GrantValue,
    mod_revision: i64,
}

/// Why a read grant is not live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Liveness {
    Live,
    LeaseEnded,
    SessionEnded,
}

impl EtcdStore {
    /// Connects to `endpoints` (`http://host:port`, any member of one cluster). Keys live
    /// under `prefix`; every call is bounded by `request_timeout`.
    pub async fn connect(
        endpoints: &[String],
        prefix: &str,
        request_timeout: Duration,
    ) -> Result<Self, StoreError> {
        if endpoints.is_empty() {
            return Err(StoreError::Internal(
                "no etcd endpoints (LOCK_ETCD_ENDPOINTS)".into(),
            ));
        }
        let options = ConnectOptions::new()
            .with_timeout(request_timeout)
            .with_connect_timeout(Duration::from_millis(ETCD_CONNECT_TIMEOUT_MS))
            .with_keep_alive(
                Duration::from_millis(ETCD_PING_INTERVAL_MS),
                Duration::from_millis(ETCD_PING_INTERVAL_MS),
            )
            .with_keep_alive_while_idle(true)
            // A member without a leader refuses at once ("no leader") instead of waiting.
            .with_require_leader(true);
        let mut clients = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            let client = tokio::time::timeout(
                request_timeout,
                Client::connect([endpoint], Some(options.clone())),
            )
            .await
            .map_err(|_| StoreError::Unavailable(format!("etcd at {endpoint} did not answer")))?
            .map_err(map_err)?;
            clients.push(client);
        }
        let prefix = if prefix.ends_with('/') {
            prefix.to_owned()
        } else {
            format!("{prefix}/")
        };
        Ok(Self {
            members: Arc::new(Members {
                endpoints: endpoints.to_vec(),
                clients,
                pinned: AtomicUsize::new(0),
            }),
            prefix,
            request_timeout,
        })
    }

    fn session_key(&self, session: SessionId) -> String {
        format!("{}s/{session}", self.prefix)
    }

    fn session_marker(&self, session: SessionId) -> String {
        format!("{}sl/{session}", self.prefix)
    }

    fn grant_key(&self, key: &LockKey) -> String {
        format!("{}g/{key}", self.prefix)
    }

    fn grant_marker(&self, lease: i64) -> String {
        format!("{}gl/{lease:x}", self.prefix)
    }

    fn fence_key(&self, key: &LockKey) -> String {
        format!("{}f/{key}", self.prefix)
    }

    /// Runs `call` on the pinned member, bounded by the request timeout; an answer about
    /// the member (unreachable, no leader, silent) moves later calls to the next one.
    async fn call<T, F, Fut>(&self, what: &str, call: F) -> Result<T, StoreError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let (index, client) = self.members.pinned();
        let result = match tokio::time::timeout(self.request_timeout, call(client)).await {
            Err(_) => Err(StoreError::Unavailable(format!(
                "etcd {what} timed out at {}",
                self.members.endpoints[index]
            ))),
            Ok(answer) => answer.map_err(map_err),
        };
        if let Err(err @ (StoreError::Unavailable(_) | StoreError::NotLeader(_))) = &result {
            self.members.unpin(index, err);
        }
        result
    }

    /// Runs a transaction.
    async fn txn(&self, what: &str, txn: Txn) -> Result<etcd_client::TxnResponse, StoreError> {
        self.call(
            what,
            |client| async move { client.kv_client().txn(txn).await },
        )
        .await
    }

    /// One linearizable read of several keys (or prefixes) at one revision.
    async fn read(&self, gets: Vec<TxnOp>) -> Result<Vec<Vec<KeyValue>>, StoreError> {
        let response = self.txn("read", Txn::new().and_then(gets)).await?;
        response
            .op_responses()
            .into_iter()
            .map(|op| match op {
                TxnOpResponse::Get(mut get) => Ok(get.take_kvs()),
                other => Err(StoreError::Internal(format!(
                    "etcd answered a read with {other:?}"
                ))),
            })
            .collect()
    }

    /// Reads single keys; each is `None` when absent.
    async fn read_keys(&self, keys: &[String]) -> Result<Vec<Option<KeyValue>>, StoreError> {
        let gets = keys.iter().map(|k| TxnOp::get(k.as_str(), None)).collect();
        Ok(self
            .read(gets)
            .await?
            .into_iter()
            .map(|mut kvs| kvs.pop())
            .collect())
    }

    /// A new lease of at least `ttl_ms`; its id.
    async fn grant_lease(&self, ttl_ms: u64) -> Result<i64, StoreError> {
        let ttl = lease_seconds(ttl_ms);
        self.call("lease grant", |client| async move {
            client.lease_client().grant(ttl, None).await
        })
        .await
        .map(|granted| granted.id())
    }

    /// Refreshes `lease` to its full TTL; `false` when it has already ended.
    async fn keep_alive(&self, lease: i64) -> Result<bool, StoreError> {
        self.call("lease keep-alive", |client| async move {
            match client.lease_client().keep_alive(lease).await {
                Ok(_) => Ok(true),
                Err(etcd_client::Error::LeaseKeepAliveError(message))
                    if message.contains("not found") =>
                {
                    Ok(false)
                }
                Err(err) => Err(err),
            }
        })
        .await
    }

    /// Ends `lease` in the background: its markers go now, not at its TTL. Best effort; an
    /// unrevoked lease ends on its own.
    fn revoke_lease_later(&self, lease: i64) {
        let store = self.clone();
        tokio::spawn(async move {
            let revoked = store
                .call("lease revoke", |client| async move {
                    client.lease_client().revoke(lease).await
                })
                .await;
            if let Err(err) = revoked {
                tracing::debug!(event = "etcd_lease_revoke_failed", lease, error = %err);
            }
        });
    }

    /// Whether `grant` is live: its own marker and its holder's session marker exist.
    async fn liveness(&self, grant: &GrantValue) -> Result<Liveness, StoreError> {
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
    async fn live_grant(&self, key: &LockKey) -> Result<Option<ReadGrant>, StoreError> {
        let record = self.read_keys(&[self.grant_key(key)]).await?.remove(0);
        let Some(grant) = record.map(|kv| read_grant(&kv)).transpose()? else {
            return Ok(None);
        };
        Ok((self.liveness(&grant.value).await? == Liveness::Live).then_some(grant))
    }

    /// The session's record, or the L2-L5 error for a session that is not live.
    fn live_session(
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

    /// Same session again: the same token; the lease only grows (invariant I4).
    async fn regrant(
        &self,
        key: &LockKey,
        current: ReadGrant,
        lease_ms: u64,
    ) -> Result<Option<LockGrant>, StoreError> {
        let old = current.value;
        if lease_ms <= old.lease_ms {
            if !self.keep_alive(old.lease).await? {
                return Ok(None);
            }
            return Ok(Some(grant_of(key, &old, old.lease_ms)));
        }
        // A longer lease than the grant has: move the grant onto a new, longer lease.
        let lease = self.grant_lease(lease_ms).await?;
        let grown = GrantValue {
            lease,
            lease_ms,
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
                    .and_then([
                        TxnOp::put(self.grant_key(key), encode(&grown)?, None),
                        TxnOp::put(
                            self.grant_marker(lease),
                            "",
                            Some(PutOptions::new().with_lease(lease)),
                        ),
                        TxnOp::delete(self.grant_marker(old.lease), None),
                    ]),
            )
            .await?
            .succeeded();
        if committed {
            self.revoke_lease_later(old.lease);
            Ok(Some(grant_of(key, &grown, lease_ms)))
        } else {
            self.revoke_lease_later(lease);
            Ok(None)
        }
    }

    /// One round of acquire: read, decide, commit. `None` when the commit lost a race.
    async fn acquire_round(
        &self,
        key: &LockKey,
        session: SessionId,
        lease_ms: u64,
        spare_lease: &mut Option<i64>,
    ) -> Result<Option<AcquireOutcome>, StoreError> {
        let read = self
            .read_keys(&[
                self.session_key(session),
                self.session_marker(session),
                self.grant_key(key),
                self.fence_key(key),
            ])
            .await?;
        let me = Self::live_session(session, read[0].as_ref(), read[1].as_ref())?;
        let current = read[2].as_ref().map(read_grant).transpose()?;
        let (fence_revision, last_token) = match &read[3] {
            Some(kv) => (kv.mod_revision(), decode::<u64>(kv.value(), "fence")?),
            None => (0, 0),
        };
        let mut took_over_expired = false;
        if let Some(current) = current.clone() {
            match self.liveness(&current.value).await? {
                Liveness::Live if current.value.session == session => {
                    return Ok(self.regrant(key, current, lease_ms).await?.map(|grant| {
                        AcquireOutcome::Granted {
                            grant,
                            took_over_expired: false,
                        }
                    }));
                }
                Liveness::Live => {
                    return Ok(Some(AcquireOutcome::Held {
                        holder_token: current.value.token,
                        free_in_ms: current.value.lease_ms,
                    }));
                }
                Liveness::LeaseEnded | Liveness::SessionEnded => took_over_expired = true,
            }
        }
        let lease = match *spare_lease {
            Some(lease) => lease,
            None => {
                let lease = self.grant_lease(lease_ms).await?;
                *spare_lease = Some(lease);
                lease
            }
        };
        let token = FencingToken(last_token + 1);
        let value = GrantValue {
            token,
            session,
            owner: me.owner,
            lease,
            lease_ms,
        };
        let mut ops = vec![
            TxnOp::put(self.grant_key(key), encode(&value)?, None),
            TxnOp::put(self.fence_key(key), encode(&token.0)?, None),
            TxnOp::put(
                self.grant_marker(lease),
                "",
                Some(PutOptions::new().with_lease(lease)),
            ),
        ];
        if let Some(old) = &current {
            ops.push(TxnOp::delete(self.grant_marker(old.value.lease), None));
        }
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
            return Ok(
                Self::granted_meanwhile(&committed, fence_revision, session)?.map(|holder_token| {
                    AcquireOutcome::Held {
                        holder_token,
                        free_in_ms: lease_ms,
                    }
                }),
            );
        }
        *spare_lease = None;
        if let Some(old) = current {
            self.revoke_lease_later(old.value.lease);
        }
        Ok(Some(AcquireOutcome::Granted {
            grant: grant_of(key, &value, lease_ms),
            took_over_expired,
        }))
    }

    /// After an acquire's lost race: the token another session was granted between this
    /// acquire's read (fence at `fence_revision`) and its commit, if one was. Such a grant
    /// held the key at an instant inside this request, so the request answers `LOCK_HELD`
    /// with that token (linearizable) instead of racing again: under a hot key, retrying
    /// every lost race let one acquire lose 16 in a row and answer 503. A grant to this very
    /// session (a concurrent retry of the same acquire) is left to the next round, which
    /// answers it as a re-grant.
    fn granted_meanwhile(
        lost: &etcd_client::TxnResponse,
        fence_revision: i64,
        session: SessionId,
    ) -> Result<Option<FencingToken>, StoreError> {
        let responses = lost.op_responses();
        let [TxnOpResponse::Get(fence), TxnOpResponse::Get(grant)] = responses.as_slice() else {
            return Err(StoreError::Internal(
                "etcd answered a failed acquire without its two reads".into(),
            ));
        };
        let Some(fence) = fence.kvs().first() else {
            return Ok(None);
        };
        if fence.mod_revision() == fence_revision {
            return Ok(None);
        }
        if let Some(grant) = grant.kvs().first() {
            if read_grant(grant)?.value.session == session {
                return Ok(None);
            }
        }
        Ok(Some(FencingToken(decode::<u64>(fence.value(), "fence")?)))
    }

    /// Deletes a dead grant record if it is unchanged since `mod_revision`; whether this call
    /// deleted it.
    async fn delete_grant_if_unchanged(
        &self,
        key_path: &str,
        mod_revision: i64,
        lease: i64,
    ) -> Result<bool, StoreError> {
        let deleted = self
            .txn(
                "delete grant",
                Txn::new()
                    .when([Compare::mod_revision(
                        key_path,
                        CompareOp::Equal,
                        mod_revision,
                    )])
                    .and_then([
                        TxnOp::delete(key_path, None),
                        TxnOp::delete(self.grant_marker(lease), None),
                    ]),
            )
            .await?
            .succeeded();
        if deleted {
            self.revoke_lease_later(lease);
        }
        Ok(deleted)
    }
}

/// etcd's TTL in whole seconds, rounded up.
fn lease_seconds(ttl_ms: u64) -> i64 {
    i64::try_from(ttl_ms.div_ceil(LEASE_GRANULARITY_MS).max(1)).unwrap_or(i64::MAX)
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|e| StoreError::Internal(format!("encode: {e}")))
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8], what: &str) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Internal(format!("stored {what}: {e}")))
}

fn read_grant(kv: &KeyValue) -> Result<ReadGrant, StoreError> {
    Ok(ReadGrant {
        value: decode(kv.value(), "grant record")?,
        mod_revision: kv.mod_revision(),
    })
}

fn grant_of(key: &LockKey, value: &GrantValue, lease_ms: u64) -> LockGrant {
    LockGrant {
        lock_key: key.clone(),
        fencing_token: value.token,
        lease_ms,
        expires_at: after_ms(lease_ms),
        session_id: value.session,
        proof: None,
        waited_ms: 0,
    }
}

/// `now + ms` by this replica's clock: display only (the store's clock decides expiry).
fn after_ms(ms: u64) -> DateTime<Utc> {
    Utc::now() + chrono::Duration::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// etcd's answers about itself: no leader, a leader change mid-request, unreachable members.
fn map_err(err: etcd_client::Error) -> StoreError {
    match err {
        etcd_client::Error::GRpcStatus(status) => {
            let message = status.message();
            if message.contains("no leader") || message.contains("leader changed") {
                return StoreError::NotLeader(format!("etcd: {message}"));
            }
            // tonic reports a failure of the connection itself (a reset, a refused connect)
            // as a status of code `Unknown` carrying the transport error as its source: that
            // is the member being gone, not an answer from etcd.
            let local_transport_failure =
                status.code() == Code::Unknown && std::error::Error::source(&status).is_some();
            match status.code() {
                Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Cancelled
                | Code::Aborted
                | Code::ResourceExhausted => StoreError::Unavailable(format!("etcd: {message}")),
                _ if local_transport_failure => StoreError::Unavailable(format!("etcd: {message}")),
                _ => StoreError::Internal(format!("etcd: {status}")),
            }
        }
        etcd_client::Error::TransportError(_)
        | etcd_client::Error::IoError(_)
        | etcd_client::Error::LeaseKeepAliveError(_) => StoreError::Unavailable(err.to_string()),
        other => StoreError::Internal(other.to_string()),
    }
}

#[async_trait]
impl LockStore for EtcdStore {
    fn backend(&self) -> Backend {
        Backend::Etcd
    }

    async fn create_session(
        &self,
        owner: &OwnerId,
        ttl_ms: u64,
    ) -> Result<SessionRecord, StoreError> {
        let session_id = SessionId::random();
        let lease = self.grant_lease(ttl_ms).await?;
        let value = SessionValue {
            owner: owner.clone(),
            ttl_ms,
            lease,
        };
        self.txn(
            "create session",
            Txn::new().and_then([
                TxnOp::put(self.session_key(session_id), encode(&value)?, None),
                TxnOp::put(
                    self.session_marker(session_id),
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

    async fn heartbeat(&self, session: SessionId) -> Result<SessionRecord, StoreError> {
        let read = self
            .read_keys(&[self.session_key(session), self.session_marker(session)])
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
        let Some(record) = self
            .read_keys(&[self.session_key(session)])
            .await?
            .remove(0)
        else {
            return Ok(false);
        };
        let value: SessionValue = decode(record.value(), "session record")?;
        let deleted = self
            .txn(
                "delete session",
                Txn::new()
                    .when([Compare::mod_revision(
                        self.session_key(session),
                        CompareOp::Equal,
                        record.mod_revision(),
                    )])
                    .and_then([
                        TxnOp::delete(self.session_key(session), None),
                        TxnOp::delete(self.session_marker(session), None),
                    ]),
            )
            .await?
            .succeeded();
        if deleted {
            // Its grants are dead from this commit on (their holder's marker is gone); the
            // reaper deletes their records without reporting them as expiries.
            self.revoke_lease_later(value.lease);
        }
        Ok(deleted)
    }

    async fn acquire_with(
        &self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
    ) -> Result<AcquireOutcome, StoreError> {
        let lease_ms = spec.lease_ms;
        let mut spare_lease = None;
        let mut outcome = Err(StoreError::Unavailable(format!(
            "acquire of {key} lost {ACQUIRE_ROUNDS_MAX} races in a row"
        )));
        for _ in 0..ACQUIRE_ROUNDS_MAX {
            match self
                .acquire_round(key, session, lease_ms, &mut spare_lease)
                .await
            {
                Ok(None) => continue,
                Ok(Some(decided)) => {
                    outcome = Ok(decided);
                    break;
                }
                Err(err) => {
                    outcome = Err(err);
                    break;
                }
            }
        }
        if let Some(lease) = spare_lease {
            self.revoke_lease_later(lease);
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
            .read_keys(&[
                self.session_key(session),
                self.session_marker(session),
                self.grant_key(key),
            ])
            .await?;
        Self::live_session(session, read[0].as_ref(), read[1].as_ref())?;
        let Some(grant) = read[2].as_ref().map(read_grant).transpose()? else {
            return Err(lost());
        };
        if grant.value.session != session || grant.value.token != token {
            return Err(lost());
        }
        if !self.keep_alive(grant.value.lease).await? {
            return Err(lost());
        }
        // The keep-alive proves the lease was running; this read proves the grant still
        // names it and its session lives, so RENEWED is true at a single instant.
        let after = self
            .read_keys(&[self.grant_key(key), self.session_marker(session)])
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
        let record = self.read_keys(&[self.grant_key(key)]).await?.remove(0);
        let Some(grant) = record.as_ref().map(read_grant).transpose()? else {
            return Ok(false);
        };
        if grant.value.session != session || grant.value.token != token {
            return Ok(false);
        }
        self.delete_grant_if_unchanged(&self.grant_key(key), grant.mod_revision, grant.value.lease)
            .await
    }

    async fn get(&self, key: &LockKey) -> Result<Option<LockInfo>, StoreError> {
        let Some(grant) = self.live_grant(key).await? else {
            return Ok(None);
        };
        Ok(Some(LockInfo {
            lock_key: key.clone(),
            fencing_token: grant.value.token,
            owner_id: grant.value.owner,
            expires_at: after_ms(grant.value.lease_ms),
            waiters: 0,
        }))
    }

    async fn leave_queue(&self, _key: &LockKey, _session: SessionId) -> Result<(), StoreError> {
        Ok(())
    }

    async fn revoke(&self, key: &LockKey) -> Result<Option<FencingToken>, StoreError> {
        let Some(grant) = self.live_grant(key).await? else {
            return Ok(None);
        };
        let deleted = self
            .delete_grant_if_unchanged(&self.grant_key(key), grant.mod_revision, grant.value.lease)
            .await?;
        Ok(deleted.then_some(grant.value.token))
    }

    async fn reap_expired(&self) -> Result<ReapReport, StoreError> {
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
        // One snapshot: grant records, live grant markers, session records, live sessions.
        let mut snapshot = self
            .read(vec![
                prefix("g"),
                keys_only("gl"),
                prefix("s"),
                keys_only("sl"),
            ])
            .await?;
        let live_sessions: std::collections::HashSet<Vec<u8>> = snapshot
            .pop()
            .unwrap_or_default()
            .into_iter()
            .map(|kv| kv.key().to_vec())
            .collect();
        let sessions = snapshot.pop().unwrap_or_default();
        let live_grants: std::collections::HashSet<Vec<u8>> = snapshot
            .pop()
            .unwrap_or_default()
            .into_iter()
            .map(|kv| kv.key().to_vec())
            .collect();
        let grants = snapshot.pop().unwrap_or_default();
        let session_records: std::collections::HashSet<Vec<u8>> =
            sessions.iter().map(|kv| kv.key().to_vec()).collect();

        let mut report = ReapReport::default();
        // Grants first, while their sessions' records still name the expiry.
        for kv in &grants {
            let grant = read_grant(kv)?;
            let session_live =
                live_sessions.contains(self.session_marker(grant.value.session).as_bytes());
            let lease_live = live_grants.contains(self.grant_marker(grant.value.lease).as_bytes());
            if lease_live && session_live {
                continue;
            }
            let path = String::from_utf8_lossy(kv.key()).into_owned();
            if !self
                .delete_grant_if_unchanged(&path, grant.mod_revision, grant.value.lease)
                .await?
            {
                continue;
            }
            let session_closed =
                !session_records.contains(self.session_key(grant.value.session).as_bytes());
            if session_closed {
                // L3 deleted the session: its grants went with it, as on PostgreSQL.
                continue;
            }
            let lock_key = path
                .strip_prefix(&format!("{}g/", self.prefix))
                .map(LockKey::parse)
                .ok_or_else(|| {
                    StoreError::Internal(format!("grant key {path} outside the prefix"))
                })?
                .map_err(|e| StoreError::Internal(format!("stored key: {e}")))?;
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
        Ok(report)
    }

    async fn ready(&self) -> Result<(), StoreError> {
        // A linearizable read needs a leader and a quorum: exactly "can take writes".
        self.read(vec![TxnOp::get(
            self.prefix.as_str(),
            Some(GetOptions::new().with_count_only()),
        )])
        .await
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
