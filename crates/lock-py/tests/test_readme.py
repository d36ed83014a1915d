"""The README's Python quick start runs as it stands, against a real lock-server."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO, Server


def readme_python_block() -> str:
    """The first ```python block of the README's "From Python" section."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("### From Python", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readme_quick_start_runs_as_it_stands(server: Server) -> None:
    env = dict(
        os.environ,
        LOCK_ENDPOINTS=server.url,
        LOCK_CLIENT_TOKEN=server.client_token,
        UNSAFE_PLAINTEXT_HTTP="true",
    )
    ran = subprocess.run(
        [sys.executable, "-c", readme_python_block()],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert "holding payout:42 with token" in ran.stdout
