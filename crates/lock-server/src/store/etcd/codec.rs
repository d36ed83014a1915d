//! Values as etcd stores them (JSON), etcd's errors as store errors, and the small
//! conversions around them.

use super::*;

/// etcd's TTL in whole seconds, rounded up.
pub(super) fn lease_seconds(ttl_ms: u64) -> i64 {
    i64::try_from(ttl_ms.div_ceil(LEASE_GRANULARITY_MS).max(1)).unwrap_or(i64::MAX)
}

pub(super) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|e| StoreError::Internal(format!("encode: {e}")))
}

pub(super) fn decode<T: for<'de> Deserialize<'de>>(
    bytes: &[u8],
    what: &str,
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Internal(format!("stored {what}: {e}")))
}

/// `P/r/{lock_key}`: the key's last revocation (who and why), written by the revoke's own
/// transaction.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RevocationValue {
    token: FencingToken,
    by: String,
    reason: Option<String>,
}

pub(super) fn encode_revocation(
    token: FencingToken,
    note: &RevokeNote,
) -> Result<Vec<u8>, StoreError> {
    encode(&RevocationValue {
        token,
        by: note.by.clone(),
        reason: note.reason.as_ref().map(|r| r.as_str().to_owned()),
    })
}

pub(super) fn decode_revocation(bytes: &[u8]) -> Result<Revocation, StoreError> {
    let value: RevocationValue = decode(bytes, "revocation")?;
    let reason = value
        .reason
        .map(RevokeReason::parse)
        .transpose()
        .map_err(|e| StoreError::Internal(format!("stored revoke reason: {e}")))?;
    Ok(Revocation {
        token: value.token,
        note: RevokeNote {
            by: value.by,
            reason,
        },
    })
}

pub(super) fn read_grant(kv: &KeyValue) -> Result<ReadGrant, StoreError> {
    Ok(ReadGrant {
        value: decode(kv.value(), "grant record")?,
        mod_revision: kv.mod_revision(),
    })
}

pub(super) fn read_delay(kv: &KeyValue) -> Result<ReadDelay, StoreError> {
    Ok(ReadDelay {
        value: decode(kv.value(), "lock-delay record")?,
        mod_revision: kv.mod_revision(),
    })
}

pub(super) fn grant_of(key: &LockKey, value: &GrantValue, lease_ms: u64) -> LockGrant {
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
pub(super) fn after_ms(ms: u64) -> DateTime<Utc> {
    Utc::now() + chrono::Duration::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// etcd's answers about itself: no leader, a leader change mid-request, unreachable members.
pub(super) fn map_err(err: etcd_client::Error) -> StoreError {
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
                // A write put a key on a lease that ended before etcd applied it: the store
                // answered too slowly for the lease (a leader election, a slow disk), which
                // the caller's retry survives; never the caller's mistake nor a bug.
                Code::NotFound if message.contains("requested lease not found") => {
                    StoreError::Unavailable(format!("etcd: {message}"))
                }
                _ => StoreError::Internal(format!("etcd: {status}")),
            }
        }
        etcd_client::Error::TransportError(_)
        | etcd_client::Error::IoError(_)
        | etcd_client::Error::LeaseKeepAliveError(_) => StoreError::Unavailable(err.to_string()),
        other => StoreError::Internal(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_that_ended_before_its_write_is_unavailable_not_internal() {
        let status = |code, message: &str| {
            map_err(etcd_client::Error::GRpcStatus(tonic::Status::new(
                code, message,
            )))
        };
        assert!(matches!(
            status(Code::NotFound, "etcdserver: requested lease not found"),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            status(Code::NotFound, "etcdserver: key not found"),
            StoreError::Internal(_)
        ));
        assert!(matches!(
            status(Code::Unavailable, "etcdserver: request timed out"),
            StoreError::Unavailable(_)
        ));
    }
}
