//! What each key holds (the records of the layout in `mod.rs`), values as etcd stores them
//! (JSON), etcd's errors as store errors, and the small conversions around them.

use chrono::{DateTime, Utc};
use etcd_client::KeyValue;
use lock_api::{
    Claim, FencingToken, GrantScope, LockGrant, LockKey, OwnerId, RevokeReason, SessionId,
};
use lock_store::claim::HeldAs;
use lock_store::{Revocation, RevokeNote, StoreError};
use serde::{Deserialize, Serialize};
use tonic::Code;

/// etcd counts lease TTLs in whole seconds.
pub(super) const LEASE_GRANULARITY_MS: u64 = 1_000;

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
        create_revision: kv.create_revision(),
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
        scope: value.scope,
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

/// `P/s/{session}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct SessionValue {
    pub(super) owner: OwnerId,
    /// The credential that opened it; absent in a record written before credentials were
    /// kept (such a session answers no caller).
    #[serde(default)]
    pub(super) credential: String,
    pub(super) ttl_ms: u64,
    pub(super) lease: i64,
}

/// `P/g/{lock_key}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct GrantValue {
    pub(super) token: FencingToken,
    pub(super) session: SessionId,
    pub(super) owner: OwnerId,
    pub(super) lease: i64,
    pub(super) lease_ms: u64,
    #[serde(default)]
    pub(super) lock_delay_ms: u64,
    /// The request it was last granted to (`LockStore::abandon`); 0 for none.
    #[serde(default)]
    pub(super) request: u64,
    /// What it holds of its key (ADR 0007): absent for the whole key (a grant record), a
    /// reader's share or a permit's slot (a share's record, `P/h/`).
    #[serde(default, skip_serializing_if = "GrantScope::is_exclusive")]
    pub(super) scope: GrantScope,
    /// A permit's key count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) permits: Option<u32>,
}

impl GrantValue {
    /// What the grant's record says its key's live grants are.
    pub(super) fn held_as(&self) -> HeldAs {
        match (self.scope, self.permits) {
            (GrantScope::Exclusive, _) => HeldAs::Exclusive,
            (GrantScope::Shared, _) => HeldAs::Shared,
            (GrantScope::Permit { .. }, permits) => HeldAs::Permits(permits.unwrap_or_default()),
        }
    }
}

/// `P/d/{lock_key}`: the lock-delay of the grant `token` of `exempt`, which ended
/// involuntarily. In force while its `dl/{lease}` marker exists.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct DelayValue {
    pub(super) token: FencingToken,
    pub(super) exempt: SessionId,
    pub(super) lease: i64,
    pub(super) delay_ms: u64,
    /// The ended shares whose ends started it (ADR 0007; `token` is the newest of them):
    /// none starts another delay while the record is there. Empty for a grant's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) shares: Vec<FencingToken>,
}

/// The session a delay exempts when it exempts none (a share's: no session is granted the
/// key before it ends): the nil id, which no session has.
pub(super) const NOBODY: SessionId = SessionId(uuid::Uuid::nil());

impl DelayValue {
    /// Whether the end of the grant or share `token` started this delay.
    pub(super) fn covers(&self, token: FencingToken) -> bool {
        self.token == token || self.shares.contains(&token)
    }
}

/// A delay record as read, with the revision a transaction pins.
#[derive(Debug, Clone)]
pub(super) struct ReadDelay {
    pub(super) value: DelayValue,
    pub(super) mod_revision: i64,
}

/// A place in a key's queue as read: `P/w/{lock_key}/{session}`.
#[derive(Debug, Clone)]
pub(super) struct Place {
    pub(super) session: SessionId,
    /// Arrival: the order of the queue.
    pub(super) create_revision: i64,
    pub(super) lease: i64,
    /// The TTL of its lease, in seconds (0 when read without values).
    pub(super) ttl_s: i64,
    /// What its acquire claims (the key alone when read without values).
    pub(super) claim: Claim,
}

/// A place's value: a lock's (and a set's) is its TTL alone, as before shares; a reader's
/// or a permit's also names its claim, so that a decision counts writers and readers ahead
/// and a wake-up knows whether a freed share makes room for the head.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(untagged)]
enum PlaceValue {
    Lock(i64),
    Share {
        ttl_s: i64,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        shared: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        permits: Option<u32>,
    },
}

/// The stored value of a place of `ttl_s` seconds claiming `claim`.
pub(super) fn encode_place(ttl_s: i64, claim: Claim) -> Result<Vec<u8>, StoreError> {
    encode(&match claim {
        Claim::Exclusive => PlaceValue::Lock(ttl_s),
        Claim::Shared => PlaceValue::Share {
            ttl_s,
            shared: true,
            permits: None,
        },
        Claim::Permit { permits } => PlaceValue::Share {
            ttl_s,
            shared: false,
            permits: Some(permits),
        },
    })
}

/// A place's TTL and claim, from its stored value (empty when read without values).
pub(super) fn read_place_value(bytes: &[u8]) -> Result<(i64, Claim), StoreError> {
    if bytes.is_empty() {
        return Ok((0, Claim::Exclusive));
    }
    Ok(match decode(bytes, "queue place")? {
        PlaceValue::Lock(ttl_s) => (ttl_s, Claim::Exclusive),
        PlaceValue::Share {
            ttl_s,
            permits: Some(permits),
            ..
        } => (ttl_s, Claim::Permit { permits }),
        PlaceValue::Share { ttl_s, shared, .. } => (
            ttl_s,
            if shared {
                Claim::Shared
            } else {
                Claim::Exclusive
            },
        ),
    })
}

/// A grant record as read, with the revision a transaction pins.
#[derive(Debug, Clone)]
pub(super) struct ReadGrant {
    pub(super) value: GrantValue,
    pub(super) mod_revision: i64,
    /// When its record was created: a share's record keeps it for its life (a share is
    /// pinned as present by it).
    pub(super) create_revision: i64,
}

/// Why a read grant is not live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Liveness {
    Live,
    LeaseEnded,
    SessionEnded,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock's place and grant record are written as before shares, so a replica that
    /// knows no shares reads them; a share's carry their claim and scope.
    #[test]
    fn lock_records_keep_their_form_and_share_records_carry_their_kind() {
        assert_eq!(encode_place(7, Claim::Exclusive).unwrap(), b"7");
        assert_eq!(read_place_value(b"7").unwrap(), (7, Claim::Exclusive));
        assert_eq!(read_place_value(b"").unwrap(), (0, Claim::Exclusive));
        for claim in [Claim::Shared, Claim::Permit { permits: 3 }] {
            let stored = encode_place(2, claim).unwrap();
            assert_eq!(read_place_value(&stored).unwrap(), (2, claim), "{claim:?}");
        }
        let lock = GrantValue {
            token: FencingToken(4),
            session: SessionId(uuid::Uuid::from_u128(1)),
            owner: OwnerId::parse("w").unwrap(),
            lease: 9,
            lease_ms: 1_000,
            lock_delay_ms: 0,
            request: 0,
            scope: GrantScope::Exclusive,
            permits: None,
        };
        let stored = String::from_utf8(encode(&lock).unwrap()).unwrap();
        assert!(
            !stored.contains("scope") && !stored.contains("permits"),
            "{stored}"
        );
        let permit = GrantValue {
            scope: GrantScope::Permit { slot: 2 },
            permits: Some(3),
            ..lock
        };
        let read: GrantValue = decode(&encode(&permit).unwrap(), "share").unwrap();
        assert_eq!(
            (read.scope, read.held_as()),
            (permit.scope, HeldAs::Permits(3))
        );
        let delay = DelayValue {
            token: FencingToken(4),
            exempt: NOBODY,
            lease: 1,
            delay_ms: 10,
            shares: vec![FencingToken(3), FencingToken(4)],
        };
        let read: DelayValue = decode(&encode(&delay).unwrap(), "delay").unwrap();
        assert!(read.covers(FencingToken(3)) && !read.covers(FencingToken(5)));
    }

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
