"""The asyncio API: the same client, sessions and locks as `fencedlock`, for event loops.

Every call that waits (open, acquire, release, close, revoke) runs the native call on a
worker thread (`asyncio.to_thread`; the native call releases the GIL), so the loop keeps
running while it waits; the held-checks do not wait and stay plain methods::

    from fencedlock import aio

    async with aio.Client() as client, client.session() as session:
        async with session.lock("payout:42", ttl=10.0, wait=2.0) as lock:
            lock.ensure_held()
            await write(token=lock.fencing_token, proof=lock.proof)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator, Sequence
from types import TracebackType
from typing import Generic, TypeVar

from fencedlock import _native

T = TypeVar("T")


class _Opening(Generic[T]):
    """What a call that opens something returns: await it for the thing, or use it as an
    async context manager that closes the thing on exit."""

    def __init__(self, open_: Callable[[], Awaitable[T]], close: Callable[[T], Awaitable[object]]):
        self._open = open_
        self._close = close
        self._opened: T | None = None

    def __await__(self) -> Generator[object, None, T]:
        return self._open().__await__()

    async def __aenter__(self) -> T:
        self._opened = await self._open()
        return self._opened

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._opened is not None:
            await self._close(self._opened)


class Lock:
    """A held lock: send `fencing_token` and `proof` with every write it guards, and call
    `ensure_held()` right before each."""

    def __init__(self, native: _native.Lock) -> None:
        self._native = native

    @property
    def key(self) -> str:
        return self._native.key

    @property
    def fencing_token(self) -> int:
        return self._native.fencing_token

    @property
    def proof(self) -> str | None:
        return self._native.proof

    @property
    def scope(self) -> str:
        """What the lock holds of its key: `exclusive`, `shared` or `permit-{slot}`."""
        return self._native.scope

    @property
    def fenced_resource(self) -> str:
        """The name a resource fences its writes under (`{key}#permit-{slot}` for a permit)."""
        return self._native.fenced_resource

    def ensure_held(self) -> None:
        """Raises `LockLost` once the lock may be lost."""
        self._native.ensure_held()

    def remaining(self) -> float:
        """Seconds the lock is certainly still held for."""
        return self._native.remaining()

    async def release(self) -> None:
        """Releases the lock; raises `LockLost` when it was lost before."""
        await asyncio.to_thread(self._native.release)


class LockSet:
    """Keys held together (`fencedlock.LockSet`), each member a `Lock`."""

    def __init__(self, native: _native.LockSet) -> None:
        self._native = native
        self.locks = [Lock(lock) for lock in native.locks]

    @property
    def keys(self) -> list[str]:
        return self._native.keys

    def ensure_held(self) -> None:
        """Raises `LockLost` once any member may be lost (no I/O: call it before each write)."""
        self._native.ensure_held()

    async def release(self) -> None:
        """Releases every member; raises the first `LockLost` of a member lost before."""
        await asyncio.to_thread(self._native.release)


class Session:
    """An open session."""

    def __init__(self, native: _native.Session) -> None:
        self._native = native

    def lock(
        self,
        key: str,
        *,
        ttl: float = 10.0,
        wait: float = 0.0,
        permits: int | None = None,
        shared: bool = False,
    ) -> _Opening[Lock]:
        """Acquires `key` (see `fencedlock.Session.lock`: `permits=N` for one of a
        semaphore's permits, `shared=True` for a reader); as a context manager, releases it
        on exit."""

        async def acquire() -> Lock:
            native = await asyncio.to_thread(
                self._native.lock, key, ttl=ttl, wait=wait, permits=permits, shared=shared
            )
            return Lock(native)

        async def release(lock: Lock) -> None:
            await lock.release()

        return _Opening(acquire, release)

    def lock_set(
        self, keys: Sequence[str], *, ttl: float = 10.0, wait: float = 0.0
    ) -> _Opening[LockSet]:
        """Acquires every key of `keys` together or none (see `fencedlock.Session.lock_set`);
        as a context manager, releases them on exit."""

        async def acquire() -> LockSet:
            native = await asyncio.to_thread(self._native.lock_set, keys, ttl=ttl, wait=wait)
            return LockSet(native)

        async def release(held: LockSet) -> None:
            await held.release()

        return _Opening(acquire, release)

    def on_lock_lost(self, listener: Callable[[_native.LockLost], object]) -> None:
        """Calls `listener` once per lost lock, on the SDK's heartbeat thread."""
        self._native.on_lock_lost(listener)

    async def close(self) -> None:
        await asyncio.to_thread(self._native.close)


class Client:
    """A lock client (see `fencedlock.Client` for the settings)."""

    def __init__(
        self,
        endpoints: Sequence[str] | None = None,
        *,
        token: str | None = None,
        ca_file: str | None = None,
        unsafe_plaintext_http: bool | None = None,
        session_ttl: float | None = None,
        request_timeout: float | None = None,
    ) -> None:
        self._native = _native.Client(
            endpoints,
            token=token,
            ca_file=ca_file,
            unsafe_plaintext_http=unsafe_plaintext_http,
            session_ttl=session_ttl,
            request_timeout=request_timeout,
        )

    def session(self, owner: str | None = None) -> _Opening[Session]:
        """Opens a session; as a context manager, closes it on exit."""

        async def open_() -> Session:
            return Session(await asyncio.to_thread(self._native.session, owner))

        async def close(session: Session) -> None:
            await session.close()

        return _Opening(open_, close)

    async def revoke(
        self, key: str, *, admin_token: str, reason: str | None = None
    ) -> int | None:
        """An operator's revoke (see `fencedlock.Client.revoke`)."""
        return await asyncio.to_thread(
            self._native.revoke, key, admin_token=admin_token, reason=reason
        )

    async def close(self) -> None:
        await asyncio.to_thread(self._native.close)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()
