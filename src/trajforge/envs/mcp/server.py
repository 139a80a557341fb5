"""Any trajforge environment's tools as an MCP server, over stdio or streamable HTTP.

The server lists the env's ``ToolSpec``s as MCP tools (same names, descriptions and JSON
schemas) and answers a call by running the env's own ``call_tool``: argument validation,
timeouts and failures are ToolEnv's, and a result starting ``Error:`` is sent with
``is_error``. A call to a tool the env does not have is a protocol error (invalid params), as
the MCP specification asks. One env instance serves every client of the server: it is reset
once on a task of its own (its first training task, else an empty one) and closed when the
server stops.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp.types as mcp_types
import uvicorn
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp_types import INVALID_PARAMS

import trajforge
from trajforge.envs.registry import EnvEntry
from trajforge.envs.tool_env import ERROR_PREFIX, ToolEnv
from trajforge.errors import ConfigError
from trajforge.schema import Task

HTTP_PATH = "/mcp"


def tool_server(env: ToolEnv) -> Server[Any]:
    """An MCP server whose tools are ``env``'s (reset already, so its tools are known)."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(
            tools=[
                mcp_types.Tool(
                    name=spec.name,
                    description=spec.function.description,
                    input_schema=spec.function.parameters,
                )
                for spec in env.tools
            ]
        )

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        if params.name not in env.tool_map:
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        text = await env.call_tool(params.name, params.arguments or {})
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(text=text)], is_error=text.startswith(ERROR_PREFIX)
        )

    return Server(
        f"trajforge-{env.name}",
        version=trajforge.__version__,
        description=getattr(env, "description", "") or None,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


@asynccontextmanager
async def served_env(entry: EnvEntry, seed: int = 0) -> AsyncIterator[ToolEnv]:
    """A fresh env of ``entry``, reset on its task, closed on the way out.

    Raises:
        ConfigError: the env is not a ``ToolEnv`` (it has no tools to serve).
    """
    env = entry.make()
    if not isinstance(env, ToolEnv):
        raise ConfigError(
            f"env {entry.name!r} is a {type(env).__name__}, not a ToolEnv; it has no tools to serve"
        )
    try:
        tasks = entry.tasks(1, seed=seed)
    except ConfigError:
        tasks = []
    try:
        await env.reset(tasks[0] if tasks else Task(id="mcp-serve", prompt=""))
        yield env
    finally:
        await env.close()


async def serve_stdio(entry: EnvEntry, seed: int = 0) -> None:
    """Serve ``entry``'s tools on stdin/stdout until the client closes stdin."""
    async with served_env(entry, seed) as env, stdio_server() as (read, write):
        server = tool_server(env)
        await server.run(read, write, server.create_initialization_options())


async def serve_http(entry: EnvEntry, port: int, host: str = "127.0.0.1", seed: int = 0) -> None:
    """Serve ``entry``'s tools at ``http://host:port/mcp`` until Ctrl-C or SIGTERM."""
    async with served_env(entry, seed) as env:
        app = tool_server(env).streamable_http_app(streamable_http_path=HTTP_PATH, host=host)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
        await uvicorn.Server(config).serve()
