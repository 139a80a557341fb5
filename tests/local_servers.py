"""Servers the tests start on 127.0.0.1: a free port, and a process listening on it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def listening(
    argv: list[str], port: int, env: Mapping[str, str], name: str
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` in a process group of its own, yielded once ``port`` accepts connections
    (within 60 s); the group is killed on the way out unless the process has ended."""
    # A file, not a pipe: a chatty server never blocks on a full pipe nobody reads.
    with tempfile.TemporaryFile() as stderr:
        process = subprocess.Popen(
            argv,
            env=dict(env),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", port), 0.2),
                ):
                    break
                if process.poll() is not None:
                    stderr.seek(0)
                    raise AssertionError(f"{name} exited at start: {stderr.read().decode()}")
                assert time.monotonic() < deadline, f"{name} did not start listening"
                time.sleep(0.1)
            yield process
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
