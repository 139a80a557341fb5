"""The first program of a confined run, inside its sandbox (``relay`` explains the route): it
listens on the sandbox's loopback at the gateway's port, forwards each connection to the unix
socket of the relay outside, and runs the agent program as its child, exiting with its status.

It runs as a script, ``python -I forwarder.py PORT SOCKET ARGV...``, so it is standard library
only. It is one thread (asyncio, the child's exit watched through a pidfd): it keeps forwarding
when the program has used up its processes.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

CHUNK = 65536


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` to ``writer`` until either end closes, then close ``writer``."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def serve(port: int, socket_path: str, command: list[str]) -> int:
    """Forward ``127.0.0.1:port`` to ``socket_path`` while ``command`` runs; its exit status
    (128 + N for a signal N, as a shell says it)."""

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_unix_connection(socket_path)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    server = await asyncio.start_server(forward, "127.0.0.1", port)
    child = subprocess.Popen(command)
    exited = asyncio.Event()
    pidfd = os.pidfd_open(child.pid)
    asyncio.get_running_loop().add_reader(pidfd, exited.set)
    await exited.wait()
    server.close()
    code = child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(asyncio.run(serve(int(sys.argv[1]), sys.argv[2], sys.argv[3:])))
