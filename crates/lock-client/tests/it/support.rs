//! A client on a manual fake clock over the in-memory transport.

use std::sync::Arc;
use std::time::Duration;

use lock_client::testing::MemoryTransport;
use lock_client::{Clock, FakeClock, LockClient, LockClientConfig, LockClientSession};

/// A clock start close to `u64::MAX`, so every test also crosses the wrap-around.
pub const START_NANOS: u64 = u64::MAX - 1_500_000_000;

pub struct Rig {
    pub clock: FakeClock,
    pub service: Arc<MemoryTransport>,
    pub client: LockClient,
}

impl Rig {
    /// `period` fixes the heartbeat period (an hour keeps the heartbeat out of the way).
    pub fn new(period: Duration) -> Self {
        let clock = FakeClock::new(START_NANOS);
        let service = Arc::new(MemoryTransport::new());
        let mut config = LockClientConfig::new(["http://replica-a", "http://replica-b"]);
        config.heartbeat_period = Some(period);
        let client = LockClient::with_parts(
            config,
            Arc::new(clock.clone()),
            service.clone(),
            service.clone(),
        )
        .unwrap();
        Self {
            clock,
            service,
            client,
        }
    }

    pub async fn session(&self, owner: &str) -> LockClientSession {
        self.client.open_session(owner).await.unwrap()
    }

    /// Advances the clock by `by` and waits until the heartbeat thread has completed a tick.
    pub async fn tick(&self, by: Duration) {
        let before = self.client.heartbeat_ticks();
        self.clock.advance(by);
        test_support::poll_until("a heartbeat tick", Duration::from_secs(5), || async {
            (self.client.heartbeat_ticks() > before).then_some(())
        })
        .await;
    }

    pub fn now(&self) -> u64 {
        self.clock.now_nanos()
    }
}
