//! Work the application's threads hand to the heartbeat thread. Its own module so that the
//! session (which sends it) and the client (whose thread runs it) do not import each other.

use lock_api::{FencingToken, LockKey, SessionId};

/// Work sent to the heartbeat thread.
#[derive(Debug)]
pub(crate) enum Background {
    /// Recompute the period (a grant with a shorter lease arrived).
    Wake,
    /// Release, on the server, a handle dropped without release.
    Release {
        endpoint: String,
        session: SessionId,
        key: LockKey,
        token: FencingToken,
    },
    /// Close, on the server, a session dropped without close.
    DeleteSession {
        endpoint: String,
        session: SessionId,
    },
}
