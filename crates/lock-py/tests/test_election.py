"""Leader election through the Python SDK, against a real lock-server: campaigns queue and
hand over with rising terms, the leader's value is read and changed under its term, a stale
leader is refused, and an observer sees every term in order."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime, timezone

import pytest

import fencedlock
from conftest import Server
from test_locks import DEADLINE_S, parked_waiters, poll_until


def fresh_name() -> str:
    """An election no other test touches."""
    return f"py-elect:{uuid.uuid4().hex[:12]}"


def test_a_waiting_candidate_leads_once_the_leader_resigns(server: Server) -> None:
    name = fresh_name()
    with server.client() as client, client.session() as first, client.session() as second:
        assert client.leader(name) is None, "nobody campaigned yet"
        leading = first.campaign(name, "10.0.0.1:80", ttl=5.0)
        leading.ensure_held()
        assert (leading.name, leading.value) == (name, "10.0.0.1:80")
        assert leading.fencing_token == leading.term
        assert leading.proof, "the lock-server signs every grant"
        assert 0.0 < leading.remaining() <= 5.0
        leader = client.leader(name)
        assert leader is not None
        assert (leader.term, leader.value) == (leading.term, "10.0.0.1:80")
        assert leader.owner_id and leader.expires_at > datetime.now(timezone.utc)

        with pytest.raises(fencedlock.LockContended):
            second.campaign(name, "10.0.0.2:80", ttl=5.0)
        got: list[fencedlock.Leadership] = []
        waiting = threading.Thread(
            target=lambda: got.append(second.campaign(name, "10.0.0.2:80", ttl=5.0, wait=5.0))
        )
        waiting.start()
        poll_until("the second candidate to be parked", lambda: parked_waiters(server) >= 1)
        with leading:
            pass  # leaving the block resigns
        waiting.join(timeout=DEADLINE_S)
        assert got, "the waiting candidate leads after the resign"
        with got[0] as successor:
            assert successor.term > leading.term
            leader = client.leader(name)
            assert leader is not None
            assert (leader.term, leader.value) == (successor.term, "10.0.0.2:80")
            with pytest.raises(fencedlock.LockLost):
                leading.ensure_held()
            leading.resign()  # once resigned, later resigns do nothing
        assert client.leader(name) is None, "the successor resigned on leaving its block"


def test_proclaim_changes_the_value_and_keeps_the_term(server: Server) -> None:
    name = fresh_name()
    with server.client() as client, client.session() as session:
        with session.campaign(name, "v1", ttl=5.0) as leading:
            leading.proclaim("v2")
            assert leading.value == "v2"
            leader = client.leader(name)
            assert leader is not None
            assert (leader.term, leader.value) == (leading.term, "v2")
            # A session that leads already keeps its term and announces the new value.
            again = session.campaign(name, "v3", ttl=5.0)
            assert again.term == leading.term
            leader = client.leader(name)
            assert leader is not None and leader.value == "v3"
            again.resign()
            leading.ensure_held()  # the first hold still holds the term
        with pytest.raises(fencedlock.LockLost):
            leading.proclaim("after the resign")


def test_a_stale_leaders_proclaim_is_lost_and_leaves_the_successors_value(
    server: Server,
) -> None:
    name = fresh_name()
    with server.client() as client, client.session() as first, client.session() as second:
        stale = first.campaign(name, "old", ttl=30.0)
        # An operator takes the term away; the successor leads before the old leader's
        # heartbeat learns of it, so only the server can refuse the old leader now.
        assert client.revoke(name, admin_token=server.admin_token) == stale.term
        successor = second.campaign(name, "new", ttl=30.0, wait=5.0)
        assert successor.term > stale.term
        with pytest.raises(fencedlock.LockLost) as raised:
            stale.proclaim("overwrite")
        assert raised.value.key == name
        assert raised.value.fencing_token == stale.term
        leader = client.leader(name)
        assert leader is not None
        assert (leader.term, leader.value) == (successor.term, "new")
        assert stale.value == "old", "a refused proclaim changes nothing"
        successor.resign()
        with pytest.raises(fencedlock.LockLost):
            stale.resign()


def test_an_observer_sees_each_term_in_order(server: Server) -> None:
    name = fresh_name()
    seen: list[fencedlock.Leader | None] = []
    failed: list[BaseException] = []

    def watch(observer: fencedlock.Observer) -> None:
        try:
            for change in observer:
                seen.append(change)
                if change is None and any(c is not None and c.value == "b2" for c in seen):
                    return
        except BaseException as err:  # the test fails with it
            failed.append(err)

    def saw(term: int, value: str) -> bool:
        return bool(failed) or any(c is not None and (c.term, c.value) == (term, value) for c in seen)

    with server.client() as client, client.session() as first, client.session() as second:
        leading = first.campaign(name, "a", ttl=5.0)
        watcher = threading.Thread(target=watch, args=(client.observe(name),), daemon=True)
        watcher.start()
        poll_until("the observer to answer the first term", lambda: saw(leading.term, "a"))
        got: list[fencedlock.Leadership] = []
        waiting = threading.Thread(
            # A short lease: renewed several times while the observer watches it.
            target=lambda: got.append(second.campaign(name, "b", ttl=1.0, wait=5.0))
        )
        waiting.start()
        poll_until("the second candidate to be parked", lambda: parked_waiters(server) >= 1)
        leading.resign()
        waiting.join(timeout=DEADLINE_S)
        assert got
        successor = got[0]
        # Changes are a poll apart: the proclaim comes once the observer saw "b".
        poll_until("the observer to answer the second term", lambda: saw(successor.term, "b"))
        successor.proclaim("b2")
        poll_until("the observer to answer the new value", lambda: saw(successor.term, "b2"))
        # Renewals move the lease's end, not the leader: no change to answer, however many
        # polls see the lease move (a second of it: several renewals, five polls).
        answered = len(seen)
        before = client.leader(name)
        assert before is not None

        def lease_moved() -> bool:
            now = client.leader(name)
            return now is not None and (now.expires_at - before.expires_at).total_seconds() >= 1.0

        poll_until("the lease to be renewed for a second", lease_moved)
        assert len(seen) == answered, f"renewals answered as changes: {seen[answered:]}"
        successor.resign()
        watcher.join(timeout=DEADLINE_S)
    assert not failed, failed
    assert not watcher.is_alive(), f"the observer saw only {seen}"
    # A poll between the resign and the successor's grant may see no leader.
    # A new term may be answered once before its value lands.
    changes = [(c.term, c.value) for c in seen[:-1] if c is not None and c.value is not None]
    assert changes == [(leading.term, "a"), (successor.term, "b"), (successor.term, "b2")]
    assert seen[0] is not None and seen[-1] is None, "the last resign left no leader"
    assert leading.term < successor.term


def test_an_observer_of_a_closed_client_raises(server: Server) -> None:
    client = server.client()
    observer = client.observe(fresh_name())
    assert next(observer) is None, "no leader yet"
    client.close()
    with pytest.raises(fencedlock.ConfigError):
        next(observer)


def test_bad_election_input_raises_invalid_argument(server: Server) -> None:
    name = fresh_name()
    with server.client() as client, client.session() as session:
        for bad in ["nul\0inside", "v" * 4097]:
            with pytest.raises(fencedlock.InvalidArgument):
                session.campaign(name, bad, ttl=1.0)
        with pytest.raises(fencedlock.InvalidArgument):
            session.campaign("", "v", ttl=1.0)
        with pytest.raises(fencedlock.InvalidArgument):
            session.campaign(name, "v", ttl=0.0)
        with pytest.raises(fencedlock.InvalidArgument):
            client.leader("")
        with pytest.raises(fencedlock.InvalidArgument):
            client.observe("bad\0name")
        assert client.leader(name) is None, "nothing was campaigned"
        with session.campaign(name, "é" * 2048, ttl=5.0) as leading:  # 4096 bytes: the limit
            for bad in ["nul\0inside", "v" * 4097]:
                with pytest.raises(fencedlock.InvalidArgument):
                    leading.proclaim(bad)
            leader = client.leader(name)
            assert leader is not None and leader.value == "é" * 2048


def test_a_waiting_observer_leaves_the_gil_to_other_threads(server: Server) -> None:
    """A thread waiting in an observer's next change does not stop other threads."""
    name = fresh_name()
    with server.client() as client:
        observer = client.observe(name)
        assert next(observer) is None
        waiter = threading.Thread(target=lambda: next(observer), daemon=True)
        waiter.start()
        started = time.monotonic()
        ticks = 0
        while time.monotonic() - started < 0.5:
            ticks += 1
            time.sleep(0.01)
        assert ticks >= 20, "the waiting observer held the GIL"
        with client.session() as session, session.campaign(name, "x", ttl=5.0):
            waiter.join(timeout=DEADLINE_S)
            assert not waiter.is_alive(), "the change ended the wait"
