"""``trajforge openenv serve ENV``: an environment as an OpenEnv server."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated

import typer

from trajforge.cli.common import EnvArgument, err_console
from trajforge.cli.preflight import claim_port
from trajforge.envs import get_env

HOST = "127.0.0.1"

openenv_app = typer.Typer(
    name="openenv",
    help="OpenEnv: serve an environment so that OpenEnv's client drives it.",
    no_args_is_help=True,
)


@openenv_app.command("serve")
def serve(
    env: EnvArgument,
    port: Annotated[
        int,
        typer.Option("--port", min=0, max=65535, help="Port on 127.0.0.1 (0: any free port)."),
    ] = 8000,
    sessions: Annotated[
        int,
        typer.Option("--sessions", min=1, help="Episodes served at once (WebSocket sessions)."),
    ] = 8,
) -> None:
    """Serve ENV as an OpenEnv server on 127.0.0.1: reset/step/state over HTTP and WebSocket
    (/ws), one episode per session. reset(seed, split) picks the env's task; the action is
    the assistant's turn (content, tool_calls), the observation the env's messages."""
    chosen = claim_port(HOST, port)
    entry = get_env(env)
    # lazy: openenv-core loads gradio (seconds at start-up); only this command needs it
    from trajforge.envs import serve_openenv

    err_console.print(f"serving {entry.name!r} as OpenEnv at http://{HOST}:{chosen} (Ctrl-C stops)")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_openenv(entry, chosen, sessions))


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.add_typer(openenv_app)
