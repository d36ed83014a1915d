//! Calls to etcd: every call bounded by the request budget and sent to the pinned member
//! (the next one after a failure), transactions, linearizable reads, leases.

use super::*;

impl EtcdStore {
    /// Runs `call` on the pinned member, bounded by the request timeout; an answer about
    /// the member (unreachable, no leader, silent) moves later calls to the next one.
    pub(super) async fn call<T, F, Fut>(&self, what: &str, call: F) -> Result<T, StoreError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let (index, client) = self.members.pinned();
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
    pub(super) fn revoke_lease_later(&self, lease: i64) {
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
}
