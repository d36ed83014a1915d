//! etcd: a share that ended involuntarily and that an acquire finds before the reaper does
//! starts its lock-delay then, once: the next grant keeps the delay record that names it, so
//! neither a permit nor a writer after it is held back a second time, and the reaper still
//! reports it.

use std::time::Duration;

use lock_api::{Claim, FencingToken, LockKey, OwnerId, SessionId};
use lock_server::store::{AcquireOutcome, AcquireSpec, LockStore, Refusal};
use test_support::poll_until;

use crate::support::StoreAt;

const LONG_MS: u64 = 30_000;
/// A lease etcd ends after one second (its TTLs are whole seconds).
const SHORT_MS: u64 = 150;
const DELAY_MS: u64 = 1_000;
const DEADLINE: Duration = Duration::from_secs(10);

async fn session(store: &dyn LockStore, owner: &str) -> SessionId {
    let owner = OwnerId::parse(owner).unwrap();
    store
        .create_session(&owner, LONG_MS)
        .await
        .unwrap()
        .session_id
}

async fn ask(store: &dyn LockStore, k: &LockKey, s: SessionId, claim: Claim) -> AcquireOutcome {
    let spec = AcquireSpec::lease(LONG_MS).claiming(claim);
    store.acquire_with(k, s, spec).await.unwrap()
}

fn token(outcome: &AcquireOutcome) -> Option<FencingToken> {
    match outcome {
        AcquireOutcome::Granted { grant, .. } => Some(grant.fencing_token),
        AcquireOutcome::Refused(_) => None,
    }
}

/// `ended`, a share of `k` granted with a short lease and a lock-delay: once it has lapsed,
/// `first` is held back by its delay, then granted; after `first` lets go, `second` is
/// granted at once (the delay does not start again).
async fn an_ended_share_delays_the_next_grant_once(
    store: &dyn LockStore,
    k: &LockKey,
    ended: (SessionId, Claim),
    first: (SessionId, Claim),
    second: (SessionId, Claim),
) -> FencingToken {
    let spec = AcquireSpec {
        lock_delay_ms: DELAY_MS,
        ..AcquireSpec::lease(SHORT_MS).claiming(ended.1)
    };
    let short = token(&store.acquire_with(k, ended.0, spec).await.unwrap()).expect("granted");
    poll_until("the share to lapse", DEADLINE, || async {
        store.get(k).await.unwrap().is_none().then_some(())
    })
    .await;
    let outcome = ask(store, k, first.0, first.1).await;
    assert!(
        matches!(outcome, AcquireOutcome::Refused(Refusal::Delayed { .. })),
        "the lapsed share's lock-delay starts when it is found: {outcome:?}"
    );
    let granted = poll_until("the lock-delay to end", DEADLINE, || async {
        token(&ask(store, k, first.0, first.1).await)
    })
    .await;
    assert!(granted > short);
    assert!(store.release(k, first.0, granted).await.unwrap());
    let again = ask(store, k, second.0, second.1).await;
    assert!(
        token(&again).is_some_and(|t| t > granted),
        "one ended share starts one lock-delay: {again:?}"
    );
    short
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_share_found_before_the_reaper_delays_others_once() {
    let store = StoreAt::etcd().open().await;
    let [a, b, c] = [
        session(&*store, "a").await,
        session(&*store, "b").await,
        session(&*store, "c").await,
    ];
    let permit = Claim::Permit { permits: 1 };
    let pool = LockKey::parse("pool").unwrap();
    let lapsed_permit = an_ended_share_delays_the_next_grant_once(
        &*store,
        &pool,
        (a, permit),
        (b, permit),
        (c, permit),
    )
    .await;
    // A writer after a lapsed reader, and a lock after the writer.
    let rw = LockKey::parse("rw").unwrap();
    let lapsed_reader = an_ended_share_delays_the_next_grant_once(
        &*store,
        &rw,
        (a, Claim::Shared),
        (b, Claim::Exclusive),
        (c, Claim::Exclusive),
    )
    .await;
    let report = store.reap_expired().await.unwrap();
    let reported: Vec<(String, FencingToken)> = (report.locks.iter())
        .map(|l| (l.lock_key.to_string(), l.fencing_token))
        .collect();
    for ended in [
        ("pool".to_owned(), lapsed_permit),
        ("rw".to_owned(), lapsed_reader),
    ] {
        assert!(reported.contains(&ended), "{ended:?} in {reported:?}");
    }
}
