"""The Python example resource (examples/fenced-py) under `lockctl fence-check`, as real
processes: uvicorn serving it on the suite's throwaway PostgreSQL keeps every promise; a copy
of it with its `fence_check` call removed accepts the paused holder's write, and the kit says
so (exit 1)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from conftest import REPO, Server, lockctl_binary

EXAMPLE = REPO / "examples" / "fenced-py" / "fenced_kv.py"
FENCE_CALL = "fence_check(conn, write.key, write.token, write.grant, claim=True)"
PROMISES = 8
"""Six refusals, the current holder's write and the paused holder's (no --claim-url)."""
PAUSED = "the paused holder's write after its lease is refused"
START_TIMEOUT_S = 60.0
CHECK_TIMEOUT_S = 120.0


@contextmanager
def serving(app_dir: Path, server: Server, log: Path) -> Iterator[str]:
    """uvicorn serving `fenced_kv` from `app_dir` on a socket this test bound first (so no
    request races its start-up: it waits in the listen queue); the base URL while it runs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    env = dict(os.environ, DATABASE_URL=server.database_url, FENCE_PUBLIC_KEYS=server.public_keys)
    command = [sys.executable, "-m", "uvicorn", "fenced_kv:create_app", "--factory"]
    command += ["--app-dir", str(app_dir), "--fd", str(listener.fileno())]
    with log.open("w") as out:
        process = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, pass_fds=[listener.fileno()]
        )
    listener.close()  # uvicorn holds it now: if it dies, a waiting request is refused
    base = f"http://127.0.0.1:{port}"
    try:
        answer = httpx.get(f"{base}/kv/never-written", timeout=START_TIMEOUT_S)
        assert answer.status_code == 404, f"{answer.status_code} {answer.text}\n{log.read_text()}"
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def fence_check(server: Server, key: str, url: str) -> tuple[int, list[dict[str, Any]], str]:
    """`lockctl --json fence-check KEY URL`: its exit code, its JSON lines, its stderr."""
    env = dict(
        os.environ,
        LOCK_ENDPOINTS=server.url,
        LOCK_CLIENT_TOKEN=server.client_token,
        UNSAFE_PLAINTEXT_HTTP="true",
    )
    ran = subprocess.run(
        [str(lockctl_binary()), "--json", "fence-check", key, url],
        env=env,
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
    )
    lines = [json.loads(line) for line in ran.stdout.splitlines() if line.strip()]
    return ran.returncode, lines, ran.stderr


def promises(lines: list[dict[str, Any]]) -> dict[str, tuple[bool, str]]:
    """promise -> (kept, answer), the summary line left out."""
    return {line["promise"]: (line["kept"], line["answer"]) for line in lines if "promise" in line}


def test_the_example_keeps_every_promise_of_the_fence(server: Server, tmp_path: Path) -> None:
    with serving(EXAMPLE.parent, server, tmp_path / "uvicorn.log") as base:
        code, lines, stderr = fence_check(server, "kv:probe", f"{base}/kv/probe")
        kept = promises(lines)
        assert code == 0, f"{kept}\n{stderr}\n{(tmp_path / 'uvicorn.log').read_text()}"
        assert len(kept) == PROMISES, kept
        assert all(ok for ok, _ in kept.values()), kept
        assert kept[PAUSED] == (True, "409 FENCED_OUT"), kept
        assert kept["a forged signature is refused"] == (True, "403 PROOF_INVALID"), kept
        assert httpx.get(f"{base}/kv/probe").status_code == 200, "the holder's write is there"


def test_a_copy_without_its_fence_check_fails_the_kit(server: Server, tmp_path: Path) -> None:
    source = EXAMPLE.read_text()
    assert source.count(FENCE_CALL) == 1, "the example's fence call, once"
    broken = source.replace(FENCE_CALL, "pass  # the fence check, removed")
    assert FENCE_CALL not in broken and "fence_check(" not in broken.split("def put(", 1)[1]
    app_dir = tmp_path / "unfenced"
    app_dir.mkdir()
    (app_dir / "fenced_kv.py").write_text(broken)
    with serving(app_dir, server, tmp_path / "uvicorn.log") as base:
        code, lines, stderr = fence_check(server, "kv:probe", f"{base}/kv/probe")
    kept = promises(lines)
    assert code == 1, f"a broken promise is exit 1: {kept}\n{stderr}"
    assert [promise for promise, (ok, _) in kept.items() if not ok] == [PAUSED], kept
    assert lines[-1]["broken"] == 1, lines[-1]
