"""ScriptedPolicy: deterministic, token-exact replies usable for SFT."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from trajforge.policy.base import SamplingParams
from trajforge.policy.check import check_trajectory
from trajforge.policy.scripted import ScriptedPolicy, ScriptError
from trajforge.schema import Message, Role, Task, ToolSpec, Trajectory

EOS = 2


def test_reply_fn_sees_task_and_conversation(
    smol_tokenizer: Any, tools: list[ToolSpec], opening: list[Message]
) -> None:
    seen: list[tuple[str | None, int]] = []

    def expert(task: Task | None, messages: list[Message]) -> str:
        seen.append((task.id if task else None, len(messages)))
        if messages[-1].role is Role.TOOL:
            return f"The answer is {messages[-1].content}."
        a, b = task.data["a"] if task else 0, task.data["b"] if task else 0
        return f'<tool_call>{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>'

    task = Task(id="sum-1", prompt="1+2", data={"a": 1, "b": 2})
    policy = ScriptedPolicy(expert, smol_tokenizer, name="expert")

    async def episode() -> list[Message]:
        session = policy.start_session(opening, tools, task=task)
        call = await policy.respond(session, SamplingParams(), turn=0)
        assert call.tool_calls[0].arguments == {"a": 1, "b": 2}
        session.add_observations(
            [Message(role=Role.TOOL, content="3", tool_call_id=call.tool_calls[0].id, name="add")]
        )
        final = await policy.respond(session, SamplingParams(), turn=1)
        assert final.content == "The answer is 3." and not final.tool_calls
        return session.messages

    messages = asyncio.run(episode())
    assert seen == [("sum-1", 2), ("sum-1", 4)]
    for m in messages:
        if m.role is Role.ASSISTANT:
            ids = m.token_ids or []
            assert ids[-1] == EOS and m.logprobs == [0.0] * len(ids)
            assert ids[:-1] == policy.renderer.encode(policy.renderer.completion_text(ids))
    traj = Trajectory(task=task, tools=tools, messages=messages, model="expert")
    assert check_trajectory(traj, smol_tokenizer) == []


def test_fixed_replies_run_out_with_a_clear_error(
    smol_tokenizer: Any, opening: list[Message]
) -> None:
    policy = ScriptedPolicy(["Only one."], smol_tokenizer)

    async def episode() -> None:
        session = policy.start_session(opening, [])
        await policy.respond(session, SamplingParams(), turn=0)
        session.add_observations([Message(role=Role.USER, content="More?")])
        await policy.respond(session, SamplingParams(), turn=1)

    with pytest.raises(ScriptError, match="no scripted reply for turn 1"):
        asyncio.run(episode())


def test_generate_without_a_session(smol_tokenizer: Any) -> None:
    policy = ScriptedPolicy(lambda task, messages: f"{len(messages)} messages", smol_tokenizer)
    completion = asyncio.run(policy.generate([1, 2], SamplingParams()))
    assert completion.text == "0 messages"
    assert completion.token_ids == [*policy.renderer.encode("0 messages"), EOS]
    assert completion.logprobs == [0.0] * len(completion.token_ids)
