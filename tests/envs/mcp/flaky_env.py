"""Environments over ``flaky_server.py`` whose scripted expert makes the calls its task lists."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from trajforge.envs.mcp import MCPEnv, MCPServerSpec, Scope
from trajforge.formats.tool_calls import format_tool_call
from trajforge.schema import Message, Role, Task

SERVER = Path(__file__).with_name("flaky_server.py")


def flaky_spec(*flags: str, scope: Scope = Scope.EPISODE, **options: Any) -> MCPServerSpec:
    return MCPServerSpec(
        name="flaky", command=sys.executable, args=[str(SERVER), *flags], scope=scope, **options
    )


def scripted(task: Task, messages: list[Message]) -> str | None:
    """Each call of ``task.data["calls"]`` in turn, then ``done``."""
    made = sum(1 for m in messages if m.role is Role.TOOL)
    calls: list[list[Any]] = task.data["calls"]
    if made < len(calls):
        name, arguments = calls[made]
        return format_tool_call(name, arguments)
    return "done"


def calls_task(task_id: str, *calls: tuple[str, dict[str, Any]]) -> Task:
    return Task(id=task_id, prompt="Make the calls.", data={"calls": [list(c) for c in calls]})


def flaky_env(spec: MCPServerSpec, tasks: list[Task] | None = None, **options: Any) -> MCPEnv:
    return MCPEnv([spec], tasks=tasks, expert=scripted, verifier=lambda evidence: 1.0, **options)


def hanging_env() -> MCPEnv:
    """Episodes whose server starts a child, then hangs in a call (the Ctrl-C test runs it in
    ``trajforge rollout``); the servers carry ``FLAKY_MARK=$MARK_SERVERS`` in their environment."""
    spec = flaky_spec(env={"FLAKY_MARK": os.environ["MARK_SERVERS"]})
    tasks = [calls_task(f"hang-{i}", ("spawn", {}), ("hang", {})) for i in range(4)]
    return flaky_env(spec, tasks=tasks, max_turns=4, tool_timeout=600)
