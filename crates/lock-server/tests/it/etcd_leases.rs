//! etcd: a released grant's lease is the next grant's (no lease grant and no revoke per lock
//! cycle), and the reuse gives the released grant's holder nothing back; a replica's hint of
//! what it last wrote to a key never outlives another replica's write.

use std::time::Duration;

use lock_api::{LockKey, OwnerId};
use lock_server::store::{AcquireOutcome, AcquireSpec, Refusal, StoreError};

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

/// A replica commits a cycle on a key it last wrote without reading first (its hint of the
/// key). Whatever another replica wrote meanwhile must still decide: a grant (the next token
/// rises past it), a waiter's queue place (the hinted session queues behind it), and a
/// closed session (no grant).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicas_hint_never_outlives_another_replicas_write() {
    let at = StoreAt::etcd();
    let (one, two) = (at.open().await, at.open().await);
    let owner = |name: &str| OwnerId::parse(name).unwrap();
    let a = one
        .create_session(&owner("a"), LEASE_MS)
        .await
        .unwrap()
        .session_id;
    let b = two
        .create_session(&owner("b"), LEASE_MS)
        .await
        .unwrap()
        .session_id;
    let key = LockKey::parse("hinted").unwrap();
    let cycle_on = async |store: &std::sync::Arc<dyn lock_server::store::LockStore>, s| {
        let AcquireOutcome::Granted { grant, .. } = store.acquire(&key, s, LEASE_MS).await.unwrap()
        else {
            panic!("{key} is free");
        };
        assert!(store.release(&key, s, grant.fencing_token).await.unwrap());
        grant.fencing_token
    };

    // Another replica's grant: the hinted session's next token rises past it.
    let t1 = cycle_on(&one, a).await;
    let t2 = cycle_on(&two, b).await;
    assert!(t2 > t1);
    let t3 = cycle_on(&one, a).await;
    assert!(
        t3 > t2,
        "token {t3} issued after {t2}: the hint outlived another grant"
    );

    // A waiter that queued through another replica while the key was held: the hinted
    // session's next acquire queues behind it.
    let AcquireOutcome::Granted { grant, .. } = one.acquire(&key, a, LEASE_MS).await.unwrap()
    else {
        panic!("{key} is free");
    };
    let wait = AcquireSpec {
        queue_ms: LEASE_MS,
        ..AcquireSpec::lease(LEASE_MS)
    };
    assert!(matches!(
        two.acquire_with(&key, b, wait).await.unwrap(),
        AcquireOutcome::Refused(Refusal::Held { .. } | Refusal::Queued { .. })
    ));
    assert!(one.release(&key, a, grant.fencing_token).await.unwrap());
    match one.acquire(&key, a, LEASE_MS).await.unwrap() {
        AcquireOutcome::Refused(Refusal::Queued { .. }) => {}
        other => panic!("a freed key was taken past its queue: {other:?}"),
    }
    let AcquireOutcome::Granted { grant, .. } = two.acquire_with(&key, b, wait).await.unwrap()
    else {
        panic!("the head of the queue is granted");
    };
    assert!(two.release(&key, b, grant.fencing_token).await.unwrap());

    // A grant revoked through another replica and granted again there: the old holder's
    // release through its own replica frees nothing.
    let AcquireOutcome::Granted { grant: old, .. } = one.acquire(&key, a, LEASE_MS).await.unwrap()
    else {
        panic!("{key} is free");
    };
    let note = lock_server::store::RevokeNote {
        by: "test".into(),
        reason: None,
    };
    assert_eq!(
        two.revoke(&key, &note).await.unwrap(),
        Some(old.fencing_token)
    );
    let AcquireOutcome::Granted { grant, .. } = two.acquire(&key, b, LEASE_MS).await.unwrap()
    else {
        panic!("a revoked key is free");
    };
    assert!(!one.release(&key, a, old.fencing_token).await.unwrap());
    assert_eq!(
        two.get(&key).await.unwrap().map(|held| held.fencing_token),
        Some(grant.fencing_token),
        "a stale hint released another session's grant"
    );
    assert!(two.release(&key, b, grant.fencing_token).await.unwrap());

    // A closed session gets nothing, hint or not.
    let t4 = cycle_on(&one, a).await;
    assert!(t4 > grant.fencing_token);
    assert!(one.delete_session(a).await.unwrap());
    match one.acquire(&key, a, LEASE_MS).await {
        Err(StoreError::SessionUnknown(_) | StoreError::SessionExpired(_)) => {}
        other => panic!("a closed session acquired: {other:?}"),
    }
}

/// Every keep-alive of a replica goes on one stream: each lease gets its own answer, an ended
/// lease's renew is refused while live ones on the same stream are renewed, all at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_keep_alive_stream_answers_each_lease_for_itself() {
    /// Whole seconds, etcd's shortest default lease.
    const SHORT_MS: u64 = 2_000;
    /// How long the short grants may take to end: their TTL and etcd's expiry checks.
    const ENDED_WITHIN_MS: u64 = 10_000;
    let store = StoreAt::etcd().open().await;
    let s = store
        .create_session(&OwnerId::parse("holder").unwrap(), 60_000)
        .await
        .unwrap()
        .session_id;
    let mut grants = Vec::new();
    for (name, lease_ms) in [("live", LEASE_MS), ("ended", SHORT_MS)] {
        for i in 0..4 {
            let key = LockKey::parse(format!("{name}-{i}")).unwrap();
            let AcquireOutcome::Granted { grant, .. } =
                store.acquire(&key, s, lease_ms).await.unwrap()
            else {
                panic!("{key} is free");
            };
            grants.push((key, grant.fencing_token, name == "live"));
        }
    }
    // The first renew opens the stream (the grants took new leases: the pool was empty) and
    // every later keep-alive goes on it; the short grants end while the live ones are kept
    // alive. (Two live leases' answers swapped would both say "alive", and each request was
    // sent: harmless, and not what this checks.)
    let deadline = tokio::time::Instant::now() + Duration::from_millis(ENDED_WITHIN_MS);
    loop {
        for (key, token, live) in &grants {
            if *live {
                store.renew(key, s, *token).await.unwrap();
            }
        }
        let mut ended = 0;
        for (key, _, live) in &grants {
            if !live && store.get(key).await.unwrap().is_none() {
                ended += 1;
            }
        }
        if ended == 4 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "short grants still live after {ENDED_WITHIN_MS} ms"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let renewals = grants.iter().map(|(key, token, live)| {
        let store = store.clone();
        async move { (key, *live, store.renew(key, s, *token).await) }
    });
    for (key, live, renewed) in futures_util::future::join_all(renewals).await {
        match (live, renewed) {
            (true, Ok(_)) | (false, Err(StoreError::LockLost { .. })) => {}
            (live, other) => panic!("renew of {key} (live: {live}) answered {other:?}"),
        }
    }
}
