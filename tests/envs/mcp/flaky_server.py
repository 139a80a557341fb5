"""A tiny MCP server (stdio) that errs, crashes, hangs and spawns on request, for the tests.

``--hang-on-start`` never answers the handshake; ``--exit-on-start`` writes to stderr and exits.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, TextContent

server = MCPServer("flaky")
calls = {"count": 0}


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


@server.tool()
def fail(reason: str) -> str:
    """Fail with the reason."""
    raise ToolError(reason)


@server.tool()
def crash() -> str:
    """Exit the server process at once."""
    os._exit(3)


@server.tool()
async def hang() -> str:
    """Never answer."""
    await asyncio.sleep(3600)
    return "late"


@server.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool()
def count() -> str:
    """How many times this server has been called to count (per-process state)."""
    calls["count"] += 1
    return str(calls["count"])


@server.tool()
def spawn() -> str:
    """Start a long-lived child process; return its pid."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    return str(child.pid)


@server.tool()
def picture() -> list[TextContent | ImageContent]:
    """A caption and a tiny image."""
    return [
        TextContent(text="a red dot"),
        ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
    ]


if __name__ == "__main__":
    if "--hang-on-start" in sys.argv:
        time.sleep(3600)
    if "--exit-on-start" in sys.argv:
        print("flaky: refusing to start (as asked)", file=sys.stderr)
        sys.exit(2)
    server.run()
