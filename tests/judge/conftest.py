from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from trajforge.schema import Message, Outcome, Role, Task, ToolCall, Trajectory


def build_trajectory(
    answer: str | None,
    *,
    gold: Any = 42,
    calls: list[tuple[str, dict[str, Any], str]] | None = None,
    env: str = "calculator",
    traj_id: str | None = None,
    reward: float | None = None,
) -> Trajectory:
    """A hand-built episode: one tool call per turn (name, args, result), then ``answer``."""
    messages = [Message(role=Role.USER, content="question")]
    for turn, (name, args, result) in enumerate(calls or []):
        call = ToolCall(id=f"call_{turn}_0", name=name, arguments=args)
        messages.append(Message(role=Role.ASSISTANT, tool_calls=[call]))
        messages.append(Message(role=Role.TOOL, content=result, tool_call_id=call.id, name=name))
    if answer is not None:
        messages.append(Message(role=Role.ASSISTANT, content=answer))
    kwargs: dict[str, Any] = {"id": traj_id} if traj_id else {}
    return Trajectory(
        task=Task(id="t", prompt="question", answer=gold),
        env=env,
        messages=messages,
        outcome=Outcome(reward=reward),
        **kwargs,
    )


@pytest.fixture
def make_traj() -> Callable[..., Trajectory]:
    return build_trajectory
