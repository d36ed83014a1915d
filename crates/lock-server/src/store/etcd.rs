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
//! | `P/w/{lock_key}/{session}` | the place's TTL in seconds | the place's own | granted, left, lapsed, or the reaper once its session ended |
//! | `P/d/{lock_key}` | [`DelayValue`] | none | the key's next grant, or the reaper once the delay is over |
//! | `P/dl/{lease}` | empty | the delay's own | the lock-delay ends |
//!
//! A session is live while its `sl` marker exists, expired while its record outlives the
//! marker (so L2 can say `SESSION_EXPIRED` until the reaper runs, as on PostgreSQL). A grant
//! is live while its record, its `gl` marker and its holder's `sl` marker all exist. Leases
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
//! read). A lost race is re-read and decided again, never overwritten. Markers never come back
//! once gone (lease ids and session ids are never reused), so "dead when read" stays true.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, KeyValue, PutOptions, Txn,
    TxnOp, TxnOpResponse, WatchFilterType, WatchOptions, WatchStream,
};
use lock_api::{Backend, FencingToken, LockGrant, LockInfo, LockKey, OwnerId, SessionId};
use serde::{Deserialize, Serialize};
use tonic::Code;

use super::{
    AcquireOutcome, AcquireSpec, ExpiredLock, LockStore, ReapReport, SessionRecord, StoreError,
    Wake, WakeSink,
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
/// Most operations one transaction carries: etcd refuses more than `--max-txn-ops`
/// (default 128), so longer reads of markers go in several transactions.
const TXN_OPS_MAX: usize = 100;
/// Queue places ahead of an acquirer whose sessions are checked in the same read as the
/// grant's markers; with more, they are checked only when the decision gets that far.
const INLINE_PLACE_CHECKS: usize = 32;
/// Interval of HTTP/2 pings on the wake-up watch's connection: etcd answers a client that
/// pings more often than its `--grpc-keepalive-min-time` (default 5 s) with GOAWAY
/// (`too_many_pings`), which ends a long-lived stream. A member that went silent breaks the
/// watch within about this long; waiters meanwhile still recheck every second.
const WATCH_PING_INTERVAL_MS: u64 = 10_000;
/// Pause before the wake-up watch is opened again after it broke.
const WATCH_RETRY_MS: u64 = 500;
/// How often an idle wake-up watch checks whether its store is still in use.
const WATCH_IDLE_CHECK_MS: u64 = 5_000;

/// The etcd lock store.
#[derive(Clone)]
pub struct EtcdStore {
    members: Arc<Members>,
    prefix: String,
    request_timeout: Duration,
    /// Every replica (sink) served by this store's one wake-up watch.
    wakes: Arc<WakeHub>,
}

/// The sinks of [`LockStore::watch_wakes`] and whether the watch runs. The watch task holds
/// it weakly: it ends once the store is gone.
#[derive(Default)]
struct WakeHub {
    sinks: Mutex<Vec<WakeSink>>,
    watching: AtomicBool,
}

impl WakeHub {
    fn deliver(&self, wake: &Wake) {
        let sinks = self
            .sinks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        sinks.iter().for_each(|sink| sink(wake.clone()));
    }
}

/// One client per member and the member calls go to. A call that finds its member
/// unreachable, leaderless or silent moves every later call to the next member (as etcd's
/// own Go client pins one endpoint). Balancing over all members instead sends most calls to
/// a dead member: its refusals are the quickest answers.
struct Members {
    endpoints: Vec<String>,
    clients: Vec<Client>,
    pinned: AtomicUsize,
    /// The clients' options with pings every [`WATCH_PING_INTERVAL_MS`]: the wake-up watch
    /// connects with these.
    watch_options: ConnectOptions,
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
    /// Records written before waiting existed have none.
    #[serde(default)]
    lock_delay_ms: u64,
}

/// `P/d/{lock_key}`: the lock-delay of the grant `token` of `exempt`, which ended
/// involuntarily. In force while its `dl/{lease}` marker exists.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct DelayValue {
    token: FencingToken,
    exempt: SessionId,
    lease: i64,
    delay_ms: u64,
}

/// A delay record as read, with the revision a transaction pins.
#[derive(Debug, Clone)]
struct ReadDelay {
    value: DelayValue,
    mod_revision: i64,
}

/// A place in a key's queue as read: `P/w/{lock_key}/{session}`.
#[derive(Debug, Clone)]
struct Place {
    session: SessionId,
    /// Arrival: the order of the queue.
    create_revision: i64,
    lease: i64,
    /// The TTL of its lease, in seconds (0 when read without values).
    ttl_s: i64,
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
        let watch_options = options.clone().with_keep_alive(
            Duration::from_millis(WATCH_PING_INTERVAL_MS),
            Duration::from_millis(ETCD_PING_INTERVAL_MS),
        );
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
                watch_options,
            }),
            prefix,
            request_timeout,
            wakes: Arc::default(),
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

    /// `P/w/{lock_key}/`: the key's queue (lock keys have no `/`, so no other key's).
    fn queue_prefix(&self, key: &LockKey) -> String {
        format!("{}w/{key}/", self.prefix)
    }

    fn place_key(&self, key: &LockKey, session: SessionId) -> String {
        format!("{}w/{key}/{session}", self.prefix)
    }

    fn delay_key(&self, key: &LockKey) -> String {
        format!("{}d/{key}", self.prefix)
    }

    fn delay_marker(&self, lease: i64) -> String {
        format!("{}dl/{lease:x}", self.prefix)
    }

    /// The key and session of a stored place's path.
    fn parse_place_path(&self, path: &[u8]) -> Option<(LockKey, SessionId)> {
        let path = std::str::from_utf8(path).ok()?;
        let rest = path.strip_prefix(&format!("{}w/", self.prefix))?;
        let (key, session) = rest.rsplit_once('/')?;
        Some((LockKey::parse(key).ok()?, SessionId::parse(session).ok()?))
    }

    /// The lock key of a stored grant record's or delay record's path (`sub` = `g`, `d`).
    fn parse_key_path(&self, sub: &str, path: &[u8]) -> Result<LockKey, StoreError> {
        let path = String::from_utf8_lossy(path);
        path.strip_prefix(&format!("{}{sub}/", self.prefix))
            .map(LockKey::parse)
            .ok_or_else(|| StoreError::Internal(format!("key {path} outside the prefix")))?
            .map_err(|e| StoreError::Internal(format!("stored key: {e}")))
    }

    /// A key's queue places as read (`kvs` of its prefix), in arrival order.
    fn read_places(&self, kvs: &[KeyValue]) -> Result<Vec<Place>, StoreError> {
        let mut places = kvs
            .iter()
            .map(|kv| {
                let (_, session) = self.parse_place_path(kv.key()).ok_or_else(|| {
                    StoreError::Internal(format!(
                        "unreadable queue place {}",
                        String::from_utf8_lossy(kv.key())
                    ))
                })?;
                let ttl_s = if kv.value().is_empty() {
                    0
                } else {
                    decode(kv.value(), "queue place")?
                };
                Ok(Place {
                    session,
                    create_revision: kv.create_revision(),
                    lease: kv.lease(),
                    ttl_s,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        places.sort_by_key(|p| p.create_revision);
        Ok(places)
    }

    /// Runs `call` on the pinned member, bounded by the request timeout; an answer about
    /// the member (unreachable, no leader, silent) moves later calls to the next one.
    async fn call<T, F, Fut>(&self, what: &str, call: F) -> Result<T, StoreError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let (index, client) = self.members.pinned();
        self.bounded(index, what, call(client)).await
    }

    /// `answer`, from member `index`, bounded by the request timeout; an answer about the
    /// member (unreachable, no leader, silent) moves later calls to the next one.
    async fn bounded<T>(
        &self,
        index: usize,
        what: &str,
        answer: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, StoreError> {
        let result = match tokio::time::timeout(self.request_timeout, answer).await {
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
        Ok(self.read_at(gets).await?.1)
    }

    /// [`Self::read`], with the revision it read at.
    async fn read_at(&self, gets: Vec<TxnOp>) -> Result<(i64, Vec<Vec<KeyValue>>), StoreError> {
        let response = self.txn("read", Txn::new().and_then(gets)).await?;
        let revision = response.header().map_or(0, |h| h.revision());
        let kvs = response
            .op_responses()
            .into_iter()
            .map(|op| match op {
                TxnOpResponse::Get(mut get) => Ok(get.take_kvs()),
                other => Err(StoreError::Internal(format!(
                    "etcd answered a read with {other:?}"
                ))),
            })
            .collect::<Result<_, _>>()?;
        Ok((revision, kvs))
    }

    /// Whether each of `keys` exists; no call for none, one read per [`TXN_OPS_MAX`] keys.
    /// Only for keys that never come back once gone (markers, records of never-reused ids),
    /// so that reads at several revisions still say "gone" truthfully.
    async fn exist(&self, keys: &[String]) -> Result<Vec<bool>, StoreError> {
        let mut found = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(TXN_OPS_MAX) {
            let gets = chunk
                .iter()
                .map(|k| TxnOp::get(k.as_str(), Some(GetOptions::new().with_keys_only())))
                .collect();
            found.extend(self.read(gets).await?.iter().map(|kvs| !kvs.is_empty()));
        }
        Ok(found)
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

    /// Same session again: the same token; the lease only grows (invariant I4). The
    /// session's queue place, if it has one, goes.
    async fn regrant(
        &self,
        key: &LockKey,
        current: ReadGrant,
        lease_ms: u64,
        place: Option<&Place>,
    ) -> Result<Option<LockGrant>, StoreError> {
        let old = current.value;
        if lease_ms <= old.lease_ms {
            if !self.keep_alive(old.lease).await? {
                return Ok(None);
            }
            if place.is_some() {
                self.leave_queue(key, old.session).await?;
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
                        // Absent when the session has no place: a no-op.
                        TxnOp::delete(self.place_key(key, old.session), None),
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

    /// One round of acquire: read, decide, commit. `None` when a commit lost a race.
    async fn acquire_round(
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

        let mut took_over_expired = false;
        // A dead grant that ended involuntarily (its holder's session was not closed).
        let mut ended_involuntarily = None;
        if let Some(current) = current.clone() {
            let (lease_live, holder_live, holder_known) = (live[0], live[1], live[2]);
            if lease_live && holder_live {
                if current.value.session == session {
                    return Ok(self
                        .regrant(key, current, lease_ms, mine.as_ref())
                        .await?
                        .map(|grant| AcquireOutcome::Granted {
                            grant,
                            took_over_expired: false,
                            store_now: None,
                        }));
                }
                self.hold_place(key, session, spec.queue_ms, mine.as_ref())
                    .await?;
                return Ok(Some(AcquireOutcome::Held {
                    holder_token: current.value.token,
                    free_in_ms: current.value.lease_ms,
                }));
            }
            took_over_expired = true;
            if holder_known {
                ended_involuntarily = Some(current);
            }
        }

        // Lock-delay: one in force, or one this acquire starts for the dead grant it found.
        if let Some(d) = &delay {
            if d.value.exempt != session && live[fixed - 1] {
                self.hold_place(key, session, spec.queue_ms, mine.as_ref())
                    .await?;
                return Ok(Some(AcquireOutcome::Delayed {
                    remaining_ms: self.delay_remaining(&d.value).await,
                }));
            }
        }
        if let Some(dead) = &ended_involuntarily {
            let started = delay
                .as_ref()
                .is_some_and(|d| d.value.token == dead.value.token);
            if dead.value.lock_delay_ms > 0 && dead.value.session != session && !started {
                if !self.start_delay(key, dead, delay.as_ref()).await? {
                    return Ok(None);
                }
                self.hold_place(key, session, spec.queue_ms, mine.as_ref())
                    .await?;
                return Ok(Some(AcquireOutcome::Delayed {
                    remaining_ms: dead.value.lock_delay_ms,
                }));
            }
        }

        // FIFO: live places of other sessions ahead of this one.
        let ahead_live = if inline {
            live[fixed..].iter().filter(|l| **l).count()
        } else {
            let markers: Vec<String> = ahead.iter().map(|s| self.session_marker(*s)).collect();
            self.exist(&markers).await?.iter().filter(|l| **l).count()
        };
        if ahead_live > 0 {
            self.hold_place(key, session, spec.queue_ms, mine.as_ref())
                .await?;
            return Ok(Some(AcquireOutcome::Queued {
                ahead: ahead_live as u64,
            }));
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
            lock_delay_ms: spec.lock_delay_ms,
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
        if let Some(d) = delay {
            self.revoke_lease_later(d.value.lease);
        }
        Ok(Some(AcquireOutcome::Granted {
            grant: grant_of(key, &value, lease_ms),
            took_over_expired,
            store_now: None,
        }))
    }

    /// A refused caller with `queue_ms > 0` keeps its place in `key`'s queue for `queue_ms`
    /// more (rounded up to whole seconds), so that a place lapses that long after the last
    /// call that renewed it, as on PostgreSQL: the place's lease kept alive when its TTL is
    /// that, else the place put again on a lease of that TTL (the same key keeps its
    /// `create_revision`, so its turn; the earlier lease, now without a key, ends on its
    /// own), or a new place at the back of the queue. (Keeping a longer lease alive would let
    /// a crashed replica's place block its queue for up to the whole wait past its deadline.)
    async fn hold_place(
        &self,
        key: &LockKey,
        session: SessionId,
        queue_ms: u64,
        mine: Option<&Place>,
    ) -> Result<(), StoreError> {
        if queue_ms == 0 {
            return Ok(());
        }
        let ttl_s = lease_seconds(queue_ms);
        if let Some(place) = mine {
            if place.ttl_s == ttl_s && self.keep_alive(place.lease).await? {
                return Ok(());
            }
        }
        let lease = self.grant_lease(queue_ms).await?;
        let placed = self
            .txn(
                "queue",
                Txn::new()
                    .when([Compare::version(
                        self.session_marker(session),
                        CompareOp::Greater,
                        0,
                    )])
                    .and_then([TxnOp::put(
                        self.place_key(key, session),
                        encode(&ttl_s)?,
                        Some(PutOptions::new().with_lease(lease)),
                    )]),
            )
            .await?
            .succeeded();
        if !placed {
            // The session ended meanwhile: no place (it would not count anyway).
            self.revoke_lease_later(lease);
        }
        // A place's earlier lease carries no key now; it ends at its TTL on its own.
        Ok(())
    }

    /// Starts the lock-delay of `dead`, a grant that ended involuntarily and that this
    /// acquire found (etcd does not say when its lease ended, so the delay runs from now).
    /// `false` when the grant record or the delay changed since the read.
    async fn start_delay(
        &self,
        key: &LockKey,
        dead: &ReadGrant,
        prior: Option<&ReadDelay>,
    ) -> Result<bool, StoreError> {
        let (lease, ops) = self.delay_ops(key, &dead.value).await?;
        let started = self
            .txn(
                "start lock-delay",
                Txn::new()
                    .when([
                        Compare::mod_revision(
                            self.grant_key(key),
                            CompareOp::Equal,
                            dead.mod_revision,
                        ),
                        Compare::mod_revision(
                            self.delay_key(key),
                            CompareOp::Equal,
                            prior.map_or(0, |d| d.mod_revision),
                        ),
                    ])
                    .and_then(ops),
            )
            .await?
            .succeeded();
        if !started {
            self.revoke_lease_later(lease);
        } else if let Some(prior) = prior {
            self.revoke_lease_later(prior.value.lease);
        }
        Ok(started)
    }

    /// A new lease for `grant`'s lock-delay and the writes that start it: the delay record
    /// naming the grant and its exempt session, and its marker.
    async fn delay_ops(
        &self,
        key: &LockKey,
        grant: &GrantValue,
    ) -> Result<(i64, Vec<TxnOp>), StoreError> {
        let lease = self.grant_lease(grant.lock_delay_ms).await?;
        let value = DelayValue {
            token: grant.token,
            exempt: grant.session,
            lease,
            delay_ms: grant.lock_delay_ms,
        };
        Ok((
            lease,
            vec![
                TxnOp::put(self.delay_key(key), encode(&value)?, None),
                TxnOp::put(
                    self.delay_marker(lease),
                    "",
                    Some(PutOptions::new().with_lease(lease)),
                ),
            ],
        ))
    }

    /// Milliseconds left of a delay in force: its lease's TTL (etcd answers whole seconds,
    /// rounded down, so one more), at most the delay asked; the delay asked when etcd cannot
    /// say.
    async fn delay_remaining(&self, delay: &DelayValue) -> u64 {
        let lease = delay.lease;
        let ttl = self
            .call("lease time-to-live", |client| async move {
                client.lease_client().time_to_live(lease, None).await
            })
            .await;
        match ttl {
            Ok(answer) if answer.ttl() >= 0 => {
                let upper = u64::try_from(answer.ttl()).unwrap_or(0).saturating_add(1);
                upper
                    .saturating_mul(LEASE_GRANULARITY_MS)
                    .min(delay.delay_ms)
                    .max(1)
            }
            // The lease just ended: the next try is granted.
            Ok(_) => 1,
            Err(err) => {
                tracing::debug!(event = "etcd_lease_ttl_failed", lease, error = %err);
                delay.delay_ms.max(1)
            }
        }
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

    /// Deletes `key`'s grant record (dead, or revoked) if it is unchanged since it was read,
    /// and starts its lock-delay in the same transaction; `prior_delay`: the revision of the
    /// delay record read with it (0: absent), compared when given. Whether this call deleted
    /// it.
    async fn end_grant_with_delay(
        &self,
        key: &LockKey,
        grant: &ReadGrant,
        prior_delay: Option<i64>,
    ) -> Result<bool, StoreError> {
        let (lease, mut ops) = self.delay_ops(key, &grant.value).await?;
        ops.extend([
            TxnOp::delete(self.grant_key(key), None),
            TxnOp::delete(self.grant_marker(grant.value.lease), None),
        ]);
        let mut compares = vec![Compare::mod_revision(
            self.grant_key(key),
            CompareOp::Equal,
            grant.mod_revision,
        )];
        if let Some(revision) = prior_delay {
            compares.push(Compare::mod_revision(
                self.delay_key(key),
                CompareOp::Equal,
                revision,
            ));
        }
        let deleted = self
            .txn("end grant", Txn::new().when(compares).and_then(ops))
            .await?
            .succeeded();
        self.revoke_lease_later(if deleted { grant.value.lease } else { lease });
        Ok(deleted)
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

    /// Opens the wake-up watch: the places there are now (one read) and, from the next
    /// revision on, every deletion of a grant record and every change of a place.
    async fn open_watch(&self) -> Result<WakeWatch, StoreError> {
        let place_prefix = format!("{}w/", self.prefix);
        let (revision, mut read) = self
            .read_at(vec![TxnOp::get(
                place_prefix.as_str(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )])
            .await?;
        let mut queued = QueuedKeys::default();
        for kv in read.pop().unwrap_or_default() {
            if let Some((key, session)) = self.parse_place_path(kv.key()) {
                queued.insert(key, session);
            }
        }
        let grant_prefix = format!("{}g/", self.prefix);
        let from = revision + 1;
        // A client of its own, which pings seldom enough for etcd to keep a long stream
        // open (`WATCH_PING_INTERVAL_MS`), on the member the other calls go to.
        let (index, _) = self.members.pinned();
        let endpoint = self.members.endpoints[index].clone();
        let options = self.members.watch_options.clone();
        let (client, stream) = self
            .bounded(index, "watch", async move {
                let client = Client::connect([endpoint], Some(options)).await?;
                let mut stream = client
                    .watch_client()
                    .watch(
                        grant_prefix,
                        Some(
                            WatchOptions::new()
                                .with_prefix()
                                .with_start_revision(from)
                                .with_filters([WatchFilterType::NoPut]),
                        ),
                    )
                    .await?;
                stream
                    .watch(
                        place_prefix,
                        Some(WatchOptions::new().with_prefix().with_start_revision(from)),
                    )
                    .await?;
                Ok((client, stream))
            })
            .await?;
        Ok(WakeWatch {
            _client: client,
            stream,
            queued,
        })
    }

    /// The wake-up watch's task, until the store is gone: serves the watch, and when it
    /// breaks (member lost, leader lost, history compacted) opens it again and wakes every
    /// waiter, since wake-ups may have been missed meanwhile.
    async fn run_watch(self, hub: Weak<WakeHub>, mut opened: Option<WakeWatch>) {
        loop {
            let mut watch = match opened.take() {
                Some(watch) => watch,
                None => {
                    let watch = loop {
                        tokio::time::sleep(Duration::from_millis(WATCH_RETRY_MS)).await;
                        if hub.strong_count() == 0 {
                            return;
                        }
                        match self.open_watch().await {
                            Ok(watch) => break watch,
                            Err(err) => {
                                tracing::debug!(event = "etcd_wake_watch_open_failed", error = %err);
                            }
                        }
                    };
                    if let Some(hub) = hub.upgrade() {
                        hub.deliver(&Wake::Everyone);
                    }
                    watch
                }
            };
            let Some(reason) = self.serve_watch(&hub, &mut watch).await else {
                return;
            };
            tracing::warn!(event = "etcd_wake_watch_restarting", reason = %reason);
        }
    }

    /// Serves `watch` until it breaks (the reason) or the store is gone (`None`). A deleted
    /// grant record or place frees a key or moves its queue: if the key has places, its
    /// head waiter is woken when the key is free.
    async fn serve_watch(&self, hub: &Weak<WakeHub>, watch: &mut WakeWatch) -> Option<String> {
        loop {
            if hub.strong_count() == 0 {
                return None;
            }
            let message = tokio::select! {
                message = watch.stream.message() => message,
                () = tokio::time::sleep(Duration::from_millis(WATCH_IDLE_CHECK_MS)) => continue,
            };
            let response = match message {
                Ok(Some(response)) => response,
                Ok(None) => return Some("the watch stream ended".into()),
                Err(err) => return Some(err.to_string()),
            };
            if response.canceled() {
                return Some(format!(
                    "etcd cancelled the watch: {} (compacted to {})",
                    response.cancel_reason(),
                    response.compact_revision()
                ));
            }
            let mut touched = BTreeSet::new();
            for event in response.events() {
                let Some(kv) = event.kv() else { continue };
                let deleted = event.event_type() == EventType::Delete;
                if let Some((key, session)) = self.parse_place_path(kv.key()) {
                    if deleted {
                        watch.queued.remove(&key, session);
                        touched.insert(key);
                    } else {
                        watch.queued.insert(key, session);
                    }
                } else if deleted {
                    if let Ok(key) = self.parse_key_path("g", kv.key()) {
                        touched.insert(key);
                    }
                }
            }
            for key in touched {
                if !watch.queued.has_places(&key) {
                    continue;
                }
                let wake = match self.queue_head(&key).await {
                    Ok(Some(session)) => Wake::Head { key, session },
                    Ok(None) => continue,
                    Err(err) => {
                        tracing::debug!(event = "etcd_queue_head_failed", key = %key, error = %err);
                        Wake::Everyone
                    }
                };
                if let Some(hub) = hub.upgrade() {
                    hub.deliver(&wake);
                }
            }
        }
    }

    /// The session first in `key`'s queue with a live session, if the key is free.
    async fn queue_head(&self, key: &LockKey) -> Result<Option<SessionId>, StoreError> {
        let mut read = self
            .read(vec![
                TxnOp::get(self.grant_key(key), None),
                TxnOp::get(
                    self.queue_prefix(key),
                    Some(GetOptions::new().with_prefix().with_keys_only()),
                ),
            ])
            .await?;
        let places = self.read_places(&read.pop().unwrap_or_default())?;
        if places.is_empty() {
            return Ok(None);
        }
        let grant = read
            .pop()
            .unwrap_or_default()
            .first()
            .map(read_grant)
            .transpose()?;
        let mut fixed: Vec<String> = grant
            .iter()
            .flat_map(|g| {
                [
                    self.grant_marker(g.value.lease),
                    self.session_marker(g.value.session),
                ]
            })
            .collect();
        for chunk in places.chunks(TXN_OPS_MAX - 2) {
            let skip = fixed.len();
            let mut checks = std::mem::take(&mut fixed);
            checks.extend(chunk.iter().map(|p| self.session_marker(p.session)));
            let live = self.exist(&checks).await?;
            if skip == 2 && live[0] && live[1] {
                return Ok(None);
            }
            if let Some(first) = live[skip..].iter().position(|l| *l) {
                return Ok(Some(chunk[first].session));
            }
        }
        Ok(None)
    }
}

/// The wake-up watch: its stream and the keys that have queue places, as it saw them.
struct WakeWatch {
    /// The watch's connection (kept open with the stream).
    _client: Client,
    stream: WatchStream,
    queued: QueuedKeys,
}

/// The sessions with a place, per key: only a key with places has anyone to wake.
#[derive(Debug, Default)]
struct QueuedKeys(HashMap<LockKey, HashSet<SessionId>>);

impl QueuedKeys {
    fn insert(&mut self, key: LockKey, session: SessionId) {
        self.0.entry(key).or_default().insert(session);
    }

    fn remove(&mut self, key: &LockKey, session: SessionId) {
        if let Some(sessions) = self.0.get_mut(key) {
            sessions.remove(&session);
            if sessions.is_empty() {
                self.0.remove(key);
            }
        }
    }

    fn has_places(&self, key: &LockKey) -> bool {
        self.0.contains_key(key)
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

fn read_delay(kv: &KeyValue) -> Result<ReadDelay, StoreError> {
    Ok(ReadDelay {
        value: decode(kv.value(), "lock-delay record")?,
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
        let mut spare_lease = None;
        let mut outcome = Err(StoreError::Unavailable(format!(
            "acquire of {key} lost {ACQUIRE_ROUNDS_MAX} races in a row"
        )));
        for _ in 0..ACQUIRE_ROUNDS_MAX {
            match self
                .acquire_round(key, session, spec, &mut spare_lease)
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
        let mut read = self
            .read(vec![
                TxnOp::get(self.grant_key(key), None),
                TxnOp::get(
                    self.queue_prefix(key),
                    Some(GetOptions::new().with_prefix().with_keys_only()),
                ),
            ])
            .await?;
        let places = self.read_places(&read.pop().unwrap_or_default())?;
        let Some(grant) = read
            .pop()
            .unwrap_or_default()
            .first()
            .map(read_grant)
            .transpose()?
        else {
            return Ok(None);
        };
        let mut checks = vec![
            self.grant_marker(grant.value.lease),
            self.session_marker(grant.value.session),
        ];
        checks.extend(places.iter().map(|p| self.session_marker(p.session)));
        let live = self.exist(&checks).await?;
        if !(live[0] && live[1]) {
            return Ok(None);
        }
        Ok(Some(LockInfo {
            lock_key: key.clone(),
            fencing_token: grant.value.token,
            owner_id: grant.value.owner,
            expires_at: after_ms(grant.value.lease_ms),
            waiters: live[2..].iter().filter(|l| **l).count() as u64,
        }))
    }

    async fn leave_queue(&self, key: &LockKey, session: SessionId) -> Result<(), StoreError> {
        // The place's lease, now without a key, ends at its TTL on its own.
        self.txn(
            "leave queue",
            Txn::new().and_then([TxnOp::delete(self.place_key(key, session), None)]),
        )
        .await
        .map(|_| ())
    }

    async fn watch_wakes(&self, sink: WakeSink) -> Result<(), StoreError> {
        self.wakes
            .sinks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(sink);
        if self.wakes.watching.swap(true, Ordering::SeqCst) {
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

    async fn revoke(&self, key: &LockKey) -> Result<Option<FencingToken>, StoreError> {
        let Some(grant) = self.live_grant(key).await? else {
            return Ok(None);
        };
        let path = self.grant_key(key);
        let deleted = if grant.value.lock_delay_ms > 0 {
            // Involuntary: the lock-delay starts. No delay record can be in force while the
            // grant lives (its commit deleted any), so none is compared.
            self.end_grant_with_delay(key, &grant, None).await?
        } else {
            self.delete_grant_if_unchanged(&path, grant.mod_revision, grant.value.lease)
                .await?
        };
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
            // L3 deleted the session: its grants went with it, as on PostgreSQL (no report,
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
                )
                .await?
            } else {
                let path = String::from_utf8_lossy(kv.key()).into_owned();
                self.delete_grant_if_unchanged(&path, grant.mod_revision, grant.value.lease)
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
