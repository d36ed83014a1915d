//! One session's grant registry: the conservative deadlines of the session and of each
//! grant, the heartbeat's renew decisions on its grid, holds, settling, and the losses to
//! deliver. [`SessionCore`] owns it; a driver feeds it replies and `now_nanos` readings.

use std::collections::BTreeMap;
use std::time::Duration;

use lock_api::{ErrorCode, FencingToken, LockKey, LockLost, LossReason};

use crate::acquire::{self, Attempt};
use crate::deadline::{RENEW_BELOW_PERIODS, usable_nanos};
use crate::time::{deadline_passed, nanos_until};

/// One held grant.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Grant {
    token: FencingToken,
    lease_ms: u64,
    deadline_nanos: u64,
    holds: u32,
    lost: Option<LossReason>,
    /// What the server said of the loss (a revoke's by whom and why).
    lost_detail: Option<String>,
    notified: bool,
}

impl Grant {
    /// This grant of `key`'s loss as its holder sees it, when it is lost.
    fn loss(&self, key: &LockKey) -> Option<LockLost> {
        let reason = self.lost?;
        let lost = LockLost::new(key.clone(), self.token, reason);
        Some(match &self.lost_detail {
            Some(detail) => lost.with_detail(detail.clone()),
            None => lost,
        })
    }
}

/// A loss to deliver, with the conservative deadline (the earlier of the grant's and the
/// session's) it was measured against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    /// What was lost and why.
    pub lost: LockLost,
    /// The grant's effective deadline at the loss.
    pub deadline_nanos: u64,
}

/// The losses a delivery found: each lost grant once, and the session's own loss when it
/// held nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Losses {
    /// Lost grants not delivered before.
    pub grants: Vec<Loss>,
    /// The session's loss, first time it is seen, with the session deadline.
    pub session: Option<(LossReason, u64)>,
    /// Whether the session is lost (so a grant's loss is a `session_lost`, not a
    /// `lease_expired`).
    pub session_lost: bool,
}

/// What the last release of a hold found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unhold {
    /// Other holds remain; the grant's loss, if any.
    StillHeld(Option<LossReason>),
    /// The last hold: send the release. The grant's loss, if any.
    Last(Option<LossReason>),
    /// The registry does not know this grant (already released, or never registered).
    Unknown,
}

/// Why a re-entry or a grant registration is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The session is closed or lost.
    Session(LossReason),
    /// This key's grant is lost.
    Grant(LockLost),
}

/// A grant answered with the token of a release this session sent but has no answer for:
/// that release may still arrive and delete it, so it must not be used. Release it again
/// (the answer clears the record) and acquire anew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleRegrant {
    /// The key.
    pub key: LockKey,
    /// The token of the unanswered release.
    pub token: FencingToken,
}

/// A held grant as a caller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// Its token.
    pub token: FencingToken,
    /// The granted lease.
    pub lease_ms: u64,
    /// Its own conservative deadline.
    pub deadline_nanos: u64,
}

/// The instant a planned request left, as the core stamped it when it planned the request
/// (before it was written). Only the core makes one: a driver cannot date an answer from
/// anything but its send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    nanos: u64,
}

impl Sent {
    /// The stamp's reading of the caller's clock.
    pub fn nanos(self) -> u64 {
        self.nanos
    }
}

/// A renewal a tick sends, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// The key.
    pub key: LockKey,
    /// The grant's token.
    pub token: FencingToken,
    /// When it left: the renewed deadline counts from here.
    pub sent: Sent,
}

/// What a heartbeat tick sends: always a heartbeat (unless the session is lost or closed), and a
/// renewal for every live grant under [`RENEW_BELOW_PERIODS`] periods.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickPlan {
    /// Send the heartbeat, stamped.
    pub heartbeat: Option<Sent>,
    /// Send a renewal for each of these.
    pub renew: Vec<Renewal>,
}

/// One session's safety state.
#[derive(Debug, Clone)]
pub struct SessionCore {
    safety_margin: f64,
    session_deadline_nanos: u64,
    lost: Option<LossReason>,
    closed: bool,
    loss_reported: bool,
    grants: BTreeMap<LockKey, Grant>,
    /// Losses of grants released before a delivery saw them: still delivered once.
    undelivered: Vec<Loss>,
    /// Releases sent (the last hold went) and not answered yet, by key.
    releasing: BTreeMap<LockKey, FencingToken>,
}

impl SessionCore {
    /// A session the server granted `ttl_ms`, for a request sent at `send_nanos`.
    pub fn new(safety_margin: f64, ttl_ms: u64, send_nanos: u64) -> Self {
        Self {
            safety_margin,
            session_deadline_nanos: send_nanos.wrapping_add(usable_nanos(safety_margin, ttl_ms)),
            lost: None,
            closed: false,
            loss_reported: false,
            grants: BTreeMap::new(),
            undelivered: Vec::new(),
            releasing: BTreeMap::new(),
        }
    }

    /// The deadline of a lease of `lease_ms` for a request sent at `send_nanos`: send time
    /// plus the usable lease, never the response time or the server's `expires_at`.
    pub fn deadline_after(&self, send_nanos: u64, lease_ms: u64) -> u64 {
        let deadline = send_nanos.wrapping_add(usable_nanos(self.safety_margin, lease_ms));
        // Never past send + lease: the server keeps the lease at least that long.
        debug_assert!(
            deadline.wrapping_sub(send_nanos) <= lease_ms.saturating_mul(1_000_000),
            "a deadline past its send plus the {lease_ms} ms lease"
        );
        deadline
    }

    /// The session's conservative deadline.
    pub fn session_deadline_nanos(&self) -> u64 {
        self.session_deadline_nanos
    }

    /// Why the session is lost, if it is.
    pub fn lost(&self) -> Option<LossReason> {
        self.lost
    }

    /// Whether the owner closed it.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// A successful heartbeat planned as `sent`: the session lives `ttl × (1 − margin)` past
    /// its send. A lost session stays lost.
    pub fn heartbeat_ok(&mut self, sent: Sent, ttl_ms: u64) {
        #[cfg(debug_assertions)]
        let grants_before: Vec<u64> = self.grants.values().map(|g| g.deadline_nanos).collect();
        if self.lost.is_none() && !self.closed {
            self.session_deadline_nanos = self.deadline_after(sent.nanos, ttl_ms);
        }
        // A heartbeat extends the session, never a grant: only a renewal does.
        #[cfg(debug_assertions)]
        debug_assert!(
            self.grants
                .values()
                .map(|g| g.deadline_nanos)
                .eq(grants_before),
            "a heartbeat moved a grant's deadline"
        );
    }

    /// A successful renew of `renewal`: the grant's new deadline (its send plus the usable
    /// `lease_ms`), or `None` when the grant is lost or gone (a late answer never revives it).
    pub fn renew_ok(&mut self, renewal: &Renewal, lease_ms: u64) -> Option<u64> {
        if self.lost.is_some() || self.closed {
            return None;
        }
        let deadline = self.deadline_after(renewal.sent.nanos, lease_ms);
        let grant = self
            .grants
            .get_mut(&renewal.key)
            .filter(|g| g.token == renewal.token && g.lost.is_none())?;
        // A loss is final: only a live grant takes a renewal's deadline.
        debug_assert!(grant.lost.is_none(), "a renewal revived a lost grant");
        grant.lease_ms = lease_ms;
        grant.deadline_nanos = deadline;
        Some(deadline)
    }

    /// A failed heartbeat (`code`: the refusal's, `None` when nothing answered): the session
    /// is lost when the code says so. Returns whether the next call goes to the next endpoint.
    pub fn heartbeat_failed(&mut self, code: Option<ErrorCode>) -> bool {
        if let Some(reason) = code.and_then(acquire::session_loss) {
            self.lose_session(reason);
            return false;
        }
        acquire::rotates(code)
    }

    /// A failed renew of `renewal`: `LOCK_LOST` loses the grant (`RenewRefused`),
    /// `LOCK_REVOKED` too (`Revoked`, with the server's `message` as the loss's detail), a
    /// session code the session. Returns whether the next call goes to the next endpoint.
    pub fn renew_failed(
        &mut self,
        renewal: &Renewal,
        code: Option<ErrorCode>,
        message: &str,
    ) -> bool {
        let reason = match code {
            Some(ErrorCode::LockLost) => LossReason::RenewRefused,
            Some(ErrorCode::LockRevoked) => LossReason::Revoked,
            _ => return self.heartbeat_failed(code),
        };
        self.lose_grant(&renewal.key, renewal.token, reason);
        if let Some(grant) = self.grants.get_mut(&renewal.key).filter(|g| {
            g.token == renewal.token && g.lost == Some(reason) && g.lost_detail.is_none()
        }) {
            grant.lost_detail = (reason == LossReason::Revoked).then(|| message.to_owned());
        }
        false
    }

    /// Marks the whole session lost (terminal): every grant with it.
    pub fn lose_session(&mut self, reason: LossReason) {
        self.lost.get_or_insert(reason);
        for grant in self.grants.values_mut() {
            grant.lost.get_or_insert(reason);
        }
    }

    /// Marks one grant lost.
    pub fn lose_grant(&mut self, key: &LockKey, token: FencingToken, reason: LossReason) {
        if let Some(grant) = self.grants.get_mut(key).filter(|g| g.token == token) {
            grant.lost.get_or_insert(reason);
        }
    }

    /// Applies the local deadlines at `now_nanos`: the session's, then each grant's.
    pub fn expire(&mut self, now_nanos: u64) {
        if self.closed {
            return;
        }
        if self.lost.is_none() && deadline_passed(now_nanos, self.session_deadline_nanos) {
            self.lose_session(LossReason::DeadlinePassed);
        }
        for grant in self.grants.values_mut() {
            if grant.lost.is_none() && deadline_passed(now_nanos, grant.deadline_nanos) {
                grant.lost = Some(LossReason::DeadlinePassed);
            }
        }
    }

    /// A tick at `now_nanos` with heartbeat `period`: deadlines first (a deadline that passed
    /// is a loss, whatever a later answer says), then what to send.
    pub fn begin_tick(&mut self, now_nanos: u64, period: Duration) -> TickPlan {
        self.expire(now_nanos);
        if self.lost.is_some() || self.closed {
            return TickPlan::default();
        }
        let threshold =
            u64::try_from((period * RENEW_BELOW_PERIODS).as_nanos()).unwrap_or(u64::MAX);
        let sent = Sent { nanos: now_nanos };
        // Every request is stamped when it is planned: its deadline counts from then.
        debug_assert_eq!(
            sent.nanos, now_nanos,
            "a request stamped after it was planned"
        );
        let renew = self
            .grants
            .iter()
            .filter(|(_, g)| g.lost.is_none())
            .filter(|(_, g)| nanos_until(now_nanos, g.deadline_nanos) < threshold)
            .map(|(k, g)| Renewal {
                key: k.clone(),
                token: g.token,
                sent,
            })
            .collect();
        TickPlan {
            heartbeat: Some(sent),
            renew,
        }
    }

    /// The shortest lease among live grants, for the heartbeat period.
    pub fn shortest_lease_ms(&self) -> Option<u64> {
        self.grants
            .values()
            .filter(|g| g.lost.is_none())
            .map(|g| g.lease_ms)
            .min()
    }

    fn refused_session(&self) -> Option<Refused> {
        if self.closed {
            return Some(Refused::Session(LossReason::SessionClosed));
        }
        self.lost.map(Refused::Session)
    }

    /// Same-session reentrancy at `now_nanos`: one more hold on `key`'s live grant, `None`
    /// when this session holds no grant of `key`.
    pub fn reenter(&mut self, key: &LockKey, now_nanos: u64) -> Result<Option<Held>, Refused> {
        self.expire(now_nanos);
        if let Some(refused) = self.refused_session() {
            return Err(refused);
        }
        let Some(grant) = self.grants.get_mut(key) else {
            return Ok(None);
        };
        if let Some(lost) = grant.loss(key) {
            return Err(Refused::Grant(lost));
        }
        grant.holds += 1;
        Ok(Some(Held {
            token: grant.token,
            lease_ms: grant.lease_ms,
            deadline_nanos: grant.deadline_nanos,
        }))
    }

    /// Registers a grant of `lease_ms` answered at `received_nanos` to `attempt`, the
    /// server having held the request `waited_ms` before granting: its deadline counts from
    /// [`Attempt::grant_basis_nanos`] (the wait credited less the margin). An idempotent re-grant of a live grant this session
    /// holds adds one hold to it. A re-grant carrying the token of this session's unanswered
    /// release is refused: that release may still delete it.
    pub fn granted(
        &mut self,
        key: &LockKey,
        token: FencingToken,
        lease_ms: u64,
        attempt: Attempt,
        received_nanos: u64,
        waited_ms: u64,
    ) -> Result<Held, StaleRegrant> {
        let send_nanos = attempt.grant_basis_nanos(received_nanos, waited_ms, self.safety_margin);
        if self.releasing.get(key) == Some(&token) {
            return Err(StaleRegrant {
                key: key.clone(),
                token,
            });
        }
        if let Some(grant) = self
            .grants
            .get_mut(key)
            .filter(|g| g.token == token && g.lost.is_none())
        {
            grant.holds += 1;
            return Ok(Held {
                token,
                lease_ms: grant.lease_ms,
                deadline_nanos: grant.deadline_nanos,
            });
        }
        // Never a re-grant of a token whose release this session has not seen answered.
        debug_assert_ne!(
            self.releasing.get(key),
            Some(&token),
            "{key}: believed a re-grant of token {token} with its release in flight"
        );
        let deadline_nanos = self.deadline_after(send_nanos, lease_ms);
        self.grants.insert(
            key.clone(),
            Grant {
                token,
                lease_ms,
                deadline_nanos,
                holds: 1,
                lost: None,
                lost_detail: None,
                notified: false,
            },
        );
        Ok(Held {
            token,
            lease_ms,
            deadline_nanos,
        })
    }

    /// Why a new acquire that includes `key` is refused here, before any call: the session
    /// is lost or closed, or it holds a grant of `key` already counted lost (its handles were
    /// told; a re-grant of its token must not make them held again). `None`: ask the server.
    /// What [`Self::reenter`] refuses, without taking a hold.
    pub fn refuses(&mut self, key: &LockKey, now_nanos: u64) -> Option<Refused> {
        self.expire(now_nanos);
        if let Some(refused) = self.refused_session() {
            return Some(refused);
        }
        let lost = self.grants.get(key)?.loss(key)?;
        Some(Refused::Grant(lost))
    }

    /// A grant of `key`/`token` answered to the try that settles an acquire given up
    /// unanswered ([`AcquireLoop::ended_unanswered`]): whether to release it at once. Yes
    /// when this session holds no grant of `key` (the grant is the unanswered attempt's, and
    /// nobody here knows of it); the release is then recorded as unanswered, so that a
    /// re-grant of that token to a later acquire is not believed.
    pub fn settling(&mut self, key: &LockKey, token: FencingToken) -> bool {
        if self.grants.contains_key(key) {
            return false;
        }
        self.releasing.insert(key.clone(), token);
        true
    }

    /// The store answered the release of `key`/`token` (whatever it found): it can no longer
    /// delete a later grant.
    pub fn release_answered(&mut self, key: &LockKey, token: FencingToken) {
        if self.releasing.get(key) == Some(&token) {
            self.releasing.remove(key);
        }
    }

    /// Time left at `now_nanos` before `key`/`token`'s conservative deadline (the earlier of
    /// the grant's and the session's), or the loss: why, and what the server said of it (a
    /// revoke's by whom and why).
    pub fn remaining(
        &mut self,
        key: &LockKey,
        token: FencingToken,
        now_nanos: u64,
    ) -> Result<Duration, LockLost> {
        self.expire(now_nanos);
        let gone = || {
            let reason = self.lost.unwrap_or(LossReason::SessionClosed);
            LockLost::new(key.clone(), token, reason)
        };
        let grant = self
            .grants
            .get(key)
            .filter(|g| g.token == token)
            .ok_or_else(gone)?;
        if let Some(lost) = grant.loss(key) {
            return Err(lost);
        }
        let session_left = nanos_until(now_nanos, self.session_deadline_nanos);
        let grant_left = nanos_until(now_nanos, grant.deadline_nanos);
        Ok(Duration::from_nanos(session_left.min(grant_left)))
    }

    /// The effective conservative deadline of `key`/`token` while it is held at `now_nanos`
    /// (not lost, neither its deadline nor the session's passed); `None` otherwise. Reads
    /// only: an observer's question, which records no loss.
    pub fn held_deadline(&self, key: &LockKey, token: FencingToken, now_nanos: u64) -> Option<u64> {
        if self.lost.is_some() || self.closed {
            return None;
        }
        let grant = self
            .grants
            .get(key)
            .filter(|g| g.token == token && g.lost.is_none())?;
        let deadline = self.effective_deadline(grant);
        (!deadline_passed(now_nanos, deadline)).then_some(deadline)
    }

    fn effective_deadline(&self, grant: &Grant) -> u64 {
        if deadline_passed(grant.deadline_nanos, self.session_deadline_nanos) {
            self.session_deadline_nanos
        } else {
            grant.deadline_nanos
        }
    }

    /// Releases one hold of `key`/`token`; the last hold removes the grant (its loss, if not
    /// yet delivered, is kept for delivery) and records the release the caller now sends as
    /// unanswered.
    pub fn unhold(&mut self, key: &LockKey, token: FencingToken) -> Unhold {
        let Some(grant) = self.grants.get_mut(key).filter(|g| g.token == token) else {
            return Unhold::Unknown;
        };
        grant.holds = grant.holds.saturating_sub(1);
        let lost = grant.lost;
        if grant.holds > 0 {
            return Unhold::StillHeld(lost);
        }
        self.releasing.insert(key.clone(), token);
        if let Some(grant) = self.grants.remove(key) {
            if let (Some(lost), false) = (grant.loss(key), grant.notified) {
                let deadline_nanos = self.effective_deadline(&grant);
                self.undelivered.push(Loss {
                    lost,
                    deadline_nanos,
                });
            }
        }
        Unhold::Last(lost)
    }

    /// The owner closed the session: every grant ends without a loss to deliver.
    pub fn close(&mut self) {
        self.closed = true;
        for grant in self.grants.values_mut() {
            grant.lost.get_or_insert(LossReason::SessionClosed);
            grant.notified = true;
        }
    }

    /// Every loss not delivered yet, each exactly once.
    pub fn take_losses(&mut self) -> Losses {
        if self.closed {
            return Losses::default();
        }
        let mut grants = std::mem::take(&mut self.undelivered);
        let mut fresh = Vec::new();
        for (key, grant) in &mut self.grants {
            if let (Some(lost), false) = (grant.loss(key), grant.notified) {
                grant.notified = true;
                fresh.push((grant.clone(), lost));
            }
        }
        for (grant, lost) in fresh {
            grants.push(Loss {
                deadline_nanos: self.effective_deadline(&grant),
                lost,
            });
        }
        let session = match (self.lost, self.loss_reported) {
            (Some(reason), false) => {
                self.loss_reported = true;
                Some((reason, self.session_deadline_nanos))
            }
            _ => None,
        };
        Losses {
            grants,
            session,
            session_lost: self.lost.is_some(),
        }
    }

    /// Losses already delivered, for a listener registered late.
    pub fn delivered_losses(&self) -> Vec<LockLost> {
        self.grants
            .iter()
            .filter(|(_, g)| g.notified)
            .filter_map(|(key, g)| g.loss(key))
            .collect()
    }
}

#[cfg(test)]
mod tests;
