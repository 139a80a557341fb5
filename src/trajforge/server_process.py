"""A local HTTP server run as a subprocess on 127.0.0.1, with nothing of it left behind.

The command runs under a small watchdog (``python -c WATCHDOG``) that leads a process group
of its own: ``stop`` ends the whole group (SIGTERM, then SIGKILL), it runs at interpreter exit
too, and should this process die without running it (SIGKILL, a crash), the watchdog sees its
parent gone and ends the group itself. The server's stderr goes to a temporary file whose tail
every error carries. ``start`` waits until a health URL answers, calling ``on_wait`` as it goes.
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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

import httpx

from trajforge.errors import InfraError

HOST = "127.0.0.1"
STDERR_TAIL_CHARS = 800
POLL_S = 0.2
STOP_WAIT_S = 5.0

# Runs the command as its child and returns its status; a thread ends the whole group when the
# process that started the watchdog is gone (its parent id changes on reparenting).
WATCHDOG = """
import os, signal, subprocess, sys, threading, time
parent = os.getppid()
child = subprocess.Popen(sys.argv[1:])
def watch():
    while os.getppid() == parent:
        time.sleep(0.5)
    os.killpg(0, signal.SIGTERM)
    time.sleep(5)
    os.killpg(0, signal.SIGKILL)
threading.Thread(target=watch, daemon=True).start()
signal.signal(signal.SIGTERM, lambda *_: child.terminate())
code = child.wait()
sys.exit(code if code >= 0 else 128 - code)
"""

WaitSink = Callable[[float, str], None]
"""Told, while a server starts, the seconds waited so far and its last line of stderr."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (Linux's ``/proc``; a zombie no init
    reaps does not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rpartition(")")[2].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                return True
    return False


class ServerProcess:
    """One server started from ``command(port)``.

    Args:
        name: What the errors call it (``vLLM server for /models/x``).
        command: The argv that serves on the port it is given.
        startup_timeout_s: Seconds the server has to answer ``health_path``.
        health_path: The path that answers 200 once the server is ready.
        env: Environment variables added to this process's for the server.
        error: The exception raised when it does not start (an ``InfraError``).
        on_wait: Called about every ``wait_report_s`` seconds while the server starts.
        wait_report_s: Seconds between two ``on_wait`` calls.
    """

    def __init__(
        self,
        name: str,
        command: Callable[[int], Sequence[str]],
        *,
        startup_timeout_s: float,
        health_path: str = "/health",
        env: Mapping[str, str] | None = None,
        error: type[InfraError] = InfraError,
        on_wait: WaitSink | None = None,
        wait_report_s: float = 10.0,
    ) -> None:
        self.name = name
        self.command = command
        self.startup_timeout_s = startup_timeout_s
        self.health_path = health_path
        self.env = dict(env or {})
        self.error = error
        self.on_wait = on_wait
        self.wait_report_s = wait_report_s
        self.url = ""
        self.starts = 0
        """How many times the server was started (a restart counts)."""
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[str] | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The watchdog's process id, which is the server's process group."""
        return None if self._process is None else self._process.pid

    def exit_code(self) -> int | None:
        """The status the server exited with (``None`` while it runs or before it started)."""
        return None if self._process is None else self._process.poll()

    def exited_within(self, seconds: float) -> bool:
        """Whether the server has exited, or does within ``seconds``."""
        process = self._process
        if process is None:
            return True
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def start(self) -> str:
        """Start the server unless it runs; its base URL.

        Raises:
            InfraError: (``error``) it exited or did not answer in time, its stderr's tail
                included; nothing of it is left running.
        """
        with self._lock:
            if self.running:
                return self.url
            self.stop()
            port = free_port()
            self.url = f"http://{HOST}:{port}"
            self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed by stop()
            self._process = subprocess.Popen(
                [sys.executable, "-c", WATCHDOG, *self.command(port)],
                stdin=subprocess.DEVNULL,
                stdout=self._stderr,
                stderr=self._stderr,
                start_new_session=True,
                env={**os.environ, **self.env},
            )
            self.starts += 1
            atexit.register(self.stop)
            failure = self._wait_ready(self._process)
            if failure is not None:
                tail = self.stderr_tail()
                self.stop()
                raise self.error(f"{self.name}: {failure}{tail}")
            return self.url

    def _wait_ready(self, process: subprocess.Popen[bytes]) -> str | None:
        """None once the health URL answers, else why the server is not up."""
        started = time.monotonic()
        reported = started
        while (waited := time.monotonic() - started) < self.startup_timeout_s:
            code = process.poll()
            if code is not None:
                return f"the server exited with status {code} before it answered"
            with contextlib.suppress(httpx.HTTPError):
                reply = httpx.get(f"{self.url}{self.health_path}", timeout=POLL_S * 5)
                if reply.status_code == 200:
                    return None
            if self.on_wait is not None and time.monotonic() - reported >= self.wait_report_s:
                reported = time.monotonic()
                self.on_wait(waited, self.last_line())
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
            # What the server started and left in its group goes too, before stop returns.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            deadline = time.monotonic() + STOP_WAIT_S
            while group_alive(process.pid) and time.monotonic() < deadline:
                time.sleep(POLL_S / 4)
            atexit.unregister(self.stop)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.flush()
        self._stderr.seek(0)
        text = self._stderr.read()
        self._stderr.seek(0, os.SEEK_END)
        return text.strip()

    def last_line(self) -> str:
        """The server's last line of output so far."""
        return self._text().rpartition("\n")[2][-200:]

    def stderr_tail(self) -> str:
        """``; its stderr ends: ...`` (what an error message ends with)."""
        text = self._text()[-STDERR_TAIL_CHARS:]
        return f"; its stderr ends: {text}" if text else "; it wrote nothing to stderr"
