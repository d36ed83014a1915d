//! Conformance of the watch log (C3 W1), on every backend: every grant, end and proclaim of
//! a key is one event, in the order they happened, each end told as it was (released,
//! revoked, expired); a read after a position answers only what came after it, of the keys
//! under the prefix asked; shares carry their scope.

use super::*;
use lock_api::{Claim, EventKind, GrantScope, LeaderValue, LockEvent};

/// The store's watch started (its sequencer, on PostgreSQL).
async fn watching(store: &Arc<dyn LockStore>) {
    store
        .watch_events(Arc::new(|_| {}))
        .await
        .expect("watch events");
}

/// Polls until the events of keys under `prefix` after `after` are `count` (or more).
async fn events(store: &dyn LockStore, prefix: &str, after: u64, count: usize) -> Vec<LockEvent> {
    poll_until("the events to be logged", EXPIRY_DEADLINE, || async {
        let page = store.events_after(prefix, after, 64).await.expect("events");
        (page.events.len() >= count).then_some(page.events)
    })
    .await
}

fn kinds(events: &[LockEvent]) -> Vec<(EventKind, u64)> {
    events.iter().map(|e| (e.kind, e.fencing_token.0)).collect()
}

fn rising(events: &[LockEvent]) {
    assert!(
        events.windows(2).all(|w| w[0].position < w[1].position),
        "positions rise: {events:?}"
    );
}

async fn every_grant_and_end_is_one_event_in_order(store: Arc<dyn LockStore>) {
    watching(&store).await;
    let k = key("ev-a");
    let [s1, s2, s3] = [
        session(&*store, "s1", LONG_MS).await,
        session(&*store, "s2", LONG_MS).await,
        session(&*store, "s3", LONG_MS).await,
    ];
    let t1 = grant(&*store, &k, s1, LONG_MS).await;
    assert!(store.release(&k, s1, t1).await.unwrap());
    let t2 = grant(&*store, &k, s2, LONG_MS).await;
    let value = LeaderValue::parse("host-2").unwrap();
    store.proclaim(&k, s2, t2, &value).await.unwrap();
    assert_eq!(
        store.revoke(&k, &note(Some("test"))).await.unwrap(),
        Some(t2)
    );
    let t3 = grant(&*store, &k, s3, SHORT_MS).await;
    poll_until(
        "the reaper to end the short grant",
        EXPIRY_DEADLINE,
        || async {
            let report = store.reap_expired().await.expect("reap");
            (report.locks.iter().any(|g| g.lock_key == k)).then_some(())
        },
    )
    .await;
    let seen = events(&*store, "ev-a", 0, 7).await;
    use EventKind::*;
    assert_eq!(
        kinds(&seen),
        [
            (Granted, t1.0),
            (Released, t1.0),
            (Granted, t2.0),
            (Proclaimed, t2.0),
            (Revoked, t2.0),
            (Granted, t3.0),
            (Expired, t3.0)
        ]
    );
    rising(&seen);
    assert_eq!(seen[0].owner_id.as_ref().map(OwnerId::as_str), Some("s1"));
    assert_eq!(seen[3].value.as_ref(), Some(&value));
}

async fn a_read_after_a_position_answers_only_later_events_under_its_prefix(
    store: Arc<dyn LockStore>,
) {
    watching(&store).await;
    let (mine, other) = (key("ev-b1"), key("other-b"));
    let s = session(&*store, "s", LONG_MS).await;
    let t1 = grant(&*store, &mine, s, LONG_MS).await;
    let first = events(&*store, "ev-b", 0, 1).await[0].position;
    let t_other = grant(&*store, &other, s, LONG_MS).await;
    assert!(store.release(&mine, s, t1).await.unwrap());
    let later = events(&*store, "ev-b", first, 1).await;
    assert_eq!(
        kinds(&later),
        [(EventKind::Released, t1.0)],
        "nothing before, nothing else"
    );
    let all = events(&*store, "", 0, 3).await;
    assert!(
        all.iter()
            .any(|e| e.lock_key == other && e.fencing_token == t_other),
        "the empty prefix watches every key: {all:?}"
    );
    let page = store
        .events_after("ev-b", later[0].position, 64)
        .await
        .unwrap();
    assert!(page.events.is_empty(), "nothing after the last: {page:?}");
    assert!(page.through >= later[0].position);
}

async fn shares_are_events_with_their_scope(store: Arc<dyn LockStore>) {
    watching(&store).await;
    let k = key("ev-c");
    let [a, b] = [
        session(&*store, "a", LONG_MS).await,
        session(&*store, "b", LONG_MS).await,
    ];
    let spec = || AcquireSpec::lease(LONG_MS).claiming(Claim::Permit { permits: 2 });
    let mut tokens = Vec::new();
    for s in [a, b] {
        match store.acquire_with(&k, s, spec()).await.unwrap() {
            AcquireOutcome::Granted { grant, .. } => tokens.push(grant.fencing_token),
            refused => panic!("a permit is free: {refused:?}"),
        }
    }
    assert!(store.release(&k, a, tokens[0]).await.unwrap());
    let seen = events(&*store, "ev-c", 0, 3).await;
    let scopes: Vec<GrantScope> = seen.iter().map(|e| e.scope).collect();
    assert_eq!(
        kinds(&seen),
        [
            (EventKind::Granted, tokens[0].0),
            (EventKind::Granted, tokens[1].0),
            (EventKind::Released, tokens[0].0)
        ]
    );
    assert_eq!(
        scopes[..2],
        [
            GrantScope::Permit { slot: 0 },
            GrantScope::Permit { slot: 1 }
        ]
    );
}

async fn a_take_over_of_an_ended_grant_is_its_expiry_then_the_new_grant(store: Arc<dyn LockStore>) {
    watching(&store).await;
    let k = key("ev-d");
    let [a, b] = [
        session(&*store, "a", LONG_MS).await,
        session(&*store, "b", LONG_MS).await,
    ];
    let t1 = grant(&*store, &k, a, SHORT_MS).await;
    let t2 = eventually_granted(&*store, &k, b).await;
    let seen = events(&*store, "ev-d", 0, 3).await;
    assert_eq!(
        kinds(&seen),
        [
            (EventKind::Granted, t1.0),
            (EventKind::Expired, t1.0),
            (EventKind::Granted, t2.0)
        ]
    );
    rising(&seen);
}

conformance!(
    every_grant_and_end_is_one_event_in_order,
    a_read_after_a_position_answers_only_later_events_under_its_prefix,
    shares_are_events_with_their_scope,
    a_take_over_of_an_ended_grant_is_its_expiry_then_the_new_grant,
);
