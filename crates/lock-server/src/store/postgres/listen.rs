//! Wake-ups across replicas: one `LISTEN lock_free` connection per store, its notifications
//! (`"<session> <key>"`, written by `lock_notify_free()`) parsed and handed to every replica's
//! sink.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_api::{LockKey, SessionId};
use sqlx::postgres::PgListener;

use crate::store::{Wake, WakeSink};

/// The channel `lock_notify_free()` (migration 0002) notifies: payload `"<session> <key>"`.
pub(super) const WAKE_CHANNEL: &str = "lock_free";
/// Pause before the listener tries again after its connection failed to come back.
const LISTEN_RETRY_MS: u64 = 500;

/// The listener's loop: each notification wakes its session's waiter; a lost connection
/// (notifications may have been missed meanwhile) wakes every waiter once it is back.
pub(super) async fn listen(mut listener: PgListener, sinks: Arc<Mutex<Vec<WakeSink>>>) {
    let sink = |wake: Wake| {
        let sinks = sinks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        sinks.iter().for_each(|sink| sink(wake.clone()));
    };
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => match parse_wake(notification.payload()) {
                Some(wake) => sink(wake),
                None => tracing::warn!(event = "wake_unparsed", payload = notification.payload()),
            },
            Ok(None) => {
                tracing::warn!(event = "wake_listener_reconnecting");
                sink(Wake::Everyone);
            }
            Err(err) => {
                tracing::warn!(event = "wake_listener_failed", error = %err);
                sink(Wake::Everyone);
                tokio::time::sleep(Duration::from_millis(LISTEN_RETRY_MS)).await;
            }
        }
    }
}

/// `"<session> <key>"`, as `lock_notify_free()` writes it.
fn parse_wake(payload: &str) -> Option<Wake> {
    let (session, key) = payload.split_once(' ')?;
    Some(Wake::Head {
        key: LockKey::parse(key.to_owned()).ok()?,
        session: SessionId::parse(session).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_payloads_parse_and_bad_ones_do_not() {
        let session = SessionId::random();
        assert_eq!(
            parse_wake(&format!("{session} payout:7.with_all-chars")),
            Some(Wake::Head {
                key: LockKey::parse("payout:7.with_all-chars".to_owned()).unwrap(),
                session
            })
        );
        assert_eq!(parse_wake("not-a-uuid k"), None);
        assert_eq!(parse_wake(&session.to_string()), None);
    }
}
