//! `lock_guard_headroom_seconds`: every held-check that passes records the time left before
//! the grant's conservative deadline, on the SDK's clock; one that fails records nothing. Read
//! through the Prometheus exporter the processes install, with a recorder local to this test's
//! thread (a `#[tokio::test]` runs its tasks on it), so other tests' checks do not mix in.

use std::time::Duration;

use lock_api::LockKey;
use lock_client::AcquirePolicy;
use lock_client::metrics::GUARD_HEADROOM_SECONDS;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};

use crate::support::Rig;

const QUIET: Duration = Duration::from_secs(3600);

/// The value of the sample line `name{labels} value` on the recorder's page.
fn sample(recorder: &PrometheusRecorder, name: &str, labels: &str) -> f64 {
    let page = recorder.handle().render();
    let prefix = format!("{name}{{{labels}}} ");
    let line = page
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("{prefix}is not exported:\n{page}"));
    line[prefix.len()..].trim().parse().unwrap()
}

#[tokio::test]
async fn a_passed_held_check_records_the_time_left_and_a_failed_one_records_nothing() {
    let recorder = PrometheusBuilder::new()
        .set_buckets(&[0.5, 1.0, 2.5, 5.0, 10.0])
        .unwrap()
        .build_recorder();
    let _local = metrics::set_default_local_recorder(&recorder);
    let rig = Rig::new(QUIET);
    let session = rig.session("w").await;
    let count = |r: &PrometheusRecorder| {
        sample(
            r,
            &format!("{GUARD_HEADROOM_SECONDS}_count"),
            r#"backend="memory""#,
        )
    };
    let page = recorder.handle().render();
    assert!(
        page.contains(&format!("# HELP {GUARD_HEADROOM_SECONDS} ")),
        "described from the first session:\n{page}"
    );
    assert_eq!(count(&recorder), 0.0, "registered without a sample");

    let key = LockKey::parse("payout:headroom").unwrap();
    let handle = session
        .acquire(&key, Duration::from_secs(10), &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    // Deadline 7 s after the send (0.7 × 10 s); 2.5 s of it spent.
    rig.clock.advance(Duration::from_millis(2_500));
    session.check_still_held(&handle).unwrap();
    assert_eq!(count(&recorder), 1.0, "one sample per passed check");
    let sum = sample(
        &recorder,
        &format!("{GUARD_HEADROOM_SECONDS}_sum"),
        r#"backend="memory""#,
    );
    assert!((sum - 4.5).abs() < 1e-9, "4.5 s left, recorded {sum}");
    let le = |bound: &str| {
        sample(
            &recorder,
            &format!("{GUARD_HEADROOM_SECONDS}_bucket"),
            &format!(r#"backend="memory",le="{bound}""#),
        )
    };
    assert_eq!((le("2.5"), le("5")), (0.0, 1.0), "in seconds, not millis");

    // Past the deadline the check fails: no headroom to record.
    rig.clock.advance(Duration::from_millis(4_600));
    session.check_still_held(&handle).unwrap_err();
    assert_eq!(count(&recorder), 1.0, "a failed check records nothing");
    let _ = session.release(handle).await;
}
