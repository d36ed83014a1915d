//! `SessionLossHandler` on the SDK's real heartbeat path (in-memory lock service, fake
//! clock): a loss the SDK's listener delivers mid-payout marks the payout abandoned, stops
//! the next write at the executor's guard with the listener's reason, and is logged as
//! `payout_abandoned` with its fields. If the listener did not flip the payout, the watch
//! would still answer `Ok` and this test fails.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use lock_api::{LockKey, LossReason};
use lock_client::AcquirePolicy;
use lock_client::test_util::Rig;
use payout_executor::guard::guard;
use payout_executor::loss::SessionLossHandler;

/// Heartbeat period of the rig.
const PERIOD: Duration = Duration::from_secs(1);
/// 3 s lease: 2.1 s usable, so the first tick (1.1 s left < two periods) renews it.
const LEASE: Duration = Duration::from_secs(3);

/// Every log line of this test binary (a global subscriber: the listener runs on the SDK's
/// heartbeat thread). Shared with the other tests of the binary, so each reads its own
/// payouts' lines.
#[derive(Clone, Default)]
pub(crate) struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

pub(crate) fn logs() -> &'static Logs {
    static LOGS: OnceLock<Logs> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Logs::default();
        tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_writer(logs.clone())
            .init();
        logs
    })
}

/// The JSON log lines whose `event` is `event`.
pub(crate) fn events(event: &str) -> Vec<serde_json::Value> {
    let bytes = logs().0.lock().unwrap().clone();
    String::from_utf8(bytes)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == event)
        .collect()
}

/// The `payout_abandoned` lines of `payout_id`.
fn abandoned(payout_id: i64) -> Vec<serde_json::Value> {
    events("payout_abandoned")
        .into_iter()
        .filter(|l| l["payout_id"] == payout_id)
        .collect()
}

#[tokio::test]
async fn a_loss_the_listener_hears_mid_payout_stops_the_next_write_and_is_logged() {
    logs();
    let rig = Rig::new(PERIOD);
    let session = rig.session("executor-t").await;
    let handler = SessionLossHandler::register(&session, "executor-t".into());
    let key = LockKey::parse("payout:7").unwrap();
    let handle = session
        .acquire(&key, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    let watch = handler.watch(7, &handle);
    guard(&session, &handle, &watch).expect("held before the loss");

    // Mid-payout, the lock service drops the grant behind the holder's back (an admin
    // revoke). The next tick's renewal is refused and the SDK delivers the loss to listeners.
    rig.service.revoke(&key);
    rig.tick(PERIOD).await;

    let heard = watch
        .check()
        .expect_err("the listener marked the in-flight payout abandoned");
    assert_eq!(heard.reason, LossReason::RenewRefused);
    assert_eq!(heard.fencing_token, handle.fencing_token());
    assert_eq!(
        guard(&session, &handle, &watch).map(|belief| belief.remaining),
        Err(heard.clone()),
        "the guard stops the next write with the listener's reason"
    );
    let lines = abandoned(7);
    assert_eq!(lines.len(), 1, "one payout_abandoned line: {lines:?}");
    let line = &lines[0];
    assert_eq!(line["payout_id"], 7);
    assert_eq!(line["key"], "payout:7");
    assert_eq!(line["token"], handle.fencing_token().0);
    assert_eq!(line["reason"], "renew_refused");
    assert_eq!(line["owner"], "executor-t");
    assert_eq!(line["session"], session.id().tag().to_string());
    assert_eq!(line["backend"], "memory");

    // A loss of a grant no payout is in flight under abandons nothing and logs no line.
    handler.unwatch(&key);
    let _ = session.release(handle).await;
    let other = LockKey::parse("payout:8").unwrap();
    let spare = session
        .acquire(&other, LEASE, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    rig.service.revoke(&other);
    rig.tick(PERIOD).await;
    assert!(session.check_still_held(&spare).is_err(), "the SDK saw it");
    assert_eq!(abandoned(7).len(), 1, "no new payout_abandoned line");
    assert!(abandoned(8).is_empty(), "none for the spare grant");
    session.close().await;
}
