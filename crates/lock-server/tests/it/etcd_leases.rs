//! etcd: a released grant's lease is the next grant's (no lease grant and no revoke per lock
//! cycle), and the reuse gives the released grant's holder nothing back.

use std::time::Duration;

use lock_api::{LockKey, OwnerId};
use lock_server::store::{AcquireOutcome, StoreError};

use crate::support::StoreAt;

const LEASE_MS: u64 = 30_000;

/// The lease id the grant record of `key` names, read from etcd itself.
async fn grant_lease(at: &StoreAt, key: &str) -> i64 {
    let StoreAt::Etcd { endpoints, prefix } = at else {
        unreachable!("an etcd store");
    };
    let mut client = etcd_client::Client::connect(endpoints, None)
        .await
        .expect("connect to etcd");
    let got = client
        .get(format!("{}/g/{key}", prefix.trim_end_matches('/')), None)
        .await
        .expect("read the grant record");
    let record: serde_json::Value =
        serde_json::from_slice(got.kvs().first().expect("a grant record").value())
            .expect("a JSON record");
    record["lease"]
        .as_i64()
        .expect("the record names its lease")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_grants_lease_is_reused_and_gives_its_old_holder_nothing() {
    let at = StoreAt::etcd();
    let store = at.open().await;
    let session = async |owner: &str| {
        store
            .create_session(&OwnerId::parse(owner).unwrap(), LEASE_MS)
            .await
            .unwrap()
            .session_id
    };
    let (a, b) = (session("a").await, session("b").await);
    let (first, second) = (
        LockKey::parse("first").unwrap(),
        LockKey::parse("second").unwrap(),
    );
    let granted = async |key: &LockKey, s| match store.acquire(key, s, LEASE_MS).await.unwrap() {
        AcquireOutcome::Granted { grant, .. } => grant.fencing_token,
        other => panic!("expected a grant of {key}, got {other:?}"),
    };

    let t1 = granted(&first, a).await;
    let lease = grant_lease(&at, "first").await;
    assert!(store.release(&first, a, t1).await.unwrap());
    let t2 = granted(&second, b).await;
    assert_eq!(
        grant_lease(&at, "second").await,
        lease,
        "the released grant's lease is the next grant's"
    );

    // The old holder's grant stays ended: its renew is refused, its key is free.
    assert!(
        matches!(
            store.renew(&first, a, t1).await,
            Err(StoreError::LockLost { .. })
        ),
        "a released grant is not renewed through its reused lease"
    );
    assert_eq!(store.get(&first).await.unwrap(), None);
    assert!(granted(&first, b).await > t1);
    // The new holder's grant is its own: renewed, and still held after the old key moved on.
    store.renew(&second, b, t2).await.unwrap();
    let held = store.get(&second).await.unwrap().expect("second is held");
    assert_eq!(held.fencing_token, t2);
}

/// A pooled lease has run down part of its TTL: the grant that takes it must still last its
/// whole lease from then (I4: the holder's deadline counts from its request), not end when
/// the lease's first grant would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_lease_lasts_its_whole_ttl_from_its_new_grant() {
    /// Whole seconds: etcd's lease granularity.
    const SHORT_MS: u64 = 2_000;
    /// How long the lease sits in the pool, then how long past its new grant it is checked:
    /// each under SHORT_MS, together past it by more than etcd's expiry-check interval.
    const PAUSE_MS: u64 = 1_500;
    let at = StoreAt::etcd();
    let store = at.open().await;
    let owner = OwnerId::parse("holder").unwrap();
    let s = store
        .create_session(&owner, 30_000)
        .await
        .unwrap()
        .session_id;
    let (first, second) = (
        LockKey::parse("first").unwrap(),
        LockKey::parse("second").unwrap(),
    );
    let AcquireOutcome::Granted { grant, .. } = store.acquire(&first, s, SHORT_MS).await.unwrap()
    else {
        panic!("first is free");
    };
    let lease = grant_lease(&at, "first").await;
    assert!(store.release(&first, s, grant.fencing_token).await.unwrap());
    // Not a synchronisation: the time the lease spends in the pool, running down.
    tokio::time::sleep(Duration::from_millis(PAUSE_MS)).await;
    let AcquireOutcome::Granted { grant, .. } = store.acquire(&second, s, SHORT_MS).await.unwrap()
    else {
        panic!("second is free");
    };
    assert_eq!(grant_lease(&at, "second").await, lease, "reused");
    // Past the lease's first TTL, within the new grant's.
    tokio::time::sleep(Duration::from_millis(PAUSE_MS)).await;
    assert_eq!(
        store.get(&second).await.unwrap().map(|g| g.fencing_token),
        Some(grant.fencing_token),
        "the grant on a reused lease ended before its lease_ms"
    );
}
