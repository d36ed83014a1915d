"""Key sets from Python against a real lock-server: all or nothing, held-checked whole."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest

import fencedlock
from conftest import Server
from fencedlock import aio
from test_locks import DEADLINE_S, is_lost, parked_waiters, poll_until


def two_accounts() -> list[str]:
    """Two keys no other test touches."""
    tag = uuid.uuid4().hex[:8]
    return [f"acct:{tag}:b", f"acct:{tag}:a"]


def test_a_set_is_acquired_whole_and_waits_holding_nothing(server: Server) -> None:
    keys = two_accounts()
    with server.client() as client, client.session() as holder, client.session() as payer:
        held = holder.lock(keys[0], ttl=5.0)
        with pytest.raises(fencedlock.LockContended) as refused:
            payer.lock_set(keys, ttl=5.0)
        assert keys[0] in str(refused.value)
        # Nothing was granted: the free key is still free for anyone.
        with holder.lock(keys[1], ttl=5.0):
            pass
        got: list[fencedlock.LockSet] = []
        thread = threading.Thread(
            target=lambda: got.append(payer.lock_set(keys, ttl=5.0, wait=5.0))
        )
        thread.start()
        poll_until("the set to be parked", lambda: parked_waiters(server) >= 1)
        held.release()
        thread.join(timeout=DEADLINE_S)
        assert got, "the set was granted once its key was released"
        with got[0] as both:
            assert both.keys == sorted(keys)
            assert len(both) == 2
            both.ensure_held()
            by_key = {lock.key: lock for lock in both.locks}
            assert by_key[keys[0]].fencing_token > held.fencing_token
            assert all(lock.proof for lock in both.locks), "each member is signed"


def test_a_set_is_lost_when_any_member_is(server: Server) -> None:
    keys = two_accounts()
    with server.client(session_ttl=1.0) as client, client.session() as session:
        both = session.lock_set(keys, ttl=1.0)
        client.revoke(keys[1], admin_token=server.admin_token, reason="test: one member")
        poll_until("the set to be lost", lambda: is_lost_set(both))
        with pytest.raises(fencedlock.LockLost) as raised:
            both.ensure_held()
        assert raised.value.key == keys[1]
        assert not is_lost(next(lock for lock in both.locks if lock.key == keys[0]))
        with pytest.raises(fencedlock.LockLost):
            both.release()


def test_a_bad_set_raises_invalid_argument(server: Server) -> None:
    with server.client() as client, client.session() as session:
        for bad in ([], ["k:1", "k:1"], [f"k:{i}" for i in range(17)], ["no spaces"]):
            with pytest.raises(fencedlock.InvalidArgument):
                session.lock_set(bad, ttl=1.0)


def test_the_asyncio_api_takes_a_set(server: Server) -> None:
    keys = two_accounts()

    async def main() -> None:
        client = aio.Client([server.url], token=server.client_token, unsafe_plaintext_http=True)
        async with client, client.session() as session:
            async with session.lock_set(keys, ttl=5.0) as both:
                both.ensure_held()
                assert both.keys == sorted(keys)
                assert [lock.key for lock in both.locks] == sorted(keys)

    asyncio.run(main())


def is_lost_set(held: fencedlock.LockSet) -> bool:
    """Whether `held.ensure_held()` raises `LockLost` now."""
    try:
        held.ensure_held()
    except fencedlock.LockLost:
        return True
    return False
