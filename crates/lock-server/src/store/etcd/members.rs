//! The etcd members and the calls to them: every call bounded by the request budget and
//! sent to the pinned member (the next one after a failure), transactions, linearizable
//! reads, leases. The only code that holds the clients.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse};
use lock_store::StoreError;

use super::codec::{lease_seconds, map_err};

/// Most operations one transaction carries: etcd refuses more than `--max-txn-ops`
/// (default 128), so longer reads of markers go in several transactions.
pub(super) const TXN_OPS_MAX: usize = 100;
/// Interval and timeout of HTTP/2 pings on each etcd connection: a member that stops
/// answering (paused, partitioned) is dropped from the balance within about this long.
const ETCD_PING_INTERVAL_MS: u64 = 500;
/// How long a connection attempt to one member may take.
const ETCD_CONNECT_TIMEOUT_MS: u64 = 1_000;
/// Interval of HTTP/2 pings on the wake-up watch's connection: etcd answers a client that
/// pings more often than its `--grpc-keepalive-min-time` (default 5 s) with GOAWAY
/// (`too_many_pings`), which ends a long-lived stream. A member that went silent breaks the
/// watch within about this long; waiters meanwhile still recheck every second.
const WATCH_PING_INTERVAL_MS: u64 = 10_000;

/// One client per member and the member calls go to. A call that finds its member
/// unreachable, leaderless or silent moves every later call to the next member (as etcd's
/// own Go client pins one endpoint). Balancing over all members instead sends most calls to
/// a dead member: its refusals are the quickest answers.
pub(super) struct Members {
    endpoints: Vec<String>,
    clients: Vec<Client>,
    pinned: AtomicUsize,
    /// The clients' options with pings every [`WATCH_PING_INTERVAL_MS`]: the wake-up watch
    /// connects with these.
    watch_options: ConnectOptions,
    /// The bound on every call.
    request_timeout: Duration,
}

impl Members {
    /// Connects to `endpoints` (`http://host:port`, any member of one cluster); every call
    /// is bounded by `request_timeout`.
    pub(super) async fn connect(
        endpoints: &[String],
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
        Ok(Self {
            endpoints: endpoints.to_vec(),
            clients,
            pinned: AtomicUsize::new(0),
            watch_options,
            request_timeout,
        })
    }

    /// The bound on every call.
    pub(super) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Member `index`'s endpoint.
    pub(super) fn endpoint(&self, index: usize) -> &str {
        &self.endpoints[index]
    }

    /// Where a long-lived watch connects: the pinned member's index and endpoint, and options
    /// with pings every [`WATCH_PING_INTERVAL_MS`].
    pub(super) fn watch_target(&self) -> (usize, String, ConnectOptions) {
        let (index, _) = self.pinned();
        (
            index,
            self.endpoints[index].clone(),
            self.watch_options.clone(),
        )
    }

    pub(super) fn pinned(&self) -> (usize, Client) {
        let index = self.pinned.load(Ordering::Relaxed) % self.clients.len();
        (index, self.clients[index].clone())
    }

    /// Moves calls off member `index`, unless another call already has.
    pub(super) fn unpin(&self, index: usize, err: &StoreError) {
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

    /// Runs `call` on the pinned member, bounded by the request timeout; an answer about
    /// the member (unreachable, no leader, silent) moves later calls to the next one.
    pub(super) async fn call<T, F, Fut>(&self, what: &str, call: F) -> Result<T, StoreError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let (index, client) = self.pinned();
        self.bounded(index, what, call(client)).await
    }

    /// `answer`, from member `index`, bounded by the request timeout; an answer about the
    /// member (unreachable, no leader, silent) moves later calls to the next one.
    pub(super) async fn bounded<T>(
        &self,
        index: usize,
        what: &str,
        answer: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, StoreError> {
        let result = match tokio::time::timeout(self.request_timeout, answer).await {
            Err(_) => Err(StoreError::Unavailable(format!(
                "etcd {what} timed out at {}",
                self.endpoints[index]
            ))),
            Ok(answer) => answer.map_err(map_err),
        };
        if let Err(err @ (StoreError::Unavailable(_) | StoreError::NotLeader(_))) = &result {
            self.unpin(index, err);
        }
        result
    }

    /// Runs a transaction.
    pub(super) async fn txn(
        &self,
        what: &str,
        txn: Txn,
    ) -> Result<etcd_client::TxnResponse, StoreError> {
        self.call(
            what,
            |client| async move { client.kv_client().txn(txn).await },
        )
        .await
    }

    /// One linearizable read of several keys (or prefixes) at one revision.
    pub(super) async fn read(&self, gets: Vec<TxnOp>) -> Result<Vec<Vec<KeyValue>>, StoreError> {
        Ok(self.read_at(gets).await?.1)
    }

    /// [`Self::read`], with the revision it read at.
    pub(super) async fn read_at(
        &self,
        gets: Vec<TxnOp>,
    ) -> Result<(i64, Vec<Vec<KeyValue>>), StoreError> {
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
    /// so that reads at several revisions still say "gone" truthfully; a grant's `gl` marker
    /// comes back only on a reused lease, after the record that named it was deleted, so a
    /// marker found after its record was read still says the grant was live when read.
    pub(super) async fn exist(&self, keys: &[String]) -> Result<Vec<bool>, StoreError> {
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
    pub(super) async fn read_keys(
        &self,
        keys: &[String],
    ) -> Result<Vec<Option<KeyValue>>, StoreError> {
        let gets = keys.iter().map(|k| TxnOp::get(k.as_str(), None)).collect();
        Ok(self
            .read(gets)
            .await?
            .into_iter()
            .map(|mut kvs| kvs.pop())
            .collect())
    }

    /// A new lease of at least `ttl_ms`; its id.
    pub(super) async fn grant_lease(&self, ttl_ms: u64) -> Result<i64, StoreError> {
        let ttl = lease_seconds(ttl_ms);
        self.call("lease grant", |client| async move {
            client.lease_client().grant(ttl, None).await
        })
        .await
        .map(|granted| granted.id())
    }

    /// Ends `lease` in the background: its markers go now, not at its TTL. Best effort; an
    /// unrevoked lease ends on its own.
    pub(super) fn revoke_lease_later(self: &Arc<Self>, lease: i64) {
        let store = Arc::clone(self);
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
}
