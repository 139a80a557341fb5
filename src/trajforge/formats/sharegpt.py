"""Trajectories to and from ShareGPT records, as LLaMA-Factory and most SFT dumps write them.

``{"conversations": [{"from": ..., "value": ...}], "system": "...", "tools": "<JSON list>"}``.
Role names are mapped explicitly (``ROLES``); any other is refused, naming the turn. A tool call
is a ``function_call`` turn whose value is the call's JSON (``{"name", "arguments"}``, or a list
of them for parallel calls); its results follow as one ``observation`` turn (a JSON list when
there were several calls).

ShareGPT has no tool-call ids: they are numbered ``call_<turn>_<k>`` on the way in. An assistant
turn that both writes text and calls tools keeps only its calls (a ``function_call`` turn has no
text). Token ids, logprobs, rewards and scores are not part of the format.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from trajforge.errors import DataError
from trajforge.formats.images import refuse_images_in
from trajforge.formats.jsonl import format_validation_error
from trajforge.schema import Message, Role, Task, ToolCall, ToolSpec, Trajectory

ROLES: dict[str, Role] = {
    "system": Role.SYSTEM,
    "human": Role.USER,
    "user": Role.USER,
    "gpt": Role.ASSISTANT,
    "assistant": Role.ASSISTANT,
    "chatgpt": Role.ASSISTANT,
    "bing": Role.ASSISTANT,
    "bard": Role.ASSISTANT,
    "function_call": Role.ASSISTANT,
    "observation": Role.TOOL,
    "tool": Role.TOOL,
}
"""Every ``from`` value read, and the role it is."""


_SPEAKER = {Role.USER: "human", Role.ASSISTANT: "gpt", Role.SYSTEM: "system"}
"""Who speaks a turn; a system message after the first turn (OpenAI takes them anywhere) is a
``system`` turn."""


def to_sharegpt(traj: Trajectory) -> dict[str, Any]:
    """The trajectory as a ShareGPT record (the system prompt in ``system``; text only: images
    are refused)."""
    refuse_images_in(traj, "ShareGPT")
    turns: list[dict[str, str]] = []
    messages = list(traj.messages)
    out: dict[str, Any] = {}
    if messages and messages[0].role is Role.SYSTEM:
        out["system"] = messages.pop(0).text
    pending: list[str] = []
    for message in messages:
        if message.role is not Role.TOOL and pending:
            turns.append(_observation(pending))
            pending = []
        if message.role is Role.TOOL:
            pending.append(message.text)
        elif message.role is Role.ASSISTANT and message.tool_calls:
            calls = [{"name": c.name, "arguments": c.arguments} for c in message.tool_calls]
            value = calls[0] if len(calls) == 1 else calls
            turns.append({"from": "function_call", "value": json.dumps(value, ensure_ascii=False)})
        else:
            turns.append({"from": _SPEAKER[message.role], "value": message.text})
    if pending:
        turns.append(_observation(pending))
    out["conversations"] = turns
    if traj.tools:
        out["tools"] = json.dumps([t.function.model_dump() for t in traj.tools], ensure_ascii=False)
    return out


def _observation(results: list[str]) -> dict[str, str]:
    value = results[0] if len(results) == 1 else json.dumps(results, ensure_ascii=False)
    return {"from": "observation", "value": value}


def from_sharegpt(record: dict[str, Any], *, task_id: str, **fields: Any) -> Trajectory:
    """A trajectory from a ShareGPT record; ``DataError`` names the bad field
    (``conversations.3.from``)."""
    turns = record.get("conversations")
    if not isinstance(turns, list):
        raise DataError("conversations: expected a list of {from, value} turns")
    messages: list[Message] = []
    if record.get("system") is not None:
        messages.append(Message(role=Role.SYSTEM, content=str(record["system"])))
    open_calls: list[str] = []
    for i, turn in enumerate(turns):
        where = f"conversations.{i}"
        if not isinstance(turn, dict):
            raise DataError(f"{where}: expected {{'from': ..., 'value': ...}}")
        name, value = turn.get("from"), turn.get("value")
        role = ROLES.get(str(name))
        if role is None:
            raise DataError(f"{where}.from: unknown role {name!r}; known: {', '.join(ROLES)}")
        if not isinstance(value, str):
            raise DataError(f"{where}.value: expected a string, got {type(value).__name__}")
        if name == "function_call":
            calls = _calls(value, f"call_{sum(m.role is Role.ASSISTANT for m in messages)}", where)
            messages.append(Message(role=Role.ASSISTANT, tool_calls=calls))
            open_calls = [c.id for c in calls]
        elif role is Role.TOOL:
            results = _results(value, len(open_calls), where)
            messages += [Message(role=Role.TOOL, content=r, tool_call_id=c)
                         for r, c in zip(results, open_calls, strict=True)]  # fmt: skip
            open_calls = []
        else:
            messages.append(Message(role=role, content=value))
    task = Task(id=task_id, prompt=next((m.text for m in messages if m.role is Role.USER), ""))
    try:
        tools = [ToolSpec(function=f) for f in _tools(record.get("tools"))]
        return Trajectory(task=task, tools=tools, messages=messages, **fields)
    except ValidationError as exc:
        raise DataError(format_validation_error(exc, "record")) from None


def _calls(value: str, prefix: str, where: str) -> list[ToolCall]:
    try:
        payload = json.loads(value)
    except json.JSONDecodeError as exc:
        raise DataError(f"{where}.value: a function_call must be JSON ({exc.msg})") from None
    calls = payload if isinstance(payload, list) else [payload]
    out = []
    for k, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise DataError(f'{where}.value: each call needs a "name" string')
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except json.JSONDecodeError as exc:
                raise DataError(f"{where}.value.arguments: not JSON ({exc.msg})") from None
        if not isinstance(arguments, dict):
            raise DataError(f"{where}.value.arguments: must be a JSON object")
        out.append(ToolCall(id=f"{prefix}_{k}", name=call["name"], arguments=arguments))
    return out


def _results(value: str, calls: int, where: str) -> list[str]:
    if calls == 0:
        raise DataError(f"{where}: an observation must follow a function_call")
    if calls == 1:
        return [value]
    try:
        results = json.loads(value)
    except json.JSONDecodeError:
        results = None
    if not isinstance(results, list) or len(results) != calls:
        raise DataError(
            f"{where}.value: {calls} parallel calls need a JSON list of {calls} results"
        )
    return [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in results]


def _tools(raw: Any) -> list[Any]:
    if raw in (None, "", []):
        return []
    try:
        tools = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as exc:
        raise DataError(f"tools: not JSON ({exc.msg})") from None
    if not isinstance(tools, list):
        raise DataError("tools: expected a JSON list of function specs")
    return [t.get("function", t) if isinstance(t, dict) else t for t in tools]
