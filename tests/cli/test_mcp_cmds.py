"""``trajforge mcp serve``: the MCP SDK's own client lists and calls an environment's tools."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

import trajforge
from local_servers import free_port, listening
from trajforge.envs.mcp import MCPEnv, MCPServerSpec
from trajforge.schema import Message, Role, Task, ToolCall

TRAJFORGE = str(Path(sys.executable).with_name("trajforge"))
# The command runs this checkout's source, whatever the installed package points at.
SOURCE_ENV = {"PYTHONPATH": str(Path(trajforge.__file__).parents[1])}


@contextlib.contextmanager
def http_server(env: str) -> Iterator[str]:
    """``trajforge mcp serve ENV --http PORT`` running; yields its URL; stopped with Ctrl-C."""
    port = free_port()
    argv = [TRAJFORGE, "mcp", "serve", env, "--http", str(port)]
    with listening(argv, port, {**os.environ, **SOURCE_ENV}, "trajforge mcp serve") as process:
        yield f"http://127.0.0.1:{port}/mcp"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0


async def check_calculator(session: ClientSession) -> None:
    await session.initialize()
    tools = (await session.list_tools()).tools
    assert [t.name for t in tools] == ["calculator"]
    assert tools[0].input_schema["required"] == ["expression"]
    result = await session.call_tool("calculator", {"expression": "6 * 7"})
    assert (result.is_error, result.content[0].text) == (False, "42")
    failed = await session.call_tool("calculator", {"expression": "1 / 0"})
    assert (failed.is_error, failed.content[0].text) == (True, "Error: division by zero")
    invalid = await session.call_tool("calculator", {"expr": "1"})
    assert invalid.is_error
    assert invalid.content[0].text == (
        "Error: invalid arguments for tool 'calculator': missing required argument "
        "'expression'; unexpected argument 'expr'"
    )
    with pytest.raises(MCPError, match="Unknown tool: nope"):
        await session.call_tool("nope", {})


async def test_the_sdk_client_calls_the_calculator_over_stdio() -> None:
    server = StdioServerParameters(
        command=TRAJFORGE, args=["mcp", "serve", "calculator"], env=SOURCE_ENV
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await check_calculator(session)


async def test_a_user_env_file_factory_is_served_too() -> None:
    example = Path(__file__).parents[2] / "examples" / "custom_env" / "my_env.py"
    server = StdioServerParameters(
        command=TRAJFORGE, args=["mcp", "serve", f"{example}:make_env"], env=SOURCE_ENV
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert [t.name for t in (await session.list_tools()).tools] == ["to_fahrenheit"]
        result = await session.call_tool("to_fahrenheit", {"celsius": 100})
        assert (result.is_error, result.content[0].text) == (False, "212")


async def test_the_sdk_client_calls_the_calculator_over_http() -> None:
    with http_server("calculator") as url:
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as session,
        ):
            await check_calculator(session)


async def test_a_trajforge_env_can_take_its_tools_from_a_served_env_over_http() -> None:
    with http_server("calculator") as url:
        env = MCPEnv([MCPServerSpec(name="calc", url=url)], name="remote-calculator")
        try:
            await env.reset(Task(id="t", prompt="6 * 7?"))
            step = await env.step(
                Message(
                    role=Role.ASSISTANT,
                    content="",
                    tool_calls=[
                        ToolCall(id="a", name="calculator", arguments={"expression": "6 * 7"}),
                        ToolCall(id="b", name="calculator", arguments={"expression": "1 / 0"}),
                    ],
                )
            )
        finally:
            await env.close()
    assert [o.content for o in step.observations] == ["42", "Error: division by zero"]


def test_serving_an_unknown_env_is_one_line_error() -> None:
    done = subprocess.run(
        [TRAJFORGE, "mcp", "serve", "nosuchenv"],
        env={**os.environ, **SOURCE_ENV},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip().startswith("error: unknown env 'nosuchenv'")
