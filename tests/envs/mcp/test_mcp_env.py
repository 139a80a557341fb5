"""MCPEnv against a real (tiny) MCP server that errs, crashes, hangs and refuses to start."""

from __future__ import annotations

import asyncio
import time

import psutil
import pytest
from flaky_env import calls_task, flaky_env, flaky_spec

from trajforge.envs.base import StepResult
from trajforge.envs.mcp import MCPEnv, Scope, ToolSelection, close_shared
from trajforge.envs.tool_env import EnvError
from trajforge.schema import Message, Role, Task, ToolCall

TASK = Task(id="t", prompt="Use the tools.")


def children() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.is_running()]


async def no_children_within(seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while children() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert children() == []


async def gone(pid: int, within: float = 5.0) -> bool:
    """True once ``pid`` has exited (a zombie waiting to be reaped counts as exited)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        await asyncio.sleep(0.05)
    return False


async def step_call(env: MCPEnv, name: str, **arguments: object) -> StepResult:
    return await env.step(
        Message(
            role=Role.ASSISTANT,
            content="",
            tool_calls=[ToolCall(id=f"c-{name}", name=name, arguments=dict(arguments))],
        )
    )


async def call(env: MCPEnv, name: str, **arguments: object) -> str:
    return (await step_call(env, name, **arguments)).observations[0].content


@pytest.fixture(autouse=True)
async def _no_leaks():
    yield
    await close_shared()
    await no_children_within()


async def test_tools_results_and_errors_become_tool_messages() -> None:
    env = flaky_env(flaky_spec(), max_turns=20)
    try:
        await env.reset(TASK)
        assert {"echo", "fail", "crash", "hang", "picture"} <= {t.name for t in env.tools}
        echo = next(t for t in env.tools if t.name == "echo")
        assert echo.function.parameters["required"] == ["text"]
        assert await call(env, "echo", text="hello") == "hello"
        assert await call(env, "fail", reason="no luck") == (
            "Error: Error executing tool fail: no luck"
        )
        assert await call(env, "echo", text=5) == (
            "Error: invalid arguments for tool 'echo': argument 'text': 5 is not of type 'string'"
        )
        assert await call(env, "echo") == (
            "Error: invalid arguments for tool 'echo': missing required argument 'text'"
        )
        assert await call(env, "picture") == "a red dot\n[image: image/png, 8 bytes]"
        assert (await call(env, "nope")).startswith("Error: unknown tool 'nope'")
    finally:
        await env.close()


async def test_a_crash_is_a_tool_error_and_the_next_call_restarts_the_server() -> None:
    env = flaky_env(flaky_spec(), max_turns=20)
    try:
        await env.reset(TASK)
        before = await step_call(env, "pid")
        first = before.observations[0].content
        assert before.infra_fault is None
        step = await step_call(env, "crash")
        crashed = step.observations[0].content
        assert crashed.startswith("Error: MCP server 'flaky'")
        assert "is not running: the connection closed" in crashed
        # Not the tool's own failure but its server's: the step says so, for the episode.
        assert step.infra_fault == f"tool 'crash': {crashed.removeprefix('Error: ')}"
        assert await gone(int(first))
        second = await call(env, "pid")
        assert second.isdigit() and second != first
    finally:
        await env.close()


async def test_a_hanging_call_times_out_and_the_server_keeps_serving() -> None:
    env = flaky_env(flaky_spec(call_timeout_s=0.5), max_turns=20)
    try:
        await env.reset(TASK)
        started = time.monotonic()
        assert await call(env, "hang") == "Error: tool 'hang' timed out after 0.5 s"
        assert time.monotonic() - started < 3
        assert await call(env, "echo", text="still here") == "still here"
    finally:
        await env.close()


async def test_a_server_that_never_answers_fails_reset_within_the_startup_timeout() -> None:
    env = flaky_env(flaky_spec("--hang-on-start", startup_timeout_s=1.0))
    started = time.monotonic()
    with pytest.raises(EnvError, match=r"MCP server 'flaky' .* did not start within 1 s"):
        await env.reset(TASK)
    assert time.monotonic() - started < 8
    await env.close()
    await no_children_within()


async def test_a_server_that_exits_at_start_reports_its_stderr() -> None:
    env = flaky_env(flaky_spec("--exit-on-start"))
    with pytest.raises(EnvError, match=r"failed to start.*refusing to start"):
        await env.reset(TASK)
    await env.close()


async def test_close_stops_the_server_and_its_children() -> None:
    env = flaky_env(flaky_spec(), max_turns=20)
    await env.reset(TASK)
    server = int(await call(env, "pid"))
    child = int(await call(env, "spawn"))
    assert psutil.pid_exists(child)
    await env.close()
    assert await gone(server, within=0.5)
    assert await gone(child, within=0.5)


async def test_each_episode_gets_its_own_server_and_shared_ones_share() -> None:
    own = [flaky_env(flaky_spec(), max_turns=20) for _ in range(2)]
    shared = [flaky_env(flaky_spec(scope=Scope.SHARED), max_turns=20) for _ in range(2)]
    try:
        for env in own + shared:
            await env.reset(TASK)
        assert [await call(env, "count") for env in own] == ["1", "1"]
        assert [await call(env, "count") for env in shared] == ["1", "2"]
        pids = [await call(env, "pid") for env in own + shared]
        assert pids[0] != pids[1] and pids[2] == pids[3]
    finally:
        for env in own + shared:
            await env.close()


async def test_tools_can_be_filtered_and_renamed() -> None:
    spec = flaky_spec(tools=ToolSelection(include=["echo", "pid"], rename={"echo": "say"}))
    env = flaky_env(spec)
    try:
        await env.reset(TASK)
        assert [t.name for t in env.tools] == ["say", "pid"]
        assert await call(env, "say", text="hi") == "hi"
    finally:
        await env.close()


async def test_a_cancelled_episode_leaves_no_server() -> None:
    env = flaky_env(flaky_spec(), tasks=[calls_task("x", ("hang", {}))])

    async def episode() -> None:
        try:
            await env.reset(TASK)
            await call(env, "hang")
        finally:
            await env.close()

    running = asyncio.create_task(episode())
    while not children():
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
