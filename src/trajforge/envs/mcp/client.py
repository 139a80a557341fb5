"""An MCP server as a tool source: connects on first use, restarts after a crash, shared or not.

``MCPClient`` holds at most one live ``MCPConnection``. A call finding it dead (the server
crashed on an earlier call) starts a new one first; the call that met the crash fails as a tool
error. Listings are remembered per server spec for the life of the process, so the episodes
after the first know their tools without starting anything; an episode's own server starts
on its first call.

Servers of scope ``shared`` are pooled per event loop: ``acquire_shared`` hands every episode
the same client, and the last ``release_shared`` stops it after ``SHARED_IDLE_S`` unless
another episode takes it first (episodes of a run come and go; the server should not).
``close_shared`` stops the pool's servers at once. A loop's end (``asyncio.run`` returning,
Ctrl-C) cancels the connections' tasks, which stop their servers on the way out.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass
from typing import Any

import mcp.types as mcp_types

from trajforge.envs.mcp.connection import MCPConnection, MCPServerError
from trajforge.envs.mcp.spec import MCPServerSpec, Scope

SHARED_IDLE_S = 5.0

_LISTINGS: dict[str, list[mcp_types.Tool]] = {}


class MCPClient:
    """One MCP server's tools for as long as the client is open."""

    def __init__(self, spec: MCPServerSpec) -> None:
        self.spec = spec
        self._connection: MCPConnection | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self.starts = 0

    async def list_tools(self) -> list[mcp_types.Tool]:
        """The server's tools (all of them; the env applies the selection)."""
        listed = _LISTINGS.get(self.spec.key)
        if listed is None:
            await self._connected()
            listed = _LISTINGS[self.spec.key]
        return listed

    async def start(self) -> None:
        """Start the server unless it runs (again, after a crash).

        Raises:
            MCPServerError: it did not start within ``startup_timeout_s``, or the client is closed.
        """
        await self._connected()

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """Call ``name`` on the server, starting (or restarting) it first if it is not running."""
        connection = await self._connected()
        return await connection.call(name, arguments)

    async def close(self) -> None:
        """Stop the server; later calls fail. Never raises."""
        self._closed = True
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()

    async def _connected(self) -> MCPConnection:
        async with self._lock:
            if self._closed:
                raise MCPServerError(f"{self.spec.describe()}: the environment was closed")
            if self._connection is not None and self._connection.alive:
                return self._connection
            if self._connection is not None:
                await self._connection.close()
                self._connection = None
            connection = MCPConnection(self.spec)
            tools = await connection.open()
            self.starts += 1
            if self._closed:  # closed while it started
                await connection.close()
                raise MCPServerError(f"{self.spec.describe()}: the environment was closed")
            _LISTINGS[self.spec.key] = tools
            self._connection = connection
            return connection


@dataclass
class _Pooled:
    client: MCPClient
    users: int = 0
    idle_close: asyncio.Task[None] | None = None


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Pooled]] = (
    weakref.WeakKeyDictionary()
)


def _pool() -> dict[str, _Pooled]:
    return _POOLS.setdefault(asyncio.get_running_loop(), {})


def open_client(spec: MCPServerSpec) -> MCPClient:
    """A client for ``spec``: the loop's shared one (taken, to be released) or a new one."""
    if spec.scope is Scope.EPISODE:
        return MCPClient(spec)
    pool = _pool()
    pooled = pool.get(spec.key)
    if pooled is None:
        pooled = pool[spec.key] = _Pooled(MCPClient(spec))
    if pooled.idle_close is not None:
        pooled.idle_close.cancel()
        pooled.idle_close = None
    pooled.users += 1
    return pooled.client


async def release_client(client: MCPClient) -> None:
    """Give back a client from ``open_client``: an episode's own is closed, a shared one is
    closed once no episode has used it for ``SHARED_IDLE_S``. Never raises."""
    if client.spec.scope is Scope.EPISODE:
        await client.close()
        return
    pool = _pool()
    pooled = pool.get(client.spec.key)
    if pooled is None or pooled.client is not client:
        await client.close()
        return
    pooled.users -= 1
    if pooled.users <= 0 and pooled.idle_close is None:
        pooled.idle_close = asyncio.create_task(_close_when_idle(client.spec.key, pooled))


async def _close_when_idle(key: str, pooled: _Pooled) -> None:
    await asyncio.sleep(SHARED_IDLE_S)
    pool = _pool()
    if pool.get(key) is pooled and pooled.users <= 0:
        del pool[key]
        await pooled.client.close()


async def close_shared() -> None:
    """Stop every shared server of the running loop now."""
    pool = _pool()
    entries = list(pool.values())
    pool.clear()
    for pooled in entries:
        if pooled.idle_close is not None:
            pooled.idle_close.cancel()
    await asyncio.gather(*(p.client.close() for p in entries))
