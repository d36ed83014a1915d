//! Wake-ups across replicas: one connection per store listens on `lock_free` (a head waiter
//! to wake) and `lock_handed_over` (a grant made to a head waiter), both written by
//! `lock_notify_free()`; each notification is parsed and handed to every replica's sink (the
//! replica where the waiter is parked answers it, the others ignore it). A listener that
//! lost its connection and could not get another is made anew from the pool (whose host may
//! have changed meanwhile); every waiter is woken once it listens again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::DateTime;
use lock_api::{FencingToken, LockGrant, LockKey, SessionId};
use sqlx::PgPool;
use sqlx::postgres::PgListener;

use lock_store::{Wake, WakeSink};

/// The channel `lock_notify_free()` (migration 0002) notifies: payload `"<session> <key>"`.
pub(super) const WAKE_CHANNEL: &str = "lock_free";
/// The channel of hand-overs (migration 0006): payload
/// `"<session> <token> <lease_ms> <expires_at, epoch µs> <place age, ms> <key>"`.
pub(super) const HAND_OVER_CHANNEL: &str = "lock_handed_over";
/// Pause before the listener tries again after its connection failed to come back.
const LISTEN_RETRY_MS: u64 = 500;

/// A listener on both channels, on a connection of `pool`.
pub(super) async fn connect_listener(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener
        .listen_all([WAKE_CHANNEL, HAND_OVER_CHANNEL])
        .await?;
    Ok(listener)
}

/// The listener's loop: each notification wakes its session's waiter; a lost connection
/// (notifications may have been missed meanwhile) wakes every waiter once it is back.
pub(super) async fn listen(
    mut listener: PgListener,
    pool: PgPool,
    sinks: Arc<Mutex<Vec<WakeSink>>>,
) {
    let sink = |wake: Wake| {
        let sinks = sinks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        sinks.iter().for_each(|sink| sink(wake.clone()));
    };
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => match parse(notification.channel(), notification.payload()) {
                Some(wake) => sink(wake),
                // Not the payload itself: it names a session by its id.
                None => tracing::warn!(
                    event = "wake_unparsed",
                    channel = notification.channel(),
                    payload_bytes = notification.payload().len()
                ),
            },
            Ok(None) => {
                tracing::warn!(event = "wake_listener_reconnecting");
                sink(Wake::Everyone);
            }
            Err(err) => {
                tracing::warn!(event = "wake_listener_failed", error = %err);
                sink(Wake::Everyone);
                listener = reconnect(&pool).await;
                sink(Wake::Everyone);
            }
        }
    }
}

/// A new listener, trying every [`LISTEN_RETRY_MS`] until one listens.
async fn reconnect(pool: &PgPool) -> PgListener {
    loop {
        tokio::time::sleep(Duration::from_millis(LISTEN_RETRY_MS)).await;
        match connect_listener(pool).await {
            Ok(listener) => return listener,
            Err(err) => tracing::warn!(event = "wake_listener_failed", error = %err),
        }
    }
}

fn parse(channel: &str, payload: &str) -> Option<Wake> {
    match channel {
        HAND_OVER_CHANNEL => parse_hand_over(payload),
        _ => parse_wake(payload),
    }
}

/// `"<session> <token> <lease_ms> <expires_at, epoch µs> <place age, ms> <key>"`.
fn parse_hand_over(payload: &str) -> Option<Wake> {
    let mut fields = payload.splitn(6, ' ');
    let session = SessionId::parse(fields.next()?).ok()?;
    let token = fields.next()?.parse().ok()?;
    let lease_ms = fields.next()?.parse().ok()?;
    let expires_at = DateTime::from_timestamp_micros(fields.next()?.parse().ok()?)?;
    let place_age_ms = fields.next()?.parse().ok()?;
    let key = LockKey::parse(fields.next()?.to_owned()).ok()?;
    Some(Wake::HandedOver {
        grant: LockGrant {
            lock_key: key,
            fencing_token: FencingToken(token),
            lease_ms,
            expires_at,
            session_id: session,
            proof: None,
            waited_ms: 0,
            scope: lock_api::GrantScope::Exclusive,
        },
        place_age_ms,
    })
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
        let id = session.expose();
        assert_eq!(
            parse_wake(&format!("{id} payout:7.with_all-chars")),
            Some(Wake::Head {
                key: LockKey::parse("payout:7.with_all-chars".to_owned()).unwrap(),
                session
            })
        );
        assert_eq!(parse_wake("not-a-uuid k"), None);
        assert_eq!(parse_wake(&id), None);
    }

    #[test]
    fn hand_over_payloads_parse_into_the_grant_and_bad_ones_do_not() {
        let session = SessionId::random();
        let id = session.expose();
        let Some(Wake::HandedOver {
            grant,
            place_age_ms,
        }) = parse(
            HAND_OVER_CHANNEL,
            &format!("{id} 42 30000 1796284800123456 17 payout:7.x"),
        )
        else {
            panic!("a hand-over payload did not parse");
        };
        assert_eq!(grant.session_id, session);
        assert_eq!(grant.fencing_token, FencingToken(42));
        assert_eq!(grant.lease_ms, 30_000);
        assert_eq!(grant.expires_at.timestamp_micros(), 1_796_284_800_123_456);
        assert_eq!(grant.lock_key.as_str(), "payout:7.x");
        assert_eq!(place_age_ms, 17);
        for bad in [
            "",
            "x 1 2 3 4 k",
            &format!("{id} -1 30000 1 0 k"),
            &format!("{id} 1 30000 1 0"),
            &format!("{id} 1 lease 1 0 k"),
        ] {
            assert_eq!(parse(HAND_OVER_CHANNEL, bad), None, "{bad:?}");
        }
    }
}
