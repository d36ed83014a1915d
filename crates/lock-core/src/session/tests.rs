//! The session core's unit tests: deadlines, ticks, losses, holds, stale re-grants.

use super::*;

const MS: u64 = 1_000_000;
/// Close to `u64::MAX`: every test crosses the wrap-around.
const START: u64 = u64::MAX - 1_500 * MS;

fn key(k: &str) -> LockKey {
    LockKey::parse(k).unwrap_or_else(|e| panic!("{e}"))
}

fn core() -> SessionCore {
    SessionCore::new(0.3, 10_000, START)
}

/// A grant of `k` with `token` and `lease_ms`, answered at once to an acquire sent at
/// `START` (no wait).
fn grant(c: &mut SessionCore, k: &str, token: u64, lease_ms: u64) -> Result<Held, StaleRegrant> {
    c.granted(
        &key(k),
        FencingToken(token),
        lease_ms,
        Attempt::sent_at(START),
        START,
        0,
    )
}

#[test]
fn deadlines_are_send_time_plus_the_usable_lease_across_the_wrap() {
    let mut c = core();
    assert_eq!(c.session_deadline_nanos(), START.wrapping_add(7_000 * MS));
    let held = grant(&mut c, "k", 4, 3_000).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(held.deadline_nanos, START.wrapping_add(2_100 * MS));
    let now = START.wrapping_add(2_000 * MS); // past u64::MAX
    assert!(now < START, "the reading wrapped");
    assert_eq!(
        c.remaining(&key("k"), FencingToken(4), now),
        Ok(Duration::from_millis(100))
    );
    assert_eq!(
        c.remaining(&key("k"), FencingToken(4), START.wrapping_add(2_100 * MS))
            .map_err(|lost| lost.reason),
        Err(LossReason::DeadlinePassed)
    );
}

#[test]
fn a_tick_renews_grants_under_two_periods_and_a_passed_deadline_is_final() {
    let mut c = core();
    let _ = grant(&mut c, "a", 1, 3_000);
    let _ = grant(&mut c, "b", 1, 9_000);
    let period = Duration::from_millis(700);
    let plan = c.begin_tick(START.wrapping_add(800 * MS), period);
    assert!(plan.heartbeat.is_some());
    let renewal = plan.renew[0].clone();
    assert_eq!(
        plan.renew
            .iter()
            .map(|r| (r.key.clone(), r.token))
            .collect::<Vec<_>>(),
        vec![(key("a"), FencingToken(1))],
        "1.3 s < 1.4 s left"
    );
    // The process was paused past a's deadline: the next tick loses it before sending.
    let late = START.wrapping_add(2_200 * MS);
    let plan = c.begin_tick(late, period);
    assert!(plan.renew.is_empty());
    assert_eq!(
        c.renew_ok(&renewal, 3_000),
        None,
        "a late answer never revives a lost grant"
    );
    let losses = c.take_losses();
    assert_eq!(losses.grants.len(), 1);
    assert_eq!(losses.grants[0].lost.reason, LossReason::DeadlinePassed);
    assert_eq!(
        losses.grants[0].deadline_nanos,
        START.wrapping_add(2_100 * MS)
    );
    assert!(c.take_losses().grants.is_empty(), "delivered once");
}

#[test]
fn session_loss_takes_every_grant_and_a_heartbeat_cannot_undo_it() {
    let mut c = core();
    let _ = grant(&mut c, "a", 1, 3_000);
    c.lose_session(LossReason::SessionExpired);
    c.heartbeat_ok(Sent { nanos: START }, 10_000);
    assert_eq!(c.lost(), Some(LossReason::SessionExpired));
    assert_eq!(
        c.remaining(&key("a"), FencingToken(1), START)
            .map_err(|lost| lost.reason),
        Err(LossReason::SessionExpired)
    );
    let losses = c.take_losses();
    assert!(losses.session_lost);
    assert_eq!(
        losses.session,
        Some((LossReason::SessionExpired, START.wrapping_add(7_000 * MS)))
    );
    assert_eq!(
        c.begin_tick(START, Duration::from_secs(1)),
        TickPlan::default()
    );
}

#[test]
fn holds_count_and_a_loss_released_before_delivery_is_still_delivered() {
    let mut c = core();
    let _ = grant(&mut c, "a", 2, 3_000);
    assert!(c.reenter(&key("a"), START).is_ok_and(|h| h.is_some()));
    assert_eq!(
        c.unhold(&key("a"), FencingToken(2)),
        Unhold::StillHeld(None)
    );
    c.lose_grant(&key("a"), FencingToken(2), LossReason::RenewRefused);
    assert_eq!(
        c.unhold(&key("a"), FencingToken(2)),
        Unhold::Last(Some(LossReason::RenewRefused))
    );
    assert_eq!(c.unhold(&key("a"), FencingToken(2)), Unhold::Unknown);
    let losses = c.take_losses();
    assert_eq!(losses.grants.len(), 1);
    assert_eq!(losses.grants[0].lost.reason, LossReason::RenewRefused);
}

#[test]
fn a_regrant_with_the_token_of_an_unanswered_release_is_refused() {
    let mut c = core();
    let _ = grant(&mut c, "a", 1, 3_000);
    assert_eq!(c.unhold(&key("a"), FencingToken(1)), Unhold::Last(None));
    // The release is in flight; the store re-grants token 1 to this session first.
    assert_eq!(
        grant(&mut c, "a", 1, 3_000),
        Err(StaleRegrant {
            key: key("a"),
            token: FencingToken(1)
        })
    );
    assert!(
        c.reenter(&key("a"), START).is_ok_and(|h| h.is_none()),
        "not registered"
    );
    c.release_answered(&key("a"), FencingToken(1));
    assert!(grant(&mut c, "a", 2, 3_000).is_ok());
}

#[test]
fn settling_releases_only_a_grant_nobody_here_holds_and_never_believes_it_again() {
    let mut c = core();
    let _ = grant(&mut c, "held", 4, 3_000);
    assert!(
        !c.settling(&key("held"), FencingToken(4)),
        "a grant this session holds is kept"
    );
    assert!(c.settling(&key("orphan"), FencingToken(9)));
    // Its release is in flight: a later acquire answered that token does not believe it.
    assert!(grant(&mut c, "orphan", 9, 3_000).is_err());
    c.release_answered(&key("orphan"), FencingToken(9));
    assert!(grant(&mut c, "orphan", 10, 3_000).is_ok());
}

#[test]
fn a_revoke_reaches_the_held_check_with_the_operators_words() {
    let mut c = core();
    grant(&mut c, "k", 4, 3_000).unwrap_or_else(|e| panic!("{e:?}"));
    let now = START.wrapping_add(1_500 * MS); // 600 ms left, under two 400 ms periods
    let plan = c.begin_tick(now, Duration::from_millis(400));
    let renewal = plan
        .renew
        .first()
        .cloned()
        .unwrap_or_else(|| panic!("{plan:?}"));
    let said = "revoked by ops: maintenance: draining the key";
    assert!(!c.renew_failed(&renewal, Some(ErrorCode::LockRevoked), said));
    let lost = c
        .remaining(&key("k"), FencingToken(4), now)
        .expect_err("a revoked grant is lost");
    assert_eq!(lost.reason, LossReason::Revoked);
    assert_eq!(lost.detail.as_deref(), Some(said));
}
