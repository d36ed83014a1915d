"""Fixtures: a real lock-server on a throwaway PostgreSQL (`harness serve-lock`), with a
second fresh database for the fence kit's resources, and the binaries the tests run."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import fencedlock

REPO = Path(__file__).resolve().parents[3]

TEST_TOOLS = ("psycopg", "fastapi", "uvicorn", "httpx")
"""The fence kit's extras and the test tools, which the tests need (never skipped)."""


def pytest_configure(config: pytest.Config) -> None:
    """Stops the run, saying what to install, when a test tool is missing."""
    missing = [name for name in TEST_TOOLS if importlib.util.find_spec(name) is None]
    if missing:
        raise pytest.UsageError(
            f"missing Python packages {missing}: "
            "pip install 'psycopg[binary]' fastapi uvicorn httpx"
        )


@dataclass(frozen=True)
class Server:
    """A running lock-server: where it listens, the client credential, its process id."""

    url: str
    client_token: str
    admin_token: str
    public_keys: str
    database_url: str
    pid: int
    log: str

    def client(self, session_ttl: float | None = None) -> fencedlock.Client:
        """A client of this server (plain HTTP on loopback, said so explicitly)."""
        return fencedlock.Client(
            [self.url],
            token=self.client_token,
            unsafe_plaintext_http=True,
            session_ttl=session_ttl,
        )


def debug_binary(name: str, variable: str) -> Path:
    """The binary `name`: the environment's `variable`, else the workspace's debug build."""
    path = Path(os.environ.get(variable, REPO / "target" / "debug" / name))
    if not path.is_file():
        pytest.fail(
            f"no {name} binary at {path}: run "
            "`cargo build --workspace --bin harness --bin lockctl` first"
        )
    return path


def harness_binary() -> Path:
    """The harness that starts the server: `FENCEDLOCK_HARNESS`, else the debug build."""
    return debug_binary("harness", "FENCEDLOCK_HARNESS")


def lockctl_binary() -> Path:
    """lockctl, whose `fence-check` is the fence kit's conformance check."""
    return debug_binary("lockctl", "FENCEDLOCK_LOCKCTL")


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    """One lock-server for the whole run, stopped when the run ends."""
    process = subprocess.Popen(
        [str(harness_binary()), "serve-lock"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdin is not None
    line = process.stdout.readline()
    if not line:
        process.wait(timeout=30)
        pytest.fail(f"harness serve-lock exited with {process.returncode} before it was ready")
    ready = json.loads(line)
    yield Server(
        ready["url"],
        ready["client_token"],
        ready["admin_token"],
        ready["public_keys"],
        ready["database_url"],
        int(ready["pid"]),
        ready["log"],
    )
    process.stdin.close()
    assert process.wait(timeout=60) == 0, "harness serve-lock failed to stop cleanly"
