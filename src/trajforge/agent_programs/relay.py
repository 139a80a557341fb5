"""The gateway's one address inside a sandbox that has no network.

bubblewrap's ``--unshare-net`` leaves a confined run a network namespace of its own with only a
loopback, which reaches nothing outside. The gateway gets in through a unix socket: on the host,
``unix_relay`` listens on a socket in a folder bound into the sandbox and forwards each
connection to the gateway's TCP address; inside, ``forwarder`` (the sandbox's first program)
listens on the loopback at the gateway's port and forwards each connection to that socket.
Every other address, 127.0.0.1's other ports included, is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from trajforge.agent_programs.forwarder import pipe

FORWARDER = Path(__file__).resolve().with_name("forwarder.py")
"""The forwarder's script, run inside the sandbox (which must see it, read-only)."""


def _bound(socket_path: Path) -> socket.socket:
    """A unix socket bound at ``socket_path``, open to any uid. It is bound through its
    folder's descriptor: a socket's path may not exceed 107 bytes, a temporary folder's can."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    folder = os.open(socket_path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        sock.bind(f"/proc/self/fd/{folder}/{socket_path.name}")
    except OSError:
        sock.close()
        raise
    finally:
        os.close(folder)
    os.chmod(socket_path, 0o777)
    return sock


@asynccontextmanager
async def unix_relay(socket_path: Path, host: str, port: int) -> AsyncIterator[None]:
    """A unix socket at ``socket_path``, open to any uid (only the sandbox it is bound into
    sees it), whose every connection is forwarded to ``host:port`` while the block runs."""
    tasks: set[asyncio.Task[object]] = set()

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None, "a connection is handled in a task"
        tasks.add(task)  # its connections end with the run, not whenever the gateway ends them
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        finally:
            task.add_done_callback(tasks.discard)
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    server = await asyncio.start_unix_server(forward, sock=_bound(socket_path))
    try:
        yield
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
