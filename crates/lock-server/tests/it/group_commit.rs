//! Group commit on PostgreSQL: a batch answers each write from its own row, a write sees the
//! writes before it in its batch, and a write that fails in the store fails alone. (The
//! conformance suite runs every case through `Batched` too.)

use std::sync::Arc;

use lock_api::{FencingToken, LockKey, OwnerId, SessionId};
use lock_server::store::batch::{BatchAnswer, BatchOp, BatchResult};
use lock_server::store::{AcquireOutcome, AcquireSpec, Batched, LockStore, Refusal, StoreError};

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
