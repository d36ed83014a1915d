//! The one `LockStore` conformance suite, run against every backend.
//!
//! Each case is an async fn taking the store; `conformance!` instantiates it per backend.
//! Expiry cases use real time with short TTLs and poll with a deadline.

use std::sync::Arc;
use std::time::Duration;

use lock_api::{FencingToken, LockKey, OwnerId, RevokeReason, SessionId};
use lock_server::store::decide::{Decision, HolderView, KeyView, decide};
use lock_server::store::{
    AcquireOutcome, AcquireSpec, LockStore, MemoryStore, Refusal, RequestId, Revocation,
    RevokeNote, SetOutcome, StoreError, Wake,
};
use test_support::poll_until;

const LONG_MS: u64 = 30_000;
const SHORT_MS: u64 = 150;
const EXPIRY_DEADLINE: Duration = Duration::from_secs(5);

fn key(raw: &str) -> LockKey {
    LockKey::parse(raw).expect("valid key")
}

async fn session(store: &dyn LockStore, owner: &str, ttl_ms: u64) -> SessionId {
    store
        .create_session(&OwnerId::parse(owner).expect("owner"), ttl_ms)
        .await
        .expect("create session")
        .session_id
}

async fn grant(store: &dyn LockStore, k: &LockKey, s: SessionId, lease_ms: u64) -> FencingToken {
    match store.acquire(k, s, lease_ms).await.expect("acquire") {
        AcquireOutcome::Granted { grant, .. } => grant.fencing_token,
        refused => panic!("expected a grant of {k}, got {refused:?}"),
    }
}

async fn held(store: &dyn LockStore, k: &LockKey, s: SessionId) -> FencingToken {
    match store.acquire(k, s, LONG_MS).await.expect("acquire") {
        AcquireOutcome::Refused(Refusal::Held { holder_token, .. }) => holder_token,
        other => panic!("expected LOCK_HELD, got {other:?}"),
    }
}

/// Polls until session `s` is granted `k`, and returns the token.
async fn eventually_granted(store: &dyn LockStore, k: &LockKey, s: SessionId) -> FencingToken {
    poll_until(
        "the key to be granted after expiry",
        EXPIRY_DEADLINE,
        || async {
            match store.acquire(k, s, LONG_MS).await.expect("acquire") {
                AcquireOutcome::Granted { grant, .. } => Some(grant.fencing_token),
                _ => None,
            }
        },
    )
    .await
}

async fn session_lifecycle(store: Arc<dyn LockStore>) {
    let s = store
        .create_session(&OwnerId::parse("w1").unwrap(), LONG_MS)
        .await
        .unwrap();
    assert_eq!(s.ttl_ms, LONG_MS);
    let beat = store.heartbeat(s.session_id).await.unwrap();
    assert!(
        beat.expires_at >= s.expires_at,
        "heartbeat moves expiry forward"
    );
    assert!(store.delete_session(s.session_id).await.unwrap());
    assert_eq!(
        store.heartbeat(s.session_id).await,
        Err(StoreError::SessionUnknown(s.session_id))
    );
    assert!(
        !store.delete_session(s.session_id).await.unwrap(),
        "second delete finds nothing"
    );
}

async fn tokens_increase_across_grants(store: Arc<dyn LockStore>) {
    let (a, b) = (
        session(&*store, "a", LONG_MS).await,
        session(&*store, "b", LONG_MS).await,
    );
    let k = key("payout:1");
    let t1 = grant(&*store, &k, a, LONG_MS).await;
    assert_eq!(
        held(&*store, &k, b).await,
        t1,
        "LOCK_HELD names the holder's token"
    );
    assert!(store.release(&k, a, t1).await.unwrap());
    let t2 = grant(&*store, &k, b, LONG_MS).await;
    assert!(t2 > t1, "{t2} > {t1}");
    let other = grant(&*store, &key("payout:2"), a, LONG_MS).await;
    assert_eq!(other, FencingToken(1), "tokens are per key");
}

async fn same_session_reacquire_returns_same_token(store: Arc<dyn LockStore>) {
    let a = session(&*store, "a", LONG_MS).await;
    let k = key("reentrant");
    let t1 = grant(&*store, &k, a, LONG_MS).await;
    let t2 = grant(&*store, &k, a, LONG_MS).await;
    assert_eq!(t1, t2);
    // A re-grant never shrinks the lease: every answer's lease is covered by the expiry (I4).
    match store.acquire(&k, a, SHORT_MS).await.unwrap() {
        AcquireOutcome::Granted { grant, .. } => {
            assert_eq!((grant.fencing_token, grant.lease_ms), (t1, LONG_MS));
        }
        other => panic!("expected the same grant, got {other:?}"),
    }
}

async fn renew_keeps_token_and_refuses_stale(store: Arc<dyn LockStore>) {
    let (a, b) = (
        session(&*store, "a", LONG_MS).await,
        session(&*store, "b", LONG_MS).await,
    );
    let k = key("renew");
    let t = grant(&*store, &k, a, LONG_MS).await;
    let renewed = store.renew(&k, a, t).await.unwrap();
    assert_eq!(renewed.fencing_token, t, "renew never changes the token");
    assert_eq!(renewed.lease_ms, LONG_MS);
    let lost = StoreError::LockLost {
        lock_key: k.clone(),
        fencing_token: FencingToken(t.0 + 1),
    };
    assert_eq!(store.renew(&k, a, FencingToken(t.0 + 1)).await, Err(lost));
    assert!(
        matches!(
            store.renew(&k, b, t).await,
            Err(StoreError::LockLost { .. })
        ),
        "other session"
    );
    assert!(store.release(&k, a, t).await.unwrap());
    assert!(
        matches!(
            store.renew(&k, a, t).await,
            Err(StoreError::LockLost { .. })
        ),
        "after release"
    );
    let unknown = SessionId::random();
    assert_eq!(
        store.renew(&k, unknown, t).await,
        Err(StoreError::SessionUnknown(unknown))
    );
}

async fn release_is_compare_and_delete(store: Arc<dyn LockStore>) {
    let a = session(&*store, "a", LONG_MS).await;
    let k = key("cad");
    let t = grant(&*store, &k, a, LONG_MS).await;
    assert!(
        !store.release(&k, a, FencingToken(t.0 + 7)).await.unwrap(),
        "wrong token is not an error"
    );
    let stranger = session(&*store, "stranger", LONG_MS).await;
    assert!(
        !store.release(&k, stranger, t).await.unwrap(),
        "the right key and token from another session release nothing"
    );
    assert!(
        !store.release(&k, SessionId::random(), t).await.unwrap(),
        "nor from an unknown session"
    );
    assert_eq!(
        store.get(&k).await.unwrap().map(|i| i.fencing_token),
        Some(t),
        "still held"
    );
    assert!(store.release(&k, a, t).await.unwrap());
    assert!(
        !store.release(&k, a, t).await.unwrap(),
        "stale release is false"
    );
    assert_eq!(store.get(&k).await.unwrap(), None);
}

async fn expired_lease_is_regranted_with_higher_token(store: Arc<dyn LockStore>) {
    let (a, b) = (
        session(&*store, "a", LONG_MS).await,
        session(&*store, "b", LONG_MS).await,
    );
    let k = key("expiring");
    let t1 = grant(&*store, &k, a, SHORT_MS).await;
    let t2 = eventually_granted(&*store, &k, b).await;
    assert!(t2 > t1);
    assert!(matches!(
        store.renew(&k, a, t1).await,
        Err(StoreError::LockLost { .. })
    ));
    assert!(
        !store.release(&k, a, t1).await.unwrap(),
        "the zombie's release does not free b's grant"
    );
    assert_eq!(
        store
            .get(&k)
            .await
            .unwrap()
            .map(|i| (i.fencing_token, i.owner_id)),
        Some((t2, OwnerId::parse("b").unwrap()))
    );
}

async fn session_expiry_frees_its_locks(store: Arc<dyn LockStore>) {
    let (a, b) = (
        session(&*store, "a", SHORT_MS).await,
        session(&*store, "b", LONG_MS).await,
    );
    let k = key("session-expiry");
    let t1 = grant(&*store, &k, a, LONG_MS).await;
    let t2 = eventually_granted(&*store, &k, b).await;
    assert!(t2 > t1);
    assert_eq!(
        store.heartbeat(a).await,
        Err(StoreError::SessionExpired(a)),
        "expired sessions are never revived"
    );
    assert_eq!(
        store.acquire(&key("x"), a, LONG_MS).await,
        Err(StoreError::SessionExpired(a))
    );
}

async fn delete_session_releases_its_locks(store: Arc<dyn LockStore>) {
    let (a, b) = (
        session(&*store, "a", LONG_MS).await,
        session(&*store, "b", LONG_MS).await,
    );
    let k = key("bye");
    let t1 = grant(&*store, &k, a, LONG_MS).await;
    store.delete_session(a).await.unwrap();
    assert!(grant(&*store, &k, b, LONG_MS).await > t1);
}

/// An operator's note on a revoke.
fn note(reason: Option<&str>) -> RevokeNote {
    RevokeNote {
        by: "ops".into(),
        reason: reason.map(|r| RevokeReason::parse(r).expect("a valid reason")),
    }
}

async fn get_and_revoke(store: Arc<dyn LockStore>) {
    let a = session(&*store, "owner-a", LONG_MS).await;
    let k = key("revocable");
    assert_eq!(store.revocation(&k).await.unwrap(), None, "never revoked");
    let why = note(Some("maintenance: node 3"));
    assert_eq!(
        store.revoke(&k, &why).await.unwrap(),
        None,
        "nothing to revoke"
    );
    assert_eq!(
        store.revocation(&k).await.unwrap(),
        None,
        "a revoke that found nothing notes nothing"
    );
    let t = grant(&*store, &k, a, LONG_MS).await;
    let info = store.get(&k).await.unwrap().expect("held");
    assert_eq!((info.fencing_token, info.owner_id.as_str()), (t, "owner-a"));
    let shown = serde_json::to_string(&info).unwrap();
    assert!(
        !shown.contains(&a.expose()),
        "L7 never shows the session id: {shown}"
    );
    assert_eq!(store.revoke(&k, &why).await.unwrap(), Some(t));
    assert_eq!(store.get(&k).await.unwrap(), None);
    assert_eq!(
        store.revocation(&k).await.unwrap(),
        Some(Revocation {
            token: t,
            note: why
        }),
        "who revoked which grant and why, beside the key"
    );
    let t2 = grant(&*store, &k, a, LONG_MS).await;
    assert!(t2 > t, "revoked tokens are not reused");
    assert_eq!(store.revoke(&k, &note(None)).await.unwrap(), Some(t2));
    assert_eq!(
        store.revocation(&k).await.unwrap(),
        Some(Revocation {
            token: t2,
            note: note(None)
        }),
        "the next revoke replaces the note"
    );
}

async fn reaper_removes_expired_grants_and_sessions(store: Arc<dyn LockStore>) {
    let a = session(&*store, "reaped", SHORT_MS * 2).await;
    let k = key("reap-me");
    let t = grant(&*store, &k, a, SHORT_MS).await;
    let report = poll_until(
        "the reaper to remove the grant",
        EXPIRY_DEADLINE,
        || async {
            let report = store.reap_expired().await.expect("reap");
            report
                .locks
                .iter()
                .any(|l| l.lock_key == k)
                .then_some(report)
        },
    )
    .await;
    let expired = report.locks.iter().find(|l| l.lock_key == k).unwrap();
    assert_eq!(
        (expired.fencing_token, expired.session_id, expired.reason),
        (t, a, "lease")
    );
    assert_eq!(expired.owner_id.as_str(), "reaped");
    // The session may go in the same pass as its grant (etcd rounds both TTLs up to 1 s).
    if report.sessions == 0 {
        poll_until(
            "the reaper to remove the session",
            EXPIRY_DEADLINE,
            || async { (store.reap_expired().await.expect("reap").sessions > 0).then_some(()) },
        )
        .await;
    }
    assert_eq!(store.heartbeat(a).await, Err(StoreError::SessionUnknown(a)));
    let b = session(&*store, "b", LONG_MS).await;
    assert!(
        grant(&*store, &k, b, LONG_MS).await > t,
        "reaped tokens are not reused"
    );
}

/// A grant whose lease runs on but whose session expired is reaped, and reported with the
/// session as its reason: never dropped silently with its session.
async fn the_reaper_reports_the_grants_of_an_expired_session(store: Arc<dyn LockStore>) {
    let a = session(&*store, "short-lived", SHORT_MS).await;
    let k = key("outlives-its-session");
    let t = grant(&*store, &k, a, LONG_MS).await;
    let expired = poll_until(
        "the reaper to report the grant",
        EXPIRY_DEADLINE,
        || async {
            let report = store.reap_expired().await.expect("reap");
            report.locks.into_iter().find(|l| l.lock_key == k)
        },
    )
    .await;
    assert_eq!(
        (expired.fencing_token, expired.session_id, expired.reason),
        (t, a, "session")
    );
}

async fn concurrent_acquirers_exactly_one_wins(store: Arc<dyn LockStore>) {
    let k = key("hot");
    let mut sessions = Vec::new();
    for i in 0..12 {
        sessions.push(session(&*store, &format!("racer-{i}"), LONG_MS).await);
    }
    let mut last = FencingToken(0);
    let mut holder_of = std::collections::HashMap::new();
    for _round in 0..5 {
        let mut tasks = tokio::task::JoinSet::new();
        for &s in &sessions {
            let (store, k) = (store.clone(), k.clone());
            tasks.spawn(async move { store.acquire(&k, s, LONG_MS).await.expect("acquire") });
        }
        let outcomes = tasks.join_all().await;
        let winners: Vec<FencingToken> = outcomes
            .iter()
            .filter_map(|o| match o {
                AcquireOutcome::Granted { grant, .. } => {
                    holder_of.insert(grant.fencing_token, grant.session_id);
                    Some(grant.fencing_token)
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            winners.len(),
            1,
            "exactly one winner per round: {outcomes:?}"
        );
        assert!(
            winners[0] > last,
            "tokens rise: {} after {last}",
            winners[0]
        );
        last = winners[0];
        assert!(store.release(&k, holder_of[&last], last).await.unwrap());
    }
}

/// Many sessions cycling one hot key (acquire, release when granted) as fast as they can:
/// contention is answered `Held`, never an error, and no token is granted twice. (On etcd a
/// lost commit race used to be retried until 16 were lost in a row: 503 under a hot key.)
async fn a_hot_key_under_many_cycling_acquirers_answers_held_never_an_error(
    store: Arc<dyn LockStore>,
) {
    const ACQUIRERS: usize = 32;
    const ATTEMPTS_EACH: usize = 25;
    let k = key("hot");
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..ACQUIRERS {
        let s = session(&*store, &format!("cycler-{i}"), LONG_MS).await;
        let (store, k) = (store.clone(), k.clone());
        tasks.spawn(async move {
            let mut granted = Vec::new();
            for attempt in 0..ATTEMPTS_EACH {
                match store.acquire(&k, s, LONG_MS).await {
                    Ok(AcquireOutcome::Granted { grant, .. }) => {
                        let token = grant.fencing_token;
                        assert!(store.release(&k, s, token).await.expect("release"));
                        granted.push(token);
                    }
                    Ok(_) => {}
                    Err(err) => panic!("acquirer {i}, attempt {attempt}: {err}"),
                }
            }
            granted
        });
    }
    let mut all: Vec<FencingToken> = tasks.join_all().await.into_iter().flatten().collect();
    let count = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), count, "a token was granted twice");
    assert!(count > 0, "nobody was ever granted the key");
}

async fn ready_when_healthy(store: Arc<dyn LockStore>) {
    store.ready().await.expect("a fresh store is ready");
}

// ---- FIFO queues and lock-delay -------------------------------------------

/// A queue place long enough for any case.
const QUEUE_MS: u64 = 30_000;

fn queued(lease_ms: u64) -> AcquireSpec {
    AcquireSpec {
        queue_ms: QUEUE_MS,
        ..AcquireSpec::lease(lease_ms)
    }
}

fn delayed(lease_ms: u64, lock_delay_ms: u64) -> AcquireSpec {
    AcquireSpec {
        lock_delay_ms,
        ..AcquireSpec::lease(lease_ms)
    }
}

async fn ask(
    store: &dyn LockStore,
    k: &LockKey,
    s: SessionId,
    spec: AcquireSpec,
) -> AcquireOutcome {
    store.acquire_with(k, s, spec).await.expect("acquire")
}

fn granted_token(outcome: &AcquireOutcome) -> Option<FencingToken> {
    match outcome {
        AcquireOutcome::Granted { grant, .. } => Some(grant.fencing_token),
        _ => None,
    }
}

async fn waiters_are_granted_in_fifo_order(store: Arc<dyn LockStore>) {
    let k = key("fifo");
    let holder = session(&*store, "holder", LONG_MS).await;
    let first = session(&*store, "first", LONG_MS).await;
    let second = session(&*store, "second", LONG_MS).await;
    let latecomer = session(&*store, "latecomer", LONG_MS).await;
    let t0 = grant(&*store, &k, holder, LONG_MS).await;
    for s in [first, second] {
        let outcome = ask(&*store, &k, s, queued(LONG_MS)).await;
        assert!(
            matches!(outcome, AcquireOutcome::Refused(Refusal::Held { holder_token, .. }) if holder_token == t0),
            "{outcome:?}"
        );
    }
    assert_eq!(store.get(&k).await.unwrap().expect("held").waiters, 2);
    assert!(store.release(&k, holder, t0).await.unwrap());
    // The key is free, but two sessions queued before these callers (a store that hands
    // over has already granted it to the first of them).
    if store.hands_over() {
        assert!(held(&*store, &k, latecomer).await > t0);
        assert!(held(&*store, &k, second).await > t0);
    } else {
        assert_eq!(
            ask(&*store, &k, latecomer, AcquireSpec::lease(LONG_MS)).await,
            AcquireOutcome::Refused(Refusal::Queued { ahead: 2 })
        );
        assert_eq!(
            ask(&*store, &k, second, queued(LONG_MS)).await,
            AcquireOutcome::Refused(Refusal::Queued { ahead: 1 })
        );
    }
    let t1 = granted_token(&ask(&*store, &k, first, queued(LONG_MS)).await).expect("first");
    assert!(t1 > t0);
    assert_eq!(store.get(&k).await.unwrap().expect("held").waiters, 1);
    assert!(store.release(&k, first, t1).await.unwrap());
    if store.hands_over() {
        assert!(held(&*store, &k, latecomer).await > t1);
    } else {
        assert_eq!(
            ask(&*store, &k, latecomer, AcquireSpec::lease(LONG_MS)).await,
            AcquireOutcome::Refused(Refusal::Queued { ahead: 1 })
        );
    }
    let t2 = granted_token(&ask(&*store, &k, second, queued(LONG_MS)).await).expect("second");
    assert!(t2 > t1);
    assert!(store.release(&k, second, t2).await.unwrap());
    // The queue is empty again: a try-acquire is granted at once.
    assert!(
        granted_token(&ask(&*store, &k, latecomer, AcquireSpec::lease(LONG_MS)).await) > Some(t2)
    );
}

async fn a_waiter_that_leaves_lapses_or_dies_blocks_nobody(store: Arc<dyn LockStore>) {
    let k = key("leavers");
    let holder = session(&*store, "holder", LONG_MS).await;
    let leaver = session(&*store, "leaver", LONG_MS).await;
    let lapser = session(&*store, "lapser", LONG_MS).await;
    let mortal = session(&*store, "mortal", SHORT_MS).await;
    let other = session(&*store, "other", LONG_MS).await;
    let t0 = grant(&*store, &k, holder, LONG_MS).await;
    ask(&*store, &k, leaver, queued(LONG_MS)).await;
    let short_place = AcquireSpec {
        queue_ms: SHORT_MS,
        ..AcquireSpec::lease(LONG_MS)
    };
    ask(&*store, &k, lapser, short_place).await;
    ask(&*store, &k, mortal, queued(LONG_MS)).await;
    store.leave_queue(&k, leaver).await.unwrap();
    store
        .leave_queue(&k, leaver)
        .await
        .expect("leaving twice is fine");
    // The lapser's place and the mortal session (no heartbeat) end within SHORT_MS.
    poll_until("the places to lapse", EXPIRY_DEADLINE, || async {
        (store.get(&k).await.unwrap().expect("held").waiters == 0).then_some(())
    })
    .await;
    // Nothing to hand over to, nothing to wait for: the key is free at once.
    assert!(store.release(&k, holder, t0).await.unwrap());
    assert!(granted_token(&ask(&*store, &k, other, AcquireSpec::lease(LONG_MS)).await) > Some(t0));
}

/// `spec` asked by request `request`.
fn asked_by(spec: AcquireSpec, request: u64) -> AcquireSpec {
    AcquireSpec {
        request: RequestId(request),
        ..spec
    }
}

/// A request that ended without telling its client gives back the grant the store made for
/// it, and nothing that another session holds or a later request of its own was granted.
async fn an_abandoned_request_gives_back_only_its_own_grant(store: Arc<dyn LockStore>) {
    let k = key("abandoned");
    let asker = session(&*store, "asker", LONG_MS).await;
    let other = session(&*store, "other", LONG_MS).await;
    // With a lock-delay: giving a grant back is voluntary and starts none.
    let first = ask(&*store, &k, asker, asked_by(delayed(LONG_MS, LONG_MS), 1)).await;
    let t0 = granted_token(&first).expect("a free key is granted");
    for (session, request) in [
        (asker, RequestId(2)),
        (other, RequestId(1)),
        (asker, RequestId::NONE),
    ] {
        assert!(
            !store.abandon(&k, session, request, true).await.unwrap(),
            "{request:?} of another session or request abandons nothing"
        );
    }
    assert_eq!(held(&*store, &k, other).await, t0);
    // Request 1 asks again (its last try): still request 1's.
    let again = ask(&*store, &k, asker, asked_by(delayed(LONG_MS, LONG_MS), 1)).await;
    assert_eq!(
        granted_token(&again),
        Some(t0),
        "a re-grant keeps the token"
    );
    assert!(store.abandon(&k, asker, RequestId(1), false).await.unwrap());
    // Given back, not revoked: no lock-delay, the key is free at once.
    let next = ask(&*store, &k, other, AcquireSpec::lease(LONG_MS)).await;
    let t1 = granted_token(&next).expect("free at once");
    assert!(t1 > t0, "{next:?}");
    assert!(store.release(&k, other, t1).await.unwrap());
    // Granted to request 4, then re-granted to request 5 of the same session (a retry, or
    // an older request whose call landed late): either may have told the client, so neither
    // takes it back.
    let t2 =
        granted_token(&ask(&*store, &k, asker, asked_by(AcquireSpec::lease(LONG_MS), 4)).await)
            .expect("free");
    let again = ask(&*store, &k, asker, asked_by(AcquireSpec::lease(LONG_MS), 5)).await;
    assert_eq!(granted_token(&again), Some(t2));
    for request in [4, 5] {
        assert!(
            !store
                .abandon(&k, asker, RequestId(request), false)
                .await
                .unwrap()
        );
    }
    assert_eq!(held(&*store, &k, other).await, t2, "the asker keeps it");
}

/// A grant handed over to the place of a request that has ended goes on to the next waiter
/// when that request is abandoned; where the store wakes instead of handing over, the place
/// goes and the next waiter is first.
async fn a_hand_over_to_an_abandoned_request_goes_on(store: Arc<dyn LockStore>) {
    let k = key("handed-abandoned");
    let holder = session(&*store, "holder", LONG_MS).await;
    let gone = session(&*store, "gone", LONG_MS).await;
    let next = session(&*store, "next", LONG_MS).await;
    let t0 = grant(&*store, &k, holder, LONG_MS).await;
    ask(&*store, &k, gone, asked_by(queued(LONG_MS), 7)).await;
    ask(&*store, &k, next, asked_by(queued(LONG_MS), 8)).await;
    assert!(store.release(&k, holder, t0).await.unwrap());
    if store.hands_over() {
        let t1 = held(&*store, &k, holder).await;
        assert!(t1 > t0, "handed over to the head");
        assert!(
            store.abandon(&k, gone, RequestId(7), true).await.unwrap(),
            "the hand-over was request 7's"
        );
        let t2 = held(&*store, &k, holder).await;
        assert!(t2 > t1, "handed on to the next waiter");
        assert!(!store.abandon(&k, gone, RequestId(7), true).await.unwrap());
        assert!(store.abandon(&k, next, RequestId(8), true).await.unwrap());
    } else {
        assert!(
            !store.abandon(&k, gone, RequestId(7), true).await.unwrap(),
            "no grant was made for it"
        );
        assert_eq!(
            ask(&*store, &k, holder, AcquireSpec::lease(LONG_MS)).await,
            AcquireOutcome::Refused(Refusal::Queued { ahead: 1 }),
            "its place went with it"
        );
        let t1 = granted_token(&ask(&*store, &k, next, asked_by(queued(LONG_MS), 8)).await);
        assert!(t1 > Some(t0));
        assert!(store.abandon(&k, next, RequestId(8), true).await.unwrap());
    }
    assert!(
        granted_token(&ask(&*store, &k, holder, AcquireSpec::lease(LONG_MS)).await).is_some(),
        "nothing is left holding the key"
    );
}

/// A waiter that asks again for a longer place than it first held (on etcd: a lease with a
/// longer TTL) keeps its turn: its place is renewed, not taken anew at the back.
async fn a_place_renewed_for_longer_keeps_its_turn(store: Arc<dyn LockStore>) {
    let k = key("renewed");
    let holder = session(&*store, "holder", LONG_MS).await;
    let first = session(&*store, "first", LONG_MS).await;
    let second = session(&*store, "second", LONG_MS).await;
    let t0 = grant(&*store, &k, holder, LONG_MS).await;
    let short_place = AcquireSpec {
        queue_ms: SHORT_MS,
        ..AcquireSpec::lease(LONG_MS)
    };
    ask(&*store, &k, first, short_place).await;
    ask(&*store, &k, second, queued(LONG_MS)).await;
    // At once, well before the short place lapses.
    ask(&*store, &k, first, queued(LONG_MS)).await;
    assert!(store.release(&k, holder, t0).await.unwrap());
    if store.hands_over() {
        assert!(held(&*store, &k, second).await > t0);
    } else {
        assert_eq!(
            ask(&*store, &k, second, queued(LONG_MS)).await,
            AcquireOutcome::Refused(Refusal::Queued { ahead: 1 })
        );
    }
    assert!(granted_token(&ask(&*store, &k, first, queued(LONG_MS)).await) > Some(t0));
}

async fn wakes_name_the_head_waiter_when_its_key_frees(store: Arc<dyn LockStore>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    store
        .watch_wakes(Arc::new(move |wake| {
            let _ = tx.send(wake);
        }))
        .await
        .unwrap();
    let k = key("wake-me");
    let holder = session(&*store, "holder", LONG_MS).await;
    let first = session(&*store, "first", LONG_MS).await;
    let second = session(&*store, "second", LONG_MS).await;
    let t0 = grant(&*store, &k, holder, LONG_MS).await;
    ask(&*store, &k, first, queued(LONG_MS)).await;
    ask(&*store, &k, second, queued(LONG_MS)).await;
    assert!(store.release(&k, holder, t0).await.unwrap());
    let expect_head = |session: SessionId| Wake::Head {
        key: k.clone(),
        session,
    };
    let next_wake = async |rx: &mut tokio::sync::mpsc::UnboundedReceiver<Wake>| {
        tokio::time::timeout(EXPIRY_DEADLINE, async {
            loop {
                match rx.recv().await.expect("the sink lives") {
                    Wake::Everyone => continue,
                    wake => return wake,
                }
            }
        })
        .await
        .expect("a wake-up within the deadline")
    };
    if !store.hands_over() {
        assert_eq!(next_wake(&mut rx).await, expect_head(first));
        // The head gives up: the next in line is woken.
        store.leave_queue(&k, first).await.unwrap();
        assert_eq!(next_wake(&mut rx).await, expect_head(second));
        return;
    }
    // The head is granted the key by the release itself, with the next token and the lease
    // its place asked for; the wake-up carries that grant.
    let handed_to = async |rx: &mut tokio::sync::mpsc::UnboundedReceiver<Wake>,
                           session: SessionId,
                           after: FencingToken| {
        let wake = next_wake(rx).await;
        let Wake::HandedOver {
            grant,
            place_age_ms,
        } = wake
        else {
            panic!("expected a hand-over to {session:?}, got {wake:?}");
        };
        assert_eq!(
            (&grant.lock_key, grant.session_id, grant.lease_ms),
            (&k, session, LONG_MS)
        );
        assert!(grant.fencing_token > after, "{grant:?} after {after}");
        assert!(
            place_age_ms < EXPIRY_DEADLINE.as_millis() as u64,
            "{place_age_ms}"
        );
        let view = store.get(&k).await.unwrap().expect("held by the head");
        assert_eq!(view.fencing_token, grant.fencing_token);
        grant.fencing_token
    };
    let t1 = handed_to(&mut rx, first, t0).await;
    // Its parked request asks again (or a retry does): the same grant.
    assert_eq!(
        granted_token(&ask(&*store, &k, first, queued(LONG_MS)).await),
        Some(t1)
    );
    // Each release hands over to the next in line, skipping nobody.
    assert!(store.release(&k, first, t1).await.unwrap());
    handed_to(&mut rx, second, t1).await;
}

async fn lock_delay_follows_expiry_and_revoke_but_not_release(store: Arc<dyn LockStore>) {
    const DELAY_MS: u64 = 1_500;
    let a = session(&*store, "a", LONG_MS).await;
    let b = session(&*store, "b", LONG_MS).await;

    // Voluntary release: no delay.
    let k = key("released");
    let t = granted_token(&ask(&*store, &k, a, delayed(LONG_MS, DELAY_MS)).await).unwrap();
    assert!(store.release(&k, a, t).await.unwrap());
    assert!(granted_token(&ask(&*store, &k, b, AcquireSpec::lease(LONG_MS)).await).is_some());

    // Revoke: others wait out the delay; the revoked session itself is not held back.
    let k = key("revoked");
    granted_token(&ask(&*store, &k, a, delayed(LONG_MS, DELAY_MS)).await).unwrap();
    assert!(store.revoke(&k, &note(None)).await.unwrap().is_some());
    match ask(&*store, &k, b, AcquireSpec::lease(LONG_MS)).await {
        AcquireOutcome::Refused(Refusal::Delayed { remaining_ms }) => {
            assert!((1..=DELAY_MS).contains(&remaining_ms), "{remaining_ms}")
        }
        other => panic!("expected the lock-delay, got {other:?}"),
    }
    assert!(granted_token(&ask(&*store, &k, a, AcquireSpec::lease(LONG_MS)).await).is_some());

    // Lease expiry: the delay runs from the expiry, whether or not the reaper ran.
    for reap in [false, true] {
        let k = key(&format!("expired-{reap}"));
        let t = granted_token(&ask(&*store, &k, a, delayed(SHORT_MS, DELAY_MS)).await).unwrap();
        poll_until("the short lease to end", EXPIRY_DEADLINE, || async {
            store.get(&k).await.unwrap().is_none().then_some(())
        })
        .await;
        if reap {
            poll_until(
                "the reaper to remove the grant",
                EXPIRY_DEADLINE,
                || async {
                    let report = store.reap_expired().await.unwrap();
                    report
                        .locks
                        .iter()
                        .any(|l| l.lock_key == k && l.fencing_token == t)
                        .then_some(())
                },
            )
            .await;
        }
        assert!(
            matches!(
                ask(&*store, &k, b, AcquireSpec::lease(LONG_MS)).await,
                AcquireOutcome::Refused(Refusal::Delayed { .. })
            ),
            "reaped: {reap}"
        );
        let t2 = eventually_granted(&*store, &k, b).await;
        assert!(t2 > t, "reaped: {reap}");
    }
}
/// The grant decision's table (`lock_store::decide`), run against the store: each situation
/// the table names (holder: nobody, the caller, another; a lock-delay in force or not; two
/// sessions queued or none) is built through the store's own calls, and the store must
/// answer what `decide` answers for it. PostgreSQL's `lock_acquire` keeps its own copy of
/// the rule in PL/pgSQL; this case is what holds every copy to the same answers.
async fn answers_follow_the_decision_table(store: Arc<dyn LockStore>) {
    const DELAY_MS: u64 = 20_000;
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Holder {
        Nobody,
        Caller,
        Another,
    }
    for holder in [Holder::Nobody, Holder::Caller, Holder::Another] {
        for delay in [false, true] {
            for queue in [false, true] {
                let row = format!("holder {holder:?}, delay {delay}, queue {queue}");
                let k = key(&format!("table-{holder:?}-{delay}-{queue}"));
                let me = session(&*store, "caller", LONG_MS).await;
                let other = session(&*store, "other", LONG_MS).await;
                let holder_session = match holder {
                    Holder::Caller => me,
                    _ => other,
                };
                let mut queued_already = false;
                let mut last_token = if delay {
                    // A delay in force: a grant with a lock-delay, revoked (an involuntary
                    // end). Its session is exempt, so it may hold the key again below.
                    let t = granted_token(
                        &ask(&*store, &k, holder_session, delayed(LONG_MS, DELAY_MS)).await,
                    )
                    .unwrap();
                    assert!(
                        store.revoke(&k, &note(None)).await.unwrap().is_some(),
                        "{row}"
                    );
                    t
                } else {
                    // A grant released (no delay), so the key has a last token; places
                    // taken while it is held stay queued once it is free.
                    let t = session(&*store, "before", LONG_MS).await;
                    let token = grant(&*store, &k, t, LONG_MS).await;
                    if queue && holder == Holder::Nobody {
                        take_two_places(&*store, &k).await;
                        queued_already = true;
                    }
                    assert!(store.release(&k, t, token).await.unwrap(), "{row}");
                    if queued_already && store.hands_over() {
                        // A free key with live places is not a state such a store reaches
                        // by release: it went to the first place, which holds it now.
                        assert_eq!(held(&*store, &k, me).await, FencingToken(token.0 + 1));
                        continue;
                    }
                    token
                };
                let mut holder_view = None;
                if holder != Holder::Nobody {
                    let token = grant(&*store, &k, holder_session, LONG_MS).await;
                    last_token = token;
                    holder_view = Some(HolderView {
                        session: holder_session,
                        token,
                        free_in_ms: LONG_MS,
                    });
                }
                if queue && !queued_already {
                    take_two_places(&*store, &k).await;
                }
                let view = KeyView {
                    holder: holder_view,
                    delay_left_ms: if delay && holder_session != me {
                        DELAY_MS
                    } else {
                        0
                    },
                    ahead: if queue { 2 } else { 0 },
                    last_token: last_token.0,
                };
                let expected = decide(&view, me);
                let answer = ask(&*store, &k, me, AcquireSpec::lease(LONG_MS)).await;
                let agrees = match (expected, &answer) {
                    (
                        Decision::Regrant { token } | Decision::Grant { token },
                        AcquireOutcome::Granted { grant, .. },
                    ) => grant.fencing_token == token,
                    (
                        Decision::Refuse(Refusal::Held { holder_token, .. }),
                        AcquireOutcome::Refused(Refusal::Held {
                            holder_token: t, ..
                        }),
                    ) => *t == holder_token,
                    (
                        Decision::Refuse(Refusal::Delayed { .. }),
                        AcquireOutcome::Refused(Refusal::Delayed { remaining_ms }),
                    ) => (1..=DELAY_MS).contains(remaining_ms),
                    (
                        Decision::Refuse(Refusal::Queued { ahead }),
                        AcquireOutcome::Refused(Refusal::Queued { ahead: a }),
                    ) => *a == ahead,
                    _ => false,
                };
                assert!(
                    agrees,
                    "{row}: the decision table says {expected:?}, the store answered {answer:?}"
                );
            }
        }
    }
}

/// A set of keys (ADR 0007), sorted as the store takes it.
fn set_of(raw: &[&str]) -> Vec<LockKey> {
    let keys = raw.iter().map(|k| key(k)).collect();
    lock_server::store::key_set::canonical(keys).expect("each key once")
}

async fn ask_set(
    store: &dyn LockStore,
    keys: &[LockKey],
    s: SessionId,
    spec: AcquireSpec,
) -> SetOutcome {
    store.acquire_set(keys, s, spec).await.expect("acquire set")
}

fn set_tokens(outcome: &SetOutcome) -> Vec<FencingToken> {
    match outcome {
        SetOutcome::Granted { grants, .. } => grants.iter().map(|g| g.fencing_token).collect(),
        refused => panic!("expected the set granted, got {refused:?}"),
    }
}

/// Who holds `k` now, and with what token.
async fn holder_of(store: &dyn LockStore, k: &LockKey) -> Option<FencingToken> {
    store.get(k).await.unwrap().map(|info| info.fencing_token)
}

async fn a_set_is_granted_all_or_nothing(store: Arc<dyn LockStore>) {
    let keys = set_of(&["acct:c", "acct:a", "acct:b"]);
    let (a, b, c) = (&keys[0], &keys[1], &keys[2]);
    let holder = session(&*store, "holder", LONG_MS).await;
    let payer = session(&*store, "payer", LONG_MS).await;
    let old_a = grant(&*store, a, holder, LONG_MS).await;
    assert!(store.release(a, holder, old_a).await.unwrap());
    let tb = grant(&*store, b, holder, LONG_MS).await;
    // One member held by another session: nothing is granted, and the answer names it.
    let refused = ask_set(&*store, &keys, payer, AcquireSpec::lease(LONG_MS)).await;
    assert!(
        matches!(&refused, SetOutcome::Refused { key, refusal: Refusal::Held { holder_token, .. } }
            if key == b && *holder_token == tb),
        "{refused:?}"
    );
    assert_eq!(holder_of(&*store, a).await, None, "no member is held alone");
    assert_eq!(holder_of(&*store, c).await, None, "no member is held alone");
    assert!(store.release(b, holder, tb).await.unwrap());
    // Free: every member, in the set's order, each with a token above its key's last.
    let granted = ask_set(&*store, &keys, payer, AcquireSpec::lease(LONG_MS)).await;
    let tokens = set_tokens(&granted);
    let SetOutcome::Granted { grants, .. } = &granted else {
        unreachable!()
    };
    let order: Vec<&LockKey> = grants.iter().map(|g| &g.lock_key).collect();
    assert_eq!(order, vec![a, b, c]);
    assert!(tokens[0] > old_a && tokens[1] > tb, "{tokens:?}");
    for (k, t) in keys.iter().zip(&tokens) {
        assert_eq!(holder_of(&*store, k).await, Some(*t), "{k} held by the set");
    }
    // Asked again: the same grants. Renewed and released per key.
    let again = ask_set(&*store, &keys, payer, AcquireSpec::lease(LONG_MS)).await;
    assert_eq!(set_tokens(&again), tokens);
    store
        .renew(a, payer, tokens[0])
        .await
        .expect("renew a member");
    assert!(store.release(b, payer, tokens[1]).await.unwrap());
    assert_eq!(holder_of(&*store, c).await, Some(tokens[2]), "c stays held");
    assert!(grant(&*store, b, holder, LONG_MS).await > tokens[1]);
}

async fn a_waiting_set_holds_nothing_and_is_ahead_on_every_key(store: Arc<dyn LockStore>) {
    let keys = set_of(&["acct:a", "acct:b"]);
    let (a, b) = (&keys[0], &keys[1]);
    let holder = session(&*store, "holder", LONG_MS).await;
    let payer = session(&*store, "payer", LONG_MS).await;
    let later = session(&*store, "later", LONG_MS).await;
    let ta = grant(&*store, a, holder, LONG_MS).await;
    let waiting = ask_set(&*store, &keys, payer, queued(LONG_MS)).await;
    assert!(
        matches!(&waiting, SetOutcome::Refused { key, refusal: Refusal::Held { .. } } if key == a),
        "{waiting:?}"
    );
    assert_eq!(
        holder_of(&*store, b).await,
        None,
        "a waiting set holds no key"
    );
    // The set queued first: a later caller waits behind it even on the free key.
    assert_eq!(
        ask(&*store, b, later, queued(LONG_MS)).await,
        AcquireOutcome::Refused(Refusal::Queued { ahead: 1 })
    );
    // Its key freed, a set's place is never handed the key alone.
    assert!(store.release(a, holder, ta).await.unwrap());
    assert_eq!(
        holder_of(&*store, a).await,
        None,
        "no member handed over alone"
    );
    let tokens = set_tokens(&ask_set(&*store, &keys, payer, queued(LONG_MS)).await);
    assert!(tokens[0] > ta);
    // Granted, the set left both queues: the later caller is next on b.
    assert!(store.release(b, payer, tokens[1]).await.unwrap());
    let next = eventually_granted(&*store, b, later).await;
    assert!(next > tokens[1]);
}

async fn sets_that_share_keys_wait_in_one_order(store: Arc<dyn LockStore>) {
    let first = set_of(&["k:a", "k:b"]);
    let second = set_of(&["k:b", "k:c"]);
    let holder = session(&*store, "holder", LONG_MS).await;
    let s1 = session(&*store, "s1", LONG_MS).await;
    let s2 = session(&*store, "s2", LONG_MS).await;
    let ta = grant(&*store, &first[0], holder, LONG_MS).await;
    assert!(matches!(
        ask_set(&*store, &first, s1, queued(LONG_MS)).await,
        SetOutcome::Refused { .. }
    ));
    // The second set queued after the first on b: b is free, but it is behind.
    let behind = ask_set(&*store, &second, s2, queued(LONG_MS)).await;
    assert!(
        matches!(&behind, SetOutcome::Refused { key, refusal: Refusal::Queued { ahead: 1 } }
            if *key == second[0]),
        "{behind:?}"
    );
    assert_eq!(holder_of(&*store, &second[1]).await, None);
    assert!(store.release(&first[0], holder, ta).await.unwrap());
    let t1 = set_tokens(&ask_set(&*store, &first, s1, queued(LONG_MS)).await);
    assert!(matches!(
        ask_set(&*store, &second, s2, queued(LONG_MS)).await,
        SetOutcome::Refused {
            refusal: Refusal::Held { .. },
            ..
        }
    ));
    assert!(store.release(&first[1], s1, t1[1]).await.unwrap());
    let t2 = set_tokens(&ask_set(&*store, &second, s2, queued(LONG_MS)).await);
    assert!(
        t2[0] > t1[1],
        "b's token rises from set to set: {t1:?} {t2:?}"
    );
}

async fn a_set_regranting_a_held_key_leaves_no_place_and_keeps_its_grant(
    store: Arc<dyn LockStore>,
) {
    let keys = set_of(&["own:a", "own:b"]);
    let (a, b) = (&keys[0], &keys[1]);
    let s = session(&*store, "s", LONG_MS).await;
    let other = session(&*store, "other", LONG_MS).await;
    let later = session(&*store, "later", LONG_MS).await;
    // Request 1 of s is granted a; its answer is lost (it will abandon).
    let first = ask(&*store, a, s, asked_by(AcquireSpec::lease(LONG_MS), 1)).await;
    let ta = granted_token(&first).expect("a granted");
    let tb = grant(&*store, b, other, LONG_MS).await;
    // Request 2 of s waits for the set: a place on both keys.
    let waiting = store
        .acquire_set(&keys, s, asked_by(queued(LONG_MS), 2))
        .await
        .unwrap();
    assert!(
        matches!(&waiting, SetOutcome::Refused { key, .. } if key == b),
        "{waiting:?}"
    );
    assert!(store.release(b, other, tb).await.unwrap());
    let set = store
        .acquire_set(&keys, s, asked_by(queued(LONG_MS), 2))
        .await
        .unwrap();
    let tokens = set_tokens(&set);
    assert_eq!(tokens[0], ta, "a key held already: the same grant");
    // Request 1 ends unanswered: it may not take back the grant request 2 was told of.
    assert!(!store.abandon(a, s, RequestId(1), false).await.unwrap());
    assert_eq!(holder_of(&*store, a).await, Some(ta));
    // The set left every queue with its grant: once a is released, a try takes it at once.
    assert!(store.release(a, s, ta).await.unwrap());
    let next = ask(&*store, a, later, AcquireSpec::lease(LONG_MS)).await;
    assert!(
        granted_token(&next) > Some(ta),
        "no place of the set left on a: {next:?}"
    );
}

async fn concurrent_sets_over_shared_keys_never_overlap(store: Arc<dyn LockStore>) {
    const SETS: usize = 6;
    let all = ["r:1", "r:2", "r:3", "r:4"];
    let mut tasks = Vec::new();
    for i in 0..SETS {
        let store = store.clone();
        // Each set takes two neighbours, so every key is shared by two sets.
        let keys = set_of(&[all[i % 4], all[(i + 1) % 4]]);
        tasks.push(tokio::spawn(async move {
            let s = session(&*store, &format!("s{i}"), LONG_MS).await;
            (
                keys.clone(),
                s,
                ask_set(&*store, &keys, s, AcquireSpec::lease(LONG_MS)).await,
            )
        }));
    }
    let mut held: Vec<(LockKey, SessionId)> = Vec::new();
    for task in tasks {
        let (keys, s, outcome) = task.await.unwrap();
        if let SetOutcome::Granted { grants, .. } = outcome {
            assert_eq!(grants.len(), keys.len());
            held.extend(keys.into_iter().map(|k| (k, s)));
        }
    }
    assert!(!held.is_empty(), "some set is granted");
    for k in all.map(key) {
        let holders: Vec<_> = held.iter().filter(|(h, _)| *h == k).collect();
        assert!(holders.len() <= 1, "{k} granted twice: {holders:?}");
        let live = holder_of(&*store, &k).await;
        assert_eq!(
            live.is_some(),
            holders.len() == 1,
            "{k}: only granted sets hold keys"
        );
    }
}

/// Two new sessions take queue places on `k`, which must be held or in a delay.
async fn take_two_places(store: &dyn LockStore, k: &LockKey) {
    for name in ["q1", "q2"] {
        let q = session(store, name, LONG_MS).await;
        let outcome = ask(store, k, q, queued(LONG_MS)).await;
        assert!(
            matches!(outcome, AcquireOutcome::Refused(_)),
            "{name} queues behind the holder or the delay: {outcome:?}"
        );
    }
}

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        // PostgreSQL as lock-server runs it (group commit), and each write alone (group
        // commit off, and the path a failed batch falls back to).
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let (store, _url) = crate::support::pg_store().await;
                    super::$case(std::sync::Arc::new(lock_server::store::Batched::new(store))).await;
                }
            )*
        }
        mod postgres_alone {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let (store, _url) = crate::support::pg_store().await;
                    super::$case(store).await;
                }
            )*
        }
        // PostgreSQL with hand-over off: a freed key's head waiter is woken to ask.
        mod postgres_waking {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let store = crate::support::pg_store_waking().await;
                    super::$case(std::sync::Arc::new(lock_server::store::Batched::new(store))).await;
                }
            )*
        }
        mod etcd {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(crate::support::StoreAt::etcd().open().await).await;
                }
            )*
        }
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(std::sync::Arc::new(super::MemoryStore::new())).await;
                }
            )*
        }
        // Batching's shell over a store without a batch statement (writes applied one by one).
        mod memory_batched {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let store = std::sync::Arc::new(super::MemoryStore::new());
                    super::$case(std::sync::Arc::new(lock_server::store::Batched::new(store))).await;
                }
            )*
        }
    };
}

conformance!(
    session_lifecycle,
    tokens_increase_across_grants,
    same_session_reacquire_returns_same_token,
    renew_keeps_token_and_refuses_stale,
    release_is_compare_and_delete,
    expired_lease_is_regranted_with_higher_token,
    session_expiry_frees_its_locks,
    delete_session_releases_its_locks,
    get_and_revoke,
    reaper_removes_expired_grants_and_sessions,
    the_reaper_reports_the_grants_of_an_expired_session,
    concurrent_acquirers_exactly_one_wins,
    a_hot_key_under_many_cycling_acquirers_answers_held_never_an_error,
    ready_when_healthy,
    // Queues and lock-delay.
    waiters_are_granted_in_fifo_order,
    a_waiter_that_leaves_lapses_or_dies_blocks_nobody,
    a_place_renewed_for_longer_keeps_its_turn,
    an_abandoned_request_gives_back_only_its_own_grant,
    a_hand_over_to_an_abandoned_request_goes_on,
    wakes_name_the_head_waiter_when_its_key_frees,
    lock_delay_follows_expiry_and_revoke_but_not_release,
    answers_follow_the_decision_table,
    // Key sets.
    a_set_is_granted_all_or_nothing,
    a_waiting_set_holds_nothing_and_is_ahead_on_every_key,
    sets_that_share_keys_wait_in_one_order,
    a_set_regranting_a_held_key_leaves_no_place_and_keeps_its_grant,
    concurrent_sets_over_shared_keys_never_overlap,
);

/// etcd only: the wake-up watch is one long call, which must outlive the request timeout
/// and etcd's ping policy. (Its first version pinged every 500 ms like the other calls;
/// etcd answers pings more frequent than `--grpc-keepalive-min-time`, 5 s, with GOAWAY,
/// so the watch broke every 2 s and waiters got `Everyone` instead of their `Head`.)
mod etcd_wake_watch {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_watch_older_than_a_few_seconds_still_names_the_head_waiter() {
        let store = crate::support::StoreAt::etcd().open().await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        store
            .watch_wakes(Arc::new(move |wake| {
                let _ = tx.send(wake);
            }))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        let k = key("late");
        let holder = session(&*store, "holder", LONG_MS).await;
        let first = session(&*store, "first", LONG_MS).await;
        let t0 = grant(&*store, &k, holder, LONG_MS).await;
        ask(&*store, &k, first, queued(LONG_MS)).await;
        assert!(store.release(&k, holder, t0).await.unwrap());
        let wake = tokio::time::timeout(EXPIRY_DEADLINE, rx.recv())
            .await
            .expect("a wake-up within the deadline");
        assert_eq!(
            wake,
            Some(Wake::Head {
                key: k,
                session: first
            }),
            "the first wake-up names the head waiter (Everyone: the watch restarted)"
        );
    }
}

mod elections;
mod events;
mod shares;
