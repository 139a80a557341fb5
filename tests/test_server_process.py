"""``ServerProcess``: a local server that answers, fails with its output, and outlives no one,
not even a user killed without cleaning up (its watchdog ends the group)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from trajforge.errors import ConfigError, InfraError
from trajforge.policy.vllm_server import PYTHON_ENV_VAR, vllm_python
from trajforge.server_process import ServerProcess, group_alive


def _http_server(port: int) -> list[str]:
    return [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]


def _gone_within(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_server_answers_and_stop_leaves_nothing(tmp_path: Path) -> None:
    server = ServerProcess("files", _http_server, startup_timeout_s=60, health_path="/")
    url = server.start()
    assert httpx.get(url).status_code == 200 and server.running and server.starts == 1
    pgid = server.pid
    assert pgid is not None and group_alive(pgid)
    server.stop()
    assert not server.running and not group_alive(pgid)


def test_a_server_that_exits_fails_with_its_output() -> None:
    def failing(port: int) -> list[str]:
        return [sys.executable, "-c", "import sys; sys.exit('no model here')"]

    server = ServerProcess("broken", failing, startup_timeout_s=60)
    with pytest.raises(InfraError, match=r"^broken: the server exited with status 1 .*no model"):
        server.start()
    assert not server.running


def test_the_watchdog_ends_the_server_when_its_user_is_killed(tmp_path: Path) -> None:
    user = textwrap.dedent(f"""
        import sys, time
        from trajforge.server_process import ServerProcess
        server = ServerProcess(
            "files", lambda port: {_http_server(0)[:-3]!r} + [str(port), "--bind", "127.0.0.1"],
            startup_timeout_s=60, health_path="/",
        )
        server.start()
        print(server.pid, flush=True)
        time.sleep(600)
    """)
    process = subprocess.Popen([sys.executable, "-c", user], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    pgid = int(process.stdout.readline())
    assert group_alive(pgid)
    os.kill(process.pid, signal.SIGKILL)  # no atexit, no stop(): only the watchdog is left
    process.wait()
    assert _gone_within(pgid, 15)


def test_a_missing_vllm_python_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PYTHON_ENV_VAR, "/nonexistent/python")
    with pytest.raises(ConfigError, match=r"TRAJFORGE_VLLM_PYTHON=/nonexistent/python: no such"):
        vllm_python()
