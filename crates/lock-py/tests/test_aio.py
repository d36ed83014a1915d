"""The asyncio API against a real lock-server: waits do not block the event loop."""

from __future__ import annotations

import asyncio
import uuid

import pytest

import fencedlock
from conftest import Server
from fencedlock import aio


def test_the_asyncio_api_takes_and_hands_over_a_lock(server: Server) -> None:
    key = f"py:{uuid.uuid4().hex[:12]}"

    async def main() -> None:
        client = aio.Client([server.url], token=server.client_token, unsafe_plaintext_http=True)
        async with client, client.session() as holder, client.session() as waiter:
            async with holder.lock(key, ttl=5.0) as held:
                held.ensure_held()
                assert held.proof
                with pytest.raises(fencedlock.LockContended):
                    await waiter.lock(key, ttl=5.0)
                # The loop runs while a waiter waits for the key.
                waiting = asyncio.ensure_future(waiter.lock(key, ttl=5.0, wait=5.0))
                ticks = 0
                while ticks < 5:
                    await asyncio.sleep(0.01)
                    ticks += 1
                assert not waiting.done()
            got = await asyncio.wait_for(waiting, timeout=10.0)
            assert got.fencing_token > held.fencing_token
            await got.release()

    asyncio.run(main())
