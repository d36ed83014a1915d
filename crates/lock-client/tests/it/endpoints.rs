//! Sessions of many processes spread over the replicas (each client starts
//! at a random endpoint) instead of all loading the first, and failover still moves a session
//! to the next endpoint.

use std::collections::BTreeSet;
use std::time::Duration;

use lock_api::ErrorCode;
use lock_client::test_util::TransportError;
use lock_client::test_util::status;

use crate::support::Rig;

const PERIOD: Duration = Duration::from_secs(1);
/// Clients opened: all on one endpoint by chance has probability 2^-63.
const CLIENTS: usize = 64;

#[tokio::test]
async fn sessions_of_many_clients_spread_over_the_endpoints() {
    let mut seen = BTreeSet::new();
    for i in 0..CLIENTS {
        let rig = Rig::new(PERIOD);
        let session = rig.session(&format!("w-{i}")).await;
        seen.insert(session.endpoint());
        session.close().await;
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["http://replica-a", "http://replica-b"],
        "every endpoint serves some sessions"
    );
}

#[tokio::test]
async fn an_unanswered_open_tries_the_other_endpoint_and_a_not_leader_tick_moves_the_session() {
    let rig = Rig::new(PERIOD);
    rig.service.fail_next(
        "create_session",
        TransportError::Unreachable("first try".into()),
    );
    let session = rig.session("w").await;
    assert_eq!(
        rig.service.count("create_session"),
        2,
        "the first endpoint tried did not answer; the other one did"
    );
    let before = session.endpoint();
    rig.service
        .fail_next("heartbeat", status(ErrorCode::NotLeader, "draining"));
    rig.tick(PERIOD).await;
    assert_ne!(session.endpoint(), before, "moved to the other endpoint");
    session.close().await;
}
