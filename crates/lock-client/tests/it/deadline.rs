//! Deadlines: the deadline is `send + lease × (1 − margin)` from the granted
//! lease, measured from before the request left, whatever the response leg costs.

use std::time::Duration;

use lock_api::LockKey;
use lock_client::AcquirePolicy;

use crate::support::Rig;

const QUIET: Duration = Duration::from_secs(3600);

#[tokio::test]
async fn deadline_is_send_time_plus_seventy_percent_of_the_lease_despite_a_slow_response() {
    let rig = Rig::new(QUIET);
    let session = rig.session("w").await;
    rig.service
        .delay_replies(rig.clock.clone(), Duration::from_millis(400));
    let send = rig.now();
    let key = LockKey::parse("payout:1").unwrap();
    let handle = session
        .acquire(&key, Duration::from_secs(10), &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        rig.now(),
        send.wrapping_add(400_000_000),
        "the reply leg took 400 ms of fake time"
    );
    assert_eq!(
        handle.client_deadline_nanos(),
        send.wrapping_add(7_000_000_000),
        "deadline from the send time, 0.7 × 10 s"
    );
    let left = session.remaining(&handle).unwrap();
    assert_eq!(
        left,
        Duration::from_millis(6_600),
        "the 400 ms response leg is already spent"
    );
    session.release(handle).await.unwrap();
}

#[tokio::test]
async fn a_clamped_lease_sets_the_deadline_not_the_requested_one() {
    let rig = Rig::new(QUIET);
    let session = rig.session("w").await;
    rig.service.clamp_leases_to(10_000);
    let send = rig.now();
    let key = LockKey::parse("payout:2").unwrap();
    let handle = session
        .acquire(&key, Duration::from_secs(30), &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(handle.lease_ms(), 10_000);
    assert_eq!(
        handle.client_deadline_nanos(),
        send.wrapping_add(7_000_000_000),
        "from 10 s, not 30 s"
    );
    session.release(handle).await.unwrap();
}
