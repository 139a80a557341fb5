"""Environment commands: ``trajforge envs`` lists them, ``trajforge tool`` calls one tool directly."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.json import JSON
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from trajforge.cli.common import JsonOption, console, err_console, print_json
from trajforge.envs import (
    ERROR_PREFIX,
    TAU2_PREFIX,
    USER_ENV_KINDS,
    EnvSource,
    ToolEnv,
    env_names,
    get_env,
)
from trajforge.errors import ConfigError
from trajforge.registry import did_you_mean
from trajforge.schema import Task

EnvSpec = Annotated[
    str | None,
    typer.Option(
        "--env",
        help="Show this environment's tools with their JSON schemas: a name `trajforge envs` "
        "lists, module:factory (from the Python path or the current directory), "
        "file.py:factory or an env file (env.yaml).",
    ),
]


def envs(env: EnvSpec = None, json_output: JsonOption = False) -> None:
    """List the environments known by name (built-in, and tau2-bench's domains where the tau2
    extra is installed) with their descriptions and tools, or show one in full."""
    if env is not None:
        _show_env(env, json_output)
        return
    rows: list[dict[str, Any]] = []
    for name in env_names():
        try:
            entry = get_env(name)
            rows.append(
                {
                    "name": name,
                    "source": entry.source.value,
                    "description": entry.description,
                    "tools": entry.tool_names(),
                }
            )
        except Exception as exc:
            source = EnvSource.TAU2 if name.startswith(TAU2_PREFIX) else EnvSource.BUILTIN
            rows.append(
                {
                    "name": name,
                    "source": source.value,
                    "description": f"unavailable: {exc}",
                    "tools": [],
                }
            )
    if json_output:
        print_json(rows)
        return
    table = Table(title="environments")
    table.add_column("name", style="bold")
    table.add_column("source")
    table.add_column("description")
    table.add_column("tools")
    for row in rows:
        table.add_row(row["name"], row["source"], row["description"], ", ".join(row["tools"]))
    console.print(table)
    console.print(f"[dim]or your own: {escape('; '.join(USER_ENV_KINDS))}[/dim]")


def _show_env(spec: str, json_output: bool) -> None:
    """One environment's description and, for each tool, its description and parameter schema."""
    entry = get_env(spec)
    tools = [t.to_openai() for t in entry.tool_specs()]
    if json_output:
        print_json({"name": entry.name, "description": entry.description, "tools": tools})
        return
    console.print(f"[bold]{escape(entry.name)}[/bold]  {escape(entry.description)}")
    if not tools:
        console.print("[dim]no tools[/dim]")
    for tool in tools:
        function = tool["function"]
        console.print(
            Panel(
                Group(
                    Text(function.get("description") or "(no description)"),
                    JSON.from_data(function.get("parameters", {}), indent=2),
                ),
                title=f"[bold]{escape(function['name'])}[/bold]",
                title_align="left",
            )
        )


def call_tool(
    env: Annotated[
        str,
        typer.Argument(
            help="Environment: a name `trajforge envs` lists, module:factory, file.py:factory "
            "or an env file (env.yaml)."
        ),
    ],
    tool: Annotated[str, typer.Argument(help="The tool to call.")],
    args: Annotated[
        str,
        typer.Option("--args", help='Arguments as a JSON object, e.g. \'{"expression": "2+2"}\'.'),
    ] = "{}",
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of the task the episode is set up with.")
    ] = 0,
    show_task: Annotated[
        bool, typer.Option("--show-task", help="Print the task prompt first.")
    ] = False,
) -> None:
    """Call one tool of an environment directly and print its result (or its error)."""
    try:
        arguments = json.loads(args)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--args: invalid JSON: {exc.msg} (column {exc.colno})") from None
    entry = get_env(env)
    instance = entry.make()
    if not isinstance(instance, ToolEnv):
        raise ConfigError(
            f"env {env!r} is a {type(instance).__name__}, not a ToolEnv; it has no tools to call"
        )
    if tool not in instance.tool_map:
        asyncio.run(instance.close())
        raise ConfigError(
            f"tool {tool!r}: not a tool of {env}{did_you_mean(tool, list(instance.tool_map))}; "
            f"its tools: {', '.join(instance.tool_map)}"
        )
    try:
        task = entry.tasks(1, seed=seed)[0]
    except (ConfigError, IndexError):
        task = Task(id="cli", prompt="")

    async def run() -> str:
        try:
            await instance.reset(task)
            return await instance.call_tool(tool, arguments)
        finally:
            await instance.close()

    if show_task:
        err_console.print(f"[dim]task {task.id}:[/dim]\n{task.prompt}")
    result = asyncio.run(run())
    typer.echo(result)
    if result.startswith(ERROR_PREFIX):
        raise SystemExit(1)


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command("envs")(envs)
    app.command("tool")(call_tool)
