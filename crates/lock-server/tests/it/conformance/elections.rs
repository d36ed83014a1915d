//! Conformance of an election's values (C2 §2.4c), on every backend: the live grant's
//! proclaim is what inspect answers, never for a later grant of the key; a stale term's
//! proclaim is refused and never hides its successor's value.

use super::*;
use lock_api::{Claim, LeaderValue};

fn value(raw: &str) -> LeaderValue {
    LeaderValue::parse(raw).expect("value")
}

async fn announced(store: &dyn LockStore, k: &LockKey) -> (FencingToken, Option<String>) {
    let info = store.get(k).await.expect("get").expect("a live grant");
    (info.fencing_token, info.value.map(String::from))
}

fn lost(result: Result<(), StoreError>, k: &LockKey, token: FencingToken) {
    assert_eq!(
        result,
        Err(StoreError::LockLost {
            lock_key: k.clone(),
            fencing_token: token
        }),
        "a proclaim by a term that does not hold {k} is refused"
    );
}

async fn a_leader_announces_and_changes_its_value_keeping_its_term(store: Arc<dyn LockStore>) {
    let k = key("election-a");
    let a = session(&*store, "a", LONG_MS).await;
    let t = grant(&*store, &k, a, LONG_MS).await;
    assert_eq!(
        announced(&*store, &k).await,
        (t, None),
        "nothing announced yet"
    );
    store
        .proclaim(&k, a, t, &value("10.0.0.1:80"))
        .await
        .unwrap();
    assert_eq!(
        announced(&*store, &k).await,
        (t, Some("10.0.0.1:80".into()))
    );
    store
        .proclaim(&k, a, t, &value("10.0.0.2:80"))
        .await
        .unwrap();
    assert_eq!(
        announced(&*store, &k).await,
        (t, Some("10.0.0.2:80".into()))
    );
    let renewed = store.renew(&k, a, t).await.unwrap();
    assert_eq!(renewed.fencing_token, t, "proclaim never changes the term");
}

async fn a_new_term_never_shows_its_predecessors_value(store: Arc<dyn LockStore>) {
    let k = key("election-b");
    let a = session(&*store, "a", LONG_MS).await;
    let b = session(&*store, "b", LONG_MS).await;
    let ta = grant(&*store, &k, a, LONG_MS).await;
    store.proclaim(&k, a, ta, &value("from a")).await.unwrap();
    assert!(store.release(&k, a, ta).await.unwrap());
    assert!(
        store.get(&k).await.unwrap().is_none(),
        "no leader after a resign"
    );
    let tb = grant(&*store, &k, b, LONG_MS).await;
    assert!(tb > ta, "the next term is higher");
    assert_eq!(
        announced(&*store, &k).await,
        (tb, None),
        "b's term announces nothing until b proclaims"
    );
    lost(
        store.proclaim(&k, a, ta, &value("late from a")).await,
        &k,
        ta,
    );
    store.proclaim(&k, b, tb, &value("from b")).await.unwrap();
    lost(
        store.proclaim(&k, a, ta, &value("later from a")).await,
        &k,
        ta,
    );
    assert_eq!(announced(&*store, &k).await, (tb, Some("from b".into())));
}

async fn only_the_holding_session_and_term_proclaim(store: Arc<dyn LockStore>) {
    let k = key("election-c");
    let a = session(&*store, "a", LONG_MS).await;
    let b = session(&*store, "b", LONG_MS).await;
    let t = grant(&*store, &k, a, LONG_MS).await;
    lost(
        store
            .proclaim(&k, b, t, &value("b is not the leader"))
            .await,
        &k,
        t,
    );
    let wrong = FencingToken(t.0 + 1);
    lost(
        store.proclaim(&k, a, wrong, &value("no such term")).await,
        &k,
        wrong,
    );
    let free = key("election-free");
    lost(
        store.proclaim(&free, a, t, &value("nobody holds it")).await,
        &free,
        t,
    );
    // A reader's share is not a leadership (ADR 0007: shares sit beside the key's grant).
    let shared = key("election-shared");
    let spec = AcquireSpec::lease(LONG_MS).claiming(Claim::Shared);
    let AcquireOutcome::Granted { grant: share, .. } =
        store.acquire_with(&shared, b, spec).await.unwrap()
    else {
        panic!("a reader is granted a free key");
    };
    let ts = share.fencing_token;
    lost(
        store.proclaim(&shared, b, ts, &value("a reader")).await,
        &shared,
        ts,
    );
    assert_eq!(announced(&*store, &k).await, (t, None));
}

async fn an_expired_leader_cannot_proclaim(store: Arc<dyn LockStore>) {
    let k = key("election-d");
    let a = session(&*store, "a", LONG_MS).await;
    let t = grant(&*store, &k, a, SHORT_MS).await;
    store.proclaim(&k, a, t, &value("brief")).await.unwrap();
    poll_until("the leader's lease to lapse", EXPIRY_DEADLINE, || async {
        store.get(&k).await.unwrap().is_none().then_some(())
    })
    .await;
    lost(
        store.proclaim(&k, a, t, &value("after the lease")).await,
        &k,
        t,
    );
}

conformance!(
    a_leader_announces_and_changes_its_value_keeping_its_term,
    a_new_term_never_shows_its_predecessors_value,
    only_the_holding_session_and_term_proclaim,
    an_expired_leader_cannot_proclaim,
);
