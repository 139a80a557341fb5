"""An OpenEnv server started from Python code as a subprocess on 127.0.0.1.

The server runs ``python -m trajforge.envs.openenv.launch REF --port P`` in a session (and so
a process group) of its own, its stderr in a temporary file. ``start`` waits until ``/health``
answers; a server that exits first or does not answer within the start-up timeout is killed
with its whole group, and the error carries the tail of its stderr. ``stop`` ends the group
(SIGTERM, then SIGKILL); it runs at interpreter exit too, so no server outlives its user.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO

import httpx

from trajforge.errors import InfraError

HOST = "127.0.0.1"
LAUNCHER = "trajforge.envs.openenv.launch"
STDERR_TAIL_CHARS = 800
POLL_S = 0.2
STOP_WAIT_S = 5.0


class OpenEnvServerError(InfraError):
    """An OpenEnv server did not start, stopped answering or broke its connection."""


class OpenEnvProcess:
    """One OpenEnv server started from ``ref`` (``module:attr`` or ``file.py:attr``).

    Args:
        ref: What the launcher serves: an ASGI app or an OpenEnv ``Environment`` class.
        startup_timeout_s: Seconds the server has to answer ``/health``.
        max_sessions: Concurrent WebSocket sessions an ``Environment`` class is served with.
    """

    def __init__(self, ref: str, startup_timeout_s: float, max_sessions: int) -> None:
        self.ref = ref
        self.startup_timeout_s = startup_timeout_s
        self.max_sessions = max_sessions
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[str] | None = None
        self._lock = threading.Lock()
        self.url = ""

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> str:
        """Start the server unless it runs; its base URL.

        Raises:
            OpenEnvServerError: it exited or did not answer in time (its stderr's tail
                included); nothing of it is left running.
        """
        with self._lock:
            if self.running:
                return self.url
            self.stop()
            port = _free_port()
            self.url = f"http://{HOST}:{port}"
            # ``python -m`` puts the current directory on the path, so a module the user
            # names from there imports in the server as it would here.
            command = [sys.executable, "-m", LAUNCHER, self.ref, "--port", str(port)]
            command += ["--max-sessions", str(self.max_sessions)]
            self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed by stop()
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
                start_new_session=True,
            )
            atexit.register(self.stop)
            failure = self._wait_ready(self._process)
            if failure is not None:
                tail = self._stderr_tail()
                self.stop()
                raise OpenEnvServerError(f"{self.describe()}: {failure}{tail}")
            return self.url

    def _wait_ready(self, process: subprocess.Popen[bytes]) -> str | None:
        """None once ``/health`` answers, else why the server is not up."""
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            code = process.poll()
            if code is not None:
                return f"the server exited with status {code} before it answered"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=POLL_S * 5).status_code == 200:
                    return None
            time.sleep(POLL_S)
        return f"the server did not answer within {self.startup_timeout_s:g} s"

    def stop(self) -> None:
        """Stop the server's whole process group and wait for it; safe to call twice."""
        process, self._process = self._process, None
        if process is not None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, sig)
                try:
                    process.wait(STOP_WAIT_S)
                    break
                except subprocess.TimeoutExpired:
                    continue
            # What the server started and left in its group goes too.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            atexit.unregister(self.stop)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def describe(self) -> str:
        return f"OpenEnv server {self.ref!r}"

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.flush()
        self._stderr.seek(0)
        text = self._stderr.read().strip()[-STDERR_TAIL_CHARS:]
        return f"; its stderr ends: {text}" if text else "; it wrote nothing to stderr"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])
