"""Fixtures: a real lock-server on a throwaway PostgreSQL (`harness serve-lock`)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import fencedlock

REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Server:
    """A running lock-server: where it listens, the client credential, its process id."""

    url: str
    client_token: str
    admin_token: str
    public_keys: str
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


def harness_binary() -> Path:
    """The harness that starts the server: `FENCEDLOCK_HARNESS`, else the debug build."""
    path = Path(os.environ.get("FENCEDLOCK_HARNESS", REPO / "target" / "debug" / "harness"))
    if not path.is_file():
        pytest.fail(f"no harness binary at {path}: run `cargo build -p harness` first")
    return path


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
        int(ready["pid"]),
        ready["log"],
    )
    process.stdin.close()
    assert process.wait(timeout=60) == 0, "harness serve-lock failed to stop cleanly"
