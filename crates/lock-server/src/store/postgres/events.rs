//! Watching on PostgreSQL (C3 W1): events are written to `lock_events_pending` (no index)
//! by the triggers of `lock_event()` in the transactions that change grants;
//! `lock_events_sequence()` moves them to `lock_events`, positioned in commit order. Each replica calls the sequencer every [`SEQUENCE_EVERY`]
//! (a lock write notifies nobody: the lock path stays off PostgreSQL's notification lock) and
//! tells its watchers the head it hears on `lock_event_head`. The reaper keeps
//! [`EVENTS_KEPT_FOR`] of events.

use std::sync::Arc;
use std::time::Duration;

use lock_api::{EventKind, FencingToken, GrantScope, LeaderValue, LockEvent, LockKey, OwnerId};
use sqlx::PgPool;
use sqlx::postgres::PgListener;

use super::hosts::Hosts;
use super::rows::{to_i64, to_u64};
use super::{PostgresStore, map_err};
use crate::store::StoreError;
use lock_store::{EventPage, HeadSink};

/// Committed events without a position wait at most this long for one.
const SEQUENCE_EVERY: Duration = Duration::from_millis(50);
/// How long the store keeps an event: a watcher away longer is told of a gap.
pub(super) const EVENTS_KEPT_FOR: &str = "15 minutes";
/// Pause before the listener tries again after its connection failed.
const LISTEN_RETRY: Duration = Duration::from_millis(500);

/// One page: the head (never below the floor: retention may have emptied the table) and
/// the floor on every row, then the event's columns (NULL without one).
const PAGE: &str = "
SELECT greatest(h.head, f.floor), f.floor, e.position, e.lock_key, e.kind, e.fencing_token, e.owner_id, e.scope, e.value
  FROM (SELECT coalesce(max(position), 0) AS head FROM lock_events) h
 CROSS JOIN lock_event_floor f
  LEFT JOIN LATERAL (
       SELECT * FROM lock_events
        WHERE position > $2 AND starts_with(lock_key, $1)
        ORDER BY position LIMIT $3) e ON true
 ORDER BY e.position";

/// What the reaper runs, in its transaction: events older than the retention go, and the
/// floor moves to the highest position gone.
pub(super) const FORGET_OLD_EVENTS: &str = "
WITH gone AS (
     DELETE FROM lock_events
      WHERE position IS NOT NULL AND at < now() - $1::interval
  RETURNING position)
UPDATE lock_event_floor SET floor = greatest(floor, (SELECT max(position) FROM gone))
 WHERE EXISTS (SELECT 1 FROM gone)";

type PageRow = (
    i64,
    i64,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<String>,
);

impl PostgresStore {
    /// [`lock_store::LockStore::events_after`].
    pub(super) async fn events_page(
        &self,
        prefix: &str,
        after: u64,
        limit: usize,
    ) -> Result<EventPage, StoreError> {
        (page(&self.pool, prefix, after, limit).await).map_err(|e| self.hosts.saw(e))
    }

    /// [`lock_store::LockStore::watch_events`]: the replica's sequencer and head listener.
    pub(super) fn start_events(&self, sink: HeadSink) {
        let (pool, listen_pool) = (self.pool.clone(), self.listen_pool.clone());
        tokio::spawn(serve(pool, listen_pool, self.hosts.clone(), sink));
    }
}

async fn page(
    pool: &PgPool,
    prefix: &str,
    after: u64,
    limit: usize,
) -> Result<EventPage, StoreError> {
    let rows: Vec<PageRow> = sqlx::query_as(PAGE)
        .bind(prefix)
        .bind(to_i64(after)?)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(pool)
        .await
        .map_err(map_err)?;
    let (head, floor) = rows.first().map_or((0, 0), |r| (r.0, r.1));
    let events = (rows.into_iter())
        .filter_map(|r| Some(event(r.2?, r.3?, r.4?, r.5?, r.6, r.7, r.8)))
        .collect::<Result<Vec<_>, _>>()?;
    let through = match events.last() {
        Some(last) if events.len() == limit => last.position,
        _ => to_u64(head)?,
    };
    Ok(EventPage {
        events,
        through: through.max(after),
        floor: to_u64(floor)?,
    })
}

fn event(
    position: i64,
    key: String,
    kind: String,
    token: i64,
    owner: Option<String>,
    scope: Option<String>,
    value: Option<String>,
) -> Result<LockEvent, StoreError> {
    let bad = |what: &str, e: &dyn std::fmt::Display| {
        StoreError::Internal(format!("stored event {what}: {e}"))
    };
    let kind = match kind.as_str() {
        "granted" => EventKind::Granted,
        "released" => EventKind::Released,
        "expired" => EventKind::Expired,
        "revoked" => EventKind::Revoked,
        "proclaimed" => EventKind::Proclaimed,
        other => return Err(bad("kind", &other)),
    };
    let key = LockKey::parse(key).map_err(|e| bad("key", &e))?;
    let mut event = LockEvent::new(key, kind, FencingToken(to_u64(token)?));
    event.position = to_u64(position)?;
    event.owner_id = owner
        .map(OwnerId::parse)
        .transpose()
        .map_err(|e| bad("owner", &e))?;
    event.scope = match scope.as_deref() {
        None => GrantScope::Exclusive,
        Some(text) => GrantScope::parse(text).ok_or_else(|| bad("scope", &text))?,
    };
    event.value = value
        .map(LeaderValue::parse)
        .transpose()
        .map_err(|e| bad("value", &e))?;
    Ok(event)
}

/// The replica's sequencer and head listener: runs until the process ends.
async fn serve(pool: PgPool, listen_pool: PgPool, hosts: Arc<Hosts>, sink: HeadSink) {
    loop {
        let listener = async {
            let mut listener = PgListener::connect_with(&listen_pool).await?;
            listener.listen("lock_event_head").await?;
            Ok::<_, sqlx::Error>(listener)
        };
        match listener.await {
            Ok(listener) => follow(listener, &pool, &hosts, &sink).await,
            Err(err) => tracing::warn!(event = "event_listener_failed", error = %err),
        }
        tokio::time::sleep(LISTEN_RETRY).await;
    }
}

/// Sequences every [`SEQUENCE_EVERY`]; passes each head heard on `lock_event_head` on.
/// Returns when the connection is lost.
async fn follow(mut listener: PgListener, pool: &PgPool, hosts: &Arc<Hosts>, sink: &HeadSink) {
    let mut tick = tokio::time::interval(SEQUENCE_EVERY);
    loop {
        tokio::select! {
            notification = listener.try_recv() => match notification {
                Ok(Some(n)) => {
                    if let Ok(head) = n.payload().parse() {
                        sink(head);
                    }
                }
                Ok(None) | Err(_) => {
                    tracing::warn!(event = "event_listener_reconnecting");
                    return;
                }
            },
            _ = tick.tick() => sequence(pool, hosts, sink).await,
        }
    }
}

/// One call of `lock_events_sequence()`; its head goes to the sink (the notification may
/// come later, or be missed). A failure has a multi-host URL look for its writable host.
async fn sequence(pool: &PgPool, hosts: &Arc<Hosts>, sink: &HeadSink) {
    match sqlx::query_scalar::<_, i64>("SELECT lock_events_sequence()")
        .fetch_one(pool)
        .await
    {
        Ok(head) => sink(u64::try_from(head).unwrap_or(0)),
        Err(err) => {
            tracing::warn!(event = "event_sequencing_failed", error = %err);
            hosts.saw(map_err(err));
        }
    }
}
