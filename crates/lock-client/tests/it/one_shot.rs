//! lockctl's one-shot calls for a session this process does not track —
//! `detach`, `acquire_as`, `release_as`, `close_session` — and L7/L8 (`inspect`, `revoke`).

use std::time::Duration;

use lock_api::{ErrorCode, FencingToken, LockError, LockKey};
use lock_client::AcquirePolicy;
use lock_client::admin::Credential;
use lock_client::test_util::Clock;
use lock_client::test_util::{rig_proof, status};

use crate::support::Rig;

const QUIET: Duration = Duration::from_secs(3600);
const LEASE: Duration = Duration::from_secs(10);
const STEP: Duration = Duration::from_millis(1);

#[tokio::test]
async fn a_detached_session_lives_on_and_acquire_as_waits_within_its_budget() {
    let rig = Rig::new(QUIET);
    let holder = rig.session("holder").await;
    let key = LockKey::parse("shared").unwrap();
    let held = holder
        .acquire(&key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    let kept = rig.session("kept").await.detach();
    assert_eq!(rig.service.count("delete_session"), 0, "detach sends no L3");

    let policy = AcquirePolicy {
        budget: Duration::from_millis(800),
        ..AcquirePolicy::default()
    };
    let before = rig.service.count("acquire");
    let start = rig.clock.now_nanos();
    let outcome = rig
        .drive(
            STEP,
            rig.client.admin().acquire_as(kept, &key, LEASE, &policy),
        )
        .await;
    let spent = Duration::from_nanos(rig.clock.now_nanos().wrapping_sub(start));
    assert_eq!(
        outcome.unwrap(),
        None,
        "contention is Ok(None), not an error"
    );
    assert!(spent <= policy.budget + STEP, "{spent:?}");
    assert!(spent >= policy.budget / 2, "kept trying: {spent:?}");
    assert!(
        rig.service.count("acquire") - before >= 3,
        "retried with backoff"
    );

    holder.release(held).await.unwrap();
    let grant = rig
        .client
        .admin()
        .acquire_as(kept, &key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .expect("free after the release");
    assert_eq!(grant.fencing_token, FencingToken(2));
    assert_eq!(grant.session_id, kept);
    assert_eq!(grant.proof, Some(rig_proof(&key, FencingToken(2))));
    let again = rig
        .client
        .admin()
        .acquire_as(kept, &key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        again.fencing_token, grant.fencing_token,
        "the session's own grant"
    );

    assert!(
        !rig.client
            .admin()
            .release_as(kept, &key, FencingToken(1))
            .await
            .unwrap()
    );
    assert!(
        rig.client
            .admin()
            .release_as(kept, &key, grant.fencing_token)
            .await
            .unwrap()
    );
    assert!(
        !rig.client
            .admin()
            .release_as(kept, &key, grant.fencing_token)
            .await
            .unwrap()
    );
    holder.close().await;
}

#[tokio::test]
async fn close_session_ends_it_and_later_calls_are_refused() {
    let rig = Rig::new(QUIET);
    let kept = rig.session("kept").await.detach();
    let key = LockKey::parse("k").unwrap();
    rig.client
        .admin()
        .acquire_as(kept, &key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    rig.client.admin().close_session(kept).await.unwrap();
    assert_eq!(rig.service.holder(&key), None, "its grants ended with it");
    let err = rig
        .client
        .admin()
        .acquire_as(kept, &key, LEASE, &AcquirePolicy::DEFAULT)
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::SessionUnknown { .. }), "{err:?}");
    rig.client.admin().close_session(kept).await.unwrap();
}

#[tokio::test]
async fn inspect_shows_the_holder_and_revoke_ends_its_grant() {
    let rig = Rig::new(QUIET);
    let session = rig.session("worker-7").await;
    let key = LockKey::parse("payout:7").unwrap();
    assert_eq!(rig.client.admin().inspect(&key).await.unwrap(), None);
    let handle = session
        .acquire(&key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    let info = rig
        .client
        .admin()
        .inspect(&key)
        .await
        .unwrap()
        .expect("held");
    assert_eq!(info.fencing_token, handle.fencing_token());
    assert_eq!(info.owner_id.as_str(), "worker-7");

    let admin = Credential::new("operators");
    let outcome = rig.client.admin().revoke(&key, &admin, None).await.unwrap();
    assert!(outcome.revoked);
    assert_eq!(outcome.fencing_token, Some(handle.fencing_token()));
    assert_eq!(rig.client.admin().inspect(&key).await.unwrap(), None);
    let outcome = rig.client.admin().revoke(&key, &admin, None).await.unwrap();
    assert_eq!((outcome.revoked, outcome.fencing_token), (false, None));
    assert!(
        session.release(handle).await.is_err(),
        "the revoked grant is lost"
    );
    session.close().await;
}

#[tokio::test]
async fn one_shot_calls_move_to_the_next_endpoint_and_stop_on_final_errors() {
    let rig = Rig::new(QUIET);
    let key = LockKey::parse("k").unwrap();
    rig.service
        .fail_next("inspect", status(ErrorCode::NotLeader, "draining"));
    assert_eq!(rig.client.admin().inspect(&key).await.unwrap(), None);
    assert_eq!(
        rig.service.count("inspect"),
        2,
        "the second endpoint answered"
    );

    rig.service
        .fail_always("inspect", status(ErrorCode::StoreUnavailable, "down"));
    let err = rig.client.admin().inspect(&key).await.unwrap_err();
    assert!(matches!(err, LockError::Unavailable { .. }), "{err:?}");
    assert_eq!(rig.service.count("inspect"), 4, "each endpoint once");
    rig.service.heal();

    rig.service
        .fail_next("revoke", status(ErrorCode::Unauthenticated, "wrong token"));
    let err = rig
        .client
        .admin()
        .revoke(&key, &Credential::new("wrong"), None)
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidArgument { .. }), "{err:?}");
    assert_eq!(rig.service.count("revoke"), 1, "a refusal is final");
}
