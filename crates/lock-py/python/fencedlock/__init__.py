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

The resource side: `TrustedKeys` verifies a write's proof offline; `fencedlock.psycopg` (the
PostgreSQL fence) and `fencedlock.fastapi` (the headers, the refusals as JSON) are imported
on their own, with the extras `fencedlock[psycopg]` and `fencedlock[fastapi]`.

Leader election: `Session.campaign(name, value)` answers a `Leadership` whose `term` fences
the leader's writes as a lock's token does; `Client.leader(name)` reads the leader and
`Client.observe(name)` iterates its changes.

Watching: `Client.watch(prefix, after=)` iterates what happens to the locks under a prefix,
each a `LockEvent` (granted, released, expired, revoked, proclaimed) with its `position`, or a
`WatchGap` when the store no longer keeps the events after `after`.
"""

from fencedlock import aio
from fencedlock._native import (
    Client,
    ConfigError,
    FencedOut,
    InvalidArgument,
    Leader,
    Leadership,
    Lock,
    LockContended,
    LockEvent,
    LockLost,
    LockServiceError,
    LockSet,
    Observer,
    ProofInvalid,
    ProvenWrite,
    Session,
    SessionLost,
    Throttled,
    TrustedKeys,
    Unavailable,
    WatchGap,
    Watcher,
)

__all__ = [
    "aio",
    "Client",
    "ConfigError",
    "FencedOut",
    "InvalidArgument",
    "Leader",
    "Leadership",
    "Lock",
    "LockContended",
    "LockEvent",
    "LockLost",
    "LockServiceError",
    "LockSet",
    "Observer",
    "ProofInvalid",
    "ProvenWrite",
    "Session",
    "SessionLost",
    "Throttled",
    "TrustedKeys",
    "Unavailable",
    "WatchGap",
    "Watcher",
]
