//! Watching on etcd (C3 W1): etcd's own history is the log. The replica's one event watch
//! follows the deployment's prefix in revision order (from [`LOOKBACK_REVISIONS`] before its
//! start, or etcd's compaction) and translates each revision's changes into the
//! [`EventRing`]: a grant or share record created is `granted` (its token changed under one
//! path: `expired`, then `granted`); deleted, `revoked` when the revision also wrote the key's
//! revocation note, `expired` when its lease's or session's marker was gone the revision
//! before, else `released`; a value record written is `proclaimed`. An event's position is
//! its revision times 256 plus its place among that revision's changes, so positions rise in
//! commit order on every replica alike, and a watcher may move between replicas.

use std::time::Duration;

use etcd_client::{Event, EventType, GetOptions, KeyValue, TxnOp, WatchOptions};
use lock_api::{EventKind, LockEvent};
use lock_store::{EventPage, HeadSink, StoreError};

use super::EtcdStore;
use super::codec::{GrantValue, decode, read_grant};
use super::event_ring::{position, through_revision};

/// How far back in etcd's history a replica's ring starts (what a watcher resuming on a
/// replica that started since may still get).
const LOOKBACK_REVISIONS: i64 = 10_000;
/// Pause before the event watch is opened again.
const EVENT_WATCH_RETRY: Duration = Duration::from_millis(500);

impl EtcdStore {
    /// [`lock_store::LockStore::events_after`]: from the ring (its watch started if it was
    /// not); a call with `limit` 0 answers the head, read from etcd.
    pub(super) async fn events_page(
        &self,
        prefix: &str,
        after: u64,
        limit: usize,
    ) -> Result<EventPage, StoreError> {
        self.start_events();
        if limit == 0 {
            let (current, _) = self.members.read_at(vec![]).await?;
            let through = through_revision(current).max(after);
            return Ok(EventPage {
                through,
                ..self.events.page(prefix, after, 0)
            });
        }
        Ok(self.events.page(prefix, after, limit))
    }

    /// Starts the ring's watch, once: on the first read of the log (a W1 stream or page), so
    /// until then etcd sends the replica no change at all (every change of every key with its
    /// previous value is a large part of a lock cycle's cost on etcd: docs/benchmarks.md).
    /// The ring begins `LOOKBACK_REVISIONS` back from that read; a watcher after an earlier
    /// position is told the gap. Once started it runs until the process ends.
    pub(super) fn start_events(&self) {
        if self.events.start() {
            tokio::spawn(self.clone().serve_events(self.events.sink()));
        }
    }

    /// The event watch, until the process ends: reopened after the last revision in the
    /// ring when it fails, from etcd's compaction when that is later.
    async fn serve_events(self, sink: Option<HeadSink>) {
        loop {
            let from = match self.events.seen() {
                0 => match self.members.read_at(vec![]).await {
                    Ok((current, _)) => (current - LOOKBACK_REVISIONS).max(1),
                    Err(_) => {
                        tokio::time::sleep(EVENT_WATCH_RETRY).await;
                        continue;
                    }
                },
                seen => seen + 1,
            };
            self.events.begin_at(from);
            if let Err(err) = self.follow_events(from, sink.as_ref()).await {
                tracing::warn!(event = "etcd_event_watch_restarting", error = %err);
            }
            tokio::time::sleep(EVENT_WATCH_RETRY).await;
        }
    }

    /// Follows the prefix from revision `from`, one response at a time.
    async fn follow_events(&self, from: i64, sink: Option<&HeadSink>) -> Result<(), StoreError> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(from)
            .with_prev_key();
        let prefix = self.keys.all().to_owned();
        let mut stream = (self.members)
            .call("event watch", |client| async move {
                client.watch_client().watch(prefix, Some(options)).await
            })
            .await?;
        loop {
            let response = stream.message().await.map_err(super::codec::map_err)?;
            let Some(response) = response else {
                return Err(StoreError::Unavailable("etcd ended the event watch".into()));
            };
            if response.compact_revision() > 0 {
                // History before the compaction is gone: the ring starts there.
                self.events.begin_at(response.compact_revision());
                return Err(StoreError::Unavailable(
                    "etcd compacted the watched history".into(),
                ));
            }
            if response.canceled() {
                let reason = response.cancel_reason().to_owned();
                return Err(StoreError::Unavailable(format!(
                    "etcd cancelled the event watch: {reason}"
                )));
            }
            for (revision, changes) in by_revision(response.events()) {
                let events = self.translate(revision, &changes).await?;
                let head = self.events.append(revision, events);
                if let Some(sink) = sink {
                    sink(head);
                }
            }
        }
    }

    /// One revision's changes as lock events, positioned.
    async fn translate(
        &self,
        revision: i64,
        changes: &[Event],
    ) -> Result<Vec<LockEvent>, StoreError> {
        let revocations = self.keys.section("r");
        let revoked_here: Vec<&[u8]> = (changes.iter())
            .filter(|e| e.event_type() == EventType::Put)
            .filter_map(|e| e.kv().map(KeyValue::key))
            .filter(|path| path.starts_with(revocations.as_bytes()))
            .collect();
        let mut out = Vec::new();
        for change in changes {
            for mut event in self.translate_one(revision, change, &revoked_here).await? {
                event.position = position(revision, out.len());
                out.push(event);
            }
        }
        Ok(out)
    }

    async fn translate_one(
        &self,
        revision: i64,
        change: &Event,
        revoked_here: &[&[u8]],
    ) -> Result<Vec<LockEvent>, StoreError> {
        let Some(kv) = change.kv() else {
            return Ok(Vec::new());
        };
        let path = kv.key();
        if path.starts_with(self.keys.section("v").as_bytes()) {
            if change.event_type() != EventType::Put {
                return Ok(Vec::new());
            }
            let key = self.keys.parse_key_path("v", path)?;
            let record: super::values::ValueRecord = decode(kv.value(), "value record")?;
            let mut event = LockEvent::new(key, EventKind::Proclaimed, record.token);
            event.value = Some(record.value);
            return Ok(vec![event]);
        }
        let key = if path.starts_with(self.keys.section("g").as_bytes()) {
            self.keys.parse_key_path("g", path)?
        } else if let Some((key, _)) = self.keys.parse_hold_path(path) {
            key
        } else {
            return Ok(Vec::new());
        };
        let before = change
            .prev_kv()
            .map(read_grant)
            .transpose()?
            .map(|g| g.value);
        if change.event_type() == EventType::Delete {
            let Some(ended) = before else {
                return Ok(Vec::new());
            };
            let revoked = revoked_here.contains(&self.keys.revocation_key(&key).as_bytes());
            let kind = self.ended_as(revision, &ended, revoked).await?;
            return Ok(vec![LockEvent::new(key, kind, ended.token)]);
        }
        let now: GrantValue = read_grant(kv)?.value;
        let mut events = Vec::new();
        match before {
            Some(was) if was.token == now.token => return Ok(events),
            Some(was) => events.push(LockEvent::new(key.clone(), EventKind::Expired, was.token)),
            None => {}
        }
        let mut granted = LockEvent::new(key, EventKind::Granted, now.token);
        granted.owner_id = Some(now.owner);
        granted.scope = now.scope;
        events.push(granted);
        Ok(events)
    }

    /// How a grant deleted at `revision` ended: revoked by that revision, expired when its
    /// lease's or its session's marker was gone just before, else released.
    async fn ended_as(
        &self,
        revision: i64,
        grant: &GrantValue,
        revoked: bool,
    ) -> Result<EventKind, StoreError> {
        if revoked {
            return Ok(EventKind::Revoked);
        }
        let at = || {
            Some(
                GetOptions::new()
                    .with_revision(revision - 1)
                    .with_keys_only(),
            )
        };
        let gets = vec![
            TxnOp::get(self.keys.grant_marker(grant.lease), at()),
            TxnOp::get(self.keys.session_marker(grant.session), at()),
        ];
        let markers = match self.members.read(gets).await {
            Ok(markers) => markers,
            // The revision before was compacted: nothing tells, and nothing was refused.
            Err(_) => return Ok(EventKind::Released),
        };
        let gone = markers.iter().any(Vec::is_empty);
        Ok(if gone {
            EventKind::Expired
        } else {
            EventKind::Released
        })
    }
}

/// A response's changes, grouped by revision (etcd sends a revision's changes together).
fn by_revision(events: &[Event]) -> Vec<(i64, Vec<Event>)> {
    let mut grouped: Vec<(i64, Vec<Event>)> = Vec::new();
    for event in events {
        let revision = event.kv().map_or(0, KeyValue::mod_revision);
        match grouped.last_mut() {
            Some((r, changes)) if *r == revision => changes.push(event.clone()),
            _ => grouped.push((revision, vec![event.clone()])),
        }
    }
    grouped
}
