//! Losses and their listeners: loss by local deadline with the
//! heartbeat stalled, survival across one NOT_LEADER tick, listeners once per handle in
//! registration order, panics contained, late registration, background release, threads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_api::{ErrorCode, LockKey, LockLost, LossReason};
use lock_client::LockHandle;
use lock_client::test_util::TransportError;
use lock_client::test_util::status;
use lock_client::{AcquirePolicy, LockClientSession};
use test_support::poll_until;

use crate::support::Rig;

const PERIOD: Duration = Duration::from_secs(1);
/// 3 s lease: usable 2.1 s, three periods of 0.7 s would be derived; the rig fixes 1 s.
const LEASE: Duration = Duration::from_secs(3);
const WAIT: Duration = Duration::from_secs(5);

fn counter(session: &LockClientSession) -> Arc<AtomicUsize> {
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    session.on_lock_lost(move |_| {
        seen.fetch_add(1, Ordering::SeqCst);
    });
    count
}

async fn hold(session: &LockClientSession, key: &str) -> LockHandle {
    let key = LockKey::parse(key).unwrap();
    session
        .acquire(&key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap()
}

#[test]
fn check_still_held_returns_a_result_never_a_bool() {
    let _typed: fn(&LockClientSession, &LockHandle) -> Result<(), LockLost> =
        LockClientSession::check_still_held;
}

#[tokio::test]
async fn stalled_heartbeat_loses_the_lock_by_the_local_deadline_and_tells_listeners_once() {
    let rig = Rig::new(PERIOD);
    let session = rig.session("w").await;
    let fired = counter(&session);
    let handle = hold(&session, "payout:1").await;
    let stalled = TransportError::Unreachable("stalled".into());
    rig.service.fail_always("heartbeat", stalled.clone());
    rig.service.fail_always("renew", stalled);

    rig.tick(PERIOD).await;
    rig.tick(PERIOD).await;
    session
        .check_still_held(&handle)
        .expect("2.0 s < 2.1 s: still held");
    assert_eq!(fired.load(Ordering::SeqCst), 0);

    rig.tick(PERIOD).await; // 3.0 s: past the 2.1 s deadline
    let lost = session.check_still_held(&handle).unwrap_err();
    assert_eq!(
        (lost.reason, lost.fencing_token),
        (LossReason::DeadlinePassed, handle.fencing_token())
    );
    assert_eq!(
        fired.load(Ordering::SeqCst),
        1,
        "listener fired once, on the tick"
    );
    assert!(
        session.remaining(&handle).is_err(),
        "the next handle-taking call errs too"
    );

    rig.service.heal();
    rig.tick(PERIOD).await;
    rig.tick(PERIOD).await;
    assert!(
        session.check_still_held(&handle).is_err(),
        "loss is terminal, even when the server answers again"
    );
    assert_eq!(fired.load(Ordering::SeqCst), 1, "never fired twice");
    assert!(
        session.release(handle).await.is_err(),
        "releasing a lost handle reports the loss"
    );
}

#[tokio::test]
async fn one_not_leader_tick_then_success_keeps_the_session() {
    let rig = Rig::new(PERIOD);
    let session = rig.session("w").await;
    let fired = counter(&session);
    let handle = hold(&session, "payout:2").await;
    rig.service
        .fail_next("heartbeat", status(ErrorCode::NotLeader, "read-only"));
    rig.tick(PERIOD).await;
    rig.tick(PERIOD).await;
    rig.tick(PERIOD).await;
    session
        .check_still_held(&handle)
        .expect("renewed despite the NOT_LEADER tick");
    assert_eq!(fired.load(Ordering::SeqCst), 0);
    assert!(rig.service.count("renew") >= 1);
    session.release(handle).await.unwrap();
}

#[tokio::test]
async fn server_refusing_renewal_loses_only_that_grant() {
    let rig = Rig::new(PERIOD);
    let session = rig.session("w").await;
    let fired = counter(&session);
    let (a, b) = (hold(&session, "a").await, hold(&session, "b").await);
    rig.service
        .fail_next("renew", status(ErrorCode::LockLost, "revoked"));
    rig.tick(PERIOD).await;
    rig.tick(PERIOD).await;
    let lost = [&a, &b]
        .iter()
        .filter(|h| session.check_still_held(h).is_err())
        .count();
    assert_eq!(lost, 1, "exactly one of the two renewals was refused");
    assert_eq!(fired.load(Ordering::SeqCst), 1);
    let _ = session.release(a).await;
    let _ = session.release(b).await;
}

#[tokio::test]
async fn a_revoked_grant_is_lost_as_revoked_with_who_and_why() {
    let rig = Rig::new(PERIOD);
    let session = rig.session("w").await;
    let heard = Arc::new(Mutex::new(Vec::<LockLost>::new()));
    let into = heard.clone();
    session.on_lock_lost(move |lost| into.lock().unwrap().push(lost.clone()));
    let handle = hold(&session, "payout:9").await;
    let told = "lock payout:9 (token 1) was revoked by lock-admin: maintenance: node 3";
    rig.service
        .fail_next("renew", status(ErrorCode::LockRevoked, told));
    rig.tick(PERIOD).await;
    rig.tick(PERIOD).await;
    let heard = heard.lock().unwrap().clone();
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert_eq!(
        (heard[0].reason, heard[0].detail.as_deref()),
        (LossReason::Revoked, Some(told))
    );
    assert!(
        heard[0].to_string().contains("maintenance: node 3"),
        "{}",
        heard[0]
    );
    assert!(session.check_still_held(&handle).is_err());
    let _ = session.release(handle).await;
}

#[tokio::test]
async fn listeners_run_in_order_a_panic_is_contained_and_late_ones_fire_at_once() {
    let rig = Rig::new(PERIOD);
    let session = rig.session("w").await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let first = order.clone();
    session.on_lock_lost(move |_| first.lock().unwrap().push("first"));
    session.on_lock_lost(|_| panic!("a listener bug"));
    let third = order.clone();
    session.on_lock_lost(move |_| third.lock().unwrap().push("third"));
    let handle = hold(&session, "payout:3").await;
    rig.service
        .fail_next("renew", status(ErrorCode::LockLost, "gone"));
    rig.tick(PERIOD).await;
    rig.tick(PERIOD).await;
    assert_eq!(
        *order.lock().unwrap(),
        vec!["first", "third"],
        "in registration order, past the panic"
    );

    let ticks = rig.client.heartbeat_ticks();
    rig.tick(PERIOD).await;
    assert!(
        rig.client.heartbeat_ticks() > ticks,
        "the heartbeat survived the panic"
    );

    let late = order.clone();
    session.on_lock_lost(move |_| late.lock().unwrap().push("late"));
    assert_eq!(
        *order.lock().unwrap(),
        vec!["first", "third", "late"],
        "late registration fires at once"
    );
    let _ = session.release(handle).await;
}

#[tokio::test]
async fn session_unknown_on_heartbeat_loses_every_grant() {
    let rig = Rig::new(PERIOD);
    let session = rig.session("w").await;
    let fired = counter(&session);
    let (a, b) = (hold(&session, "a").await, hold(&session, "b").await);
    rig.service
        .fail_next("heartbeat", status(ErrorCode::SessionUnknown, "reaped"));
    rig.tick(PERIOD).await;
    for handle in [&a, &b] {
        assert_eq!(
            session.check_still_held(handle).unwrap_err().reason,
            LossReason::SessionUnknown
        );
    }
    assert_eq!(fired.load(Ordering::SeqCst), 2, "once per handle");
    let key = LockKey::parse("c").unwrap();
    assert!(
        session
            .acquire(&key, LEASE, &AcquirePolicy::TRY_ONCE)
            .await
            .is_err(),
        "a lost session grants nothing"
    );
}

#[tokio::test]
async fn releasing_a_grant_the_server_no_longer_has_reports_the_loss() {
    let rig = Rig::new(Duration::from_secs(3600));
    let session = rig.session("w").await;
    let handle = hold(&session, "revoked").await;
    rig.service.revoke(handle.lock_key());
    let lost = session.release(handle).await.unwrap_err();
    assert_eq!(lost.reason, LossReason::NotHeld);
}

#[tokio::test]
async fn a_loss_noticed_and_released_before_the_tick_is_still_delivered_once() {
    let rig = Rig::new(PERIOD);
    let session = rig.session("w").await;
    let fired = counter(&session);
    let handle = hold(&session, "noticed-first").await;
    rig.clock.advance(LEASE); // past the deadline, before any tick ran
    assert!(session.check_still_held(&handle).is_err());
    assert!(session.release(handle).await.is_err());
    rig.tick(PERIOD).await;
    assert_eq!(
        fired.load(Ordering::SeqCst),
        1,
        "the listener still hears of it, once"
    );
    rig.tick(PERIOD).await;
    assert_eq!(fired.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_dropped_handle_is_released_in_the_background() {
    let rig = Rig::new(Duration::from_secs(3600));
    let session = rig.session("w").await;
    let key = LockKey::parse("dropped").unwrap();
    drop(
        session
            .acquire(&key, LEASE, &AcquirePolicy::TRY_ONCE)
            .await
            .unwrap()
            .unwrap(),
    );
    poll_until("the background release", WAIT, || async {
        (rig.service.count("release") == 1).then_some(())
    })
    .await;
    assert_eq!(rig.service.holder(&key), None);
}

/// A session dropped without `close` (the Python binding's close while a call on another
/// thread still holds it ends this way) is closed on the server in the background, with
/// what it held.
#[tokio::test]
async fn a_dropped_session_is_closed_in_the_background() {
    let rig = Rig::new(Duration::from_secs(3600));
    let session = rig.session("w").await;
    let key = LockKey::parse("dropped-session").unwrap();
    let handle = session
        .acquire(&key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    drop(session);
    poll_until("the background close", WAIT, || async {
        (rig.service.count("delete_session") == 1).then_some(())
    })
    .await;
    assert_eq!(rig.service.holder(&key), None, "its grant went with it");
    drop(handle);
}

fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .collect()
}

#[tokio::test]
async fn close_sends_l3_and_leaves_no_sdk_thread() {
    let rig = Rig::new(PERIOD);
    let name = rig.client.heartbeat_thread().to_owned();
    assert!(name.starts_with("lock-hb-"));
    poll_until("the heartbeat thread to run", WAIT, || async {
        thread_names().contains(&name).then_some(())
    })
    .await;
    let session = rig.session("w").await;
    let handle = hold(&session, "k").await;
    session.release(handle).await.unwrap();
    rig.service
        .fail_always("delete_session", TransportError::Unreachable("down".into()));
    session.close().await; // never fails, even when L3 cannot be sent
    assert_eq!(rig.service.count("delete_session"), 1);
    let Rig { client, .. } = rig;
    client.close();
    // `close` joins the thread; the kernel lists an exited thread a moment longer (the join
    // returns when the thread clears its id, before its task is released).
    poll_until(
        "the heartbeat thread to be gone after close",
        WAIT,
        || async { (!thread_names().contains(&name)).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn a_late_tick_declares_a_passed_deadline_before_any_answer_can_revive_it() {
    let rig = Rig::new(PERIOD);
    let session = rig.session("w").await;
    let fired = counter(&session);
    let handle = hold(&session, "payout:1").await;
    // The process was paused: its first tick runs 2.5 s after the grant was sent for (its
    // deadline was 2.1 s), while the server still holds the grant and would renew it.
    rig.tick(Duration::from_millis(2_500)).await;
    let lost = session
        .check_still_held(&handle)
        .expect_err("a deadline that passed stays passed");
    assert_eq!(lost.reason, LossReason::DeadlinePassed);
    assert_eq!(
        fired.load(Ordering::SeqCst),
        1,
        "the listener heard it once"
    );
    assert_eq!(
        rig.service.count("renew"),
        0,
        "no renewal of a grant whose deadline passed"
    );
}
