//! Session records as the etcd store reads them: a session's record with its revision, and
//! the count of a credential's live sessions (its index keys under `P/sc/`, each on its
//! session's lease), which the credential's session quota reads.

use etcd_client::{GetOptions, Txn, TxnOp, TxnOpResponse};
use lock_api::SessionId;

use lock_store::StoreError;

use super::EtcdStore;
use super::codec::{SessionValue, decode};

impl EtcdStore {
    /// `P/s/{session}` and the revision it was last written at, if the session is known.
    pub(super) async fn session_record(
        &self,
        session: SessionId,
    ) -> Result<Option<(i64, SessionValue)>, StoreError> {
        let Some(record) = self
            .members
            .read_keys(&[self.keys.session_key(session)])
            .await?
            .remove(0)
        else {
            return Ok(None);
        };
        let value = decode(record.value(), "session record")?;
        Ok(Some((record.mod_revision(), value)))
    }

    /// Live sessions `credential` opened: its keys under `P/sc/`, counted by etcd.
    pub(super) async fn count_sessions(&self, credential: &str) -> Result<u64, StoreError> {
        let prefix = self.keys.credential_sessions(credential);
        let count_only = GetOptions::new().with_prefix().with_count_only();
        let read = Txn::new().and_then([TxnOp::get(prefix, Some(count_only))]);
        let response = self.members.txn("count sessions", read).await?;
        match response.op_responses().into_iter().next() {
            Some(TxnOpResponse::Get(get)) => Ok(u64::try_from(get.count()).unwrap_or(0)),
            other => Err(StoreError::Internal(format!(
                "etcd answered a count with {other:?}"
            ))),
        }
    }
}
