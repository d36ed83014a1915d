//! Group commit on PostgreSQL: a batch answers each write from its own row, a write sees the
//! writes before it in its batch, and a write that fails in the store fails alone. (The
//! conformance suite runs every case through `Batched` too.)

use std::sync::Arc;

use lock_api::{FencingToken, LockKey, OwnerId, SessionId};
use lock_server::store::batch::{BatchAnswer, BatchOp, BatchResult};
use lock_server::store::{AcquireOutcome, AcquireSpec, Batched, LockStore, Refusal, StoreError};

use crate::support::CutAfterCommit;

const LEASE_MS: u64 = 30_000;

fn key(raw: &str) -> LockKey {
    LockKey::parse(raw).expect("valid key")
}

async fn sessions(store: &dyn LockStore, n: usize) -> Vec<SessionId> {
    let mut out = Vec::new();
    for i in 0..n {
        let owner = OwnerId::parse(format!("batch-{i}")).unwrap();
        out.push(
            store
                .create_session(&owner, LEASE_MS)
                .await
                .unwrap()
                .session_id,
        );
    }
    out
}

fn acquire(k: &str, session: SessionId) -> BatchOp {
    BatchOp::Acquire {
        key: key(k),
        session,
        spec: AcquireSpec::lease(LEASE_MS),
    }
}

/// The grant in an acquire's result, checked to be for `k` and `session`.
fn granted(result: &BatchResult, k: &str, session: SessionId) -> FencingToken {
    match result {
        Ok(BatchAnswer::Acquire(AcquireOutcome::Granted { grant, .. })) => {
            assert_eq!(grant.lock_key, key(k), "an answer for another write's key");
            assert_eq!(
                grant.session_id, session,
                "an answer for another write's session"
            );
            grant.fencing_token
        }
        other => panic!("expected a grant of {k}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_answers_each_write_from_its_own_row() {
    let (store, _url) = crate::support::pg_store().await;
    let s = sessions(&*store, 4).await;
    // Keys out of their sorted order (the statement works through them sorted), one key
    // twice, kinds mixed.
    let keys = ["zulu", "alpha", "mike", "hot"];
    let first: Vec<BatchOp> = vec![
        acquire(keys[0], s[0]),
        BatchOp::Heartbeat { session: s[3] },
        acquire(keys[1], s[1]),
        acquire("hot", s[2]),
        acquire(keys[2], s[2]),
        acquire("hot", s[3]),
    ];
    let results = store.apply_batch(&first).await;
    assert_eq!(results.len(), first.len());
    let zulu = granted(&results[0], "zulu", s[0]);
    match &results[1] {
        Ok(BatchAnswer::Heartbeat(record)) => assert_eq!(record.session_id, s[3]),
        other => panic!("expected the heartbeat's record, got {other:?}"),
    }
    granted(&results[2], "alpha", s[1]);
    let hot = granted(&results[3], "hot", s[2]);
    granted(&results[4], "mike", s[2]);
    // The second acquire of `hot` in the batch sees the first one's grant.
    assert!(
        matches!(
            &results[5],
            Ok(BatchAnswer::Acquire(AcquireOutcome::Refused(Refusal::Held { holder_token, .. })))
                if *holder_token == hot
        ),
        "a later write in a batch sees an earlier one's grant: {:?}",
        results[5]
    );

    // Renew, release and a new acquire of the released key, in one batch.
    let second = vec![
        BatchOp::Release {
            key: key("hot"),
            session: s[2],
            token: hot,
        },
        BatchOp::Renew {
            key: key("zulu"),
            session: s[0],
            token: zulu,
        },
        acquire("hot", s[3]),
        BatchOp::Release {
            key: key("alpha"),
            session: s[0],
            token: zulu,
        },
        BatchOp::Renew {
            key: key("mike"),
            session: s[1],
            token: FencingToken(1),
        },
    ];
    let results = store.apply_batch(&second).await;
    assert_eq!(results[0], Ok(BatchAnswer::Release(true)));
    match &results[1] {
        Ok(BatchAnswer::Renew(grant)) => {
            assert_eq!(
                (grant.lock_key.as_str(), grant.fencing_token),
                ("zulu", zulu)
            );
        }
        other => panic!("expected zulu's renewal, got {other:?}"),
    }
    let next = granted(&results[2], "hot", s[3]);
    assert!(
        next > hot,
        "the released key is granted again with a higher token"
    );
    assert_eq!(
        results[3],
        Ok(BatchAnswer::Release(false)),
        "another session's release is refused"
    );
    assert!(
        matches!(&results[4], Err(StoreError::LockLost { lock_key, .. }) if lock_key.as_str() == "mike"),
        "another session's renewal is refused: {:?}",
        results[4]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_fails_in_the_store_fails_alone() {
    let (store, _url) = crate::support::pg_store().await;
    let s = sessions(&*store, 3).await;
    // A lease the store cannot add to its clock (interval out of range): the one statement
    // fails, so every write goes again alone.
    let absurd = BatchOp::Acquire {
        key: key("absurd"),
        session: s[1],
        spec: AcquireSpec::lease(i64::MAX as u64),
    };
    let ops = vec![acquire("a", s[0]), absurd, acquire("c", s[2])];
    let results = store.apply_batch(&ops).await;
    assert_eq!(granted(&results[0], "a", s[0]), FencingToken(1));
    assert!(
        matches!(&results[1], Err(StoreError::Internal(_))),
        "the bad write fails: {:?}",
        results[1]
    );
    assert_eq!(granted(&results[2], "c", s[2]), FencingToken(1));
    // Applied once: the same session's re-acquire is the same grant.
    assert_eq!(
        granted(&store.apply_batch(&ops[..1]).await[0], "a", s[0]),
        FencingToken(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_through_batching_each_get_their_own_grant() {
    let (pg, _url) = crate::support::pg_store().await;
    let batched = Arc::new(Batched::new(pg));
    let store: Arc<dyn LockStore> = batched.clone();
    const CALLERS: usize = 64;
    let s = sessions(&*store, CALLERS).await;
    let calls: Vec<_> = s
        .iter()
        .enumerate()
        .map(|(i, &session)| {
            let store = store.clone();
            tokio::spawn(async move {
                let k = key(&format!("k{i:03}"));
                let outcome = store.acquire(&k, session, LEASE_MS).await.unwrap();
                (k, session, outcome)
            })
        })
        .collect();
    for call in calls {
        let (k, session, outcome) = call.await.unwrap();
        match outcome {
            AcquireOutcome::Granted { grant, .. } => {
                assert_eq!((grant.lock_key, grant.session_id), (k, session));
                assert_eq!(grant.fencing_token, FencingToken(1));
            }
            other => panic!("expected a grant, got {other:?}"),
        }
    }
    assert!(
        batched.largest_batch() > 1,
        "the callers overlapped, so some went in one batch (else nothing here was tested)"
    );
}

/// A batch whose answer is lost after it committed is not applied again: each write is told
/// its outcome is unknown (503, the client asks again) instead of an answer from after its
/// own effect. Applied again alone, the releases below answered `released: false` although
/// they had released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_cut_off_after_its_commit_answers_unknown_never_a_wrong_answer() {
    let db = test_support::fresh_database().await;
    let proxy = CutAfterCommit::start(&db.url, "lock_batch").await;
    let store = lock_server::store::PostgresStore::connect(&proxy.url, 4)
        .await
        .expect("connect through the proxy");
    let s = sessions(&store, 2).await;
    let mut tokens = Vec::new();
    for (i, session) in s.iter().enumerate() {
        let k = format!("cut-{i}");
        let outcome = store.acquire(&key(&k), *session, LEASE_MS).await.unwrap();
        let AcquireOutcome::Granted { grant, .. } = outcome else {
            panic!("{outcome:?}")
        };
        tokens.push(grant.fencing_token);
    }
    proxy.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let releases: Vec<BatchOp> = (0..2)
        .map(|i| BatchOp::Release {
            key: key(&format!("cut-{i}")),
            session: s[i],
            token: tokens[i],
        })
        .collect();
    let results = store.apply_batch(&releases).await;
    assert_eq!(
        proxy.cuts.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the cut happened"
    );
    for result in &results {
        assert!(
            matches!(result, Err(StoreError::Unavailable(m)) if m.contains("may or may not")),
            "an unknown outcome, not an answer: {result:?}"
        );
    }
    // The batch did commit: both keys are free.
    for i in 0..2 {
        let held = store.get(&key(&format!("cut-{i}"))).await.unwrap();
        assert_eq!(held, None, "cut-{i} was released by the batch");
    }
}

/// Back-pressure: past its bound of writes waiting for the store, a replica answers 503 at
/// once instead of queueing without end; the writes it took are answered when the store
/// comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_past_the_bound_are_refused_at_once_while_the_store_stalls() {
    use sqlx::Connection;
    let (pg, url) = crate::support::pg_store().await;
    const BOUND: usize = 4;
    let batched: Arc<dyn LockStore> = Arc::new(Batched::bounded(pg, BOUND));
    let s = sessions(&*batched, 12).await;
    // The store stalls: every heartbeat waits on the sessions table.
    let mut stall = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut stall).await.unwrap();
    sqlx::query("LOCK TABLE lock_sessions IN ACCESS EXCLUSIVE MODE")
        .execute(&mut stall)
        .await
        .unwrap();
    let beats: Vec<_> = s
        .iter()
        .map(|&session| {
            let store = batched.clone();
            tokio::spawn(async move { store.heartbeat(session).await })
        })
        .collect();
    // The refused ones answer while the store is still stalled; the others cannot.
    let past_bound = s.len() - BOUND;
    test_support::poll_until(
        "the writes past the bound to be answered",
        std::time::Duration::from_secs(10),
        || {
            let done = beats.iter().filter(|b| b.is_finished()).count();
            async move { (done >= past_bound).then_some(()) }
        },
    )
    .await;
    let (mut refused, mut waiting) = (0, Vec::new());
    for beat in beats {
        if beat.is_finished() {
            let answer = beat.await.unwrap();
            assert!(
                matches!(&answer, Err(StoreError::Unavailable(m)) if m.contains("writes waiting")),
                "{answer:?}"
            );
            refused += 1;
        } else {
            waiting.push(beat);
        }
    }
    assert_eq!((waiting.len(), refused), (BOUND, past_bound));
    sqlx::query("ROLLBACK").execute(&mut stall).await.unwrap();
    for beat in waiting {
        assert!(
            beat.await.unwrap().is_ok(),
            "answered once the store is back"
        );
    }
}
