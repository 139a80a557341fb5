"""``trajforge mcp serve ENV``: an environment's tools as an MCP server (stdio or HTTP)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated

import typer

from trajforge.cli.common import EnvArgument, err_console
from trajforge.cli.preflight import claim_port
from trajforge.envs import get_env

mcp_app = typer.Typer(
    name="mcp",
    help="Model Context Protocol: serve an environment's tools to any MCP client.",
    no_args_is_help=True,
)


@mcp_app.command("serve")
def serve(
    env: EnvArgument,
    http: Annotated[
        int | None,
        typer.Option(
            "--http",
            min=0,
            max=65535,
            metavar="PORT",
            help="Serve streamable HTTP at http://127.0.0.1:PORT/mcp instead of stdio (0: any "
            "free port).",
        ),
    ] = None,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of the task the env is set up with.")
    ] = 0,
) -> None:
    """Serve ENV's tools over MCP: stdio by default (for a client that starts this command),
    or streamable HTTP on 127.0.0.1. Each call runs the env's tool; its errors come back with
    is_error set."""
    # lazy: the MCP SDK and uvicorn cost a second at start-up; only this command needs them
    from trajforge.envs import serve_http, serve_stdio

    port = None if http is None else claim_port("127.0.0.1", http, option="--http")
    entry = get_env(env)
    if port is None:
        asyncio.run(serve_stdio(entry, seed=seed))
        return
    err_console.print(f"serving {entry.name!r} tools at http://127.0.0.1:{port}/mcp (Ctrl-C stops)")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_http(entry, port, seed=seed))


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.add_typer(mcp_app)
