"""Trajectories to and from ShareGPT records, as LLaMA-Factory and most SFT dumps write them.

``{"conversations": [{"from": ..., "value": ...}], "system": "...", "tools": "<JSON list>"}``.
Role names are mapped explicitly (``ROLES``); any other is refused, naming the turn. A tool call
is a ``function_call`` turn whose value is the call's JSON (``{"name", "arguments"}``, or a list
of them for parallel calls); its results follow as one ``observation`` turn (a JSON list when
there were several calls).

Images follow LLaMA-Factory's multimodal ShareGPT: an ``<image>`` token in a turn's value where
the image stood, and the record's ``images`` list holding them in the order their tokens appear,
each as ``{"bytes", "path"}`` (as trl-vision; paths are not read). A record without ``images``
keeps any ``<image>`` text as text. The ``system`` field is text only: an image there is refused.

ShareGPT has no tool-call ids: they are numbered ``call_<turn>_<k>`` on the way in. An assistant
turn that both writes text and calls tools keeps only its calls (a ``function_call`` turn has no
text). Token ids, logprobs, rewards and scores are not part of the format.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from trajforge.errors import DataError
from trajforge.formats.images import image_column_entry, image_from_column
from trajforge.formats.imported import imported_trajectory
from trajforge.schema import (
    Content,
    ImagePart,
    Message,
    Role,
    TextPart,
    ToolCall,
    ToolSpec,
    Trajectory,
)

IMAGE_TOKEN = "<image>"
"""Where an image stood in a turn's value (LLaMA-Factory's placeholder)."""

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
    """The trajectory as a ShareGPT record (the system prompt in ``system``, images as
    ``<image>`` tokens and the ``images`` list)."""
    turns: list[dict[str, str]] = []
    messages = list(traj.messages)
    out: dict[str, Any] = {}
    if messages and messages[0].role is Role.SYSTEM:
        if messages[0].images:
            raise DataError(f"trajectory {traj.id}: messages[0]: the ShareGPT format's system "
                            "field holds text only and this message has an image part")  # fmt: skip
        out["system"] = messages.pop(0).text
    images: list[dict[str, Any]] = []
    turn_value = _valuer(traj, images)
    pending: list[str] = []
    for message in messages:
        if message.role is not Role.TOOL and pending:
            turns.append(_observation(pending))
            pending = []
        if message.role is Role.TOOL:
            pending.append(turn_value(message))
        elif message.role is Role.ASSISTANT and message.tool_calls:
            calls = [{"name": c.name, "arguments": c.arguments} for c in message.tool_calls]
            value = calls[0] if len(calls) == 1 else calls
            turns.append({"from": "function_call", "value": json.dumps(value, ensure_ascii=False)})
        else:
            turns.append({"from": _SPEAKER[message.role], "value": turn_value(message)})
    if pending:
        turns.append(_observation(pending))
    out["conversations"] = turns
    if images:
        out["images"] = images
    if traj.tools:
        out["tools"] = json.dumps([t.function.model_dump() for t in traj.tools], ensure_ascii=False)
    return out


def _valuer(traj: Trajectory, images: list[dict[str, Any]]) -> Callable[[Message], str]:
    """How a message's content is written as a turn's value, its images added to ``images``."""
    with_images = any(m.images for m in traj.messages)

    def value(message: Message) -> str:
        if not with_images:
            return message.text
        if IMAGE_TOKEN in message.text:
            at = traj.messages.index(message)
            raise DataError(f"trajectory {traj.id}: messages[{at}]: its text holds {IMAGE_TOKEN} "
                            "and the trajectory has images; ShareGPT could not tell them apart")  # fmt: skip
        if isinstance(message.content, str):
            return message.content
        images.extend(image_column_entry(p) for p in message.content if isinstance(p, ImagePart))
        return "".join(p.text if isinstance(p, TextPart) else IMAGE_TOKEN for p in message.content)

    return value


def _observation(results: list[str]) -> dict[str, str]:
    value = results[0] if len(results) == 1 else json.dumps(results, ensure_ascii=False)
    return {"from": "observation", "value": value}


def from_sharegpt(record: dict[str, Any], *, task_id: str, **fields: Any) -> Trajectory:
    """A trajectory from a ShareGPT record; ``DataError`` names the bad field
    (``conversations.3.from``)."""
    turns = record.get("conversations")
    if not isinstance(turns, list):
        raise DataError("conversations: expected a list of {from, value} turns")
    raw_images = record.get("images") or []
    if not isinstance(raw_images, list):
        raise DataError("images: expected a list of {bytes, path} images")
    images = iter(enumerate(raw_images))
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
            messages += [Message(role=Role.TOOL, content=_content(r, raw_images, images, where),
                                 tool_call_id=c)
                         for r, c in zip(results, open_calls, strict=True)]  # fmt: skip
            open_calls = []
        else:
            messages.append(Message(role=role, content=_content(value, raw_images, images, where)))
    left = sum(1 for _ in images)
    if left:
        raise DataError(f"images: {left} image(s) have no {IMAGE_TOKEN} token in the turns")
    return imported_trajectory(
        task_id,
        messages,
        lambda: [ToolSpec(function=f) for f in _tools(record.get("tools"))],
        "record",
        **fields,
    )


def _content(value: str, raw_images: list[Any], images: Any, where: str) -> Content:
    """A turn's value as content: with ``<image>`` tokens taking the record's images in turn
    when it has any, else the text as it is."""
    if not raw_images or IMAGE_TOKEN not in value:
        return value
    parts: list[TextPart | ImagePart] = []
    for k, text in enumerate(value.split(IMAGE_TOKEN)):
        if k:
            taken = next(images, None)
            if taken is None:
                raise DataError(f"{where}.value: an {IMAGE_TOKEN} token with no image left")
            parts.append(image_from_column(taken[1], f"images.{taken[0]}"))
        if text:
            parts.append(TextPart(text=text))
    return parts


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
