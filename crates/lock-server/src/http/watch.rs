//! W1 `GET /v1/watch`: what happens to the locks under a prefix, as server-sent events. The
//! stream opens with an `open` event naming the position it starts after; each `lock` event
//! carries its position as the SSE `id`; a watcher that reconnects with `after` (or
//! `Last-Event-ID`) gets every event after it, or first a `gap` event when the store no
//! longer keeps them. A stream holds one of its credential's waiter places, reads the store
//! whenever the head moves past it (or every [`RECHECK`]), and ends when the replica drains.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Extension, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use lock_api::{ErrorBody, LockEvent, LockKey, ValidationError, WatchGap, WatchOpen};
use serde::Deserialize;
use service_kit::{ApiError, Caller};
use tokio::sync::watch;

use super::store_error::api_error;
use crate::quota::WaiterPlace;
use crate::state::AppState;
use crate::store::{EVENT_PAGE_MAX, LockStore};

/// A stream reads the store at least this often, whatever it heard of the head.
const RECHECK: Duration = Duration::from_secs(1);
/// The highest position a store gives (PostgreSQL's `bigint`).
const POSITION_MAX: u64 = i64::MAX as u64;
/// After a failed read, the stream waits this long before reading again.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(500);

/// W1's query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WatchQuery {
    /// Keys starting with this are watched; absent or empty: every key.
    #[param(max_length = 200)]
    pub prefix: Option<String>,
    /// Resume after this position (a position an earlier stream sent); absent: from now.
    #[param(minimum = 0, maximum = 9_223_372_036_854_775_807_i64)]
    pub after: Option<u64>,
}

#[utoipa::path(get, path = "/v1/watch", tag = "locks", operation_id = "W1_watch",
    params(WatchQuery), security(("lock_client" = [])),
    responses((status = 200, description = "server-sent events: `open` (data {\"after\": N}), `lock` (id = position, data = LockEvent), `gap` (data = WatchGap)", content_type = "text/event-stream", body = lock_api::WatchFrame),
        (status = 400, description = "INVALID_ARGUMENT: prefix, after (above 2^63 - 1 or the store's head), Last-Event-ID or an unknown parameter", body = ErrorBody),
        (status = 429, description = "TOO_MANY_WAITERS: the credential's waiting acquires and watches on this replica are at its quota", body = ErrorBody)))]
/// W1 `GET /v1/watch?prefix=P&after=N`.
pub async fn watch(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<WatchQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let prefix = match query.prefix.as_deref() {
        None | Some("") => String::new(),
        Some(raw) => LockKey::parse(raw.to_owned())
            .map_err(|e| ValidationError::new("prefix", e.reason))?
            .as_str()
            .to_owned(),
    };
    // The later of the two: a browser resends its first URL with the last id it saw.
    let asked = match (query.after, last_event_id(&headers)?) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    if asked.is_some_and(|after| after > POSITION_MAX) {
        Err(ValidationError::new(
            "after",
            format!("must be at most {POSITION_MAX}"),
        ))?;
    }
    let place = state.quotas().wait(&caller)?;
    // The head, as the store answers it: where a stream "from now" starts, and a bound no
    // resumed position may pass (a position from another deployment, or a store restarted).
    let head = (state.store().events_after(&prefix, 0, 0).await)
        .map_err(api_error)?
        .through;
    let after = match asked {
        None => head,
        Some(after) if after > head => Err(ValidationError::new(
            "after",
            format!("{after} is beyond the store's head position {head}"),
        ))?,
        Some(after) => after,
    };
    tracing::info!(event = "watch_opened", credential = %caller.name, prefix = %prefix, after);
    let reader = Reader {
        store: state.store_arc(),
        head: state.head(),
        draining: state.draining(),
        prefix,
        after,
        pending: std::collections::VecDeque::new(),
        _place: place,
    };
    // First the position the stream starts after: a watcher that opened "from now" knows
    // where to resume from before any event came.
    let opened = Event::default()
        .id(after.to_string())
        .event("open")
        .json_data(WatchOpen { after })
        .unwrap_or_else(|_| Event::default().event("open"));
    let events = futures_util::stream::unfold(reader, Reader::next);
    let stream =
        futures_util::StreamExt::chain(futures_util::stream::once(async { Ok(opened) }), events);
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// `Last-Event-ID`, the position a browser's EventSource resumes after.
fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(raw) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let refused = || ValidationError::new("Last-Event-ID", "must be a position (a whole number)");
    let text = raw.to_str().map_err(|_| refused())?;
    Ok(Some(text.trim().parse().map_err(|_| refused())?))
}

/// One stream's reading of the store.
struct Reader {
    store: std::sync::Arc<dyn LockStore>,
    head: watch::Receiver<u64>,
    draining: watch::Receiver<bool>,
    prefix: String,
    /// The position sent last (or resumed after).
    after: u64,
    /// Read and not yet sent, lowest first.
    pending: std::collections::VecDeque<LockEvent>,
    _place: WaiterPlace,
}

impl Reader {
    /// The stream's next event (read a page at a time), or its end on a drain.
    async fn next(mut self) -> Option<(Result<Event, Infallible>, Self)> {
        loop {
            if *self.draining.borrow() {
                return None;
            }
            if let Some(event) = self.pending.pop_front() {
                self.after = event.position;
                return Some((Ok(lock_event(&event)), self));
            }
            let read = self
                .store
                .events_after(&self.prefix, self.after, EVENT_PAGE_MAX)
                .await;
            match read {
                Ok(page) if self.after < page.floor => {
                    let gap = WatchGap {
                        after: self.after,
                        resume_from: page.floor,
                    };
                    self.after = page.floor;
                    return Some((Ok(gap_event(&gap)), self));
                }
                Ok(page) if page.events.is_empty() => {
                    self.after = page.through;
                    self.wait_for_more().await;
                }
                Ok(page) => self.pending.extend(page.events),
                Err(err) => {
                    tracing::warn!(event = "watch_read_failed", error = %err);
                    tokio::time::sleep(RETRY_AFTER_FAILURE).await;
                }
            }
        }
    }

    /// Until the head moves past the stream's position, [`RECHECK`] passes, or a drain.
    async fn wait_for_more(&mut self) {
        let after = self.after;
        let moved = self.head.wait_for(|head| *head > after);
        tokio::select! {
            _ = moved => {}
            _ = self.draining.changed() => {}
            () = tokio::time::sleep(RECHECK) => {}
        }
    }
}

fn lock_event(event: &LockEvent) -> Event {
    Event::default()
        .id(event.position.to_string())
        .event("lock")
        .json_data(event)
        .unwrap_or_else(|_| Event::default().event("lock"))
}

fn gap_event(gap: &WatchGap) -> Event {
    Event::default()
        .event("gap")
        .json_data(gap)
        .unwrap_or_else(|_| Event::default().event("gap"))
}
