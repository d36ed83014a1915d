//! The shared rig lives in `lock_client::test_util` (the executor's tests use it too).

pub use lock_client::test_util::Rig;
