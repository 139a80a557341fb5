"""``MCPEnv``: a ``ToolEnv`` whose tools come from MCP servers (beside any local tools).

On ``reset`` each server's tools are listed (from the process-wide listing when some episode
already listed them, otherwise by starting the server) and added to the env as ``MCPTool``s,
after the local tools, in server order. An episode's own server (scope ``episode``) starts at
the first listing or call and stops on ``close``; a ``shared`` server is taken from the loop's
pool on ``reset`` and given back on ``close``. ``close`` stops what the episode holds on every
path: a finished, failed or cancelled episode (the rollout engine closes every env it made).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from trajforge.envs.mcp.client import MCPClient, open_client, release_client
from trajforge.envs.mcp.spec import MCPServerSpec
from trajforge.envs.mcp.tools import select_tools
from trajforge.envs.tool import Tool
from trajforge.envs.tool_env import EnvError, ToolEnv
from trajforge.errors import TrajforgeError
from trajforge.schema import Message, Task, ToolSpec


class MCPEnv(ToolEnv):
    """An environment offering MCP servers' tools.

    Args:
        servers: The servers whose tools the env offers (their names must differ).
        tools: Local tools offered beside them.
        **kwargs: ``ToolEnv``'s arguments (tasks, verifier, limits, name, expert...).
    """

    def __init__(
        self,
        servers: Sequence[MCPServerSpec],
        tools: Iterable[Tool | Callable[..., Any]] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(tools, **kwargs)
        names = [s.name for s in servers]
        if len(set(names)) != len(names):
            raise EnvError(f"env {self.name!r}: two MCP servers have the same name")
        self.servers = list(servers)
        self._local = dict(self.tool_map)
        self._clients: dict[str, MCPClient] = {}

    async def reset(self, task: Task) -> list[Message]:
        await self._release()
        self.tool_map = dict(self._local)
        self.tools = [t.spec for t in self.tool_map.values()]
        for spec in self.servers:
            client = self._clients[spec.name] = open_client(spec)
            try:
                listed = await client.list_tools()
            except TrajforgeError as exc:
                raise EnvError(f"env {self.name!r}: {exc}") from None
            self.add_tools(select_tools(spec, listed, client.call_tool, client.start))
        return await super().reset(task)

    async def list_tools(self) -> list[ToolSpec]:
        specs = [t.spec for t in self._local.values()]
        for spec in self.servers:
            client = open_client(spec)
            try:
                listed = await client.list_tools()
            finally:
                await release_client(client)
            specs.extend(t.spec for t in select_tools(spec, listed, client.call_tool, client.start))
        return specs

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            await self._release()

    async def _release(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        # Shielded: an episode whose close is cancelled (a run torn down) still stops them.
        await asyncio.shield(asyncio.gather(*(release_client(c) for c in clients)))
