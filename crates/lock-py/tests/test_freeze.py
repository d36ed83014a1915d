"""The Python client's own process frozen past its lease (SIGSTOP, as a GC pause, a stopped
container or a migrating VM freezes it): while it sleeps, its grant ends on the server and
another client takes the key with a higher token; when it wakes, the SDK knows the lock is
lost before its code can write, its loss listener is called, and its session, gone too, takes
nothing more."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import fencedlock
from conftest import Server

#: How long the holder or its report may take before the test fails.
DEADLINE_S = 30.0

#: The frozen holder: takes the lock, says so, waits for the test to thaw it, then reports
#: what its SDK says of the lock (one line) and what its session answers a new lock.
HOLDER = r"""
import sys, time
import fencedlock

url, token, key = sys.argv[1:4]
client = fencedlock.Client([url], token=token, unsafe_plaintext_http=True, session_ttl=1.0)
session = client.session()
losses = []
session.on_lock_lost(losses.append)
lock = session.lock(key, ttl=1.0)
print(f"held {lock.fencing_token}", flush=True)
sys.stdin.readline()
try:
    lock.ensure_held()
    verdict = "held"
except fencedlock.LockLost as lost:
    verdict = f"lost {lost.reason}"
deadline = time.monotonic() + 10.0
while not losses and time.monotonic() < deadline:
    time.sleep(0.01)
try:
    session.lock(key, ttl=1.0, wait=0.0)
    again = "retaken"
except fencedlock.LockContended:
    again = "contended"
except fencedlock.LockServiceError as err:
    again = type(err).__name__
print(f"{verdict} listener={len(losses)} again={again}", flush=True)
"""


def test_a_holder_frozen_past_its_lease_wakes_knowing_the_lock_is_lost(server: Server) -> None:
    key = f"py:frozen:{uuid.uuid4().hex[:12]}"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, server.url, server.client_token, key],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        held = holder.stdout.readline().split()
        assert held[:1] == ["held"], f"the holder did not take the lock: {held}"
        frozen_token = int(held[1])
        os.kill(holder.pid, signal.SIGSTOP)
        try:
            # The frozen holder neither heartbeats nor renews: the server ends its grant,
            # and this client, waiting meanwhile, is granted the key with a higher token.
            with server.client() as client, client.session() as session:
                with session.lock(key, ttl=10.0, wait=DEADLINE_S) as lock:
                    assert lock.fencing_token > frozen_token
                    os.kill(holder.pid, signal.SIGCONT)
                    holder.stdin.write("\n")
                    holder.stdin.flush()
                    report, _ = holder.communicate(timeout=DEADLINE_S)
                    lock.ensure_held()
        finally:
            if holder.poll() is None:
                os.kill(holder.pid, signal.SIGCONT)
    finally:
        holder.kill()
        holder.wait(timeout=DEADLINE_S)
    assert holder.returncode == 0, f"the holder failed: {report}"
    words = report.split()
    assert words[0] == "lost", f"the woken holder still believed it held the lock: {report}"
    assert "listener=1" in words, report
    # Its session ended with the freeze too (TTL 1 s): no new lock from it.
    assert "again=SessionLost" in words, report
