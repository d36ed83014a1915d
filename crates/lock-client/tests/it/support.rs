//! The shared rig lives in `lock_client::testing` (the executor's tests use it too).

pub use lock_client::testing::Rig;
