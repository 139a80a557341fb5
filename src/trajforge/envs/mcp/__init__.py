"""MCP servers as tool sources of trajforge environments.

Contract: an ``MCPServerSpec`` names a server (stdio ``command`` or HTTP ``url``), its scope
(``episode``: one server per episode; ``shared``: one per process), its tool selection and its
time limits. ``MCPEnv`` is a ``ToolEnv`` offering those servers' tools as ``MCPTool``s, so tool
messages, argument errors and timeouts are ToolEnv's own. A server that does not start in time,
crashes or breaks its connection turns the call into an ``Error:`` tool message and is started
again on the next call; ``close`` (and the end of the event loop) stops every server the
episode holds, with its whole process group. Each connection lives in one asyncio task that
enters and exits the SDK's contexts itself, so concurrent episodes never cross cancel scopes.
An env file (``env.yaml``: servers, local tools, tasks, verifier; ``envfile``) loads wherever
an env is named. The other way round, ``server`` serves any env's tools as an MCP server
(``trajforge mcp serve``; it loads uvicorn and the SDK's server, so only that command imports it).
"""

from trajforge.envs.mcp.client import MCPClient, close_shared
from trajforge.envs.mcp.connection import MCPServerError
from trajforge.envs.mcp.env import MCPEnv
from trajforge.envs.mcp.spec import MCPServerSpec, Scope, ToolSelection
from trajforge.envs.mcp.tools import MCPTool, result_text

__all__ = [
    "MCPClient",
    "MCPEnv",
    "MCPServerError",
    "MCPServerSpec",
    "MCPTool",
    "Scope",
    "ToolSelection",
    "close_shared",
    "result_text",
]
