"""Trajectories in the dataset formats TRL trains on, conversational (OpenAI-shaped messages):

- prompt/completion (``SFTTrainer`` with the loss on the completion only): ``prompt`` is every
  message before the last assistant turn, ``completion`` that turn, ``tools`` the tool specs;
- preference (``DPOTrainer``): ``prompt`` the messages two trajectories share from the start,
  ``chosen`` and ``rejected`` the rest of each.

The conversational SFT format itself (``messages``, ``tools``) is the ``openai`` format.
"""

from __future__ import annotations

from typing import Any

from trajforge.errors import DataError
from trajforge.formats.openai_chat import from_openai_chat, message_to_openai
from trajforge.schema import Message, Role, Trajectory


def _tools(traj: Trajectory) -> list[dict[str, Any]]:
    return [tool.to_openai() for tool in traj.tools]


def to_prompt_completion(traj: Trajectory) -> dict[str, Any]:
    """``{prompt, completion, tools}``: the last assistant turn is the completion."""
    last = max((i for i, m in enumerate(traj.messages) if m.role is Role.ASSISTANT), default=None)
    if last is None:
        raise DataError(f"trajectory {traj.id}: no assistant turn to be the completion")
    return {
        "prompt": [message_to_openai(m) for m in traj.messages[:last]],
        "completion": [message_to_openai(traj.messages[last])],
        "tools": _tools(traj),
    }


def from_prompt_completion(record: dict[str, Any], **fields: Any) -> Trajectory:
    """The conversation ``prompt + completion`` as a trajectory."""
    prompt, completion = record.get("prompt"), record.get("completion")
    if not isinstance(prompt, list) or not isinstance(completion, list):
        raise DataError("prompt, completion: expected lists of chat messages")
    data = {"messages": [*prompt, *completion], "tools": record.get("tools") or []}
    return from_openai_chat(data, **fields)


def _same(a: Message, b: Message) -> bool:
    return (a.role, a.content, a.tool_calls, a.tool_call_id) == (
        b.role, b.content, b.tool_calls, b.tool_call_id,
    )  # fmt: skip


def to_preference(chosen: Trajectory, rejected: Trajectory) -> dict[str, Any]:
    """``{prompt, chosen, rejected, tools}`` of two trajectories of one task: the prompt is
    the messages they share from the start, up to the first turn where they differ."""
    shared = 0
    for a, b in zip(chosen.messages, rejected.messages, strict=False):
        if a.role is Role.ASSISTANT or not _same(a, b):
            break
        shared += 1
    if shared == 0:
        raise DataError(f"trajectories {chosen.id} and {rejected.id} share no prompt")
    return {
        "prompt": [message_to_openai(m) for m in chosen.messages[:shared]],
        "chosen": [message_to_openai(m) for m in chosen.messages[shared:]],
        "rejected": [message_to_openai(m) for m in rejected.messages[shared:]],
        "tools": _tools(chosen),
    }
