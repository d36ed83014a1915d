//! An election's campaign, proclaim and resign on [`LockClientSession`] (C2 §2.4c): the
//! election's key acquired exclusively with a value, the value changed under the same term,
//! the key released to the next candidate.

use std::time::Duration;

use lock_api::{Claim, LeaderValue, LockError, LockKey, LockLost, ProclaimRequest};

use super::LockClientSession;
use crate::core::AcquirePolicy;
use crate::election::Leadership;
use crate::transport::{Call, Reply};

impl LockClientSession {
    /// Campaigns in the election `name`: acquires its key exclusively for a lease of `ttl`,
    /// waiting behind earlier candidates in the key's FIFO queue within `policy`, the grant
    /// announcing `value` from the moment it is answered. `Ok(None)`: another candidate
    /// still leads when the policy ran out (campaign again to stay in line). A session that
    /// leads already keeps its term and announces `value`.
    pub async fn campaign(
        &self,
        name: &LockKey,
        value: LeaderValue,
        ttl: Duration,
        policy: &AcquirePolicy,
    ) -> Result<Option<Leadership>, LockError> {
        if let Some(handle) = self.reenter(name, Claim::Exclusive)? {
            let mut leadership = Leadership::new(handle, value.clone());
            self.proclaim(&mut leadership, value).await?;
            return Ok(Some(leadership));
        }
        let claim = Claim::Exclusive;
        let acquired = (self.acquire_announcing(name, claim, Some(&value), ttl, policy)).await?;
        Ok(acquired.map(|handle| Leadership::new(handle, value)))
    }

    /// Announces `value` in place of what `leadership` announced, keeping its term. A term
    /// this session has lost is `LockError::Lost`, checked here before the call and by the
    /// server (which never lets a stale term overwrite a successor's value).
    pub async fn proclaim(
        &self,
        leadership: &mut Leadership,
        value: LeaderValue,
    ) -> Result<(), LockError> {
        self.check_still_held(leadership.handle())
            .map_err(LockError::Lost)?;
        let call = Call::Proclaim(
            leadership.name().clone(),
            ProclaimRequest {
                session_id: self.shared.id,
                fencing_token: leadership.term(),
                value: value.clone(),
            },
        );
        match self.transport.send(&self.shared.endpoint(), call).await {
            Ok(Reply::Proclaimed) => {
                leadership.set_value(value);
                Ok(())
            }
            Ok(other) => Err(LockError::Protocol {
                status: 200,
                message: format!("proclaim answered {other:?}"),
            }),
            Err(err) => {
                let grant = (leadership.name(), leadership.term());
                let err = self.classify_on(err, Some(grant));
                if let LockError::Lost(lost) = &err {
                    // The server no longer has this term: it is lost here too, as a refused
                    // renewal's grant is (held-checks fail, listeners are told).
                    let mut state = self.shared.state();
                    state
                        .core()
                        .lose_grant(&lost.lock_key, lost.fencing_token, lost.reason);
                }
                Err(err)
            }
        }
    }

    /// Gives up `leadership`: the key is released and goes to the next candidate at once.
    /// `Err` when the term was lost already (as [`release`](Self::release)).
    pub async fn resign(&self, leadership: Leadership) -> Result<(), LockLost> {
        self.release(leadership.into_handle()).await
    }
}
