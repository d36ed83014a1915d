//! `AdminClient`: one-shot calls, for tools and operators (`lockctl`). Each call is sent on
//! its own, to each endpoint in turn on `NOT_LEADER` or no answer: no session is heartbeated
//! and no lease renewed here, so what they return is a record, not a held lock. The types
//! their answers use are re-exported here.

pub mod watch;

use std::sync::Arc;
use std::time::Duration;

pub use lock_api::{LockGrant, LockInfo, LockOutcome, RevokeReason, SessionId};

pub use crate::config::Credential;
use lock_api::{
    AcquireRequest, ErrorCode, FencingToken, LockError, LockKey, ReleaseRequest, RetryVerdict,
};

use crate::clock::Clock;
use crate::config::ClientConfig;
use crate::core::{AcquireLoop, AcquirePolicy, Next};
use crate::transport::{Call, Reply, Transport, TransportError, WatchBody};

/// One-shot calls on the lock service: acquire and release for a session this process does
/// not track, close a session, inspect and revoke a key. Made by
/// [`ClientBuilder::build_admin`](crate::ClientBuilder::build_admin) or
/// [`LockClient::admin`](crate::LockClient::admin). Cheap to clone.
#[derive(Debug, Clone)]
pub struct AdminClient {
    config: Arc<ClientConfig>,
    clock: Arc<dyn Clock>,
    transport: Arc<dyn Transport>,
}

impl AdminClient {
    pub(crate) fn new(
        config: Arc<ClientConfig>,
        clock: Arc<dyn Clock>,
        transport: Arc<dyn Transport>,
    ) -> Self {
        Self {
            config,
            clock,
            transport,
        }
    }

    /// One-shot acquire for a session this process does not track (one opened elsewhere, e.g.
    /// by `lockctl session open` and
    /// [`LockClientSession::detach`](crate::LockClientSession::detach)): retries `LOCK_HELD`
    /// with full-jitter backoff within `policy` (budget on the SDK's clock, `max_attempts`),
    /// moving to the next endpoint after `NOT_LEADER` or no answer, as
    /// [`LockClientSession::acquire`](crate::LockClientSession::acquire) does. `Ok(None)`:
    /// still held by another session when the policy ran out.
    ///
    /// Returns the server's grant record, not a handle: nothing in this process heartbeats
    /// the session or renews the lease, so the grant is good for at most
    /// `lease_ms × (1 − safety margin)` from before this call, and the session's own TTL
    /// bounds it too. A session that holds `key` already is answered its own grant again
    /// (same token). Records no metrics (the session's backend is unknown here).
    pub async fn acquire_as(
        &self,
        session: SessionId,
        key: &LockKey,
        ttl: Duration,
        policy: &AcquirePolicy,
    ) -> Result<Option<LockGrant>, LockError> {
        let clock = &self.clock;
        let endpoints = &self.config.endpoints;
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut acquiring =
            AcquireLoop::new(policy, self.config.request_timeout, clock.now_nanos());
        let mut rng = fastrand::Rng::new();
        let mut endpoint = 0usize;
        loop {
            let attempt = acquiring.attempt(clock.now_nanos());
            let call = Call::Acquire(
                key.clone(),
                AcquireRequest {
                    session_id: session,
                    ttl_ms: Some(ttl_ms),
                    wait_ms: attempt.wait_ms(),
                    lock_delay_ms: None,
                    mode: None,
                    permits: None,
                    value: None,
                },
            );
            let err = match self
                .transport
                .send(&endpoints[endpoint % endpoints.len()], call)
                .await
            {
                Ok(Reply::Grant(grant))
                    if grant.lock_key == *key && grant.session_id == session =>
                {
                    return Ok(Some(grant));
                }
                Ok(other) => {
                    return Err(LockError::Protocol {
                        status: 200,
                        message: format!("acquire answered {other:?}"),
                    });
                }
                Err(err) => wire_error(err),
            };
            let after = acquiring.failed(clock.now_nanos(), err.retry(), &mut rng);
            if after.rotate {
                endpoint = endpoint.wrapping_add(1);
            }
            match after.next {
                Next::Retry(sleep) => clock.sleep(sleep).await,
                Next::Contended => return Ok(None),
                Next::Fail => return Err(err),
            }
        }
    }

    /// One-shot release for a session this process does not track: compare-and-delete on `key`,
    /// `token` and `session`. `Ok(true)`: the grant was deleted; `Ok(false)`: there was no
    /// live grant of this key with this token and session (already released, expired,
    /// revoked, or never this session's). Tries each endpoint once on `NOT_LEADER` or no
    /// answer.
    pub async fn release_as(
        &self,
        session: SessionId,
        key: &LockKey,
        token: FencingToken,
    ) -> Result<bool, LockError> {
        let call = Call::Release(
            key.clone(),
            ReleaseRequest {
                session_id: session,
                fencing_token: token,
            },
        );
        match self.call_any(call).await? {
            Reply::Released(answer) => Ok(answer.released),
            other => Err(unexpected("release", &other)),
        }
    }

    /// One-shot close: ends `session` on the server with all its grants (idempotent: an
    /// unknown session is not an error). Unlike
    /// [`LockClientSession::close`](crate::LockClientSession::close) it reports a failure,
    /// since nothing will retry it. Tries each endpoint once on `NOT_LEADER` or no answer.
    pub async fn close_session(&self, session: SessionId) -> Result<(), LockError> {
        match self.call_any(Call::DeleteSession(session)).await? {
            Reply::Deleted => Ok(()),
            other => Err(unexpected("close session", &other)),
        }
    }

    /// Inspect: the key's live grant — token, owner and display expiry, never a session id — or
    /// `None` when no live grant exists. For operators and tools: no client may decide
    /// whether a write is safe from it (the fencing token does). Tries each endpoint once on
    /// `NOT_LEADER` or no answer.
    pub async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>, LockError> {
        match self.call_any(Call::Inspect(key.clone())).await {
            Ok(Reply::Info(info)) => Ok(Some(info)),
            Ok(other) => Err(unexpected("inspect", &other)),
            Err(NotHeld) => Ok(None),
            Err(Failed(err)) => Err(err),
        }
    }

    /// Opens W1 on each endpoint in turn until one answers.
    pub(crate) async fn open_watch(
        &self,
        prefix: &str,
        after: Option<u64>,
    ) -> Result<Box<dyn WatchBody>, LockError> {
        let mut last = None;
        for endpoint in &self.config.endpoints {
            match self.transport.watch(endpoint, prefix, after).await {
                Ok(body) => return Ok(body),
                Err(err) => {
                    let err = wire_error(err);
                    if err.retry() != RetryVerdict::NextTick {
                        return Err(err);
                    }
                    last = Some(err);
                }
            }
        }
        Err(last.unwrap_or(LockError::Unavailable {
            message: "no endpoint configured".into(),
        }))
    }

    /// Sleeps `duration` on the SDK's clock.
    pub(crate) async fn sleep(&self, duration: Duration) {
        self.clock.sleep(duration).await;
    }

    /// Revokes the key's live grant, if any, presenting `admin` (the operators'
    /// `LOCK_ADMIN_TOKEN`) instead of the client's credential, with an optional `reason`. The
    /// holder learns it at its next renewal (`LOCK_REVOKED` with who and why: its loss is
    /// `LossReason::Revoked`); the token is never reused. Tries each endpoint once on
    /// `NOT_LEADER` or no answer.
    pub async fn revoke(
        &self,
        key: &LockKey,
        admin: &Credential,
        reason: Option<&RevokeReason>,
    ) -> Result<LockOutcome, LockError> {
        let call = Call::Revoke(key.clone(), admin.clone(), reason.cloned());
        match self.call_any(call).await? {
            Reply::Revoked(outcome) => Ok(outcome),
            other => Err(unexpected("revoke", &other)),
        }
    }

    /// Sends `call` to each endpoint in order until one answers anything but `NOT_LEADER`
    /// or nothing.
    async fn call_any(&self, call: Call) -> Result<Reply, OneShotError> {
        let mut last = None;
        for endpoint in &self.config.endpoints {
            match self.transport.send(endpoint, call.clone()).await {
                Ok(reply) => return Ok(reply),
                Err(TransportError::Status { body, .. }) if body.code == ErrorCode::LockNotHeld => {
                    return Err(NotHeld);
                }
                Err(err) => {
                    let err = wire_error(err);
                    if err.retry() != RetryVerdict::NextTick {
                        return Err(Failed(err));
                    }
                    last = Some(err);
                }
            }
        }
        Err(Failed(last.unwrap_or(LockError::Unavailable {
            message: "no endpoint configured".into(),
        })))
    }
}

/// Why a one-shot call failed: inspect's "no live grant" is an answer, not an error.
enum OneShotError {
    NotHeld,
    Failed(LockError),
}

use OneShotError::{Failed, NotHeld};

impl From<OneShotError> for LockError {
    fn from(err: OneShotError) -> Self {
        match err {
            NotHeld => LockError::Protocol {
                status: 404,
                message: "LOCK_NOT_HELD".into(),
            },
            Failed(err) => err,
        }
    }
}

/// A transport failure as the caller sees it (no grant context: `LOCK_LOST` is `Protocol`).
fn wire_error(err: TransportError) -> LockError {
    match err {
        TransportError::Unreachable(message) => LockError::Unavailable { message },
        TransportError::Status { status, body } => LockError::from_wire(status, body, None),
    }
}

fn unexpected(what: &str, reply: &Reply) -> LockError {
    LockError::Protocol {
        status: 200,
        message: format!("{what} answered {reply:?}"),
    }
}
