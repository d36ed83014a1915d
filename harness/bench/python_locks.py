"""Lock cycles per second of the Python lock libraries, for `harness bench python`.

One *cycle* is acquire + release of one lock, never waiting (the key is free: client *i*
cycles on its own key). The harness starts the stores and runs this script once per side
and client count; the script prints one JSON line with what it counted.

Sides (``--side``):

- ``fencedlock``: the lock service's Python SDK, ``client.session()`` and
  ``with session.lock(key, ttl=30, wait=0)``; the lock-server's URL is ``--target``, the
  credential ``LOCK_CLIENT_TOKEN`` (environment).
- ``tooz-postgresql``: tooz's ``postgresql://`` driver (psycopg2, advisory locks).
- ``tooz-etcd``: tooz's ``etcd3+http://`` driver (etcd3gw, etcd's HTTP gateway).
- ``redis-lock``: python-redis-lock on a ``redis://`` URL.

Clients run as processes (``--concurrency processes``, the default: each its own interpreter
and GIL, as a Python service scales) or as threads of one process (``threads``). Each client
opens its connection and runs one cycle before a barrier; the clock runs from the barrier to
the last client's end. ``cpu_seconds`` is the clients' CPU time (every thread of their
processes) over that window.

``check`` verifies that the sides' packages import, and names the pip line when one does not.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import multiprocessing
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, Protocol

#: Lease of every grant, seconds: longer than any run, as the Rust side's.
LEASE_SECONDS = 30
#: Session TTL of a fencedlock client, seconds (the Rust side's, too).
SESSION_TTL_SECONDS = 60.0
#: How long clients may take to start (imports, connections) before the run fails.
START_TIMEOUT_SECONDS = 120.0
#: How long past its measured seconds a run may take to report before it fails.
REPORT_GRACE_SECONDS = 60.0

#: Per side: the modules it imports, the distributions whose versions the report names, and
#: how to install what is missing.
REQUIREMENTS: dict[str, tuple[list[str], list[str], str]] = {
    "fencedlock": (
        ["fencedlock"],
        ["fencedlock"],
        "cd crates/lock-py && VIRTUAL_ENV=<venv> <venv>/bin/maturin develop --release "
        "(or: script/bench-python-venv)",
    ),
    "tooz-postgresql": (
        ["tooz", "psycopg2"],
        ["tooz", "psycopg2-binary"],
        "pip install tooz psycopg2-binary",
    ),
    "tooz-etcd": (["tooz", "etcd3gw"], ["tooz", "etcd3gw"], "pip install tooz etcd3gw"),
    "redis-lock": (
        ["redis_lock", "redis"],
        ["python-redis-lock", "redis"],
        "pip install python-redis-lock redis",
    ),
}


class Cycler(Protocol):
    """One client of one side: `cycle` acquires and releases its key, `close` lets go."""

    def cycle(self) -> None: ...

    def close(self) -> None: ...


class FencedlockCycler:
    """The lock service's Python SDK: one client, one session, `with session.lock(...)`."""

    def __init__(self, target: str, index: int) -> None:
        import fencedlock

        self.client = fencedlock.Client(
            [target], unsafe_plaintext_http=True, session_ttl=SESSION_TTL_SECONDS
        )
        self.session = self.client.session(owner=f"pybench-{index}")
        self.key = f"pybench.{index}"

    def cycle(self) -> None:
        with self.session.lock(self.key, ttl=LEASE_SECONDS, wait=0) as lock:
            if lock.fencing_token <= 0:
                raise RuntimeError("a grant without a fencing token")

    def close(self) -> None:
        self.session.close()
        self.client.close()


class ToozCycler:
    """tooz: one coordinator per client, one lock object, `acquire(blocking=False)`."""

    def __init__(self, target: str, index: int) -> None:
        from tooz import coordination

        self.coordinator = coordination.get_coordinator(target, f"pybench-{index}".encode())
        self.coordinator.start(start_heart=False)
        self.lock = self.coordinator.get_lock(f"pybench.{index}".encode())

    def cycle(self) -> None:
        if not self.lock.acquire(blocking=False):
            raise RuntimeError(f"{self.lock.name!r} was held: keys are distinct")
        if not self.lock.release():
            raise RuntimeError(f"{self.lock.name!r} was not released")

    def close(self) -> None:
        self.coordinator.stop()


class RedisLockCycler:
    """python-redis-lock: one Redis connection per client, one `Lock`."""

    def __init__(self, target: str, index: int) -> None:
        import redis
        import redis_lock  # type: ignore[import-untyped]

        self.redis = redis.Redis.from_url(target)
        self.lock = redis_lock.Lock(self.redis, f"pybench.{index}", expire=LEASE_SECONDS)

    def cycle(self) -> None:
        if not self.lock.acquire(blocking=False):
            raise RuntimeError("the lock was held: keys are distinct")
        self.lock.release()

    def close(self) -> None:
        self.redis.close()


CYCLERS: dict[str, Callable[[str, int], Cycler]] = {
    "fencedlock": FencedlockCycler,
    "tooz-postgresql": ToozCycler,
    "tooz-etcd": ToozCycler,
    "redis-lock": RedisLockCycler,
}


class BarrierLike(Protocol):
    """`threading.Barrier` and `multiprocessing`'s."""

    def wait(self, timeout: float | None = None) -> int: ...

    def abort(self) -> None: ...


class QueueLike(Protocol):
    """`queue.Queue` and `multiprocessing`'s."""

    def put(self, obj: Any) -> None: ...

    def get(self, block: bool = True, timeout: float | None = None) -> Any: ...


def client_main(
    side: str,
    target: str,
    index: int,
    seconds: float,
    barrier: BarrierLike,
    results: QueueLike,
) -> None:
    """One client: set up, one cycle, the barrier, then cycles until its deadline."""
    try:
        cycler = CYCLERS[side](target, index)
        cycler.cycle()
        barrier.wait(timeout=START_TIMEOUT_SECONDS)
        cpu_started = time.process_time()
        started = time.monotonic()
        deadline = started + seconds
        cycles = 0
        while time.monotonic() < deadline:
            cycler.cycle()
            cycles += 1
        ended = time.monotonic()
        cpu_ended = time.process_time()
        cycler.close()
        results.put(
            {
                "index": index,
                "cycles": cycles,
                "started": started,
                "ended": ended,
                "cpu_started": cpu_started,
                "cpu_ended": cpu_ended,
            }
        )
    except BaseException:  # noqa: BLE001 - the parent reports it
        barrier.abort()
        results.put({"index": index, "error": traceback.format_exc()})


def run(side: str, target: str, clients: int, seconds: float, concurrency: str) -> dict[str, Any]:
    """Runs `clients` clients of `side` for `seconds`: the report's JSON object."""
    workers: list[Any] = []
    results: QueueLike
    if concurrency == "processes":
        # Spawned, not forked: no connection or runtime thread of the parent is inherited.
        context = multiprocessing.get_context("spawn")
        barrier: BarrierLike = context.Barrier(clients)
        results = context.Queue()
        for index in range(clients):
            process_args = (side, target, index, seconds, barrier, results)
            workers.append(context.Process(target=client_main, args=process_args))
    else:
        barrier = threading.Barrier(clients)
        results = queue.Queue()
        for index in range(clients):
            thread_args = (side, target, index, seconds, barrier, results)
            workers.append(threading.Thread(target=client_main, args=thread_args, daemon=True))
    for worker in workers:
        worker.start()
    tallies = [
        results.get(timeout=START_TIMEOUT_SECONDS + seconds + REPORT_GRACE_SECONDS)
        for _ in workers
    ]
    for worker in workers:
        worker.join()
    errors = [t["error"] for t in tallies if "error" in t]
    if errors:
        raise RuntimeError(f"{side}: {len(errors)} client(s) failed; the first:\n{errors[0]}")
    elapsed = max(t["ended"] for t in tallies) - min(t["started"] for t in tallies)
    per_client = [t["cycles"] for t in sorted(tallies, key=lambda t: t["index"])]
    if concurrency == "processes":
        cpu_seconds = sum(t["cpu_ended"] - t["cpu_started"] for t in tallies)
    else:  # one process: its CPU clock counts every thread
        cpu_seconds = max(t["cpu_ended"] for t in tallies) - min(t["cpu_started"] for t in tallies)
    return {
        "side": side,
        "clients": clients,
        "concurrency": concurrency,
        "cycles": sum(per_client),
        "seconds": elapsed,
        "per_client": per_client,
        "cpu_seconds": cpu_seconds,
    }


def check(sides: list[str]) -> dict[str, str]:
    """Imports every side's modules: their distributions' versions, or exits naming the
    pip line of each side that cannot run."""
    versions = {"python": sys.version.split()[0]}
    missing = []
    for side in sides:
        modules, distributions, install = REQUIREMENTS[side]
        try:
            for module in modules:
                importlib.import_module(module)
        except ImportError as err:
            missing.append(f"{side}: {err} -- install with: {install}")
            continue
        for distribution in distributions:
            versions[distribution] = importlib.metadata.version(distribution)
    if missing:
        print(f"{sys.executable} cannot run every side:", file=sys.stderr)
        for line in missing:
            print(f"  {line}", file=sys.stderr)
        sys.exit(2)
    return versions


def main() -> None:
    """`check --sides ...` or `run --side ... --target ... --clients N --seconds S`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    check_parser = commands.add_parser("check", help="check that the sides' packages import")
    check_parser.add_argument("--sides", default=",".join(REQUIREMENTS))
    run_parser = commands.add_parser("run", help="measure one side at one client count")
    run_parser.add_argument("--side", choices=sorted(CYCLERS), required=True)
    run_parser.add_argument("--target", required=True, help="the store's or server's URL")
    run_parser.add_argument("--clients", type=int, required=True)
    run_parser.add_argument("--seconds", type=float, required=True)
    run_parser.add_argument(
        "--concurrency", choices=["processes", "threads"], default="processes"
    )
    args = parser.parse_args()
    if args.command == "check":
        sides = [s for s in args.sides.split(",") if s]
        unknown = [s for s in sides if s not in REQUIREMENTS]
        if unknown:
            parser.error(f"unknown sides: {unknown}")
        print(json.dumps(check(sides)))
    else:
        if "LOCK_CLIENT_TOKEN" not in os.environ and args.side == "fencedlock":
            parser.error("fencedlock needs LOCK_CLIENT_TOKEN in the environment")
        report = run(args.side, args.target, args.clients, args.seconds, args.concurrency)
        print(json.dumps(report))


if __name__ == "__main__":
    main()
