//! Key sets in the SDK (ADR 0007): a set acquired whole or not at all, its held-check
//! covering every member, a bad set refused before it leaves the process.

use std::time::Duration;

use lock_api::{LockError, LockKey, LossReason};
use lock_client::AcquirePolicy;

use crate::support::Rig;

const QUIET: Duration = Duration::from_secs(3600);
/// The heartbeat's period, and a lease it renews on every tick.
const PERIOD: Duration = Duration::from_secs(1);
const LEASE: Duration = Duration::from_secs(3);

fn keys(raw: &[&str]) -> Vec<LockKey> {
    raw.iter().map(|k| LockKey::parse(*k).unwrap()).collect()
}

#[tokio::test]
async fn a_set_is_held_whole_and_its_check_covers_every_member() {
    let rig = Rig::new(PERIOD);
    let (a, b) = (rig.session("a").await, rig.session("b").await);
    let set_keys = keys(&["acct:2", "acct:1"]);
    let held = a
        .acquire(&set_keys[0], LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    // One member held elsewhere: contention, and nothing held by b.
    let refused = b
        .acquire_set(&set_keys, LEASE, &AcquirePolicy::TRY_ONCE)
        .await;
    assert!(refused.unwrap().is_none(), "contention is Ok(None)");
    assert_eq!(
        rig.service.holder(&set_keys[1]),
        None,
        "no member held alone"
    );
    a.release(held).await.unwrap();

    let set = b
        .acquire_set(&set_keys, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .expect("free: granted");
    let members: Vec<&LockKey> = set.handles().iter().map(|h| h.lock_key()).collect();
    assert_eq!(members, [&set_keys[1], &set_keys[0]], "sorted by key");
    for handle in set.handles() {
        assert_eq!(
            rig.service.holder(handle.lock_key()),
            Some(handle.fencing_token())
        );
        assert!(handle.fence_proof().is_some(), "each member has its proof");
    }
    b.check_set_held(&set).expect("every member held");
    // One member revoked: its renewal is refused within two ticks, and the set is lost.
    rig.service.revoke(&set_keys[0]);
    rig.tick(PERIOD).await;
    rig.tick(PERIOD).await;
    let lost = b.check_set_held(&set).unwrap_err();
    assert_eq!(lost.lock_key, set_keys[0]);
    assert!(
        matches!(lost.reason, LossReason::Revoked | LossReason::RenewRefused),
        "{lost:?}"
    );
    b.check_still_held(set.get(&set_keys[1]).unwrap())
        .expect("the other member is still held on its own");
    assert!(b.release_set(set).await.is_err(), "the loss is reported");
    assert_eq!(rig.service.holder(&set_keys[1]), None, "the rest released");
}

#[tokio::test]
async fn a_set_naming_a_key_whose_grant_was_lost_is_refused_before_any_call() {
    let rig = Rig::new(PERIOD);
    let session = rig.session("a").await;
    let set_keys = keys(&["acct:1", "acct:2"]);
    let held = session
        .acquire(&set_keys[0], LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    let refused = lock_client::test_util::status(lock_api::ErrorCode::LockLost, "gone");
    rig.service.fail_next("renew", refused);
    rig.tick(PERIOD).await;
    rig.tick(PERIOD).await;
    assert!(
        session.check_still_held(&held).is_err(),
        "the grant is lost"
    );
    let asked = session
        .acquire_set(&set_keys, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap_err();
    assert!(
        matches!(&asked, LockError::Lost(lost) if lost.lock_key == set_keys[0]),
        "{asked:?}"
    );
    assert_eq!(
        rig.service.count("acquire_set"),
        0,
        "refused in the process"
    );
    assert!(
        session.check_still_held(&held).is_err(),
        "the lost handle stays lost"
    );
}

#[tokio::test]
async fn a_bad_set_is_refused_before_any_call() {
    let rig = Rig::new(QUIET);
    let session = rig.session("a").await;
    let seventeen: Vec<String> = (0..17).map(|i| format!("k:{i}")).collect();
    let seventeen: Vec<&str> = seventeen.iter().map(String::as_str).collect();
    for bad in [keys(&[]), keys(&seventeen), keys(&["k:1", "k:1"])] {
        let refused = session
            .acquire_set(&bad, LEASE, &AcquirePolicy::TRY_ONCE)
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, LockError::InvalidArgument { message } if message.contains("lock_keys")),
            "{refused:?}"
        );
    }
    assert_eq!(
        rig.service.count("acquire_set"),
        0,
        "refused in the process"
    );
}
