"""One live connection to an MCP server, owned by one asyncio task.

The SDK's transports and ``ClientSession`` are anyio context managers whose cancel scopes must
be entered and exited by the same task; closing a session from another task (a concurrent
episode, a timeout, Ctrl-C) raises "exit cancel scope in a different task" or hangs. So each
connection runs in a task of its own that enters the transport and the session, lists the
tools, serves calls sent to it through a queue, and exits both on the way out, whatever ends
it: a stop request, a crash of the server, a cancellation. A stdio server runs in its own
process group, which the SDK's shutdown stops whole (stdin closed, then SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import IO, Any

import anyio
import httpx2
import mcp.types as mcp_types
import psutil
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CONNECTION_CLOSED

from trajforge.envs.mcp.spec import MCPServerSpec
from trajforge.envs.tool import ToolError
from trajforge.errors import InfraError

STDERR_TAIL_CHARS = 600
# Bounds the SDK's own shutdown (stdin closed, 2 s, SIGTERM to the group, 2 s, SIGKILL).
CLOSE_WAIT_S = 8.0
MAX_LIST_PAGES = 100
# Set in a stdio server's environment so that its process can be told apart from its siblings.
MARK_VARIABLE = "TRAJFORGE_MCP_CONNECTION"
# The SDK's defaults for MCP over HTTP: a server may hold a response stream open for long.
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


class MCPServerError(ToolError, InfraError):
    """An MCP server could not be reached or stopped answering (not a tool's own failure): the
    model reads it as a tool error, and the episode is marked lost to the infrastructure."""


@dataclass
class _Call:
    name: str
    arguments: dict[str, Any]
    done: asyncio.Future[mcp_types.CallToolResult]
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


class MCPConnection:
    """A started MCP server (or HTTP session): its tools and a way to call them.

    ``open()`` starts the owner task and returns the server's tools; ``call()`` runs one tool;
    ``close()`` stops the server and waits for it. After a crash ``alive`` is False and every
    call fails with ``MCPServerError``; the caller opens a new connection.
    """

    def __init__(self, spec: MCPServerSpec) -> None:
        self.spec = spec
        self._requests: asyncio.Queue[_Call | None] = asyncio.Queue()
        self._ready: asyncio.Future[list[mcp_types.Tool]] | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stderr: IO[str] | None = None
        self._stderr_text = ""
        self._mark = uuid.uuid4().hex
        self._group: int | None = None
        self._failure: str | None = None

    @property
    def alive(self) -> bool:
        """True while the owner task runs and the server has not failed."""
        return self._owner is not None and not self._owner.done() and self._failure is None

    async def open(self) -> list[mcp_types.Tool]:
        """Start the server, do the handshake and list its tools within ``startup_timeout_s``.

        Raises:
            MCPServerError: it did not start, answer or list its tools in time (with the
                tail of its stderr); nothing of it is left running.
        """
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._owner = asyncio.create_task(self._own(), name=f"mcp:{self.spec.name}")
        self._owner.add_done_callback(_retrieve_exception)
        try:
            return await asyncio.wait_for(asyncio.shield(self._ready), self.spec.startup_timeout_s)
        except TimeoutError:
            await self.close()
            raise MCPServerError(
                f"{self.spec.describe()} did not start within {self.spec.startup_timeout_s:g} s"
                f"{self._stderr_tail()}"
            ) from None
        except BaseException:
            await self.close()
            raise

    async def call(self, name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """Run tool ``name`` (the server's name for it); cancelling this cancels the request.

        Raises:
            MCPServerError: the server is gone or failed during the call.
            MCPError: the server answered with a protocol error (unknown tool, bad params).
        """
        if not self.alive:
            raise MCPServerError(self._gone())
        call = _Call(name, arguments, asyncio.get_running_loop().create_future())
        self._requests.put_nowait(call)
        try:
            return await asyncio.shield(call.done)
        except asyncio.CancelledError:
            call.scope.cancel()
            raise

    async def close(self) -> None:
        """Stop the server and wait for it (bounded); never raises, safe to call twice."""
        owner = self._owner
        if owner is None:
            return
        if not owner.done():
            # A serving connection stops at its next queue read; one still starting (a server
            # that does not answer the handshake) reads no queue and is cancelled instead.
            serving = self._ready is not None and self._ready.done()
            if serving:
                self._requests.put_nowait(None)
                await asyncio.wait({owner}, timeout=CLOSE_WAIT_S)
            if not owner.done():
                owner.cancel()
                await asyncio.wait({owner}, timeout=CLOSE_WAIT_S)

    async def _own(self) -> None:
        assert self._ready is not None
        try:
            async with self._session() as session:
                await session.initialize()
                self._find_group()
                tools = await _list_all(session)
                self._ready.set_result(tools)
                async with anyio.create_task_group() as group:
                    while self._failure is None:
                        call = await self._requests.get()
                        if call is None:
                            break
                        group.start_soon(self._serve, session, call)
                    group.cancel_scope.cancel()
        except BaseException as exc:
            self._failure = self._failure or _describe(exc)
            if not self._ready.done():
                self._ready.set_exception(
                    MCPServerError(
                        f"{self.spec.describe()} failed to start: {self._failure}"
                        f"{self._stderr_tail()}"
                    )
                )
            if not isinstance(exc, Exception):
                raise  # a cancellation or an interrupt goes on; a failure is recorded above
        finally:
            self._failure = self._failure or "it was stopped"
            while not self._requests.empty():
                pending = self._requests.get_nowait()
                if pending is not None and not pending.done.done():
                    pending.done.set_exception(MCPServerError(self._gone()))

    async def _serve(self, session: ClientSession, call: _Call) -> None:
        try:
            with call.scope:
                call.done.set_result(await session.call_tool(call.name, call.arguments))
        except MCPError as exc:
            if exc.error.code != CONNECTION_CLOSED:
                call.done.set_exception(exc)
                return
            self._fail(f"the connection closed ({exc.error.message})")
        except Exception as exc:
            self._fail(_describe(exc))
        finally:
            if not call.done.done():
                if call.scope.cancel_called:  # its caller gave up; nobody waits for it
                    call.done.cancel()
                else:  # the connection failed or is stopping under it
                    call.done.set_exception(MCPServerError(self._gone()))

    def _fail(self, reason: str) -> None:
        """The server crashed or the transport broke: stop this connection for good."""
        self._failure = self._failure or reason
        self._requests.put_nowait(None)

    @contextlib.asynccontextmanager
    async def _session(self) -> AsyncIterator[ClientSession]:
        spec = self.spec
        async with contextlib.AsyncExitStack() as stack:
            if spec.command is not None:
                errlog = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - the exit stack closes it
                self._stderr = stack.enter_context(errlog)
                stack.callback(self._save_stderr)
                params = StdioServerParameters(
                    command=spec.executable,
                    args=list(spec.args),
                    env={**spec.env, MARK_VARIABLE: self._mark},
                    cwd=spec.cwd,
                )
                # Runs after the SDK's shutdown, which only signals the group when the server
                # outlives its closed stdin: what it started and left behind is killed here.
                stack.callback(self._kill_group)
                read, write = await stack.enter_async_context(stdio_client(params, self._stderr))
            else:
                assert spec.url is not None
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(headers=dict(spec.headers), timeout=HTTP_TIMEOUT)
                )
                read, write = await stack.enter_async_context(
                    streamable_http_client(spec.url, http_client=http)
                )
            yield await stack.enter_async_context(ClientSession(read, write))

    def _find_group(self) -> None:
        """Remember the server's process group: the SDK starts it in a session of its own, so
        the group id is the pid of the child carrying this connection's mark."""
        if self.spec.command is None:
            return
        for child in psutil.Process().children():
            with contextlib.suppress(psutil.Error):
                if child.environ().get(MARK_VARIABLE) == self._mark:
                    self._group = child.pid
                    return

    def _kill_group(self) -> None:
        if self._group is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._group, signal.SIGKILL)
            self._group = None

    def _gone(self) -> str:
        return (
            f"{self.spec.describe()} is not running: {self._failure or 'it was never started'}"
            f"{self._stderr_tail()}"
        )

    def _save_stderr(self) -> None:
        self._stderr_text = self._read_stderr()

    def _read_stderr(self) -> str:
        if self._stderr is None or self._stderr.closed:
            return self._stderr_text
        self._stderr.flush()
        self._stderr.seek(0)
        text = self._stderr.read().strip()[-STDERR_TAIL_CHARS:]
        self._stderr.seek(0, 2)
        return text

    def _stderr_tail(self) -> str:
        text = self._read_stderr()
        return f"; its stderr ends: {text}" if text else ""


async def _list_all(session: ClientSession) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _retrieve_exception(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()  # a failure is recorded on the connection; no "never retrieved" noise


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.CancelledError):
        return "it was cancelled"
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
