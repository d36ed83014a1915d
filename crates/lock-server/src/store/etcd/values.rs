//! What an election's leader announces (C2 §2.4c): the record `P/v/{lock_key}`, the value
//! with the token of the grant that wrote it, kept as the fence is. Proclaim writes it
//! only while that grant's record is the one read and live; a read answers it only for the
//! live grant whose token it names.

use etcd_client::{Compare, CompareOp, KeyValue, Txn, TxnOp};
use lock_api::{FencingToken, LeaderValue, LockKey, SessionId};
use lock_store::StoreError;
use serde::{Deserialize, Serialize};

use super::EtcdStore;
use super::codec::{ReadGrant, decode, encode, read_grant};

/// `P/v/{lock_key}`'s value.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct ValueRecord {
    pub(super) token: FencingToken,
    pub(super) value: LeaderValue,
}

impl EtcdStore {
    /// [`lock_store::LockStore::proclaim`]: one read, then a write pinned to the grant
    /// record as read and to its lease's and session's markers.
    pub(super) async fn proclaim_value(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
        value: &LeaderValue,
    ) -> Result<(), StoreError> {
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
            ])
            .await?;
        Self::live_session(session, read[0].as_ref(), read[1].as_ref())?;
        let Some(grant) = read[2].as_ref().map(read_grant).transpose()? else {
            return Err(lost());
        };
        if grant.value.session != session || grant.value.token != token {
            return Err(lost());
        }
        let record = encode(&ValueRecord {
            token,
            value: value.clone(),
        })?;
        let written = self
            .members
            .txn(
                "proclaim",
                Txn::new()
                    .when([
                        Compare::mod_revision(
                            self.keys.grant_key(key),
                            CompareOp::Equal,
                            grant.mod_revision,
                        ),
                        Compare::version(
                            self.keys.grant_marker(grant.value.lease),
                            CompareOp::Greater,
                            0,
                        ),
                        Compare::version(self.keys.session_marker(session), CompareOp::Greater, 0),
                    ])
                    .and_then([TxnOp::put(self.keys.value_key(key), record, None)]),
            )
            .await?
            .succeeded();
        if written { Ok(()) } else { Err(lost()) }
    }

    /// What `grant`, a live grant, announces, by `record`, its key's value record read in
    /// the same read as the grant.
    pub(super) fn value_of(
        record: Option<&KeyValue>,
        grant: &ReadGrant,
    ) -> Result<Option<LeaderValue>, StoreError> {
        let Some(kv) = record else {
            return Ok(None);
        };
        let record: ValueRecord = decode(kv.value(), "value record")?;
        Ok((record.token == grant.value.token).then_some(record.value))
    }
}
