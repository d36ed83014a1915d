//! The acquire loop: the budget on the fake clock, contention between two sessions,
//! reentrancy, and settling an attempt whose answer never came.

use std::time::Duration;

use lock_api::LockKey;
use lock_client::AcquirePolicy;
use lock_client::test_util::Clock;

use crate::support::Rig;

const QUIET: Duration = Duration::from_secs(3600);
const LEASE: Duration = Duration::from_secs(10);
const STEP: Duration = Duration::from_millis(1);

#[tokio::test]
async fn contended_acquire_gives_up_within_its_budget_with_none() {
    let rig = Rig::new(QUIET);
    let (a, b) = (rig.session("a").await, rig.session("b").await);
    let key = LockKey::parse("hot").unwrap();
    let held = a
        .acquire(&key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    let policy = AcquirePolicy {
        budget: Duration::from_millis(800),
        ..AcquirePolicy::default()
    };
    let start = rig.clock.now_nanos();
    let outcome = rig
        .drive(STEP, b.acquire(&key, LEASE, &policy))
        .await
        .unwrap();
    let spent = Duration::from_nanos(rig.clock.now_nanos().wrapping_sub(start));
    assert!(outcome.is_none(), "contention is Ok(None), not an error");
    assert!(
        spent <= policy.budget + STEP,
        "spent {spent:?} of an {:?} budget",
        policy.budget
    );
    assert!(
        spent >= policy.budget / 2,
        "it kept trying for most of the budget: {spent:?}"
    );
    let attempts = rig.service.count("acquire") - 1;
    assert!(attempts >= 3, "retried with backoff: {attempts} attempts");
    a.release(held).await.unwrap();
}

#[tokio::test]
async fn contended_acquire_wins_once_the_holder_releases() {
    let rig = Rig::new(QUIET);
    let (a, b) = (rig.session("a").await, rig.session("b").await);
    let key = LockKey::parse("handover").unwrap();
    let held = a
        .acquire(&key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    let first = held.fencing_token();
    let policy = AcquirePolicy {
        budget: Duration::from_secs(5),
        ..AcquirePolicy::default()
    };
    let waiter = b.acquire(&key, LEASE, &policy);
    tokio::pin!(waiter);
    // Let b fail a few times, then release a's grant.
    for _ in 0..100 {
        tokio::select! {
            biased;
            _ = &mut waiter => panic!("b cannot win while a holds the key"),
            _ = tokio::task::yield_now() => rig.clock.advance(STEP),
        }
    }
    a.release(held).await.unwrap();
    let won = rig
        .drive(STEP, waiter)
        .await
        .unwrap()
        .expect("b wins within its budget");
    assert!(
        won.fencing_token() > first,
        "a higher token for the new holder"
    );
    b.release(won).await.unwrap();
}

#[tokio::test]
async fn reacquiring_a_held_key_is_reentrant_and_only_the_last_release_sends_l6() {
    let rig = Rig::new(QUIET);
    let session = rig.session("a").await;
    let key = LockKey::parse("reentrant").unwrap();
    let outer = session
        .acquire(&key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    let inner = session
        .acquire(&key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        outer.fencing_token(),
        inner.fencing_token(),
        "same grant, same token"
    );
    assert_eq!(
        rig.service.count("acquire"),
        1,
        "the second acquire never left the process"
    );
    session.release(inner).await.unwrap();
    assert_eq!(rig.service.count("release"), 0, "one hold remains");
    session.check_still_held(&outer).unwrap();
    session.release(outer).await.unwrap();
    assert_eq!(rig.service.count("release"), 1, "the last release sends L6");
    assert_eq!(rig.service.holder(&key), None);
}

#[tokio::test]
async fn no_leader_anywhere_is_an_error_not_contention() {
    let rig = Rig::new(QUIET);
    let session = rig.session("a").await;
    rig.service.fail_always(
        "acquire",
        lock_client::test_util::status(lock_api::ErrorCode::NotLeader, "read-only"),
    );
    let policy = AcquirePolicy {
        budget: Duration::from_millis(200),
        ..AcquirePolicy::default()
    };
    let key = LockKey::parse("k").unwrap();
    let err = rig
        .drive(STEP, session.acquire(&key, LEASE, &policy))
        .await
        .unwrap_err();
    assert!(
        matches!(err, lock_api::LockError::NotLeader { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_regrant_of_an_unanswered_releases_token_is_released_again_and_replaced() {
    let rig = Rig::new(QUIET);
    let session = rig.session("w").await;
    let key = LockKey::parse("payout:9").unwrap();
    let first = session
        .acquire(&key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.fencing_token().0, 1);
    // The release gets no answer: it may still be in flight and delete a later grant.
    rig.service.fail_next(
        "release",
        lock_client::test_util::TransportError::Unreachable("no answer".into()),
    );
    session.release(first).await.unwrap();
    assert_eq!(
        rig.service.holder(&key).map(|t| t.0),
        Some(1),
        "still held at the store"
    );
    // The store re-grants token 1 to this session; the SDK must not hand it out.
    let policy = AcquirePolicy {
        budget: Duration::from_millis(500),
        ..AcquirePolicy::default()
    };
    let second = rig
        .drive(STEP, session.acquire(&key, LEASE, &policy))
        .await
        .unwrap()
        .expect("a fresh grant after the second release");
    assert_eq!(second.fencing_token().0, 2, "a fresh, higher token");
    assert_eq!(rig.service.holder(&key).map(|t| t.0), Some(2));
    assert_eq!(rig.service.count("release"), 2, "token 1 released again");
    session.release(second).await.unwrap();
}

/// The server's proof of a grant reaches the handle unchanged, for a reentrant handle too,
/// so the caller can send it with every fenced write.
#[tokio::test]
async fn the_handle_carries_the_servers_proof() {
    let rig = Rig::new(QUIET);
    let a = rig.session("a").await;
    let key = LockKey::parse("payout:5").unwrap();
    let first = a
        .acquire(&key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    let expected = lock_client::test_util::rig_proof(&key, first.fencing_token());
    assert_eq!(first.fence_proof(), Some(expected.as_str()));
    let again = a
        .acquire(&key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.fence_proof(), Some(expected.as_str()), "reentrant");
    a.release(again).await.unwrap();
    a.release(first).await.unwrap();
}

/// An acquire that gives up on an attempt whose answer never came gives back the grant the
/// server made for it (C2 §L4): the key is free again, not held by a session that does not
/// know it until its lease ends.
#[tokio::test]
async fn a_grant_whose_answer_never_came_is_given_back_when_the_acquire_gives_up() {
    let rig = Rig::new(QUIET);
    let (payer, other) = (rig.session("payer").await, rig.session("other").await);
    let key = LockKey::parse("payout:7").unwrap();
    let policy = AcquirePolicy {
        max_attempts: 2,
        ..AcquirePolicy::default()
    };
    // Both attempts are granted (the second the same token again); neither answer arrives.
    rig.service.lose_answers("acquire", 2);
    let outcome = rig.drive(STEP, payer.acquire(&key, LEASE, &policy)).await;
    assert!(
        matches!(outcome, Err(lock_client::LockError::Unavailable { .. })),
        "{outcome:?}"
    );
    assert_eq!(
        rig.service.holder(&key),
        None,
        "the grant made for the unanswered attempts was released"
    );
    assert_eq!(rig.service.count("release"), 1);
    let taken = other
        .acquire(&key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap();
    assert!(taken.is_some(), "another session gets the key at once");
}

/// The settling try never releases a grant this session holds knowingly: a key it holds is
/// answered its own grant again, and that grant stays.
#[tokio::test]
async fn settling_leaves_a_grant_the_session_holds() {
    let rig = Rig::new(QUIET);
    let payer = rig.session("payer").await;
    let key = LockKey::parse("payout:8").unwrap();
    let held = payer
        .acquire(&key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    let other_key = LockKey::parse("payout:9").unwrap();
    rig.service.lose_answers("acquire", 1);
    let outcome = payer
        .acquire(&other_key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await;
    assert!(outcome.is_err(), "{outcome:?}");
    assert_eq!(rig.service.holder(&other_key), None, "settled");
    assert_eq!(
        rig.service.holder(&key),
        Some(held.fencing_token()),
        "untouched"
    );
}
