//! Key sets (ADR 0007): a session acquires several keys together or none, and holds them as
//! a [`LockSet`]. Each member is an ordinary grant of this session (its own token, proof,
//! deadline, renewal and loss); the set only acquires them at once and guards them together.

use std::time::Duration;

use lock_api::{AcquireSetRequest, Claim, LockError, LockGrant, LockKey, LockLost, SetGrant};

use super::LockClientSession;
use crate::core::{AcquireLoop, AcquirePolicy, Attempt, Next, Refused};
use crate::handle::LockHandle;
use crate::transport::{Call, Reply};

/// Keys held together: one [`LockHandle`] per key, sorted by key. A set is held while every
/// member is ([`LockClientSession::check_set_held`]); a member's loss is the set's.
#[derive(Debug)]
pub struct LockSet {
    handles: Vec<LockHandle>,
}

impl LockSet {
    /// The members, sorted by key.
    pub fn handles(&self) -> &[LockHandle] {
        &self.handles
    }

    /// The member for `key`, if the set has it.
    pub fn get(&self, key: &LockKey) -> Option<&LockHandle> {
        self.handles.iter().find(|h| h.lock_key() == key)
    }

    /// The members, to release or guard one by one.
    pub fn into_handles(self) -> Vec<LockHandle> {
        self.handles
    }
}

impl LockClientSession {
    /// Acquires every key of `keys` (1 to [`lock_api::SET_KEYS_MAX`], each once, any order)
    /// for `ttl`, all in one store transaction or none, each with its own token. The loop,
    /// its budget and its errors are [`LockClientSession::acquire`]'s: `Ok(None)` when the
    /// budget ran out while a key was held. A waiting set holds no key, so sets never
    /// deadlock; the server queues it on every key at once.
    pub async fn acquire_set(
        &self,
        keys: &[LockKey],
        ttl: Duration,
        policy: &AcquirePolicy,
    ) -> Result<Option<LockSet>, LockError> {
        let keys =
            lock_api::key_set(keys.to_vec()).map_err(|refused| LockError::InvalidArgument {
                message: format!("{}: {}", refused.field, refused.reason),
            })?;
        let started = self.shared.clock.now_nanos();
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut acquiring = AcquireLoop::new(policy, self.shared.config.request_timeout, started);
        loop {
            self.refuses(&keys)?;
            let attempt = acquiring.attempt(self.shared.clock.now_nanos());
            let call = self.set_call(&keys, ttl_ms, attempt.wait_ms());
            let failure = match self.transport.send(&self.shared.endpoint(), call).await {
                Ok(Reply::Grants(answer)) => {
                    match self.register_set(&keys, &answer, attempt).await? {
                        Some(set) => {
                            self.observe(started, "granted");
                            return Ok(Some(set));
                        }
                        None => LockError::Contention {
                            message: "a member was re-granted the token of an unanswered release"
                                .into(),
                        },
                    }
                }
                Ok(other) => {
                    self.observe(started, "error");
                    return Err(LockError::Protocol {
                        status: 200,
                        message: format!("set acquire answered {other:?}"),
                    });
                }
                Err(err) => self.classify(err),
            };
            match self.after_failure(&mut acquiring, &failure) {
                Next::Retry(sleep) => self.shared.clock.sleep(sleep).await,
                Next::Contended => {
                    self.observe(started, "contended");
                    return Ok(None);
                }
                Next::Fail => {
                    if acquiring.ended_unanswered() {
                        self.settle_set(&keys, ttl_ms).await;
                    }
                    self.observe(started, "error");
                    return Err(failure);
                }
            }
        }
    }

    /// `Err` with the first member's loss once any member of `set` is past its conservative
    /// deadline or lost; a guard clause before each side effect, as
    /// [`LockClientSession::check_still_held`] is for one key.
    pub fn check_set_held(&self, set: &LockSet) -> Result<(), LockLost> {
        set.handles
            .iter()
            .try_for_each(|handle| self.check_still_held(handle))
    }

    /// Releases every member of `set`; the first member's loss, if any was lost (the others
    /// are released all the same).
    pub async fn release_set(&self, set: LockSet) -> Result<(), LockLost> {
        let mut first_loss = None;
        for handle in set.handles {
            if let Err(lost) = self.release(handle).await {
                first_loss.get_or_insert(lost);
            }
        }
        first_loss.map_or(Ok(()), Err)
    }

    /// This session's set acquire of `keys`, waiting `wait_ms` in the server (`None`: a try).
    fn set_call(&self, keys: &[LockKey], ttl_ms: u64, wait_ms: Option<u64>) -> Call {
        Call::AcquireSet(AcquireSetRequest {
            session_id: self.shared.id,
            lock_keys: keys.to_vec(),
            ttl_ms: Some(ttl_ms),
            wait_ms,
            lock_delay_ms: None,
        })
    }

    /// What [`LockClientSession::acquire`] refuses before a call, for any key of the set: a
    /// session lost or closed, a grant of a key already counted lost.
    fn refuses(&self, keys: &[LockKey]) -> Result<(), LockError> {
        let now = self.shared.clock.now_nanos();
        let refused = {
            let mut state = self.shared.state();
            keys.iter().find_map(|key| state.core().refuses(key, now))
        };
        match refused {
            None => Ok(()),
            Some(Refused::Session(reason)) => Err(self.session_error(reason)),
            Some(Refused::Grant(lost)) => Err(LockError::Lost(lost)),
        }
    }

    /// Registers every grant of a set's answer: the set, or `None` when a member re-granted
    /// the token of an unanswered release (the members registered are released again, and
    /// those after it, granted but never registered, are settled: released unless held here).
    async fn register_set(
        &self,
        keys: &[LockKey],
        answer: &SetGrant,
        attempt: Attempt,
    ) -> Result<Option<LockSet>, LockError> {
        let answered: Vec<&LockKey> = answer.grants.iter().map(|g| &g.lock_key).collect();
        if answered != keys.iter().collect::<Vec<_>>() {
            self.settle_grants(&answer.grants).await;
            return Err(LockError::Protocol {
                status: 200,
                message: format!("a set of {keys:?} answered grants of {answered:?}"),
            });
        }
        let mut handles = Vec::with_capacity(keys.len());
        for (i, (key, grant)) in keys.iter().zip(&answer.grants).enumerate() {
            match self.register(key, Claim::Exclusive, grant, attempt).await? {
                Some(handle) => handles.push(handle),
                None => {
                    for handle in handles {
                        let _ = self.release(handle).await;
                    }
                    self.settle_grants(&answer.grants[i + 1..]).await;
                    return Ok(None);
                }
            }
        }
        Ok(Some(LockSet { handles }))
    }

    /// As [`LockClientSession::acquire`]'s settle, for a set: one try answers a grant made
    /// for an attempt whose answer never came; each member this session does not hold
    /// otherwise is released at once.
    async fn settle_set(&self, keys: &[LockKey], ttl_ms: u64) {
        let call = self.set_call(keys, ttl_ms, None);
        let Ok(Reply::Grants(answer)) = self.transport.send(&self.shared.endpoint(), call).await
        else {
            return;
        };
        let ours: Vec<LockGrant> = (answer.grants.into_iter())
            .filter(|grant| keys.contains(&grant.lock_key))
            .collect();
        self.settle_grants(&ours).await;
    }

    /// Grants of this session that nobody here registered: each released at once unless the
    /// session holds its key otherwise.
    async fn settle_grants(&self, grants: &[LockGrant]) {
        for grant in grants {
            let (key, token) = (&grant.lock_key, grant.fencing_token);
            let ours = grant.session_id == self.shared.id;
            if ours && self.shared.state().core().settling(key, token) {
                self.send_release(key, token).await;
            }
        }
    }
}
