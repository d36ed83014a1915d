"""Watching through the Python SDK, against a real lock-server: a watcher sees what happens
to the locks under its prefix (and nothing else) in order with rising positions, a campaign's
value, only the events after the position it was asked to resume after, and a gap when the
store forgot some; its wait leaves the GIL to other threads and a Ctrl-C loses nothing."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Union

import psycopg
import pytest

import fencedlock
from conftest import Server
from test_locks import DEADLINE_S, poll_until

Item = Union[fencedlock.LockEvent, fencedlock.WatchGap]
"""What a watcher answers (`Union`: the package supports Python 3.9)."""


def fresh_prefix() -> str:
    """A prefix no other test's keys start with."""
    return f"py-watch:{uuid.uuid4().hex[:12]}:"


def next_within(watcher: fencedlock.Watcher) -> Item:
    """The watcher's next item, or the test fails after `DEADLINE_S` (never hangs)."""
    got: list[Item] = []
    failed: list[BaseException] = []

    def wait() -> None:
        try:
            got.append(next(watcher))
        except BaseException as err:  # raised again below
            failed.append(err)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(timeout=DEADLINE_S)
    if failed:
        raise failed[0]
    if not got:
        pytest.fail(f"{watcher!r} answered nothing within {DEADLINE_S} s")
    return got[0]


def next_event(watcher: fencedlock.Watcher) -> fencedlock.LockEvent:
    """The watcher's next item, which must be an event."""
    item = next_within(watcher)
    assert isinstance(item, fencedlock.LockEvent), f"an event, not {item!r}"
    return item


def what(event: fencedlock.LockEvent) -> tuple[str, str, int]:
    """An event's key, kind and fencing token."""
    return (event.key, event.kind, event.fencing_token)


def cycle(session: fencedlock.Session, key: str) -> int:
    """Takes `key` and releases it: the grant's fencing token."""
    with session.lock(key, ttl=5.0) as lock:
        token = lock.fencing_token
    return token


def test_a_watcher_sees_a_grant_then_its_release_only_under_its_prefix(
    server: Server,
) -> None:
    prefix = fresh_prefix()
    outside = prefix.rstrip(":") + "-outside"  # shares the text before the last ':' only
    with server.client() as client, client.session(owner="py-watch-owner") as session:
        watcher = client.watch(prefix)
        assert watcher.prefix == prefix
        cycle(session, outside)
        token = cycle(session, prefix + "a")
        cycle(session, outside)
        marker = cycle(session, prefix + "marker")

        granted = next_event(watcher)
        assert what(granted) == (prefix + "a", "granted", token)
        assert granted.owner_id == "py-watch-owner"
        assert granted.scope is None, "a whole key's grant has no share scope"
        assert granted.value is None
        assert watcher.position == granted.position
        released = next_event(watcher)
        assert what(released) == (prefix + "a", "released", token)
        assert released.position > granted.position
        assert watcher.position == released.position
        # The outside key's events, before and after, never came: the marker's is next.
        following = next_event(watcher)
        assert what(following) == (prefix + "marker", "granted", marker)
        assert following.position > released.position
        assert next_event(watcher).kind == "released"


def test_shares_and_permits_are_seen_with_their_scope(server: Server) -> None:
    prefix = fresh_prefix()
    with server.client() as client, client.session() as session:
        watcher = client.watch(prefix)
        with session.lock(prefix + "rw", ttl=5.0, shared=True):
            pass
        with session.lock(prefix + "sem", ttl=5.0, permits=3) as permit:
            scope = permit.scope
        seen = [next_event(watcher) for _ in range(4)]
    assert [(e.key, e.kind) for e in seen] == [
        (prefix + "rw", "granted"),
        (prefix + "rw", "released"),
        (prefix + "sem", "granted"),
        (prefix + "sem", "released"),
    ]
    assert seen[0].scope == "shared"
    assert seen[2].scope == scope and scope.startswith("permit-")


def test_a_campaign_is_seen_granted_and_proclaimed_with_its_value(server: Server) -> None:
    prefix = fresh_prefix()
    name = prefix + "leader"
    with server.client() as client, client.session(owner="py-watch-leader") as session:
        watcher = client.watch(prefix)
        with session.campaign(name, "10.0.0.1:80", ttl=5.0) as leading:
            leading.proclaim("10.0.0.2:80")
        seen = [next_event(watcher) for _ in range(4)]
    assert [(e.key, e.kind, e.value) for e in seen] == [
        (name, "granted", None),
        (name, "proclaimed", "10.0.0.1:80"),
        (name, "proclaimed", "10.0.0.2:80"),
        (name, "released", None),
    ]
    assert {e.fencing_token for e in seen} == {leading.term}, "every event is of the one term"
    assert seen[0].owner_id == "py-watch-leader"
    positions = [e.position for e in seen]
    assert positions == sorted(set(positions)), f"positions rise: {positions}"


def test_a_watch_after_a_position_sees_only_later_events(server: Server) -> None:
    prefix = fresh_prefix()
    with server.client() as client, client.session() as session:
        first = client.watch(prefix)
        token = cycle(session, prefix + "a")
        granted = next_event(first)
        assert granted.kind == "granted"
        position = first.position
        assert position == granted.position

        later = client.watch(prefix, after=position)
        assert later.position == position, "the position it was asked to start after"
        released = next_event(later)
        assert what(released) == (prefix + "a", "released", token)
        assert released == next_event(first), "both watches answer the same event"
        second = cycle(session, prefix + "b")
        for watcher in (first, later):
            event = next_event(watcher)
            assert what(event) == (prefix + "b", "granted", second)
            assert event.position > released.position


def test_a_waiting_watcher_leaves_the_gil_to_other_threads(server: Server) -> None:
    """A thread waiting in a watcher's next event does not stop other threads."""
    prefix = fresh_prefix()
    with server.client() as client:
        watcher = client.watch(prefix)
        got: list[Item] = []
        waiter = threading.Thread(target=lambda: got.append(next(watcher)), daemon=True)
        waiter.start()
        started = time.monotonic()
        ticks = 0
        while time.monotonic() - started < 0.5:
            ticks += 1
            time.sleep(0.01)
        assert ticks >= 20, "the waiting watcher held the GIL"
        with client.session() as session:
            token = cycle(session, prefix + "a")
        waiter.join(timeout=DEADLINE_S)
        assert not waiter.is_alive(), "the event ended the wait"
        assert isinstance(got[0], fencedlock.LockEvent) and got[0].fencing_token == token


def test_a_ctrl_c_cuts_the_wait_and_loses_no_event(server: Server) -> None:
    """SIGINT raises `KeyboardInterrupt` from a wait (checked every second); the wait it cut
    is resumed by the next call, which answers the events that came since, in order."""
    prefix = fresh_prefix()
    with server.client() as client, client.session() as session:
        watcher = client.watch(prefix)
        interrupt = threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGINT))
        # Should the interrupt not cut the wait, an event ends it and the test fails.
        fallback = threading.Timer(DEADLINE_S, lambda: cycle(session, prefix + "fallback"))
        interrupt.start()
        fallback.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                next(watcher)
        finally:
            fallback.cancel()
            interrupt.cancel()
        opened_at = watcher.position
        assert opened_at is not None, "a watch knows where it started once open"
        token = cycle(session, prefix + "a")
        granted, released = next_event(watcher), next_event(watcher)
        assert [what(e) for e in (granted, released)] == [
            (prefix + "a", "granted", token),
            (prefix + "a", "released", token),
        ]
        assert granted.position < released.position == watcher.position


def test_closing_a_watcher_ends_its_iteration_even_from_another_thread(
    server: Server,
) -> None:
    prefix = fresh_prefix()
    with server.client() as client, client.session() as session:
        seen: list[Item] = []
        with client.watch(prefix) as watcher:
            iterating = threading.Thread(target=lambda: seen.extend(watcher), daemon=True)
            iterating.start()
            token = cycle(session, prefix + "a")
            poll_until("the watcher to see the lock's cycle", lambda: len(seen) >= 2)
            watcher.close()
            iterating.join(timeout=DEADLINE_S)
            assert not iterating.is_alive(), "closing ended the iteration"
        assert [what(e) for e in seen if isinstance(e, fencedlock.LockEvent)] == [
            (prefix + "a", "granted", token),
            (prefix + "a", "released", token),
        ]
        with pytest.raises(StopIteration):
            next(watcher)
        watcher.close()  # again: nothing
        with client.watch(prefix) as other:
            pass
        assert list(other) == [], "leaving its block closed it"


def test_a_watcher_of_a_closed_client_raises(server: Server) -> None:
    client = server.client()
    watcher = client.watch(fresh_prefix())
    client.close()
    with pytest.raises(fencedlock.ConfigError):
        next(watcher)
    with pytest.raises(fencedlock.ConfigError):
        client.watch(fresh_prefix())


def test_bad_watch_input_raises_invalid_argument(server: Server) -> None:
    with server.client() as client:
        for bad in ["nul\0inside", "k" * 10_000, "white space"]:
            with pytest.raises(fencedlock.InvalidArgument, match="prefix"):
                client.watch(bad)
        with pytest.raises(fencedlock.InvalidArgument, match="after"):
            client.watch(fresh_prefix(), after=-1)
        assert issubclass(fencedlock.InvalidArgument, fencedlock.LockServiceError)
        every = client.watch()  # no prefix: every key
        assert every.prefix == "" and isinstance(every.position, int), "open: its start is known"


def lock_server_database(server: Server) -> str:
    """The lock-server's own database (its `DATABASE_URL`), read from its process."""
    environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
    for entry in environ:
        if entry.startswith(b"DATABASE_URL="):
            return entry.split(b"=", 1)[1].decode()
    pytest.fail("the lock-server has no DATABASE_URL")


def test_a_watch_after_forgotten_events_is_told_of_the_gap(server: Server) -> None:
    """The store forgets events (its retention, done here by hand): a watch after them
    answers a `WatchGap`, then the events it keeps. (Last in this file: the other tests
    never resume so far back.)"""
    prefix = fresh_prefix()
    with server.client() as client, client.session() as session:
        watcher = client.watch(prefix)
        cycle(session, prefix + "a")
        next_event(watcher)
        kept_from = next_event(watcher).position
        with psycopg.connect(lock_server_database(server), autocommit=True) as db:
            db.execute("DELETE FROM lock_events WHERE position <= %s", (kept_from,))
            db.execute("UPDATE lock_event_floor SET floor = GREATEST(floor, %s)", (kept_from,))
        token = cycle(session, prefix + "a")

        late = client.watch(prefix, after=0)
        gap = next_within(late)
        assert isinstance(gap, fencedlock.WatchGap), f"a gap first, not {gap!r}"
        assert (gap.after, gap.resume_from) == (0, kept_from)
        assert late.position == kept_from, "the watch goes on after the gap"
        kept = [next_event(late) for _ in range(2)]
        assert [what(e) for e in kept] == [
            (prefix + "a", "granted", token),
            (prefix + "a", "released", token),
        ]
        assert kept_from < kept[0].position < kept[1].position == late.position
