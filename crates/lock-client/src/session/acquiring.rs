//! The acquire loop of [`LockClientSession`]: one claim on one key, retried with full-jitter
//! backoff within the policy's budget ([`AcquireLoop`] decides), each grant registered with
//! the core, and an attempt whose answer never came settled.

use std::time::Duration;

use lock_api::{AcquireRequest, Claim, ErrorCode, LeaderValue, LockError, LockKey};

use super::LockClientSession;
use crate::core::{AcquireLoop, AcquirePolicy, Next};
use crate::handle::LockHandle;
use crate::metrics as m;
use crate::transport::{Call, Reply};

impl LockClientSession {
    /// Acquires `key` for a lease of `ttl` (the server may clamp it), retrying contention
    /// with full-jitter backoff within `policy.budget` on the SDK's clock.
    ///
    /// `Ok(None)` is the ordinary contended outcome: the budget ran out while another
    /// session held the key. Acquiring a key this session already holds returns a new handle
    /// on the same grant and token (a hold count); only the last release is sent to the server.
    pub async fn acquire(
        &self,
        key: &LockKey,
        ttl: Duration,
        policy: &AcquirePolicy,
    ) -> Result<Option<LockHandle>, LockError> {
        self.acquire_claim(key, Claim::Exclusive, ttl, policy).await
    }

    /// [`acquire`](Self::acquire) of what `claim` asks (ADR 0007): the whole key (a lock, a
    /// read/write lock's writer), a reader's share beside other readers, or one of a
    /// semaphore's permits. The handle's [`scope`](LockHandle::scope) says what it holds (a
    /// permit's slot); its proof signs that scope, and a resource fences a permit per slot.
    /// Held-checks, renewal, loss and release are a lock's. A key this session already
    /// holds in another scope is refused (`InvalidArgument`), never converted; so is a claim
    /// of another kind than the key's live grants (`LOCK_KIND_CONFLICT`).
    pub async fn acquire_claim(
        &self,
        key: &LockKey,
        claim: Claim,
        ttl: Duration,
        policy: &AcquirePolicy,
    ) -> Result<Option<LockHandle>, LockError> {
        self.acquire_announcing(key, claim, None, ttl, policy).await
    }

    /// [`acquire_claim`](Self::acquire_claim) whose grant announces `value` (an election's
    /// campaign, C2 §2.4c): the server sets it before it answers. A re-entered grant
    /// (`reentrant`) announces nothing here; the caller proclaims.
    pub(super) async fn acquire_announcing(
        &self,
        key: &LockKey,
        claim: Claim,
        value: Option<&LeaderValue>,
        ttl: Duration,
        policy: &AcquirePolicy,
    ) -> Result<Option<LockHandle>, LockError> {
        let shared = &self.shared;
        let started = shared.clock.now_nanos();
        let backend = shared.backend.as_str();
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        if let Some(handle) = self.reenter(key, claim)? {
            metrics::counter!(m::ACQUIRE_TOTAL, "backend" => backend, "outcome" => "reentrant")
                .increment(1);
            return Ok(Some(handle));
        }
        let mut acquiring = AcquireLoop::new(policy, shared.config.request_timeout, started);
        loop {
            let attempt = acquiring.attempt(shared.clock.now_nanos());
            let call = self.acquire_call(key, claim, ttl_ms, attempt.wait_ms(), value);
            let failure = match self.transport.send(&shared.endpoint(), call).await {
                Ok(Reply::Grant(grant)) => {
                    match self.register(key, claim, &grant, attempt).await? {
                        Some(handle) => {
                            self.observe(started, "granted");
                            return Ok(Some(handle));
                        }
                        None => LockError::Contention {
                            message: format!(
                                "{key}: re-granted a token whose release is unanswered"
                            ),
                        },
                    }
                }
                Ok(other) => {
                    self.observe(started, "error");
                    return Err(LockError::Protocol {
                        status: 200,
                        message: format!("acquire answered {other:?}"),
                    });
                }
                // A campaign whose grant ended (revoked, expired) before its value was set:
                // nothing is held, and the election goes on; so does the campaign.
                Err(err) if value.is_some() && err.code() == Some(ErrorCode::LockLost) => {
                    LockError::Contention {
                        message: format!("{key}: the term ended before its value was set"),
                    }
                }
                Err(err) => self.classify(err),
            };
            match self.after_failure(&mut acquiring, &failure) {
                Next::Retry(sleep) => shared.clock.sleep(sleep).await,
                Next::Contended => {
                    self.observe(started, "contended");
                    return Ok(None);
                }
                Next::Fail => {
                    if acquiring.ended_unanswered() {
                        self.settle(key, claim, ttl_ms).await;
                    }
                    self.observe(started, "error");
                    return Err(failure);
                }
            }
        }
    }

    /// What the acquire loop does after `failure`: the endpoint moves on when the loop says
    /// so; the retry's sleep, contention, or the end.
    pub(super) fn after_failure(&self, acquiring: &mut AcquireLoop, failure: &LockError) -> Next {
        let shared = &self.shared;
        let after = {
            let mut rng = shared
                .rng
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            acquiring.failed(shared.clock.now_nanos(), failure.retry(), &mut rng)
        };
        if after.rotate {
            shared.rotate_endpoint();
        }
        after.next
    }

    /// The loop gave up on an attempt whose answer never came: the server may have granted
    /// it meanwhile to a caller that no longer listens. One try without waiting answers such
    /// a grant again (same session, same token); unless this session holds `key` otherwise,
    /// it is released at once. Best effort: a try that fails leaves the grant to the
    /// server's own abandon, at worst to its lease.
    pub(super) async fn settle(&self, key: &LockKey, claim: Claim, ttl_ms: u64) {
        let call = self.acquire_call(key, claim, ttl_ms, None, None);
        let Ok(Reply::Grant(grant)) = self.transport.send(&self.shared.endpoint(), call).await
        else {
            return;
        };
        let token = grant.fencing_token;
        let ours = grant.lock_key == *key && grant.session_id == self.shared.id;
        if !(ours && self.shared.state().core().settling(key, token)) {
            return;
        }
        tracing::info!(event = "acquire_settled", key = %key, token = token.0, session = %self.shared.id.tag(), "gave back a grant made for an attempt whose answer never came");
        metrics::counter!(m::ACQUIRES_SETTLED_TOTAL, "backend" => self.shared.backend.as_str())
            .increment(1);
        self.send_release(key, token).await;
    }

    /// This session's L4 of `claim` on `key`: a lease of `ttl_ms`, waiting `wait_ms` in the server
    /// (`None`: a try), announcing `value`.
    pub(super) fn acquire_call(
        &self,
        key: &LockKey,
        claim: Claim,
        ttl_ms: u64,
        wait_ms: Option<u64>,
        value: Option<&LeaderValue>,
    ) -> Call {
        let (mode, permits) = claim.as_wire();
        Call::Acquire(
            key.clone(),
            AcquireRequest {
                session_id: self.shared.id,
                ttl_ms: Some(ttl_ms),
                wait_ms,
                lock_delay_ms: None,
                mode,
                permits,
                value: value.cloned(),
            },
        )
    }

    pub(super) fn observe(&self, started: u64, outcome: &'static str) {
        let backend = self.shared.backend.as_str();
        let waited = Duration::from_nanos(self.shared.clock.now_nanos().wrapping_sub(started));
        metrics::counter!(m::ACQUIRE_TOTAL, "backend" => backend, "outcome" => outcome)
            .increment(1);
        metrics::histogram!(m::ACQUIRE_WAIT_SECONDS, "backend" => backend, "outcome" => outcome)
            .record(waited.as_secs_f64());
    }
}
