//! An election's proclaim in the SDK: a term the server no longer has is the leader's loss,
//! as the held-check would report it, never a protocol error.

use std::time::Duration;

use lock_api::{LeaderValue, LockError, LockKey, LossReason};
use lock_client::AcquirePolicy;

use crate::support::Rig;

#[tokio::test]
async fn proclaiming_a_term_the_server_no_longer_has_is_the_leaders_loss() {
    let rig = Rig::new(Duration::from_secs(3600));
    let session = rig.session("leader").await;
    let name = LockKey::parse("elect:stale").unwrap();
    let value = |v: &str| LeaderValue::parse(v).unwrap();
    let mut leadership = session
        .campaign(
            &name,
            value("a"),
            Duration::from_secs(30),
            &AcquirePolicy::TRY_ONCE,
        )
        .await
        .unwrap()
        .expect("free: leads");
    session
        .proclaim(&mut leadership, value("b"))
        .await
        .expect("a live term proclaims");
    // Revoked behind its back: the local deadline still holds, only the server refuses.
    rig.service.revoke(&name);
    session.check_still_held(leadership.handle()).unwrap();
    let err = session
        .proclaim(&mut leadership, value("c"))
        .await
        .unwrap_err();
    let LockError::Lost(lost) = err else {
        panic!("a refused proclaim is the term's loss: {err:?}");
    };
    assert_eq!(
        (lost.lock_key, lost.fencing_token),
        (name, leadership.term())
    );
    assert_eq!(lost.reason, LossReason::RenewRefused);
    assert_eq!(
        leadership.value().as_str(),
        "b",
        "a refused value is not taken"
    );
}
