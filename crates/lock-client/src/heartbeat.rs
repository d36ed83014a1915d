//! One heartbeat tick for one session, driving the pure core: the core applies the local
//! deadlines and plans the tick (a heartbeat, and a renewal for each grant under two periods of
//! remaining time), stamping when each request leaves; this sends it, hands the answers back
//! with their stamps, applies the deadlines again and delivers losses. Runs on the heartbeat
//! thread; errors other than 404/410/`LOCK_LOST` are retried on the next tick (the next
//! endpoint after `NOT_LEADER` or no answer): only the deadline decides loss.

use std::time::Duration;

use lock_api::{ErrorCode, RenewRequest};

use crate::metrics as m;
use crate::session::Shared;
use crate::transport::{Call, Reply, Transport, TransportError};

fn result_label(err: &TransportError) -> &'static str {
    match err.code() {
        None => "unreachable",
        Some(ErrorCode::NotLeader) => "not_leader",
        Some(
            ErrorCode::SessionUnknown
            | ErrorCode::SessionExpired
            | ErrorCode::LockLost
            | ErrorCode::LockRevoked,
        ) => "lost",
        Some(_) => "error",
    }
}

/// One tick for `shared` with heartbeat `period`: the core plans it (deadlines first), this
/// sends it and feeds the answers back, then losses are delivered.
pub(crate) async fn tick(shared: &Shared, transport: &dyn Transport, period: Duration) {
    if shared.is_closed() {
        return;
    }
    let backend = shared.backend.as_str();
    let plan = shared.begin_tick(shared.clock.now_nanos(), period);
    if let Some(sent) = plan.heartbeat {
        match transport
            .send(&shared.endpoint(), Call::Heartbeat(shared.id))
            .await
        {
            Ok(Reply::Heartbeat(beat)) => {
                shared.heartbeat_ok(sent, beat.ttl_ms);
                metrics::counter!(m::HEARTBEATS_TOTAL, "backend" => backend, "result" => "ok")
                    .increment(1);
            }
            Ok(other) => {
                tracing::warn!(event = "heartbeat_failed", session = %shared.id.tag(), answer = ?other, "unexpected heartbeat answer");
                metrics::counter!(m::HEARTBEATS_TOTAL, "backend" => backend, "result" => "error")
                    .increment(1);
            }
            Err(err) => {
                tracing::debug!(event = "heartbeat_failed", session = %shared.id.tag(), error = %err);
                metrics::counter!(m::HEARTBEATS_TOTAL, "backend" => backend, "result" => result_label(&err)).increment(1);
                shared.heartbeat_failed(err.code());
            }
        }
    }
    for renewal in &plan.renew {
        if shared.session_loss().is_some() {
            break;
        }
        let (key, token) = (&renewal.key, renewal.token);
        let call = Call::Renew(
            key.clone(),
            RenewRequest {
                session_id: shared.id,
                fencing_token: token,
            },
        );
        match transport.send(&shared.endpoint(), call).await {
            Ok(Reply::Grant(grant)) if grant.fencing_token == token => {
                shared.renew_ok(renewal, grant.lease_ms, grant.proof);
                metrics::counter!(m::RENEWALS_TOTAL, "backend" => backend, "result" => "ok")
                    .increment(1);
            }
            Ok(other) => {
                // Renew never changes the token; an answer that does is not our grant.
                tracing::error!(event = "renew_failed", key = %key, token = token.0, answer = ?other, "renew answered another grant");
                shared.renew_failed(
                    renewal,
                    Some(ErrorCode::LockLost),
                    "renew answered another grant",
                );
                metrics::counter!(m::RENEWALS_TOTAL, "backend" => backend, "result" => "error")
                    .increment(1);
            }
            Err(err) => {
                tracing::debug!(event = "renew_failed", key = %key, token = token.0, error = %err);
                metrics::counter!(m::RENEWALS_TOTAL, "backend" => backend, "result" => result_label(&err)).increment(1);
                shared.renew_failed(renewal, err.code(), err.message());
            }
        }
    }
    shared.expire_local(shared.clock.now_nanos());
    shared.fire_pending();
}
