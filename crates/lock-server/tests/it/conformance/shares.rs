//! Conformance of readers and permits (ADR 0007), on every backend: one key, one kind; a
//! semaphore's slots and tokens; readers sharing, a writer alone, FIFO with readers
//! batched; renew, release, expiry, revoke and a session's close as for a lock; the waiter a
//! freed share wakes.

use super::*;
use lock_api::{Claim, GrantScope};

fn permits(n: u32) -> Claim {
    Claim::Permit { permits: n }
}

fn claiming(claim: Claim, lease_ms: u64) -> AcquireSpec {
    AcquireSpec::lease(lease_ms).claiming(claim)
}

/// The grant's token and scope, or the refusal.
async fn try_share(
    store: &dyn LockStore,
    k: &LockKey,
    s: SessionId,
    spec: AcquireSpec,
) -> Result<(FencingToken, GrantScope), Refusal> {
    match store.acquire_with(k, s, spec).await.expect("acquire") {
        AcquireOutcome::Granted { grant, .. } => Ok((grant.fencing_token, grant.scope)),
        AcquireOutcome::Refused(refusal) => Err(refusal),
    }
}

async fn share(
    store: &dyn LockStore,
    k: &LockKey,
    s: SessionId,
    claim: Claim,
) -> (FencingToken, GrantScope) {
    try_share(store, k, s, claiming(claim, LONG_MS))
        .await
        .unwrap_or_else(|refusal| panic!("expected {claim:?} of {k} granted, got {refusal:?}"))
}

async fn kind_conflict(store: &dyn LockStore, k: &LockKey, s: SessionId, claim: Claim) -> String {
    match store.acquire_with(k, s, claiming(claim, LONG_MS)).await {
        Err(StoreError::KindConflict { lock_key, held, .. }) if &lock_key == k => held,
        other => panic!("expected a kind conflict for {claim:?} on {k}, got {other:?}"),
    }
}

async fn sessions<const N: usize>(store: &dyn LockStore) -> [SessionId; N] {
    let mut out = [SessionId(uuid::Uuid::nil()); N];
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = session(store, &format!("s{i}"), LONG_MS).await;
    }
    out
}

async fn permits_fill_their_slots_each_with_its_own_token(store: Arc<dyn LockStore>) {
    let k = key("pool");
    let [a, b, c] = sessions::<3>(&*store).await;
    let (ta, sa) = share(&*store, &k, a, permits(2)).await;
    let (tb, sb) = share(&*store, &k, b, permits(2)).await;
    assert_eq!(
        (sa, sb),
        (
            GrantScope::Permit { slot: 0 },
            GrantScope::Permit { slot: 1 }
        )
    );
    assert!(tb > ta, "tokens rise per key across slots");
    // Full: the holder that ends soonest is named.
    let full = try_share(&*store, &k, c, claiming(permits(2), LONG_MS)).await;
    assert!(matches!(full, Err(Refusal::Held { .. })), "{full:?}");
    // The caller's own permit again: the same slot and token.
    assert_eq!(share(&*store, &k, a, permits(2)).await, (ta, sa));
    let view = store.get(&k).await.unwrap().expect("held");
    assert_eq!(view.permits, Some(2));
    let held: Vec<(FencingToken, GrantScope)> = view
        .holders
        .iter()
        .map(|h| (h.fencing_token, h.scope))
        .collect();
    assert_eq!(held, vec![(ta, sa), (tb, sb)]);
    assert!(store.release(&k, a, ta).await.unwrap());
    let (tc, sc) = share(&*store, &k, c, permits(2)).await;
    assert_eq!(sc, GrantScope::Permit { slot: 0 }, "the lowest free slot");
    assert!(tc > tb, "{tc} > {tb}");
}

async fn a_key_is_of_one_kind_while_it_is_held(store: Arc<dyn LockStore>) {
    let k = key("kinds");
    let [a, b] = sessions::<2>(&*store).await;
    let (t, _) = share(&*store, &k, a, permits(2)).await;
    assert!(
        kind_conflict(&*store, &k, b, Claim::Exclusive)
            .await
            .contains("2 permits")
    );
    assert!(
        kind_conflict(&*store, &k, b, Claim::Shared)
            .await
            .contains("2 permits")
    );
    assert!(
        kind_conflict(&*store, &k, b, permits(3))
            .await
            .contains("2 permits")
    );
    assert!(store.release(&k, a, t).await.unwrap());
    // Free again: any kind starts it anew, on the key's one counter.
    let lock = grant(&*store, &k, b, LONG_MS).await;
    assert!(lock > t);
    assert!(
        kind_conflict(&*store, &k, a, permits(2))
            .await
            .contains("exclusive")
    );
    // A writer's readers wait for it rather than conflict.
    let waits = try_share(&*store, &k, a, claiming(Claim::Shared, LONG_MS)).await;
    assert_eq!(
        waits.map_err(|r| matches!(r, Refusal::Held { holder_token, .. } if holder_token == lock)),
        Err(true)
    );
    // A session holds a key in one mode: a writer asking to read, a reader asking to write.
    assert!(
        kind_conflict(&*store, &k, b, Claim::Shared)
            .await
            .contains("exclusive")
    );
    assert!(store.release(&k, b, lock).await.unwrap());
    share(&*store, &k, a, Claim::Shared).await;
    assert!(
        kind_conflict(&*store, &k, a, Claim::Exclusive)
            .await
            .contains("shared")
    );
}

async fn readers_share_and_a_queued_writer_is_not_overtaken(store: Arc<dyn LockStore>) {
    let k = key("rw");
    let [r1, r2, w, late] = sessions::<4>(&*store).await;
    let (t1, s1) = share(&*store, &k, r1, Claim::Shared).await;
    let (t2, _) = share(&*store, &k, r2, Claim::Shared).await;
    assert_eq!(s1, GrantScope::Shared);
    assert!(t2 > t1);
    // The writer waits for every reader, in the queue.
    let queued_writer = try_share(&*store, &k, w, queued(LONG_MS)).await;
    assert!(
        matches!(queued_writer, Err(Refusal::Held { .. })),
        "{queued_writer:?}"
    );
    // A reader after the queued writer waits behind it.
    let late_reader = try_share(&*store, &k, late, queued(LONG_MS).claiming(Claim::Shared)).await;
    assert_eq!(late_reader, Err(Refusal::Queued { ahead: 1 }));
    assert!(store.release(&k, r1, t1).await.unwrap());
    assert!(store.release(&k, r2, t2).await.unwrap());
    let writer = granted_token(&ask(&*store, &k, w, queued(LONG_MS)).await).expect("the writer");
    assert!(
        writer > t2,
        "a writer's token is above every reader's before it"
    );
    assert!(store.release(&k, w, writer).await.unwrap());
    let reader = try_share(&*store, &k, late, queued(LONG_MS).claiming(Claim::Shared)).await;
    assert!(reader.expect("the late reader").0 > writer);
}

async fn a_share_renews_releases_and_expires_as_a_lock(store: Arc<dyn LockStore>) {
    let k = key("share-life");
    let [a, b] = sessions::<2>(&*store).await;
    let (t, scope) = share(&*store, &k, a, permits(1)).await;
    let renewed = store.renew(&k, a, t).await.unwrap();
    assert_eq!((renewed.fencing_token, renewed.scope), (t, scope));
    let wrong = store.renew(&k, b, t).await;
    assert!(
        matches!(wrong, Err(StoreError::LockLost { .. })),
        "{wrong:?}"
    );
    assert!(!store.release(&k, b, t).await.unwrap(), "another session's");
    assert!(store.release(&k, a, t).await.unwrap());
    assert!(!store.release(&k, a, t).await.unwrap(), "released once");
    // A short permit lapses; the reaper reports it; its lock-delay holds the key.
    let spec = AcquireSpec {
        lock_delay_ms: 400,
        ..claiming(permits(1), SHORT_MS)
    };
    let (short, _) = try_share(&*store, &k, a, spec).await.expect("granted");
    let report = poll_until("the reaper to end the permit", EXPIRY_DEADLINE, || async {
        let report = store.reap_expired().await.expect("reap");
        report
            .locks
            .iter()
            .any(|l| l.lock_key == k)
            .then_some(report)
    })
    .await;
    let ended = report.locks.iter().find(|l| l.lock_key == k).unwrap();
    assert_eq!((ended.fencing_token, ended.session_id), (short, a));
    let lost = store.renew(&k, a, short).await;
    assert!(matches!(lost, Err(StoreError::LockLost { .. })), "{lost:?}");
    let next = poll_until("the lock-delay to end", EXPIRY_DEADLINE, || async {
        try_share(&*store, &k, b, claiming(permits(1), LONG_MS))
            .await
            .ok()
    })
    .await;
    assert!(next.0 > short, "tokens are never reused");
}

async fn revoke_and_close_end_every_share(store: Arc<dyn LockStore>) {
    let k = key("share-revoke");
    let [a, b, c] = sessions::<3>(&*store).await;
    let (ta, _) = share(&*store, &k, a, Claim::Shared).await;
    let (tb, _) = share(&*store, &k, b, Claim::Shared).await;
    let note = RevokeNote {
        by: "ops".into(),
        reason: None,
    };
    assert_eq!(
        store.revoke(&k, &note).await.unwrap(),
        Some(tb),
        "the newest is named"
    );
    assert!(store.get(&k).await.unwrap().is_none(), "every reader ended");
    for (s, t) in [(a, ta), (b, tb)] {
        let lost = store.renew(&k, s, t).await;
        assert!(matches!(lost, Err(StoreError::LockLost { .. })), "{lost:?}");
    }
    let (tc, _) = share(&*store, &k, c, permits(3)).await;
    assert!(tc > tb);
    assert!(store.delete_session(c).await.unwrap());
    assert!(
        store.get(&k).await.unwrap().is_none(),
        "a closed session's permit ends"
    );
}

async fn a_freed_share_wakes_the_waiter_it_makes_room_for(store: Arc<dyn LockStore>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    store
        .watch_wakes(Arc::new(move |wake| {
            let _ = tx.send(wake);
        }))
        .await
        .unwrap();
    let next_head = async |rx: &mut tokio::sync::mpsc::UnboundedReceiver<Wake>| {
        tokio::time::timeout(EXPIRY_DEADLINE, async {
            loop {
                if let Wake::Head { key, session } = rx.recv().await.expect("the sink lives") {
                    return (key, session);
                }
            }
        })
        .await
        .expect("a wake-up within the deadline")
    };
    let k = key("share-wake");
    let [holder, waiter, writer, r1, r2] = sessions::<5>(&*store).await;
    let (t, _) = share(&*store, &k, holder, permits(1)).await;
    let spec = queued(LONG_MS).claiming(permits(1));
    assert!(try_share(&*store, &k, waiter, spec).await.is_err());
    assert!(store.release(&k, holder, t).await.unwrap());
    assert_eq!(
        next_head(&mut rx).await,
        (k.clone(), waiter),
        "woken, never handed a permit"
    );
    let (tw, _) = try_share(&*store, &k, waiter, spec)
        .await
        .expect("granted when it asks");
    assert!(store.release(&k, waiter, tw).await.unwrap());
    // A writer frees the key for two queued readers: the first is woken, and its grant wakes
    // the second.
    let k = key("share-wake-rw");
    let lock = grant(&*store, &k, writer, LONG_MS).await;
    let read = queued(LONG_MS).claiming(Claim::Shared);
    assert!(try_share(&*store, &k, r1, read).await.is_err());
    assert!(try_share(&*store, &k, r2, read).await.is_err());
    assert!(store.release(&k, writer, lock).await.unwrap());
    assert_eq!(next_head(&mut rx).await, (k.clone(), r1));
    try_share(&*store, &k, r1, read)
        .await
        .expect("the first reader");
    assert_eq!(next_head(&mut rx).await, (k.clone(), r2));
    try_share(&*store, &k, r2, read)
        .await
        .expect("the second reader beside it");
}

async fn an_abandoned_request_gives_back_only_its_own_share(store: Arc<dyn LockStore>) {
    let k = key("share-abandon");
    let [a, b] = sessions::<2>(&*store).await;
    let read = |request| asked_by(claiming(Claim::Shared, LONG_MS), request);
    let (ta, _) = try_share(&*store, &k, a, read(7)).await.expect("granted");
    let (tb, _) = try_share(&*store, &k, b, read(8)).await.expect("granted");
    assert!(
        !store.abandon(&k, a, RequestId(8), false).await.unwrap(),
        "b's request"
    );
    assert!(store.abandon(&k, a, RequestId(7), false).await.unwrap());
    let lost = store.renew(&k, a, ta).await;
    assert!(matches!(lost, Err(StoreError::LockLost { .. })), "{lost:?}");
    // Asked again by another request of b's: no single request's, so never abandoned.
    assert_eq!(
        try_share(&*store, &k, b, read(9)).await.expect("again").0,
        tb
    );
    assert!(!store.abandon(&k, b, RequestId(8), false).await.unwrap());
    assert_eq!(store.renew(&k, b, tb).await.unwrap().fencing_token, tb);
}

async fn an_ended_readers_lock_delay_holds_a_writer_before_any_reaper(store: Arc<dyn LockStore>) {
    let k = key("share-delay");
    let [r, w] = sessions::<2>(&*store).await;
    let spec = AcquireSpec {
        lock_delay_ms: 5_000,
        ..claiming(Claim::Shared, SHORT_MS)
    };
    let (t, _) = try_share(&*store, &k, r, spec).await.expect("granted");
    poll_until("the reader's lease to end", EXPIRY_DEADLINE, || async {
        store.get(&k).await.unwrap().is_none().then_some(())
    })
    .await;
    let lost = store.renew(&k, r, t).await;
    assert!(matches!(lost, Err(StoreError::LockLost { .. })), "{lost:?}");
    match store.acquire(&k, w, LONG_MS).await.expect("acquire") {
        AcquireOutcome::Refused(Refusal::Delayed { remaining_ms }) => {
            assert!(remaining_ms > 1_000, "{remaining_ms}");
        }
        other => panic!("a writer within the reader's lock-delay: {other:?}"),
    }
}

async fn share_waiters_keep_their_turns_across_calls(store: Arc<dyn LockStore>) {
    let k = key("share-turns");
    let [h, p1, p2] = sessions::<3>(&*store).await;
    let wait = queued(LONG_MS).claiming(permits(1));
    let (t, _) = share(&*store, &k, h, permits(1)).await;
    for waiter in [p1, p2, p1, p2] {
        assert!(try_share(&*store, &k, waiter, wait).await.is_err(), "full");
    }
    assert!(store.release(&k, h, t).await.unwrap());
    let second = try_share(&*store, &k, p2, wait).await;
    assert_eq!(second, Err(Refusal::Queued { ahead: 1 }), "p1 came first");
    try_share(&*store, &k, p1, wait)
        .await
        .expect("the head is granted");
}

/// Who holds a hot key now, as the cyclers saw their grants: counted from the answer to the
/// release, inside the store's own interval, so an overlap seen here is an overlap there.
#[derive(Debug, Default)]
struct Seen {
    readers: std::sync::atomic::AtomicI64,
    writers: std::sync::atomic::AtomicI64,
    most: std::sync::atomic::AtomicI64,
}

async fn cycle(
    store: &dyn LockStore,
    k: &LockKey,
    s: SessionId,
    claim: Claim,
    seen: &Seen,
    limit: i64,
) {
    use std::sync::atomic::Ordering::SeqCst;
    for attempt in 0..20 {
        let answer = store.acquire_with(k, s, claiming(claim, LONG_MS)).await;
        let token = match answer {
            Ok(AcquireOutcome::Granted { grant, .. }) => grant.fencing_token,
            Ok(AcquireOutcome::Refused(_)) => continue,
            Err(err) => panic!("{claim:?}, attempt {attempt}: {err}"),
        };
        let (mine, other) = match claim {
            Claim::Exclusive => (&seen.writers, &seen.readers),
            Claim::Shared | Claim::Permit { .. } => (&seen.readers, &seen.writers),
        };
        let now = mine.fetch_add(1, SeqCst) + 1;
        seen.most.fetch_max(now, SeqCst);
        assert!(now <= limit, "{now} holders of {claim:?} at once");
        assert_eq!(other.load(SeqCst), 0, "{claim:?} beside the other mode");
        tokio::task::yield_now().await;
        mine.fetch_sub(1, SeqCst);
        assert!(store.release(k, s, token).await.expect("release"));
    }
}

async fn hot_shares_under_many_cyclers_stay_bounded_and_never_error(store: Arc<dyn LockStore>) {
    const CYCLERS: usize = 12;
    let (pool, doc) = (key("hot-pool"), key("hot-doc"));
    let (pool_seen, doc_seen) = (Arc::new(Seen::default()), Arc::new(Seen::default()));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..CYCLERS {
        let s = session(&*store, &format!("cycler-{i}"), LONG_MS).await;
        let (store, pool, doc) = (store.clone(), pool.clone(), doc.clone());
        let (pool_seen, doc_seen) = (pool_seen.clone(), doc_seen.clone());
        tasks.spawn(async move {
            cycle(&*store, &pool, s, permits(3), &pool_seen, 3).await;
            let mode = if i % 3 == 0 {
                Claim::Exclusive
            } else {
                Claim::Shared
            };
            let limit = if mode == Claim::Exclusive {
                1
            } else {
                i64::MAX
            };
            cycle(&*store, &doc, s, mode, &doc_seen, limit).await;
        });
    }
    tasks.join_all().await;
    let most = pool_seen.most.load(std::sync::atomic::Ordering::SeqCst);
    assert!((1..=3).contains(&most), "permits held at once: {most}");
}

conformance!(
    hot_shares_under_many_cyclers_stay_bounded_and_never_error,
    an_ended_readers_lock_delay_holds_a_writer_before_any_reaper,
    share_waiters_keep_their_turns_across_calls,
    an_abandoned_request_gives_back_only_its_own_share,
    permits_fill_their_slots_each_with_its_own_token,
    a_key_is_of_one_kind_while_it_is_held,
    readers_share_and_a_queued_writer_is_not_overtaken,
    a_share_renews_releases_and_expires_as_a_lock,
    revoke_and_close_end_every_share,
    a_freed_share_wakes_the_waiter_it_makes_room_for,
);
