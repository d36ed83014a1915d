//! Lease keep-alives on one stream per replica. Every grant of a reused lease, every renew,
//! every heartbeat and every waiter's place is a keep-alive; opening a gRPC stream for each
//! (and closing it cleanly: etcd answers many reset streams with GOAWAY) cost more of the
//! replica's CPU than the rest of the call. etcd's `LeaseKeepAlive` stream takes any lease
//! and answers each request in order, so one stream, on the pinned member, carries them all:
//! a caller registers for its lease's next answer, queues its request (both with no await
//! between, so a dropped call cannot leave one without the other), and waits for the answer.
//!
//! The stream is opened by the first keep-alive that finds none (its own answer is the
//! opening's), and dropped when it ends, fails, times out or the pinned member changes; the
//! next keep-alive opens another. A keep-alive is sent after the call that asked for it
//! arrived, so a lease it refreshes lasts its TTL from after that arrival (I4), as with a
//! stream of its own.

use std::collections::VecDeque;

use tokio::sync::oneshot;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use lock_store::StoreError;

use super::members::Members;

/// Callers waiting for an answer, by lease, in the order their requests were sent.
type Waiting = Arc<Mutex<HashMap<i64, VecDeque<oneshot::Sender<bool>>>>>;

/// The open stream: its member, its sending half, who waits on it, whether it still runs.
struct Stream {
    member: usize,
    keeper: etcd_client::LeaseKeeper,
    waiting: Waiting,
    running: Arc<AtomicBool>,
}

/// This replica's keep-alive stream, if one is open.
#[derive(Default)]
pub(super) struct KeepAlives {
    stream: tokio::sync::Mutex<Option<Stream>>,
}

impl KeepAlives {
    /// Refreshes `lease` to its full TTL; `false` when it has already ended.
    pub(super) async fn keep_alive(
        &self,
        members: &Members,
        lease: i64,
    ) -> Result<bool, StoreError> {
        let (index, client) = members.pinned();
        let mut slot = self.stream.lock().await;
        if slot
            .as_ref()
            .is_some_and(|s| s.member != index || !s.running.load(Ordering::Acquire))
        {
            // Dropping the sending half ends the stream cleanly; its reader then ends.
            *slot = None;
        }
        let Some(stream) = slot.as_ref() else {
            let opened = members
                .bounded(index, "lease keep-alive", async move {
                    match client.lease_client().keep_alive(lease).await {
                        Ok(opened) => Ok(Some(opened)),
                        Err(etcd_client::Error::LeaseKeepAliveError(message))
                            if message.contains("not found") =>
                        {
                            Ok(None)
                        }
                        Err(err) => Err(err),
                    }
                })
                .await?;
            // An ended lease opens no stream (etcd's client refuses to); the next call tries.
            let Some((keeper, answers)) = opened else {
                return Ok(false);
            };
            let stream = Stream {
                member: index,
                keeper,
                waiting: Arc::default(),
                running: Arc::new(AtomicBool::new(true)),
            };
            read_answers(answers, stream.waiting.clone(), stream.running.clone());
            *slot = Some(stream);
            return Ok(true);
        };
        let (answer, mut answered) = oneshot::channel();
        // Registered and queued with no await between: a call dropped here (its client gone)
        // leaves no registration without a request, which would take a later caller's answer.
        stream
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(lease)
            .or_default()
            .push_back(answer);
        let sent = stream.keeper.try_keep_alive_lease(lease);
        // A reader that ended stopped before this caller registered, or after answering it.
        let ended = !stream.running.load(Ordering::Acquire);
        let member = stream.member;
        if sent.is_err() {
            // Full (etcd takes no more) or ended: the next keep-alive opens another stream.
            *slot = None;
        }
        drop(slot);
        let endpoint = members.endpoint(member);
        let failed = match sent {
            Err(err) => format!("etcd lease keep-alive to {endpoint} failed: {err}"),
            Ok(()) if ended => match answered.try_recv() {
                Ok(alive) => return Ok(alive),
                Err(_) => format!("etcd lease keep-alive stream to {endpoint} ended"),
            },
            Ok(()) => match tokio::time::timeout(members.request_timeout(), answered).await {
                Ok(Ok(alive)) => return Ok(alive),
                Ok(Err(_)) => format!("etcd lease keep-alive stream to {endpoint} ended"),
                Err(_) => {
                    // A stream that stopped answering is replaced by the next call.
                    self.close(member).await;
                    format!("etcd lease keep-alive timed out at {endpoint}")
                }
            },
        };
        let err = StoreError::Unavailable(failed);
        members.unpin(member, &err);
        Err(err)
    }

    /// Drops the stream on `member`, if it is the open one.
    async fn close(&self, member: usize) {
        let mut slot = self.stream.lock().await;
        if slot.as_ref().is_some_and(|s| s.member == member) {
            *slot = None;
        }
    }
}

/// Hands each answer on the stream to the first caller waiting on its lease. When the
/// stream ends, every caller still waiting is told so (its sender dropped).
fn read_answers(
    mut answers: etcd_client::LeaseKeepAliveStream,
    waiting: Waiting,
    running: Arc<AtomicBool>,
) {
    tokio::spawn(async move {
        loop {
            match answers.message().await {
                Ok(Some(answer)) => {
                    let caller = {
                        let mut waiting = waiting
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        let queue = waiting.get_mut(&answer.id());
                        let caller = queue.and_then(VecDeque::pop_front);
                        if waiting.get(&answer.id()).is_some_and(VecDeque::is_empty) {
                            waiting.remove(&answer.id());
                        }
                        caller
                    };
                    // A caller that timed out dropped its receiver: nothing to tell.
                    if let Some(caller) = caller {
                        let _ = caller.send(answer.ttl() > 0);
                    }
                }
                Ok(None) => break,
                Err(err) => {
                    tracing::debug!(event = "etcd_keep_alive_stream_failed", error = %err);
                    break;
                }
            }
        }
        running.store(false, Ordering::Release);
        waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    });
}
