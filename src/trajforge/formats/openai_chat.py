"""Trajectories to and from the OpenAI chat-completions shape most datasets use.

``{"messages": [...], "tools": [...]}`` where an assistant's ``tool_calls`` are
``{"id", "type": "function", "function": {"name", "arguments": "<JSON string>"}}``. Token ids,
logprobs and rewards have no place in that format and are dropped on the way out. Images are
``image_url`` parts holding base64 data URLs, both ways (remote URLs are never fetched).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from trajforge.errors import DataError
from trajforge.formats.images import content_to_openai, image_url_part
from trajforge.formats.imported import imported_trajectory, text_or_parts
from trajforge.formats.jsonl import format_validation_error
from trajforge.schema import (
    Content,
    ImagePart,
    Message,
    Task,
    TextPart,
    ToolCall,
    ToolSpec,
    Trajectory,
)

# Text content parts as chat completions (``text``) and the Responses API (``input_text``,
# ``output_text``) write them.
TEXT_PARTS = ("text", "input_text", "output_text")


def to_openai_chat(traj: Trajectory) -> dict[str, Any]:
    """The trajectory's conversation and tools as an OpenAI chat-completions request body."""
    out: dict[str, Any] = {"messages": [message_to_openai(m) for m in traj.messages]}
    if traj.tools:
        out["tools"] = [tool.to_openai() for tool in traj.tools]
    return out


def from_openai_chat(
    data: dict[str, Any], *, task: Task | None = None, **fields: Any
) -> Trajectory:
    """Build a trajectory from ``{"messages": [...], "tools": [...]}``.

    Args:
        data: The OpenAI-shaped record.
        task: The task; by default one whose prompt is the first user message.
        **fields: Other ``Trajectory`` fields (``run_id``, ``env``, ``outcome``, ...).

    Raises:
        DataError: the record is not a valid conversation; the message names the field.
    """
    raw_messages = data.get("messages")
    if not isinstance(raw_messages, list):
        raise DataError("messages: expected a list of chat messages")
    messages = messages_from_openai(raw_messages)
    return imported_trajectory(
        task if task is not None else str(fields.pop("task_id", "openai-chat")),
        messages,
        lambda: [ToolSpec.model_validate(t) for t in data.get("tools") or []],
        "openai chat record",
        **fields,
    )


def message_to_openai(msg: Message) -> dict[str, Any]:
    """One message in the OpenAI chat shape (tool-call arguments as a JSON string)."""
    out: dict[str, Any] = {"role": msg.role.value, "content": content_to_openai(msg.content)}
    if msg.reasoning is not None:
        out["reasoning_content"] = msg.reasoning
    if msg.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": call.raw
                    if call.parse_error is not None and call.raw is not None
                    else json.dumps(call.arguments, ensure_ascii=False),
                },
            }
            for call in msg.tool_calls
        ]
    if msg.tool_call_id is not None:
        out["tool_call_id"] = msg.tool_call_id
    if msg.name is not None:
        out["name"] = msg.name
    return out


def messages_from_openai(raw_messages: list[Any]) -> list[Message]:
    """OpenAI chat messages as trajforge messages (a ``developer`` message is a system one);
    ``DataError`` names the first bad field as ``messages.<i>.<field>``."""
    return [_message_from_openai(m, i) for i, m in enumerate(raw_messages)]


def _message_from_openai(raw: Any, index: int) -> Message:
    where = f"messages.{index}"
    if not isinstance(raw, dict):
        raise DataError(f"{where}: expected an object, got {type(raw).__name__}")
    role = "system" if raw.get("role") == "developer" else raw.get("role")
    calls = [
        _call_from_openai(c, f"{where}.tool_calls.{k}")
        for k, c in enumerate(raw.get("tool_calls") or [])
    ]
    try:
        return Message(
            role=role,
            content=message_content(raw.get("content"), where),
            reasoning=raw.get("reasoning_content", raw.get("reasoning")),
            tool_calls=calls,
            tool_call_id=raw.get("tool_call_id"),
            name=raw.get("name"),
        )
    except ValidationError as exc:
        raise DataError(format_validation_error(exc, where)) from None


def message_content(content: Any, where: str) -> Content:
    """Message content as trajforge holds it: a string where it is text only (text parts
    joined, as ``content_text``), text and image parts where it has ``image_url`` parts."""
    if not isinstance(content, list):
        return content_text(content, where)
    parts: list[TextPart | ImagePart] = []
    for k, part in enumerate(content):
        if _is_image(part):
            parts.append(image_url_part(part, f"{where}.content.{k}"))
        elif isinstance(part, dict) and part.get("type") in TEXT_PARTS:
            parts.append(TextPart(text=str(part.get("text", ""))))
        else:
            raise DataError(f"{where}.content.{k}: {_unsupported(part, 'text and image_url')}")
    return text_or_parts(parts)


def _is_image(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "image_url"


def content_text(content: Any, where: str) -> str:
    """Message content (a string, or text parts) as one string; ``DataError`` for other parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for k, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") in TEXT_PARTS):
                raise DataError(f"{where}.content.{k}: {_unsupported(part, 'text')}")
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise DataError(f"{where}.content: expected a string or a list of parts")


def _unsupported(part: Any, supported: str) -> str:
    kind = part.get("type") if isinstance(part, dict) else type(part).__name__
    return f"only {supported} parts are supported, not {kind!r}"


def _call_from_openai(raw: Any, where: str) -> ToolCall:
    if not isinstance(raw, dict) or not isinstance(raw.get("function"), dict):
        raise DataError(f"{where}.function: expected {{'name': ..., 'arguments': ...}}")
    function = raw["function"]
    name = str(function.get("name") or "")
    arguments = function.get("arguments")
    call_id = str(raw.get("id") or "")
    if not call_id:
        raise DataError(f"{where}.id: a tool call needs an id")
    if isinstance(arguments, dict):
        return ToolCall(id=call_id, name=name, arguments=arguments)
    text = "" if arguments is None else str(arguments)
    try:
        parsed = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as err:
        return ToolCall(
            id=call_id, name=name, raw=text, parse_error=f"arguments are not JSON: {err.msg}"
        )
    if not isinstance(parsed, dict):
        return ToolCall(
            id=call_id, name=name, raw=text, parse_error="arguments are not a JSON object"
        )
    return ToolCall(id=call_id, name=name, arguments=parsed)
