"""Permits and readers from Python against a real lock-server (ADR 0007): a semaphore's
permits in their own slots, readers beside readers and a writer after them, each scope signed
in the proof a resource verifies, and a claim the key cannot take refused as our own error."""

from __future__ import annotations

import asyncio
import threading

import pytest

import fencedlock
from conftest import Server
from fencedlock import aio
from test_locks import DEADLINE_S, fresh_key, parked_waiters, poll_until


def test_permits_are_held_in_their_own_slots_and_signed(server: Server) -> None:
    key = fresh_key()
    keys = fencedlock.TrustedKeys(server.public_keys)
    with server.client() as client, client.session() as a, client.session() as b:
        c = client.session()
        first = a.lock(key, ttl=5.0, permits=2)
        second = b.lock(key, ttl=5.0, permits=2)
        assert (first.scope, second.scope) == ("permit-0", "permit-1")
        assert second.fenced_resource == f"{key}#permit-1"
        assert second.fencing_token > first.fencing_token
        grant, scope = keys.verify_scoped(key, second.fencing_token, second.proof)
        assert scope == "permit-1"
        assert grant != keys.verify_scoped(key, first.fencing_token, first.proof)[0]
        with pytest.raises(fencedlock.ProofInvalid):
            keys.verify(key, second.fencing_token, second.proof)  # a mutex's resource refuses
        with pytest.raises(fencedlock.LockContended):
            c.lock(key, ttl=5.0, permits=2)
        with pytest.raises(fencedlock.InvalidArgument, match="2 permits"):
            c.lock(key, ttl=5.0, permits=3)
        first.release()
        with c.lock(key, ttl=5.0, permits=2) as third:
            assert third.scope == "permit-0"
            third.ensure_held()
        second.release()


def test_a_writer_waits_for_the_readers_and_runs_after_them(server: Server) -> None:
    key = fresh_key()
    keys = fencedlock.TrustedKeys(server.public_keys)
    with server.client() as client, client.session() as r1, client.session() as r2:
        w = client.session()
        one = r1.lock(key, ttl=5.0, shared=True)
        two = r2.lock(key, ttl=5.0, shared=True)
        assert (one.scope, two.scope) == ("shared", "shared")
        assert keys.verify_scoped(key, two.fencing_token, two.proof)[1] == "shared"
        got: list[fencedlock.Lock] = []
        writer = threading.Thread(target=lambda: got.append(w.lock(key, ttl=5.0, wait=5.0)))
        writer.start()
        poll_until("the writer to be parked", lambda: parked_waiters(server) >= 1)
        one.release()
        assert not got, "a writer never runs beside a reader"
        two.release()
        writer.join(timeout=DEADLINE_S)
        assert got, "the writer was granted once the last reader released"
        with got[0] as written:
            assert written.scope == "exclusive"
            assert written.fencing_token > two.fencing_token
            with pytest.raises(fencedlock.InvalidArgument):
                w.lock(key, ttl=5.0, shared=True)  # its writer asking to read


def test_a_bad_claim_raises_invalid_argument(server: Server) -> None:
    with server.client() as client, client.session() as session:
        for bad in ({"permits": 0}, {"permits": -1}, {"permits": 2**40}, {"permits": 257},
                    {"permits": 2, "shared": True}):
            with pytest.raises(fencedlock.InvalidArgument):
                session.lock(fresh_key(), ttl=1.0, **bad)  # type: ignore[arg-type]


def test_the_asyncio_api_takes_a_permit(server: Server) -> None:
    key = fresh_key()

    async def main() -> None:
        client = aio.Client([server.url], token=server.client_token, unsafe_plaintext_http=True)
        async with client, client.session() as session:
            async with session.lock(key, ttl=5.0, permits=3) as permit:
                assert permit.scope == "permit-0"
                assert permit.fenced_resource == f"{key}#permit-0"
                permit.ensure_held()

    asyncio.run(main())
