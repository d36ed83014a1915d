"""Fenced distributed locks: the lock service's Python SDK.

A client opens sessions; a session takes locks; each lock carries a fencing token (and the
lock-server's signed proof of it) to send with every write it guards. The SDK's decisions
(conservative deadlines, the heartbeat, the bounded acquire) are the Rust SDK's own, through
its native module::

    import fencedlock

    with fencedlock.Client() as client, client.session() as session:
        with session.lock("payout:42", ttl=10.0, wait=2.0) as lock:
            lock.ensure_held()
            write(payout=42, token=lock.fencing_token, proof=lock.proof)
"""

from fencedlock import aio
from fencedlock._native import (
    Client,
    ConfigError,
    InvalidArgument,
    Lock,
    LockContended,
    LockLost,
    LockServiceError,
    ProofInvalid,
    Session,
    SessionLost,
    Throttled,
    TrustedKeys,
    Unavailable,
)

__all__ = [
    "aio",
    "Client",
    "ConfigError",
    "InvalidArgument",
    "Lock",
    "LockContended",
    "LockLost",
    "LockServiceError",
    "ProofInvalid",
    "Session",
    "SessionLost",
    "Throttled",
    "TrustedKeys",
    "Unavailable",
]
