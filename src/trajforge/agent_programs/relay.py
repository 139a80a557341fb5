"""The gateway's one address inside a sandbox that has no network.

bubblewrap's ``--unshare-net`` leaves a confined run a network namespace of its own with only a
loopback, which reaches nothing outside. The gateway gets in through a unix socket: on the host,
``unix_relay`` listens on a socket in a folder bound into the sandbox and forwards each
connection to the gateway's TCP address; inside, ``FORWARDER`` (the sandbox's first program)
listens on the loopback at the gateway's port, forwards each connection to that socket, and runs
the agent program as its child, exiting with its status. Every other address, 127.0.0.1's other
ports included, is refused. The forwarder is one thread (asyncio, the child's exit watched
through a pidfd), so it keeps forwarding when the program has used up its processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

FORWARDER = """\
import asyncio, os, signal, subprocess, sys
port, socket_path = int(sys.argv[1]), sys.argv[2]
command = sys.argv[3:]

async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()

async def forward(reader, writer):
    try:
        upstream_reader, upstream_writer = await asyncio.open_unix_connection(socket_path)
    except OSError:
        writer.close()
        return
    await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

async def main():
    server = await asyncio.start_server(forward, "127.0.0.1", port)
    child = subprocess.Popen(command)
    exited = asyncio.Event()
    pidfd = os.pidfd_open(child.pid)
    asyncio.get_running_loop().add_reader(pidfd, exited.set)
    await exited.wait()
    server.close()
    code = child.wait()
    return code if code >= 0 else 128 - code

sys.exit(asyncio.run(main()))
"""
"""Run inside the sandbox as ``python -I -c FORWARDER PORT SOCKET ARGV...``."""

_CHUNK = 65536


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


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
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))

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
