"""The Python SDK against a real lock-server, as a Python user runs it."""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

import fencedlock
from conftest import Server

#: How long a condition may take to become true before a test fails.
DEADLINE_S = 10.0


def fresh_key() -> str:
    """A key no other test touches."""
    return f"py:{uuid.uuid4().hex[:12]}"


def poll_until(what: str, check: Callable[[], bool]) -> None:
    """Polls `check` until it is true, or fails after `DEADLINE_S`."""
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {DEADLINE_S} s")
        time.sleep(0.02)


def parked_waiters(server: Server) -> float:
    """The lock-server's `lock_waiters` gauge: acquires parked in its queue now."""
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=DEADLINE_S) as answer:
        text: str = answer.read().decode()
    for line in text.splitlines():
        if line.startswith("lock_waiters "):
            return float(line.split()[1])
    pytest.fail("lock_waiters is absent from /metrics")


def is_lost(lock: fencedlock.Lock) -> bool:
    """Whether `lock.ensure_held()` raises `LockLost` now."""
    try:
        lock.ensure_held()
    except fencedlock.LockLost:
        return True
    return False


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    """The process `pid` stopped (SIGSTOP) for the block, continued after it."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_lock_carries_a_rising_token_and_a_proof(server: Server) -> None:
    key = fresh_key()
    with server.client() as client, client.session() as session:
        with session.lock(key, ttl=5.0) as first:
            first.ensure_held()
            assert first.key == key
            assert first.proof, "the lock-server signs every grant"
            assert 0.0 < first.remaining() <= 5.0
            token = first.fencing_token
        with session.lock(key, ttl=5.0) as second:
            assert second.fencing_token > token


def test_a_held_lock_is_contended_and_a_waiter_gets_it_once_released(server: Server) -> None:
    key = fresh_key()
    with server.client() as client, client.session() as holder, client.session() as waiter:
        held = holder.lock(key, ttl=5.0)
        with pytest.raises(fencedlock.LockContended):
            waiter.lock(key, ttl=5.0)
        got: list[fencedlock.Lock] = []
        thread = threading.Thread(target=lambda: got.append(waiter.lock(key, ttl=5.0, wait=5.0)))
        thread.start()
        # The waiter is in the server's queue before the holder lets go.
        poll_until("the waiter to be parked", lambda: parked_waiters(server) >= 1)
        held.release()
        thread.join(timeout=DEADLINE_S)
        assert got and got[0].fencing_token > held.fencing_token
        got[0].release()


def test_a_lock_is_lost_by_the_clients_own_clock_when_the_server_stops(server: Server) -> None:
    key = fresh_key()
    losses: list[fencedlock.LockLost] = []
    with server.client(session_ttl=1.0) as client, client.session() as session:
        session.on_lock_lost(losses.append)
        lock = session.lock(key, ttl=1.0)
        with frozen(server.pid):
            started = time.monotonic()

            poll_until("ensure_held to raise LockLost", lambda: is_lost(lock))
            # The SDK stops believing before the server's lease (1 s) ends.
            assert time.monotonic() - started < 1.0
            poll_until("the loss listener to be called", lambda: bool(losses))
        with pytest.raises(fencedlock.LockLost) as raised:
            lock.ensure_held()
        assert raised.value.key == key
        assert raised.value.fencing_token == lock.fencing_token
        assert raised.value.reason in {"deadline_passed", "session_expired", "session_unknown"}
        assert losses[0].key == key


def test_a_revoke_reaches_the_holder_with_its_reason(server: Server) -> None:
    key = fresh_key()
    with server.client(session_ttl=1.0) as client, client.session() as session:
        lock = session.lock(key, ttl=1.0)
        revoked = client.revoke(
            key, admin_token=server.admin_token, reason="maintenance: pytest drains the key"
        )
        assert revoked == lock.fencing_token
        assert client.revoke(key, admin_token=server.admin_token) is None, "nothing held now"

        poll_until("the holder to learn of the revoke", lambda: is_lost(lock))
        with pytest.raises(fencedlock.LockLost) as raised:
            lock.ensure_held()
        assert raised.value.reason == "revoked"
        assert raised.value.detail is not None and "pytest drains the key" in raised.value.detail
        with pytest.raises(fencedlock.LockServiceError):
            client.revoke(key, admin_token="not-the-admin-token")


def test_bad_input_raises_the_sdks_own_exceptions(server: Server) -> None:
    with server.client() as client, client.session() as session:
        with pytest.raises(fencedlock.InvalidArgument):
            session.lock("", ttl=1.0)
        with pytest.raises(fencedlock.InvalidArgument):
            session.lock(fresh_key(), ttl=-1.0)
        with pytest.raises(fencedlock.InvalidArgument):
            session.lock(fresh_key(), ttl=1.0, wait=float("nan"))
    with pytest.raises(fencedlock.ConfigError):
        fencedlock.Client([server.url], token=server.client_token, unsafe_plaintext_http=False)
    with pytest.raises(fencedlock.ConfigError):
        fencedlock.Client(["ftp://127.0.0.1:1"], unsafe_plaintext_http=True)
    assert issubclass(fencedlock.LockContended, fencedlock.LockServiceError)


def test_a_wrong_credential_is_refused(server: Server) -> None:
    with fencedlock.Client([server.url], token="not-the-token", unsafe_plaintext_http=True) as c:
        with pytest.raises(fencedlock.LockServiceError):
            c.session()
