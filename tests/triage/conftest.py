from __future__ import annotations

from typing import Any

from trajforge.schema import (
    FunctionSpec,
    Message,
    Outcome,
    OutcomeStatus,
    Role,
    Task,
    ToolCall,
    ToolSpec,
    Trajectory,
)

CALC = ToolSpec(
    function=FunctionSpec(
        name="calculator",
        parameters={
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    )
)

Call = tuple[str, dict[str, Any], str]


def episode(
    calls: list[Call | ToolCall],
    answer: str | None = "The answer is 42",
    *,
    reward: float | None = 1.0,
    status: OutcomeStatus = OutcomeStatus.OK,
    reason: str | None = None,
    gold: Any = 42,
    tools: list[ToolSpec] | None = None,
    run_id: str | None = "r1",
) -> Trajectory:
    """user, then one assistant call per turn and its result, then ``answer``: messages[1] is
    the first call, messages[1 + 2k] the k-th (a malformed ``ToolCall`` gets an error result)."""
    messages = [Message(role=Role.USER, content="what is 6*7?")]
    for turn, item in enumerate(calls):
        if isinstance(item, ToolCall):
            call, result = item, "Error: could not parse the tool call"
        else:
            name, args, result = item
            call = ToolCall(id=f"call_{turn}", name=name, arguments=args)
        messages.append(Message(role=Role.ASSISTANT, tool_calls=[call]))
        messages.append(Message(role=Role.TOOL, content=result, tool_call_id=call.id))
    if answer is not None:
        messages.append(Message(role=Role.ASSISTANT, content=answer))
    return Trajectory(
        task=Task(id="t1", prompt="what is 6*7?", answer=gold),
        env="calculator",
        run_id=run_id,
        tools=[CALC] if tools is None else tools,
        messages=messages,
        outcome=Outcome(status=status, reward=reward, reason=reason),
    )


GOOD: Call = ("calculator", {"expression": "6*7"}, "42")
